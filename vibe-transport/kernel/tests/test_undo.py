"""The GUI's way of taking changes back: Blender's undo history (snapshot.py), run headless.

Blender's undo runs in `blender -b` and the bpy module too, so these tests turn the GUI path on
(`snapshot.uses_undo`) and check it without a window: one undo step per agent call, transactions
that step back to their begin and keep the human's history, the refusals when the human changed
the scene since the begin (`human_edits`) or is in the middle of an edit (busy), and no file
snapshot ever. The live test `tests/live_gui_human.rs` runs the same in GUI Blender 3.4 with a
person's edits coming in between.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel import agent_code, app_handlers, snapshot  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import KernelCalls  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "transactions", "code_exec"]
FAILING = "import bpy\nbpy.data.objects['Cube'].location.x = 7\nraise ValueError('no')"


def location(name):
    # Undo frees and re-reads data-blocks: never hold a reference across a step.
    return tuple(round(v, 4) for v in bpy.data.objects[name].location)


def human_move(name, delta, label="Move"):
    """A person's move: a change, then the undo step Blender's operator would push."""
    obj = bpy.data.objects[name]
    obj.location = [obj.location[i] + delta[i] for i in range(3)]
    bpy.ops.ed.undo_push(message=label)


def undo():
    return bpy.ops.ed.undo.poll() and "FINISHED" in bpy.ops.ed.undo()


class UndoTest(KernelCalls, unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        # GUI Blender's history starts with the file as loaded ("Original"); headless it starts empty.
        bpy.ops.ed.undo_push(message="Original")
        self.steps = bpy.context.preferences.edit.undo_steps
        self.addCleanup(setattr, bpy.context.preferences.edit, "undo_steps", self.steps)
        original = snapshot.uses_undo
        snapshot.uses_undo = lambda: True
        self.addCleanup(setattr, snapshot, "uses_undo", original)
        self.k = Kernel()
        self.k.state.features.add("code_exec")
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES})
        app_handlers.install_busy_handlers(self.k)
        self.addCleanup(app_handlers.remove_handlers, self.k)

        def no_file_operations(operation):
            raise AssertionError("the GUI path never saves or loads a file")
        self.k.file_op = no_file_operations

    def refused(self, tool, **params):
        answer = self.call(tool, **params)
        self.assertFalse(answer["ok"], "%s %r succeeded" % (tool, params))
        return answer["error"]

    def test_every_agent_call_is_one_undo_step(self):
        self.ok("object.move", name="Cube", delta=[1, 0, 0])
        self.ok("mesh.create_cube", name="Crate")
        self.ok("object.move", name="Cube", delta=[0, 2, 0])
        self.assertTrue(undo())
        self.assertEqual(location("Cube"), (1, 0, 0))
        self.assertIn("Crate", bpy.data.objects)
        self.assertTrue(undo())
        self.assertNotIn("Crate", bpy.data.objects)
        self.assertEqual(location("Cube"), (1, 0, 0))
        self.assertTrue(undo())
        self.assertEqual(location("Cube"), (0, 0, 0))
        # A refused call makes no step: the history still ends where it did.
        self.refused("object.move", name="Nope", delta=[1, 0, 0])
        self.assertFalse(undo())

    def test_a_tool_that_fails_halfway_is_taken_back(self):
        from vibe_kernel import tools

        def half_a_move(k, params):
            bpy.data.objects["Cube"].location.x = 5
            raise RuntimeError("the kernel's own bug")

        original = tools.TOOLS["object.move"]
        tools.TOOLS["object.move"] = (half_a_move,) + original[1:]
        try:
            error = self.refused("object.move", name="Cube", delta=[1, 0, 0])
        finally:
            tools.TOOLS["object.move"] = original
        self.assertEqual((error["code"], error["details"]["rolled_back"]), ("execution_failed", True))
        self.assertEqual(location("Cube"), (0, 0, 0))
        self.assertEqual(self.ok("blender.errors")["errors"][-1]["source"], "object.move")

    def test_step_names_say_the_tool_and_its_object(self):
        self.assertEqual(snapshot.step_name("object.move", {"name": "Cube"}), "Vibe: object.move Cube")
        self.assertEqual(snapshot.step_name("python.exec", {"code": "x"}), "Vibe: python.exec")
        pushed = []
        original = snapshot.push
        snapshot.push = pushed.append
        try:
            self.ok("material.ensure_principled", name="Glass")
            self.ok("transaction.begin", label="layout")
            self.ok("object.move", name="Cube", delta=[0, 0, 1])
        finally:
            snapshot.push = original
        self.assertEqual(pushed, ["Vibe: material.ensure_principled Glass", "Vibe: begin tx-1 (layout)",
                                  "Vibe: object.move Cube"])

    def test_a_rollback_steps_back_to_the_begin_and_keeps_the_humans_history(self):
        light = location("Light")
        human_move("Light", [0, 0, 1], "Human: move Light")
        before = self.ok("scene.snapshot")
        self.ok("transaction.begin")
        self.ok("mesh.create_cube", name="Crate")
        self.ok("object.move", name="Camera", delta=[1, 1, 1])
        self.ok("material.ensure_principled", name="Glass", metallic=0.5)
        self.assertEqual(self.ok("transaction.rollback"), {"transaction": "tx-1", "rolled_back": True})
        self.assertEqual(self.ok("scene.snapshot"), before)
        self.assertFalse(self.ok("kernel.status")["transaction_open"])
        self.assertFalse(any(snapshot.UNDO_MARK in s for s in bpy.data.scenes))
        # The human's own step before the begin is the next one back.
        self.assertTrue(undo())
        self.assertEqual(location("Light"), light)

    def test_a_rollback_is_refused_when_the_human_changed_the_scene(self):
        self.ok("transaction.begin")
        self.ok("object.move", name="Camera", delta=[1, 0, 0])
        camera = location("Camera")
        human_move("Cube", [0, 0, 2])
        error = self.refused("transaction.rollback")
        self.assertEqual((error["code"], error["details"]["rule"]), ("contract_violation", "human_edits"))
        self.assertEqual(error["details"]["changed"], [{"name": "Cube", "what": "moved"}])
        self.assertIn("force", error["message"])
        # Nothing moved, and the transaction is still open.
        self.assertEqual(location("Cube"), (0, 0, 2))
        self.assertEqual(location("Camera"), camera)
        self.assertTrue(self.ok("kernel.status")["transaction_open"])
        self.assertEqual(self.refused("transaction.rollback", force="yes")["code"], "invalid_arguments")
        self.ok("transaction.rollback", force=True)
        self.assertEqual(location("Cube"), (0, 0, 0))
        self.assertNotEqual(location("Camera"), camera)

    def test_human_edits_between_agent_calls_are_remembered(self):
        self.ok("transaction.begin")
        self.ok("object.move", name="Camera", delta=[1, 0, 0])
        human_move("Cube", [0, 3, 0])
        self.ok("object.move", name="Cube", location=[0, 0, 0])  # the agent's move hides the human's
        error = self.refused("transaction.rollback")
        self.assertEqual(error["details"]["changed"], [{"name": "Cube", "what": "moved"}])

    def test_human_steps_the_fingerprint_cannot_see_still_count(self):
        self.ok("transaction.begin")
        self.ok("object.move", name="Camera", delta=[1, 0, 0])
        bpy.context.scene.frame_current = 42  # a setting the kernel does not compare
        bpy.ops.ed.undo_push(message="Human: frame")
        camera = location("Camera")
        error = self.refused("transaction.rollback")
        self.assertEqual(error["details"]["rule"], "human_edits")
        self.assertEqual(error["details"]["human_steps"], 1)
        # The history was walked back and forward again: everything as it was.
        self.assertEqual(bpy.context.scene.frame_current, 42)
        self.assertEqual(location("Camera"), camera)
        self.ok("transaction.rollback", force=True)
        self.assertEqual(bpy.context.scene.frame_current, 1)

    def test_a_human_undo_past_the_begin_is_a_rollback_already(self):
        self.ok("transaction.begin")
        self.ok("object.move", name="Cube", delta=[1, 0, 0])
        self.assertTrue(undo() and undo())
        self.assertEqual(self.ok("transaction.rollback"), {"transaction": "tx-1", "rolled_back": True})
        self.assertEqual(location("Cube"), (0, 0, 0))

    def test_a_begin_gone_from_the_history_is_said_and_nothing_moves(self):
        bpy.context.preferences.edit.undo_steps = 4
        self.ok("transaction.begin")
        self.ok("object.move", name="Camera", delta=[1, 0, 0])
        for _ in range(4):  # the person's steps push the begin out of the history
            human_move("Cube", [0, 0, 1])
        camera = location("Camera")
        error = self.refused("transaction.rollback", force=True)
        self.assertEqual((error["code"], error["details"]["reason"]), ("execution_failed", "undo_history_exhausted"))
        self.assertFalse(error["details"]["rolled_back"])
        self.assertEqual((location("Cube"), location("Camera")), ((0, 0, 4), camera))
        self.assertTrue(self.ok("kernel.status")["transaction_open"])
        self.ok("transaction.commit")

    def test_forced_after_an_undo_past_the_begin_it_steps_forward_to_it(self):
        self.ok("object.move", name="Light", delta=[0, 0, 1])
        light = location("Light")
        self.ok("transaction.begin")
        self.ok("object.move", name="Cube", delta=[1, 0, 0])
        self.assertTrue(undo() and undo() and undo())  # the person undoes past the begin, and one more
        self.assertNotEqual(location("Light"), light)
        error = self.refused("transaction.rollback")
        self.assertEqual(error["details"]["rule"], "human_edits")
        self.assertEqual(error["details"]["changed"], [{"name": "Light", "what": "moved"}])
        self.ok("transaction.rollback", force=True)
        self.assertEqual((location("Light"), location("Cube")), (light, (0, 0, 0)))

    def test_commit_forgets_the_position_and_the_mark(self):
        self.ok("transaction.begin")
        self.ok("object.move", name="Cube", delta=[1, 0, 0])
        self.ok("transaction.commit")
        self.assertFalse(any(snapshot.UNDO_MARK in s for s in bpy.data.scenes))
        self.assertEqual(location("Cube"), (1, 0, 0))
        self.assertTrue(undo())  # and the agent's step is still Ctrl+Z-able
        self.assertEqual(location("Cube"), (0, 0, 0))

    def test_busy_while_the_human_edits_a_mesh(self):
        bpy.context.view_layer.objects.active = bpy.data.objects["Cube"]
        bpy.ops.object.mode_set(mode="EDIT")
        self.addCleanup(lambda: bpy.context.object and bpy.context.object.mode != "OBJECT"
                        and bpy.ops.object.mode_set(mode="OBJECT"))
        for tool, params in (("object.move", {"name": "Cube", "delta": [1, 0, 0]}),
                             ("object.move", {"name": "Light", "delta": [1, 0, 0]}),
                             ("transaction.begin", {})):
            error = self.refused(tool, **params)
            self.assertEqual((error["code"], error["details"]["reason"]), ("contract_violation", "busy"))
            self.assertEqual(error["details"]["human"], "editing Cube in EDIT_MESH mode")
        self.assertEqual(self.ok("object.info", name="Cube")["name"], "Cube")
        bpy.ops.object.mode_set(mode="OBJECT")
        self.ok("object.move", name="Cube", delta=[1, 0, 0])

    def test_without_undo_a_transaction_is_refused(self):
        bpy.context.preferences.edit.undo_steps = 0
        error = self.refused("transaction.begin")
        self.assertEqual((error["code"], error["details"]["rule"]), ("contract_violation", "undo_unavailable"))
        self.assertIn("Undo Steps", error["message"])
        self.assertFalse(self.ok("kernel.status")["transaction_open"])
        self.assertEqual(self.refused("python.exec", code=FAILING)["details"]["rule"], "undo_unavailable")
        # Code that only reads has nothing to take back: it runs without undo, in a process
        # where no agent code that writes has run (tests before this one ran some).
        agent_code.WRITING_CODE_RAN = False
        self.assertEqual(self.ok("python.exec", code="print(1)")["stdout"], "1\n")
        # After such code, reading may run what it left behind: such code needs undo too, but
        # code that reaches nothing it could have left (reaches_no_leftovers).
        agent_code.WRITING_CODE_RAN = True
        self.assertEqual(self.ok("python.exec", code="print(1)")["stdout"], "1\n")
        self.assertEqual(self.refused("python.exec", code="import bpy\nprint(len(bpy.data.objects))")
                         ["details"]["rule"], "undo_unavailable")

    def test_a_transaction_never_outgrows_the_history(self):
        bpy.context.preferences.edit.undo_steps = 4
        self.ok("transaction.begin")
        for _ in range(3):
            self.ok("object.move", name="Cube", delta=[1, 0, 0])
        error = self.refused("object.move", name="Cube", delta=[1, 0, 0])
        self.assertEqual(error["details"]["rule"], "undo_history_full")
        self.ok("transaction.rollback")
        self.assertEqual(location("Cube"), (0, 0, 0))

    def test_a_failed_python_exec_steps_back_without_a_file(self):
        self.ok("object.move", name="Cube", delta=[0, 0, 1])
        answer = self.call("python.exec", code=FAILING)
        self.assertEqual(answer["error"]["code"], "execution_failed")
        self.assertTrue(answer["error"]["details"]["rolled_back"])
        self.assertEqual(location("Cube"), (0, 0, 1))
        answer = self.call("python.exec", code="import bpy\nbpy.data.objects.remove(bpy.data.objects['Light'])")
        self.assertEqual(answer["error"]["details"]["reason"], "actuator_lock")
        self.assertTrue(answer["error"]["details"]["rolled_back"])
        self.assertIn("Light", bpy.data.objects)
        self.ok("python.exec", code="import bpy\nbpy.data.objects['Cube'].location.x = 5")
        self.assertTrue(undo())  # one step: the run, as a whole
        self.assertEqual(location("Cube"), (0, 0, 1))

    def test_a_python_exec_on_a_fresh_history_can_still_be_taken_back(self):
        answer = self.call("python.exec", code=FAILING)
        self.assertTrue(answer["error"]["details"]["rolled_back"], answer)
        self.assertEqual(location("Cube"), (0, 0, 0))

    def test_fingerprint_differences_name_what_changed(self):
        before = snapshot.fingerprint()
        bpy.data.objects["Cube"].location.x = 1
        bpy.data.objects["Cube"].data.vertices[0].co.x += 0.5
        bpy.data.objects["Light"].data.energy = 5
        bpy.data.objects.remove(bpy.data.objects["Camera"])
        bpy.data.collections.new("Props")
        bpy.context.scene.collection.children.link(bpy.data.collections["Props"])
        bpy.data.materials.new("Glass")
        self.assertEqual(snapshot.differences(before, snapshot.fingerprint()), [
            {"name": "Camera", "what": "removed"},
            {"name": "Cube", "what": "moved, geometry edited"},
            {"name": "Light", "what": "settings changed"},
            {"name": "Collection", "what": "collection changed"},
            {"name": "Props", "what": "collection added"},
            {"name": "Glass", "what": "material added"},
            {"name": "scene camera", "what": "changed"},  # removing Camera took it away
        ])
        self.assertEqual(snapshot.differences(before, before), [])


if __name__ == "__main__":
    unittest.main()
