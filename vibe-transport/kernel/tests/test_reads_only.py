"""Code proven read-only (read_only.reads_only) runs without a rollback point and without the
actuator lock's inventories, so the proof must hold: every snippet of a corpus of ways to write
through builtins, in-place operators, stores and rebinding is run through python.exec, and
whenever the classifier calls it read-only, the scene's fingerprint (snapshot.fingerprint, an
independent walk over the scene) must not move. The writers must also be told apart as writers.
The proof covers the code's own text only: objects an earlier call left behind are run by
reading them, so after any code that may write, only code that reaches nothing they can be on
(read_only.reaches_no_leftovers: built-ins, math, mathutils) runs without the rollback point.
The attacks below stash such objects on Blender's data, where the kernel state check must
refuse and put them back (bpy's reads were on the fast path for a while: these broke it).
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel import agent_code, code_gate, read_only, snapshot  # noqa: E402
from kernel_case import KernelCalls, code_kernel  # noqa: E402

CUBE = "bpy.data.objects['Cube']"
# Code that reads: all of it must be classified read-only.
READERS = [
    "print(1)",
    "import bpy\nprint(len(bpy.data.objects))",
    "import bpy\nprint(sorted(o.name for o in bpy.data.objects))",
    "import bpy\nv = %s.location\nprint(f'{v.x:.3f} {v!r}')" % CUBE,
    "import bpy\nfor o in bpy.data.objects:\n    if o.type == 'MESH':\n        print(o.name, len(o.data.vertices))",
    "import bpy\ntry:\n    print(bpy.data.objects['Nope'])\nexcept KeyError as e:\n    print('missing', e)",
    "import bpy\nv = %s.location\nw = v + v\nprint(sum([v, v], v), w)" % CUBE,
    "import bpy\nprint(isinstance(%s, bpy.types.Object), hash(%s), bool(bpy.data.objects))" % (CUBE, CUBE),
    "import bpy\nprint(%s.children, %s.bound_box[0][:])" % (CUBE, CUBE),
    "import bpy\nd = {o.name: o.location[:] for o in bpy.data.objects}\nprint(d)",
    "import bpy\na, *rest = [o.name for o in bpy.data.objects]\nprint(a, rest)",
    "import bpy\nprint(max(bpy.data.objects))",  # fails (no ordering): still nothing to take back
]
# Code that writes (or may): none of it may be classified read-only.
WRITERS = [
    "import bpy\n%s.location.x = 5" % CUBE,
    "import bpy\nv = %s.location\nv += v" % CUBE,
    "import bpy\nx = [%s.location]\nx[0] += x[0]" % CUBE,
    "import bpy\nv = %s.location\nv[:] = (3, 3, 3)" % CUBE,
    "import bpy\nprint('x', file=bpy.data.texts.new('T'))",
    "import bpy\nsorted(list(bpy.data.objects), key=bpy.data.objects.remove)",
    "import bpy\nlist(map(bpy.data.objects.remove, list(bpy.data.objects)))",
    "import bpy\n[0 for %s.name in ['Renamed']]" % CUBE,
    "import bpy\nfor bpy.context.scene.frame_current in range(3):\n    pass",
    "import bpy\nprint = bpy.data.objects.remove\nprint(%s)" % CUBE,
    "import bpy\nfrom bpy.data.objects import remove as print\nprint(%s)" % CUBE,
    "import bpy\n(print := bpy.data.objects.remove)(%s)" % CUBE,
    "import bpy\nx = bpy.data.objects.remove\nx(%s)" % CUBE,
    "import bpy\n(lambda: bpy.data.objects.remove(%s))()" % CUBE,
    "import bpy\ndel %s['prop']" % CUBE,
    "import bpy\n%s.location.zero()" % CUBE,
    "import bpy\nbpy.ops.object.delete()",
    "import bpy\nclass A:\n    bpy.data.objects.remove(%s)" % CUBE,
    "import bpy\ntry:\n    pass\nexcept Exception as print:\n    pass\nprint(%s)" % CUBE,
    "import bpy\nv = %s.location\nv @= v" % CUBE,
]


# Read-only code that reaches nothing earlier code can leave behind: all of it must pass.
LEFTOVER_FREE = [
    "print(1)",
    "print(sorted({3, 1, 2}), [i * i for i in range(4)])",
    "import math, mathutils\nprint(math.pi, mathutils.Vector, round(math.e, 3))",
    "from mathutils import Vector\nfrom math import *\nprint(Vector, pi, tau)",
]
# Read-only code that may reach something earlier code left: none of it may pass.
MAY_REACH_LEFTOVERS = [
    "import bpy\nprint(len(bpy.data.objects))",
    "import bpy as b\nprint(b.context.scene.name)",
    "import json\nprint(json.dumps)",
    "import bpy\nb = bpy\nprint(b.data)",
    "import bpy\nprint(bpy.app.version)",
    "import bpy\nprint(bpy.path)",
    "import bpy\nprint([bpy][0].data)",
    "from bpy import data\nprint(data)",
    "import mathutils.geometry\nprint(1)",
    "import bpy\nfrom math import pi as bpy\nprint(bpy.data)",
    "import bpy\nfor bpy in [1]:\n    pass",
    "import math\nimport bpy as math\nprint(math.data)",
]


def unmade_scene_struct():
    """A kind of data the scene points to whose Python class bpy has not made yet (it makes one
    the first time code reaches such data), as (scene property, class name); None if none is
    left in this process."""
    from vibe_kernel import kernel_state

    # Named here: reading the data, or its property's `fixed_type`, would make the class.
    kinds = [("unit_settings", "UnitSettings"), ("safe_areas", "DisplaySafeAreas"),
             ("sequencer_colorspace_settings", "ColorManagedSequencerColorspaceSettings"),
             ("grease_pencil_settings", "SceneGpencil"), ("hydra", "SceneHydra"), ("eevee", "SceneEEVEE"),
             ("display", "SceneDisplay"), ("cursor", "View3DCursor")]
    made = {cls.__name__ for cls in kernel_state.bpy_classes()}
    names = bpy.types.Scene.bl_rna.properties.keys()
    return next(((prop, kind) for prop, kind in kinds if prop in names and kind not in made), None)


class ReadsOnlyTest(KernelCalls, unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = code_kernel("agent")
        # As in a kernel process where no agent code that writes has run yet (the proof's own
        # ground; tests before this one ran some).
        agent_code.WRITING_CODE_RAN = False

    def tearDown(self):
        if hasattr(bpy, "vibe_test_hook"):
            del bpy.vibe_test_hook

    def classified(self, code):
        return read_only.reads_only(code_gate.parse(code))

    def test_readers_are_read_only_and_change_nothing(self):
        for code in READERS:
            with self.subTest(code=code):
                self.assertTrue(self.classified(code))
                before = snapshot.fingerprint()
                self.call("python.exec", code=code)
                self.assertEqual(snapshot.fingerprint(), before)

    def test_writers_are_never_read_only(self):
        for code in WRITERS:
            with self.subTest(code=code):
                self.assertFalse(self.classified(code))

    def test_whatever_is_called_read_only_leaves_the_fingerprint(self):
        # The independent check over the whole corpus: the classifier's verdict is never
        # trusted where the fingerprint says otherwise.
        for code in READERS + WRITERS:
            bpy.ops.wm.read_factory_settings(use_empty=False)
            if not self.classified(code):
                continue
            before = snapshot.fingerprint()
            self.call("python.exec", code=code)
            self.assertEqual(snapshot.fingerprint(), before, code)

    def test_leftover_free_code_is_told_apart(self):
        for code in LEFTOVER_FREE:
            with self.subTest(code=code):
                tree = code_gate.parse(code)
                self.assertTrue(read_only.reads_only(tree) and read_only.reaches_no_leftovers(tree))
        for code in MAY_REACH_LEFTOVERS:
            with self.subTest(code=code):
                self.assertFalse(read_only.reaches_no_leftovers(code_gate.parse(code)))

    def test_the_leftover_free_modules_take_no_attribute(self):
        # The ground reaches_no_leftovers stands on: nothing in the views of math and
        # mathutils (submodules one level down) takes an attribute a stash could be put in.
        import types

        from vibe_kernel import module_views, read_only as proof

        views = module_views.Views()
        for name in proof.LEFTOVER_FREE_MODULES:
            pending = [views.of(__import__(name))]
            while pending:
                view = pending.pop()
                for attr, value in vars(view).items():
                    if attr.startswith("__"):
                        continue
                    if isinstance(value, types.ModuleType):
                        pending.append(value)  # a submodule's view, itself read-only
                        continue
                    with self.subTest(module=view.__name__, attr=attr):
                        with self.assertRaises((AttributeError, TypeError)):
                            setattr(value, "vibe_probe", 1)

    def test_a_stash_on_blender_data_never_outlives_its_call(self):
        # What code that reads only Blender's data can read of Python's: the classes of that
        # data and the functions they hold. A lazy map stored there (on an existing class, one
        # bpy makes during the run, a method's function) would delete the Cube when a later
        # call, or the kernel, reads it. The writing call is refused and the store put back.
        self.ok("python.exec", code="x = []\nx.append(1)")  # what the kernel itself reads, its classes made
        found = unmade_scene_struct()
        targets = ["bpy.data.objects['Cube']", "bpy.context.scene.render"]
        if found is not None:
            targets.append("bpy.context.scene.%s" % found[0])
        # And on a method of such a class: a bound method's attribute reads fall through to its
        # function's (a helper's attack: every object deleted by `print(list(...))`).
        methods = ["bpy.data.meshes['Cube'].from_pydata", "bpy.context.window_manager.popup_menu"]
        stashes = [(target, "t = type(%s)" % target) for target in targets]
        stashes += [(method, "t = type(%s).%s" % tuple(method.rsplit(".", 1))) for method in methods]
        for target, bind in stashes:
            with self.subTest(target=target):
                stash = ("import bpy\n%s\nt.vibe_hook = map(bpy.data.objects.remove, "
                         "[bpy.data.objects['Cube']])" % bind)
                error = self.exec_error(stash, "contract_violation")
                self.assertEqual(error["details"]["rule"], "kernel_state", error)
                self.assertTrue(any(c.endswith((".vibe_hook", "(attributes of the function)"))
                                    for c in error["details"]["changed"]), error)
                self.assertTrue(agent_code.WRITING_CODE_RAN)
                reader = "import bpy\nprint(len(list(%s.vibe_hook)))" % target
                self.assertTrue(self.classified(reader))
                before = snapshot.fingerprint()
                error = self.exec_error(reader, "execution_failed")
                self.assertIn("AttributeError", error["message"])
                self.assertIn("Cube", bpy.data.objects)
                self.assertEqual(snapshot.fingerprint(), before)
        if found is None:
            self.skipTest("every class the scene points to was made already: the run-made case not reached")

    def test_objects_left_by_earlier_code_never_run_under_the_proof(self):
        # Code that writes stashes a lazy map on an object a module shares (a module itself is a
        # view made per run and the containers it holds are copies, see module_views.py; a
        # function's attributes are its own); later code that only reads runs it by iterating
        # it. Without the rollback point the Cube stayed deleted after a failed call answered
        # "rolled back", and a call that succeeded deleted the person's Cube past the actuator
        # lock.
        import json

        self.addCleanup(vars(json.dumps).pop, "vibe_test_hook", None)
        stash = ("import bpy, json\n[json.dumps][0].vibe_test_hook = "
                 "map(bpy.data.objects.remove, [bpy.data.objects['Cube']])")
        trigger = "import json\nprint(len(list(json.dumps.vibe_test_hook)))"
        self.assertTrue(self.classified(trigger))
        self.assertTrue(self.classified(trigger + "\nraise RuntimeError"))
        self.ok("python.exec", code=stash)
        self.assertIn("Cube", bpy.data.objects)
        before = snapshot.fingerprint()
        answer = self.call("python.exec", code=trigger + "\nraise RuntimeError")
        self.assertEqual(answer["error"]["code"], "execution_failed", answer)
        self.assertTrue(answer["error"]["details"]["rolled_back"], answer)
        self.assertIn("Cube", bpy.data.objects)
        self.assertEqual(snapshot.fingerprint(), before)
        self.ok("python.exec", code=stash)
        answer = self.call("python.exec", code=trigger)
        self.assertEqual(answer["error"]["details"]["reason"], "actuator_lock", answer)
        self.assertIn("Cube", bpy.data.objects)
        self.assertEqual(snapshot.fingerprint(), before)


if __name__ == "__main__":
    unittest.main()
