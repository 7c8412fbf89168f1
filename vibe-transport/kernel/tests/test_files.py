"""file.open, project roots and the state that follows the file (files.py, Kernel.file_loaded):
a `.blend` opens from a project root or the sandbox only (after resolving links, never through
HUMAN_ONLY), never during a transaction, with Python auto-execution off; everything in it is the
human's; file.save never writes into a project root; every file load (file.open, or a person's
in the GUI) drops an open transaction and reaches each session's next answer as an event.
Runs like test_kernel.py:

    python -m unittest discover -s vibe-transport/kernel/tests      (a Python with bpy)
    blender -b --factory-startup --python-exit-code 1 --python vibe-transport/kernel/tests/run_in_blender.py
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

KERNEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, KERNEL_DIR)

import bpy  # noqa: E402

from vibe_kernel import app_handlers, channel, headless, lock, wire  # noqa: E402
from vibe_kernel.state import Session  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import KernelCalls  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "transactions", "file.read", "file.write"]


def save_human_file(path, tag=None):
    """A `.blend` a person made: the factory scene and a Statue with a Bevel. With `tag`, the
    Statue, a material and a collection carry the agent's tag of that session id (a file an
    earlier agent session saved, whose id a later session happens to share)."""
    bpy.ops.wm.read_factory_settings(use_empty=False)
    statue = bpy.data.objects.new("Statue", bpy.data.meshes.new("Statue"))
    bpy.data.collections["Collection"].objects.link(statue)
    statue.modifiers.new("Bevel", "BEVEL")
    if tag is not None:
        statue[lock.CREATED_PROP] = tag
        bpy.data.materials["Material"][lock.CREATED_PROP] = tag
        bpy.data.collections["Collection"][lock.CREATED_PROP] = tag
    os.makedirs(os.path.dirname(path), exist_ok=True)
    bpy.ops.wm.save_as_mainfile(filepath=path, copy=True, check_existing=False)


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class FileTest(KernelCalls, unittest.TestCase):
    def setUp(self):
        self.top = os.path.realpath(tempfile.mkdtemp(prefix="vibe-files-"))
        self.addCleanup(shutil.rmtree, self.top, True)
        self.project = os.path.join(self.top, "project")
        self.sandbox = os.path.join(self.top, "sandbox")
        self.outside = os.path.join(self.top, "outside")
        for folder in (self.project, self.sandbox, self.outside, os.path.join(self.project, "sub")):
            os.makedirs(folder)
        self.scene_file = os.path.join(self.project, "scene.blend")
        save_human_file(self.scene_file, tag="agent")
        save_human_file(os.path.join(self.outside, "x.blend"))
        save_human_file(os.path.join(self.top, "project-evil", "x.blend"))
        save_human_file(os.path.join(self.project, "HUMAN_ONLY", "h.blend"))
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.a = self.k.state
        self.a.configure({"session_id": "agent", "capabilities": CAPABILITIES, "sandbox": self.sandbox,
                          "project_roots": [self.project]})
        app_handlers.install_busy_handlers(self.k)
        self.addCleanup(app_handlers.remove_handlers, self.k)
        self.addCleanup(self.drop_transaction)

    def drop_transaction(self):
        tx = self.k.shared.transaction
        if tx is not None:
            wire.snapshot.discard(tx[1])
            self.k.shared.transaction = None

    def refused_file(self, path):
        error = self.refused("file.open", "contract_violation", file=path)
        self.assertEqual((error["details"]["reason"], error["details"]["field"]), ("sandbox", "file"), error)
        self.assertNotIn(self.top, error["message"])
        return error

    def frame(self, tool, session=None, **params):
        """A call frame through Kernel.handle, in `session` (the first one if None): the answer's
        envelope, as the wire sends it."""
        self.frames = getattr(self, "frames", 0) + 1
        answer = self.k.handle({"type": "call", "id": self.frames, "tool": tool, "params": params},
                               session or self.a)
        self.k.state = self.a  # `call` runs in the first session
        json.loads(channel.encode(answer))
        return answer["envelope"]


class FileOpenTest(FileTest):
    def test_a_blend_in_a_project_root_opens_and_everything_in_it_is_the_humans(self):
        self.ok("modifier.add", name="Cube", modifier_type="BEVEL")  # the agent's, in the old file
        self.ok("object.info", name="Cube")
        on_disk = digest(self.scene_file)
        busy_while_loading = []

        @bpy.app.handlers.persistent
        def watch(*_):
            busy_while_loading.append(self.k.shared.busy)

        bpy.app.handlers.load_post.append(watch)
        self.addCleanup(bpy.app.handlers.load_post.remove, watch)
        opened = self.ok("file.open", file=self.scene_file)
        self.assertEqual(len(busy_while_loading), 1)
        self.assertGreater(busy_while_loading[0], 0, "busy while it loads")
        self.assertEqual(opened, {"file": self.scene_file, "scene": "Scene", "objects": 4})
        self.assertIn("Statue", bpy.data.objects)
        for blocks in (bpy.data.objects, bpy.data.materials, bpy.data.collections):
            self.assertEqual([b.name for b in blocks if lock.CREATED_PROP in b], [], "tags taken off")
        self.assertEqual(digest(self.scene_file), on_disk, "the file on disk stays as it was")
        self.assertEqual((self.k.shared.modifiers, self.k.shared.identity, self.a.seen), ({}, {}, {}))
        self.assertFalse(self.ok("object.audit_identity", name="Statue")["created_by_agent"])
        self.assertEqual(self.refused("object.delete", "contract_violation", name="Statue")["details"]["reason"],
                         "actuator_lock")
        self.assertEqual(self.refused("modifier.remove", "contract_violation", name="Statue",
                                      modifier_name="Bevel")["details"]["kind"], "modifier")
        status = self.ok("kernel.status")
        self.assertEqual(sorted(status), ["blender_version", "file", "protocol", "state", "transaction_open"])
        self.assertEqual((status["file"], status["state"]), ("scene.blend", "ready"))

    def test_paths_outside_the_roots_and_the_sandbox_are_refused(self):
        with open(os.path.join(self.project, "notes.txt"), "w") as f:
            f.write("not a blend")
        for path in (os.path.join(self.outside, "x.blend"),
                     os.path.join(self.top, "project-evil", "x.blend"),  # a prefix of the root's name only
                     os.path.join(self.project, "..", "outside", "x.blend"),
                     "scene.blend", "project/scene.blend",  # not absolute
                     os.path.join(self.project, "notes.txt"),
                     self.project, os.path.join(self.top, "x.blend"), "/x.blend"):
            with self.subTest(path=path):
                self.refused_file(path)
        self.assertNotIn("Statue", bpy.data.objects)
        self.assertEqual(self.k.shared.loads, 0)
        self.a.configure({"session_id": "agent", "capabilities": CAPABILITIES})  # no roots, no sandbox
        self.refused_file(self.scene_file)

    def test_links_out_of_the_root_are_refused_and_links_inside_followed(self):
        os.symlink(os.path.join(self.outside, "x.blend"), os.path.join(self.project, "link.blend"))
        os.symlink(self.outside, os.path.join(self.project, "out"))
        os.symlink(os.path.join(self.outside, "gone.blend"), os.path.join(self.project, "dangling.blend"))
        for path in ("link.blend", "out/x.blend", "dangling.blend"):
            with self.subTest(path=path):
                self.assertIn("outside", self.refused_file(os.path.join(self.project, path))["message"])
        os.symlink(self.scene_file, os.path.join(self.project, "sub", "alias.blend"))
        alias = os.path.join(self.project, "sub", "alias.blend")
        self.assertEqual(self.ok("file.open", file=alias)["file"], alias)
        self.assertIn("Statue", bpy.data.objects)

    def test_human_only_is_refused_as_given_and_through_links(self):
        for path in ("HUMAN_ONLY/h.blend", "human_only/h.blend", "sub/Human_Only./h.blend"):
            with self.subTest(path=path):
                self.assertIn("HUMAN_ONLY", self.refused_file(os.path.join(self.project, path))["message"])
        os.symlink(os.path.join(self.project, "HUMAN_ONLY", "h.blend"), os.path.join(self.project, "h.blend"))
        os.symlink(os.path.join(self.project, "HUMAN_ONLY"), os.path.join(self.project, "notes"))
        for path in ("h.blend", "notes/h.blend"):
            with self.subTest(path=path):
                self.assertIn("HUMAN_ONLY", self.refused_file(os.path.join(self.project, path))["message"])

    def test_a_missing_file_inside_a_root_is_not_found(self):
        error = self.refused("file.open", "not_found", file=os.path.join(self.project, "missing.blend"))
        self.assertEqual(error["details"]["field"], "file")

    def test_a_file_saved_into_the_sandbox_opens_again(self):
        self.ok("mesh.create_cube", name="Box")
        self.ok("file.save", path="out/a.blend")
        self.ok("object.delete", name="Box")
        self.assertEqual(self.ok("file.open", file=os.path.join(self.sandbox, "out", "a.blend"))["objects"], 4)
        self.assertIn("Box", bpy.data.objects)
        self.assertFalse(self.ok("object.audit_identity", name="Box")["created_by_agent"], "loaded: the human's")

    def test_refused_while_a_transaction_is_open(self):
        self.ok("transaction.begin")
        error = self.refused("file.open", "contract_violation", file=self.scene_file)
        self.assertEqual((error["details"]["rule"], error["details"]["transaction"]), ("transaction_open", "tx-1"))
        # Another session's open transaction refuses it too (as every change while it is open).
        b = Session(self.k.shared)
        b.configure({"session_id": "b", "capabilities": CAPABILITIES, "project_roots": [self.project]})
        other = self.frame("file.open", session=b, file=self.scene_file)
        self.assertEqual(other["error"]["details"]["rule"], "transaction_of_another_session")
        self.ok("transaction.commit")
        self.ok("file.open", file=self.scene_file)

    def test_python_auto_execution_stays_off(self):
        trap = os.path.join(self.project, "trap.blend")
        bpy.ops.wm.read_factory_settings(use_empty=False)
        text = bpy.data.texts.new("boot.py")
        text.write("import bpy\nbpy.app.driver_namespace['vibe_text_ran'] = True\n")
        text.use_module = True  # registered: runs on load when scripts may run
        curve = bpy.data.objects["Cube"].driver_add("location", 0)
        curve.driver.type = "SCRIPTED"
        curve.driver.expression = "(bpy.app.driver_namespace.update(vibe_driver_ran=True), 1.0)[1]"
        bpy.ops.wm.save_as_mainfile(filepath=trap, copy=True, check_existing=False)
        bpy.ops.wm.read_factory_settings(use_empty=False)
        namespace = bpy.app.driver_namespace
        keys = ("vibe_text_ran", "vibe_driver_ran")
        self.addCleanup(lambda: [bpy.app.driver_namespace.pop(key, None) for key in keys])
        self.ok("file.open", file=trap)
        bpy.context.view_layer.update()
        bpy.context.scene.frame_set(2)
        self.assertEqual([key for key in keys if key in namespace], [], "neither the text nor the driver ran")
        self.assertTrue(bpy.app.autoexec_fail, "Blender blocked the file's scripts")
        self.assertEqual(bpy.data.objects["Cube"].location.x, 0.0)
        # The trap is armed: a load that trusts the file runs both.
        preferences = bpy.context.preferences.filepaths
        saved = preferences.use_scripts_auto_execute
        self.addCleanup(setattr, preferences, "use_scripts_auto_execute", saved)
        preferences.use_scripts_auto_execute = True
        bpy.ops.wm.open_mainfile(filepath=trap, load_ui=False, use_scripts=True)
        bpy.context.view_layer.update()
        bpy.context.scene.frame_set(3)
        self.assertEqual([key for key in keys if key in bpy.app.driver_namespace], list(keys))


class ProjectRootTest(FileTest):
    def configure(self, **settings):
        frame = {"type": "configure", "id": 1,
                 "session": dict({"session_id": "agent", "capabilities": CAPABILITIES}, **settings)}
        return self.k.handle(frame, self.a)["envelope"]

    def test_configure_refuses_bad_roots_and_a_sandbox_that_overlaps_one(self):
        inner = os.path.join(self.project, "sub")
        for settings in ({"project_roots": ["relative/root"]}, {"project_roots": [os.path.join(self.top, "missing")]},
                         {"project_roots": ["/"]}, {"project_roots": self.project},
                         {"sandbox": inner, "project_roots": [self.project]},
                         {"sandbox": self.sandbox, "project_roots": [self.top]},
                         {"sandbox": self.project, "project_roots": [self.project]}):
            with self.subTest(settings=settings):
                answer = self.configure(**settings)
                self.assertFalse(answer["ok"], answer)
                self.assertEqual((answer["error"]["code"], answer["error"]["details"]["field"]),
                                 ("invalid_arguments", "session"))
        self.assertEqual((self.a.sandbox, self.a.project_roots), (self.sandbox, [self.project]), "settings kept")
        self.assertTrue(self.configure(sandbox=self.sandbox, project_roots=[self.project, self.outside])["ok"])
        self.assertTrue(self.configure()["ok"])
        self.assertEqual((self.a.sandbox, self.a.project_roots), (None, []))

    def test_file_save_never_writes_into_a_project_root(self):
        os.symlink(self.project, os.path.join(self.sandbox, "proj"))
        error = self.refused("file.save", "contract_violation", path="proj/x.blend")
        self.assertEqual((error["details"]["reason"], error["details"]["field"], error["details"]["rule"]),
                         ("sandbox", "path", "project_root"))
        self.a.project_roots = [self.sandbox]  # past configure's check (a link swapped in later)
        error = self.refused("file.save", "contract_violation", path="a.blend")
        self.assertEqual(error["details"]["rule"], "project_root")
        self.assertFalse(os.path.exists(os.path.join(self.project, "x.blend")))
        self.assertFalse(os.path.exists(os.path.join(self.sandbox, "a.blend")))


class LoadEventTest(FileTest):
    def event(self, file, dropped=None):
        return {"event": "file_loaded", "file": file, "transaction_dropped": dropped}

    def test_file_open_answers_with_its_own_event(self):
        answer = self.frame("file.open", file=self.scene_file)
        self.assertEqual(answer["result"]["_meta"], {"events": [self.event("scene.blend")]})
        status = self.frame("kernel.status")
        self.assertNotIn("_meta", status["result"], "heard once")
        self.assertEqual(status["result"]["file"], "scene.blend")

    def test_a_persons_load_drops_the_transaction_and_reaches_the_next_answer(self):
        self.assertEqual(self.frame("transaction.begin")["result"]["transaction"], "tx-1")
        snapshot_file = self.k.shared.transaction[1]
        bpy.ops.wm.open_mainfile(filepath=self.scene_file)  # as a person does in the GUI
        self.assertIsNone(self.k.shared.transaction)
        self.assertFalse(os.path.exists(snapshot_file))
        self.assertEqual(self.k.shared.loads, 1)
        self.assertEqual([b.name for b in bpy.data.objects if lock.CREATED_PROP in b], [])
        answer = self.frame("object.info", name="Statue")
        self.assertEqual(answer["result"]["_meta"]["events"], [self.event("scene.blend", "tx-1")])
        self.assertNotIn("_meta", self.frame("object.info", name="Statue")["result"])
        self.assertFalse(self.frame("kernel.status")["result"]["transaction_open"])
        self.assertEqual(self.frame("transaction.commit")["error"]["details"]["rule"], "no_transaction")
        said = [e["message"] for e in self.k.shared.console]
        self.assertTrue(any("tx-1" in m and "dropped" in m for m in said), said)

    def test_failures_carry_the_events_too_and_every_session_hears_of_them(self):
        b = Session(self.k.shared)
        b.configure({"session_id": "b", "capabilities": CAPABILITIES})
        self.assertTrue(self.frame("object.info", session=b, name="Cube")["ok"])
        self.assertIn("Cube", b.seen)
        bpy.ops.wm.read_factory_settings(use_empty=False)  # File > New: a load of no file
        failed = self.frame("object.info", name="Nope")
        self.assertEqual(failed["error"]["details"]["events"], [self.event("")])
        heard = self.frame("object.info", session=b, name="Camera")
        self.assertEqual(heard["result"]["_meta"]["events"], [self.event("")])
        self.assertEqual(sorted(b.seen), ["Camera"], "pointers from before the load were dropped")
        # A reconnect of a known session hears what it missed; a new session has missed nothing.
        bpy.ops.wm.open_mainfile(filepath=self.scene_file)
        back = Session(self.k.shared)
        back.configure({"session_id": "b", "capabilities": CAPABILITIES})
        self.assertEqual(self.frame("kernel.status", session=back)["result"]["_meta"]["events"],
                         [self.event("scene.blend")])
        new = Session(self.k.shared)
        new.configure({"session_id": "c", "capabilities": CAPABILITIES})
        self.assertNotIn("_meta", self.frame("kernel.status", session=new)["result"])

    def test_the_kernels_own_reloads_are_no_file_loads(self):
        self.assertTrue(self.frame("transaction.begin")["ok"])
        self.assertTrue(self.frame("object.move", name="Cube", delta=[1, 0, 0])["ok"])
        self.assertNotIn("_meta", self.frame("transaction.rollback")["result"])
        checkpoint = os.path.join(self.top, "checkpoint.blend")
        self.assertTrue(self.k.handle({"type": "checkpoint", "id": 90, "path": checkpoint})["envelope"]["ok"])
        self.assertTrue(self.k.handle({"type": "restore", "id": 91, "path": checkpoint})["envelope"]["ok"])
        self.assertEqual(self.k.shared.loads, 0)
        self.assertNotIn("_meta", self.frame("kernel.status")["result"])
        self.assertEqual(self.frame("kernel.status")["result"]["file"], "", "a snapshot's name is not the file's")

    def test_the_file_name_follows_opens_not_copies(self):
        self.assertEqual(self.ok("kernel.status")["file"], "")
        self.ok("file.open", file=self.scene_file)
        self.ok("file.save", path="copy.blend")
        self.ok("transaction.begin")
        self.ok("transaction.rollback")
        self.assertEqual(self.ok("kernel.status")["file"], "scene.blend")


class NoDataYet:
    """bpy as an add-on's register() sees it: `bpy.data` is not there yet."""

    def __getattr__(self, name):
        if name == "data":
            raise AttributeError("'_RestrictData' object has no attribute 'filepath'")
        return getattr(bpy, name)


