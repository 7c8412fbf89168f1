"""Kernel unit tests, run inside a real Blender:

    python -m unittest discover -s vibe-transport/kernel/tests      (a Python with bpy)
    blender -b --factory-startup --python-exit-code 1 --python vibe-transport/kernel/tests/run_in_blender.py
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel import tools  # noqa: E402
from vibe_kernel.envelope import sanitize  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import KernelCalls, code_kernel  # noqa: E402


class KernelTest(KernelCalls, unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()

    def snapshot(self):
        return self.ok("scene.snapshot")

    def test_globs_and_message_hygiene(self):
        self.assertTrue(tools.glob_match("C*", "Cube"))
        self.assertTrue(tools.glob_match("C?be", "Cube"))
        self.assertFalse(tools.glob_match("[C]ube", "Cube"))
        text = 'Traceback (most recent call last):\n  File "/home/ann/x.py", line 3, in run\n    boom()\nRuntimeError: cannot open /home/ann/a.blend'
        self.assertEqual(sanitize(text), "RuntimeError: cannot open a.blend")
        # An operator's error as Blender raises it: the reason, not where the operator was called.
        text = ('RuntimeError: Error: Python: Traceback (most recent call last):\n  File "/opt/b/node.py", line 9, '
                'in execute\nRuntimeError: no settings for agent code\n\nLocation: /opt/b/ops.py:109\n')
        self.assertEqual(sanitize(text), "RuntimeError: no settings for agent code")

    def test_names_are_never_taken_from_another_object(self):
        self.assertEqual(self.refused("mesh.create_cube", "invalid_arguments", name="Cube")["details"]["reason"], "name_taken")
        self.ok("mesh.create_cube", name="Box")
        before = self.snapshot()
        # Blender 3.4's own rule would rename the human's Cube to Cube.001 here.
        refused = self.refused("object.rename", "invalid_arguments", name="Box", new_name="Cube")
        self.assertEqual((refused["details"]["reason"], refused["details"]["field"]), ("name_taken", "new_name"))
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(bpy.data.objects["Cube"].name, "Cube")
        self.assertEqual(self.ok("object.rename", name="Box", new_name="Crate")["name"], "Crate")

    def test_a_refused_call_leaves_the_scene_as_it_was(self):
        before = self.snapshot()
        error = self.refused("modifier.add", "invalid_arguments", name="Cube", modifier_type="SUBSURF", levels=6)
        self.assertEqual(error["details"]["reason"], "sanity_limit")
        self.refused("object.set_parent", "invalid_arguments", name="Cube", parent="Cube")
        self.refused("object.move", "invalid_arguments", name="Cube", location=[1, 1, 1], delta=[1, 1, 1])
        self.assertEqual(self.snapshot(), before)

    def test_a_rolled_back_transaction_restores_the_scene_exactly(self):
        before = self.snapshot()
        self.ok("transaction.begin")
        self.assertEqual(self.refused("transaction.begin", "contract_violation")["details"]["rule"], "transaction_open")
        self.ok("mesh.create_plane", name="Draft")
        self.ok("object.move", name="Cube", delta=[1, 2, 3])
        self.ok("material.ensure_principled", name="Glass", metallic=0.5)
        self.ok("transaction.rollback")
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.refused("transaction.commit", "contract_violation")["details"]["rule"], "no_transaction")

    def test_the_identity_cache_never_outlives_a_reload(self):
        self.ok("mesh.create_cube", name="Box")
        self.ok("object.info", name="Box")  # cached now
        self.ok("transaction.begin")
        self.ok("object.move", name="Box", location=[1, 2, 3])
        self.ok("transaction.rollback")  # the file reloads: every reference is new
        self.assertEqual(self.ok("object.info", name="Box")["location"], [0.0, 0.0, 0.0])
        self.ok("object.delete", name="Box")
        self.refused("object.info", "not_found", name="Box")

    def test_identity_drift_is_told_from_a_typo(self):
        self.ok("object.info", name="Cube")
        bpy.data.objects["Cube"].name = "Hero"  # a person renames it
        error = self.refused("object.info", "not_found", name="Cube")
        self.assertEqual((error["details"]["reason"], error["details"]["current_name"]), ("identity_drift", "Hero"))
        self.assertNotIn("reason", self.refused("object.info", "not_found", name="Cuube")["details"])

    def test_busy_refuses_mutations_and_serves_reads(self):
        self.k.state.busy = 1
        self.assertEqual(self.refused("object.move", "contract_violation", name="Cube", delta=[1, 0, 0])["details"]["reason"], "busy")
        self.assertEqual(self.ok("kernel.status")["state"], "busy")
        self.k.state.busy = 0
        self.ok("object.move", name="Cube", delta=[1, 0, 0])

    def test_capabilities_are_enforced_here_too(self):
        self.refused("file.save", "capability_missing", path="a.blend")
        answer = self.k.call("python.exec", {"code": "print(1)"})
        self.assertEqual(answer["error"]["code"], "capability_missing")
        self.refused("object.teleport", "contract_violation")

    def test_the_sandbox_is_enforced_here_too(self):
        sandbox = tempfile.mkdtemp(prefix="vibe-sandbox-")
        os.makedirs(os.path.join(sandbox, "HUMAN_ONLY"))
        self.k.state.configure({"session_id": "t", "capabilities": ["scene.read", "scene.write", "file.write"],
                                "sandbox": sandbox})
        for bad in ("../x.blend", "/tmp/x.blend", "HUMAN_ONLY/x.blend", "human_only/x.blend", "a/../../x.blend"):
            self.assertEqual(self.refused("file.save", "contract_violation", path=bad)["details"]["reason"], "sandbox", bad)
        saved = self.ok("file.save", path="out/scene.blend")
        self.assertGreater(saved["bytes"], 0)
        self.assertTrue(os.path.exists(os.path.join(sandbox, "out", "scene.blend")))

    def test_deleting_an_object_removes_its_own_data(self):
        self.ok("mesh.create_cube", name="Crate")
        self.ok("material.ensure_principled", name="Wood")
        self.ok("mesh.assign_material", name="Crate", material="Wood")
        self.ok("object.delete", name="Crate")
        wood = [m for m in self.ok("scene.snapshot")["materials"] if m["name"] == "Wood"][0]
        self.assertEqual(wood["users"], 0)

    def test_unexpected_exceptions_become_clean_envelopes_and_reach_the_console(self):
        original = tools.TOOLS["object.info"]

        def broken(k, params):
            raise RuntimeError("exploded in /home/ann/secret/file.py")

        tools.TOOLS["object.info"] = (broken, False, frozenset({"scene.read"}))
        try:
            error = self.refused("object.info", "execution_failed", name="Cube")
        finally:
            tools.TOOLS["object.info"] = original
        self.assertNotIn("/home/ann", error["message"])
        self.assertEqual(self.ok("blender.errors", limit=5)["errors"][-1]["source"], "object.info")

    def test_a_meshs_size_is_in_its_data_block(self):
        small = self.ok("mesh.create_cube", name="Small", size=2, location=[1, 2, 0])["data"]
        big = self.ok("mesh.create_cube", name="Big", size=4, location=[1, 2, 0])["data"]
        twin = self.ok("mesh.create_cube", name="Twin", size=4, location=[1, 2, 0])["data"]
        self.assertEqual(small["extent"], [2.0, 2.0, 2.0])
        self.assertEqual(big["extent"], [4.0, 4.0, 4.0])
        self.assertNotEqual(small, big)
        self.assertEqual(big, twin)
        # The mesh's own size: the object's scale and modifiers are not in it.
        self.ok("object.set_transform", name="Big", scale=[3, 3, 3])
        self.ok("modifier.add", name="Big", modifier_type="ARRAY", count=3)
        self.assertEqual(self.ok("object.info", name="Big")["data"]["extent"], [4.0, 4.0, 4.0])
        # 32-bit vertices, rounded with round(x, 4): what MockBlender models.
        self.assertEqual(self.ok("mesh.create_cube", name="Odd", size=3.7)["data"]["extent"], [3.7, 3.7, 3.7])
        self.assertEqual(self.ok("mesh.create_plane", name="Floor", size=10)["data"]["extent"], [10.0, 10.0, 0.0])
        for primitive, extent in (("uv_sphere", [2.0, 2.0, 2.0]), ("cylinder", [2.0, 2.0, 2.0]),
                                  ("monkey", [2.7344, 1.7031, 1.9688]), ("plane", [2.0, 2.0, 0.0])):
            made = self.ok("object.create", name=primitive, type="MESH", primitive=primitive)
            self.assertEqual(made["data"]["extent"], extent, primitive)
        # A person editing the mesh itself changes the scene's content.
        before = self.snapshot()
        bpy.data.objects["Cube"].data.vertices[0].co.x = 5.0  # the cube spans -1..1
        self.assertEqual(self.ok("object.info", name="Cube")["data"]["extent"], [6.0, 2.0, 2.0])
        self.assertNotEqual(self.snapshot()["objects"], before["objects"])

    def test_created_objects_are_known_across_renames(self):
        self.k.state.configure({"session_id": "s-1", "capabilities": ["scene.read", "scene.write"]})
        self.ok("object.create", name="Pivot", type="EMPTY")
        self.ok("object.rename", name="Pivot", new_name="Anchor")
        self.assertTrue(self.ok("object.audit_identity", name="Anchor")["created_by_agent"])
        self.assertFalse(self.ok("object.audit_identity", name="Cube")["created_by_agent"])
        self.k.state.configure({"session_id": "s-2", "capabilities": ["scene.read", "scene.write"]})
        self.assertFalse(self.ok("object.audit_identity", name="Anchor")["created_by_agent"])


class CodeExecTest(unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = code_kernel("c")

    def exec(self, code, deadline_ms=2000):
        self.k.call_deadline_ms = deadline_ms
        return self.k.call("python.exec", {"code": code})

    def test_output_is_captured_and_capped(self):
        answer = self.exec("print('x' * 100000)")
        self.assertTrue(answer["ok"], answer)
        self.assertTrue(answer["result"]["truncated"])
        self.assertEqual(len(answer["result"]["stdout"]), 65536)

    def test_runaway_code_is_interrupted_and_rolled_back(self):
        answer = self.exec("import bpy\nbpy.data.objects['Cube'].location.x = 3\nwhile True:\n    pass", deadline_ms=500)
        self.assertEqual(answer["error"]["code"], "timeout")
        self.assertTrue(answer["error"]["details"]["rolled_back"])
        self.assertEqual(bpy.data.objects["Cube"].location.x, 0.0)
        self.assertTrue(self.exec("print(1)")["ok"])

    def test_the_gate_runs_here_too_and_builtins_are_restricted(self):
        for code in ("import os", "__import__('os')", "().__class__.__bases__", "open('/etc/passwd')",
                     "import bpy\nbpy.app.timers.register(print)", "import bpy\nbpy.ops.wm.quit_blender()",
                     "import bpy\nw = bpy.ops.wm\nw.quit_blender()"):
            answer = self.exec(code)
            self.assertEqual(answer["error"]["details"].get("reason"), "security_block", code)
        # Even past the AST check, the runtime has no `open` and imports stay on the allowlist.
        answer = self.exec("import math\nprint(math.floor(2.5))")
        self.assertEqual(answer["result"]["stdout"], "2\n")

    def test_a_failing_run_leaves_the_scene_as_it_was(self):
        answer = self.exec("import bpy\nbpy.data.objects['Cube'].location.y = 4\nraise ValueError('no')")
        self.assertEqual(answer["error"]["code"], "execution_failed")
        self.assertEqual(answer["error"]["message"], "ValueError: no")
        self.assertEqual(bpy.data.objects["Cube"].location.y, 0.0)


class TokenTest(unittest.TestCase):
    def test_tcp_always_has_a_token(self):
        import stat
        from vibe_kernel import tcp

        self.assertEqual(tcp.ensure_token("given"), "given")
        made = tcp.ensure_token(None)
        self.assertGreaterEqual(len(made), 32)
        path = os.path.join(tempfile.gettempdir(), "vibe-kernel-token-%d" % os.getpid())
        with open(path, encoding="utf-8") as f:
            self.assertEqual(f.read().strip(), made)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        os.remove(path)


if __name__ == "__main__":
    unittest.main()
