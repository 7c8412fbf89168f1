"""The actuator lock for agent code, in-kernel (a filter; the bridge's boundary check is tested
from Rust): every way agent code can delete, rename or unlink an object the agent did not create
is refused and rolled back; the agent's own objects stay free. Runs like test_kernel.py."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel import lock  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402

# Each path takes the factory Cube (which the agent did not create) away from the scene.
ATTACKS = {
    "objects.remove": "import bpy\nbpy.data.objects.remove(bpy.data.objects['Cube'])",
    "ops.delete": "import bpy\nfor o in bpy.context.scene.objects:\n    o.select_set(o.name == 'Cube')\n"
                  "bpy.context.view_layer.objects.active = bpy.data.objects['Cube']\nbpy.ops.object.delete()",
    "batch_remove": "import bpy\nbpy.data.batch_remove(list(bpy.data.objects))",
    "mesh removal": "import bpy\nbpy.data.meshes.remove(bpy.data.meshes['Cube'])",
    "unlink everywhere": "import bpy\nob = bpy.data.objects['Cube']\nfor c in list(ob.users_collection):\n"
                         "    c.objects.unlink(ob)",
    "collection removal": "import bpy\nbpy.data.collections.remove(bpy.data.collections['Collection'])",
    "unlink then purge": "import bpy\nob = bpy.data.objects['Cube']\nfor c in list(ob.users_collection):\n"
                         "    c.objects.unlink(ob)\nbpy.data.orphans_purge(do_recursive=True)",
    "rename": "import bpy\nbpy.data.objects['Cube'].name = 'junk'",
    "data swap": "import bpy\nbpy.data.objects['Cube'].data = bpy.data.meshes.new('Other')",
}


class LockTest(unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.k.state.features.add("code_exec")
        self.k.state.configure({"session_id": "lock",
                               "capabilities": ["scene.read", "scene.write", "transactions", "code_exec"]})
        self.k.call_deadline_ms = 5000

    def state(self):
        # Identities change with a reload (a rollback); everything else must be as it was.
        return {name: dict(record, uid=None) for name, record in lock.inventory(self.k).items()}

    def test_every_path_is_refused_and_rolled_back(self):
        for label, code in ATTACKS.items():
            with self.subTest(label):
                bpy.ops.wm.read_factory_settings(use_empty=False)
                before = self.state()
                answer = self.k.call("python.exec", {"code": code})
                self.assertFalse(answer["ok"], "%s: %r" % (label, answer))
                details = answer["error"]["details"]
                self.assertEqual(details["reason"], "actuator_lock", answer)
                self.assertTrue(details["violations"], answer)
                self.assertEqual(self.state(), before, label)

    def test_the_refusal_names_each_object_and_what_happened(self):
        answer = self.k.call("python.exec", {"code": ATTACKS["rename"]})
        self.assertEqual(answer["error"]["details"]["violations"], [{"name": "Cube", "what": 'renamed to "junk"'}])
        answer = self.k.call("python.exec", {"code": ATTACKS["batch_remove"]})
        names = [v["name"] for v in answer["error"]["details"]["violations"]]
        self.assertEqual(names, ["Camera", "Cube", "Light"])

    def test_the_humans_other_data_blocks_and_object_parts_are_protected_too(self):
        setup = ("import bpy\ncube = bpy.data.objects['Cube']\ncube.modifiers.new('Bend', 'SIMPLE_DEFORM')\n"
                 "cube.vertex_groups.new(name='spine')\nbpy.data.actions.new('Walk').use_fake_user = True\n"
                 "bpy.data.node_groups.new('Rigging', 'GeometryNodeTree').use_fake_user = True\n")
        exec(compile(setup, "setup", "exec"))  # the person's own work, not the agent's
        attacks = {
            "material": ("bpy.data.materials.remove(bpy.data.materials['Material'])", "Material"),
            "action": ("bpy.data.actions.remove(bpy.data.actions['Walk'])", "Walk"),
            "node group": ("bpy.data.node_groups['Rigging'].name = 'x'", "Rigging"),
            "modifier": ("ob = bpy.data.objects['Cube']\nob.modifiers.remove(ob.modifiers['Bend'])", "Cube"),
            "vertex group": ("ob = bpy.data.objects['Cube']\nob.vertex_groups.remove(ob.vertex_groups['spine'])",
                             "Cube"),
        }
        for label, (code, name) in attacks.items():
            with self.subTest(label):
                answer = self.k.call("python.exec", {"code": "import bpy\n" + code})
                self.assertFalse(answer["ok"], "%s: %r" % (label, answer))
                details = answer["error"]["details"]
                self.assertEqual(details["reason"], "actuator_lock", answer)
                self.assertIn(name, [v["name"] for v in details["violations"]], answer)
        self.assertIn("Bend", bpy.data.objects["Cube"].modifiers)
        self.assertIn("Walk", bpy.data.actions)
        # A material the agent made itself (tagged by material.ensure_principled) stays free.
        made = self.k.call("material.ensure_principled", {"name": "Paint"})
        self.assertTrue(made["ok"], made)
        gone = self.k.call("python.exec", {"code": "import bpy\nbpy.data.materials.remove(bpy.data.materials['Paint'])"})
        self.assertTrue(gone["ok"], gone)

    def test_a_new_object_that_takes_a_protected_name_is_not_the_protected_object(self):
        # Delete the person's Cube and build a lookalike: same name, a new mesh of the same name.
        code = ("import bpy\ncube = bpy.data.objects['Cube']\nmesh = cube.data\nbpy.data.objects.remove(cube)\n"
                "bpy.data.meshes.remove(mesh)\nnew = bpy.data.objects.new('Cube', bpy.data.meshes.new('Cube'))\n"
                "bpy.context.scene.collection.children['Collection'].objects.link(new)\n")
        before = self.state()
        answer = self.k.call("python.exec", {"code": code})
        if lock.uses_addresses() and answer["ok"]:
            self.skipTest("Blender 3.4 has no session UID and the new object took the freed address; the "
                          "boundary's record and the typed lock still hold")
        self.assertFalse(answer["ok"], answer)
        self.assertEqual(answer["error"]["details"]["violations"],
                         [{"name": "Cube", "what": 'deleted; a new object took the name "Cube"'}])
        self.assertEqual(self.state(), before)

    def test_the_humans_constraints_are_protected_too(self):
        bpy.data.objects["Cube"].constraints.new("TRACK_TO").name = "Aim"  # the person's
        answer = self.k.call("python.exec", {"code": "import bpy\nc = bpy.data.objects['Cube'].constraints\n"
                                                     "c.remove(c['Aim'])"})
        self.assertEqual(answer["error"]["details"]["violations"], [{"name": "Cube", "what": 'lost its constraint "Aim"'}])
        self.assertIn("Aim", bpy.data.objects["Cube"].constraints)

    def test_the_agents_own_objects_stay_free_and_property_edits_are_allowed(self):
        made = self.k.call("python.exec", {"code": "import bpy\nme = bpy.data.meshes.new('Box')\n"
                                                   "ob = bpy.data.objects.new('Box', me)\n"
                                                   "bpy.context.scene.collection.objects.link(ob)\n"
                                                   "bpy.data.objects['Cube'].location.x = 3"})
        self.assertTrue(made["ok"], made)
        self.assertEqual(made["result"]["created"], ["Box"])
        self.assertEqual(bpy.data.objects["Cube"].location.x, 3)
        renamed = self.k.call("python.exec", {"code": "import bpy\nbpy.data.objects['Box'].name = 'Crate'"})
        self.assertTrue(renamed["ok"], renamed)
        deleted = self.k.call("python.exec", {"code": "import bpy\nbpy.data.objects.remove(bpy.data.objects['Crate'])"})
        self.assertTrue(deleted["ok"], deleted)
        self.assertNotIn("Crate", bpy.data.objects)

    def test_a_typed_creation_is_the_agents_too(self):
        made = self.k.call("object.create", {"name": "Pole", "type": "EMPTY"})
        self.assertTrue(made["ok"], made)
        gone = self.k.call("python.exec", {"code": "import bpy\nbpy.data.objects.remove(bpy.data.objects['Pole'])"})
        self.assertTrue(gone["ok"], gone)

    def test_inside_a_transaction_a_refused_call_leaves_the_state_before_it(self):
        self.assertTrue(self.k.call("transaction.begin", {})["ok"])
        self.assertTrue(self.k.call("python.exec", {"code": "import bpy\nbpy.data.objects['Cube'].location.z = 7"})["ok"])
        before = self.state()
        answer = self.k.call("python.exec", {"code": ATTACKS["objects.remove"]})
        self.assertEqual(answer["error"]["details"]["reason"], "actuator_lock")
        self.assertEqual(self.state(), before)
        self.assertEqual(bpy.data.objects["Cube"].location.z, 7)
        self.assertTrue(self.k.call("transaction.rollback", {})["ok"])
        self.assertEqual(bpy.data.objects["Cube"].location.z, 0)



class ExactSnapshotTest(unittest.TestCase):
    """Rollbacks keep data-blocks nobody uses yet (a material made before `begin`)."""

    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.k.state.features.add("code_exec")
        self.k.state.configure({"session_id": "exact",
                                "capabilities": ["scene.read", "scene.write", "transactions", "code_exec"]})
        self.k.call_deadline_ms = 5000

    def blocks(self):
        return {(c, b.name, b.users, b.use_fake_user) for c in ("materials", "meshes", "node_groups")
                for b in getattr(bpy.data, c)}

    def test_a_rollback_keeps_unused_data_blocks(self):
        self.assertTrue(self.k.call("material.ensure_principled", {"name": "Unused"})["ok"])
        bpy.data.meshes.new("Spare")
        before = self.blocks()
        self.assertEqual(bpy.data.materials["Unused"].users, 0)
        self.assertTrue(self.k.call("transaction.begin", {})["ok"])
        self.assertTrue(self.k.call("object.move", {"name": "Cube", "delta": [1, 0, 0]})["ok"])
        self.assertTrue(self.k.call("transaction.rollback", {})["ok"])
        self.assertEqual(self.blocks(), before)

    def test_a_failed_python_exec_keeps_unused_data_blocks(self):
        self.assertTrue(self.k.call("material.ensure_principled", {"name": "Unused"})["ok"])
        before = self.blocks()
        failed = self.k.call("python.exec", {"code": "import bpy\nbpy.data.objects['Cube'].location.x = 5\nraise ValueError('no')"})
        self.assertFalse(failed["ok"])
        self.assertEqual(self.blocks(), before)
        self.assertEqual(bpy.data.objects["Cube"].location.x, 0)


if __name__ == "__main__":
    unittest.main()