class StartTest(unittest.TestCase):
    def test_a_kernel_starts_before_bpy_data_is_readable(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        real = wire.bpy
        wire.bpy = NoDataYet()
        try:
            k = Kernel()  # as the add-on's register() makes it
        finally:
            wire.bpy = real
        self.assertEqual(k.call("kernel.status", {})["result"]["file"], "", "read at the first call")


class CommandLineTest(unittest.TestCase):
    def test_open_is_parsed(self):
        options = headless.parse_args(["--stdio", "--factory", "--open", "/x/a.blend"])
        self.assertEqual((options["mode"], options["factory"], options["open"]), ("stdio", True, "/x/a.blend"))
        with self.assertRaises(SystemExit):
            headless.parse_args(["--stdio", "--open"])

    def test_a_kernel_started_with_open_serves_that_file_as_the_humans(self):
        top = tempfile.mkdtemp(prefix="vibe-open-")
        self.addCleanup(shutil.rmtree, top, True)
        path = os.path.join(top, "scene.blend")
        save_human_file(path, tag="agent")
        bpy.ops.wm.read_factory_settings(use_empty=False)
        script = os.path.join(KERNEL_DIR, "run_kernel.py")
        if bpy.app.binary_path:  # inside Blender
            command = [bpy.app.binary_path, "-b", "--factory-startup", "--python", script, "--",
                       "--stdio", "--open", path]
        else:  # the bpy module
            command = [sys.executable, script, "--stdio", "--factory", "--open", path]
        frames = [{"type": "configure", "id": 1, "session": {"session_id": "agent", "capabilities": ["scene.read"]}},
                  {"type": "call", "id": 2, "tool": "object.audit_identity", "params": {"name": "Statue"}},
                  {"type": "call", "id": 3, "tool": "kernel.status", "params": {}},
                  {"type": "bye"}]
        stdin = "".join(json.dumps(f) + "\n" for f in frames)
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)
        answers = {}
        for line in done.stdout.splitlines():
            try:
                frame = json.loads(line)
            except ValueError:
                continue  # Blender's banner before the hello
            if isinstance(frame, dict) and frame.get("type") == "result":
                answers[frame["id"]] = frame["envelope"]
        self.assertEqual(sorted(answers), [1, 2, 3], done.stderr[-2000:])
        self.assertFalse(answers[2]["result"]["created_by_agent"], answers[2])
        self.assertEqual(answers[3]["result"]["file"], "scene.blend")
        self.assertNotIn("_meta", answers[3]["result"], "the load happened before anyone connected")


if __name__ == "__main__":
    unittest.main()
