"""The actuator lock for typed tools (lock.refuse_object, lock.refuse_modifier): object.rename,
object.delete, object.assign_collection with mode "move" and modifier.remove are refused on a
data-block the agent did not make in this session; the agent's own objects and modifiers stay
free, property edits and mode "link" stay allowed, a missing name stays not_found. Runs like
test_kernel.py:

    python -m unittest discover -s vibe-transport/kernel/tests      (a Python with bpy)
    blender -b --factory-startup --python-exit-code 1 --python vibe-transport/kernel/tests/run_in_blender.py
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel import lock  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import KernelCalls  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "transactions"]


class TypedLockTest(KernelCalls, unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES})

    def locked(self, tool, **params):
        """The refusal of `tool`, checked to be the actuator lock's and to change nothing."""
        before = self.ok("scene.snapshot")
        error = self.refused(tool, "contract_violation", **params)
        self.assertEqual(error["details"]["reason"], "actuator_lock", error)
        self.assertTrue(error["message"].startswith("security block: cannot "), error)
        self.assertEqual(self.ok("scene.snapshot"), before, "a refused call changes nothing")
        return error

    def test_the_humans_objects_cannot_be_renamed_deleted_or_moved_out_of_their_collections(self):
        self.ok("scene.create_collection", name="Props")
        error = self.locked("object.rename", name="Cube", new_name="Box")
        self.assertEqual(error["details"], {"reason": "actuator_lock", "rule": "rename", "kind": "object",
                                            "name": "Cube", "field": "name"})
        self.assertEqual(error["message"],
                         'security block: cannot rename object "Cube", which the agent did not create in this session')
        error = self.locked("object.delete", name="Camera")
        self.assertEqual(error["details"], {"reason": "actuator_lock", "rule": "remove", "kind": "object",
                                            "name": "Camera", "field": "name"})
        self.assertEqual(error["message"],
                         'security block: cannot delete object "Camera", which the agent did not create in this session')
        error = self.locked("object.assign_collection", name="Light", collection="Props", mode="move")
        self.assertEqual(error["details"], {"reason": "actuator_lock", "rule": "unlink", "kind": "object",
                                            "name": "Light", "field": "name"})
        # "move" is the default mode.
        self.assertEqual(self.locked("object.assign_collection", name="Light", collection="Props")["details"]["rule"],
                         "unlink")
        self.assertIn("Cube", bpy.data.objects)
        self.assertIn("Camera", bpy.data.objects)
        self.assertEqual([c.name for c in bpy.data.objects["Light"].users_collection], ["Collection"])

    def test_link_and_property_edits_stay_allowed_on_the_humans_objects(self):
        self.ok("scene.create_collection", name="Props")
        linked = self.ok("object.assign_collection", name="Cube", collection="Props", mode="link")
        self.assertEqual(linked["collections"], ["Collection", "Props"])
        self.ok("object.move", name="Cube", delta=[1, 0, 0])
        self.ok("object.set_transform", name="Cube", scale=[2, 2, 2])
        self.ok("object.set_parent", name="Camera", parent="Cube")
        self.ok("material.ensure_principled", name="Red")
        self.ok("mesh.assign_material", name="Cube", material="Red", slot=1)
        self.ok("modifier.add", name="Cube", modifier_type="BEVEL")
        self.ok("selection.set_active_object", name="Light")

    def test_the_agents_own_objects_are_free(self):
        self.ok("scene.create_collection", name="Props")
        self.ok("mesh.create_cube", name="Box")
        self.ok("mesh.create_plane", name="Floor")
        self.ok("object.create", name="Lamp", type="LIGHT")
        self.assertEqual(self.ok("object.rename", name="Box", new_name="Crate")["name"], "Crate")
        self.assertEqual(self.ok("object.assign_collection", name="Crate", collection="Props")["collections"], ["Props"])
        self.ok("object.assign_collection", name="Floor", collection="Props", mode="move")
        self.assertEqual(self.ok("object.delete", name="Crate"), {"deleted": "Crate"})
        self.ok("object.delete", name="Floor")
        self.ok("object.delete", name="Lamp")

    def test_a_missing_name_stays_not_found(self):
        for tool, params, field in (("object.rename", {"name": "Nope", "new_name": "X"}, "name"),
                                    ("object.delete", {"name": "Nope"}, "name"),
                                    ("object.assign_collection", {"name": "Nope", "collection": "Collection"}, "name"),
                                    ("object.assign_collection", {"name": "Cube", "collection": "Nope"}, "collection"),
                                    ("modifier.remove", {"name": "Nope", "modifier_name": "Bevel"}, "name"),
                                    ("modifier.remove", {"name": "Cube", "modifier_name": "Nothing"}, "modifier_name")):
            with self.subTest(tool=tool, params=params):
                error = self.refused(tool, "not_found", **params)
                self.assertEqual(error["details"]["field"], field)
                self.assertNotIn("reason", error["details"])

    def test_the_lock_comes_before_the_tools_other_checks(self):
        # name_taken would refuse this rename too, children this delete: the lock speaks first.
        self.assertEqual(self.locked("object.rename", name="Cube", new_name="Camera")["details"]["rule"], "rename")
        self.ok("object.set_parent", name="Camera", parent="Cube")
        self.assertEqual(self.locked("object.delete", name="Cube")["details"]["rule"], "remove")
        # A bad mode is still a bad argument (the rule depends on it).
        self.refused("object.assign_collection", "invalid_arguments", name="Cube", collection="Collection",
                     mode="steal")

    def test_a_modifier_the_human_made_cannot_be_removed(self):
        bpy.data.objects["Cube"].modifiers.new("Armature", "ARMATURE")  # as a person would
        error = self.locked("modifier.remove", name="Cube", modifier_name="Armature")
        self.assertEqual(error["details"], {"reason": "actuator_lock", "rule": "remove", "kind": "modifier",
                                            "name": "Armature", "object": "Cube", "field": "modifier_name"})
        self.assertEqual(error["message"], 'security block: cannot remove modifier "Armature" of "Cube", which the '
                                           'agent did not add in this session')
        self.assertIn("Armature", bpy.data.objects["Cube"].modifiers)

    def test_the_agents_modifiers_are_free_on_any_object(self):
        added = self.ok("modifier.add", name="Cube", modifier_type="BEVEL")
        self.assertEqual([m["name"] for m in added["modifiers"]], ["Bevel"])
        self.ok("modifier.add", name="Cube", modifier_type="BEVEL")  # Blender names it Bevel.001
        self.assertEqual(self.ok("modifier.remove", name="Cube", modifier_name="Bevel.001")["modifiers"][0]["name"],
                         "Bevel")
        self.assertEqual(self.ok("modifier.remove", name="Cube", modifier_name="Bevel")["modifiers"], [])
        # Every modifier of an object the agent made is the agent's, whoever added it.
        self.ok("mesh.create_cube", name="Box")
        bpy.data.objects["Box"].modifiers.new("Mirror", "MIRROR")
        self.assertEqual(self.ok("modifier.remove", name="Box", modifier_name="Mirror")["modifiers"], [])

    def test_the_record_is_this_sessions_and_follows_the_object(self):
        self.ok("modifier.add", name="Cube", modifier_type="ARRAY")
        bpy.data.objects["Cube"].name = "Hero"  # a person renames the object: the record follows it
        self.ok("modifier.add", name="Hero", modifier_type="SOLIDIFY")
        self.ok("modifier.remove", name="Hero", modifier_name="Solidify")
        self.k.state.configure({"session_id": "other", "capabilities": CAPABILITIES})
        error = self.locked("modifier.remove", name="Hero", modifier_name="Array")
        self.assertEqual(error["details"]["object"], "Hero")
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES})
        self.ok("modifier.remove", name="Hero", modifier_name="Array")
        # Removed is forgotten: a person's modifier of that name later is the person's.
        bpy.data.objects["Hero"].modifiers.new("Array", "ARRAY")
        self.locked("modifier.remove", name="Hero", modifier_name="Array")

    def test_a_rollback_restores_the_record_as_it_was_at_begin(self):
        self.ok("modifier.add", name="Cube", modifier_type="BEVEL")
        self.ok("transaction.begin")
        self.ok("modifier.remove", name="Cube", modifier_name="Bevel")
        self.ok("modifier.add", name="Cube", modifier_type="MIRROR")
        self.ok("transaction.rollback")  # the file reloads: every pointer is new
        self.assertEqual([m.name for m in bpy.data.objects["Cube"].modifiers], ["Bevel"])
        self.assertEqual(list(self.k.shared.modifiers.values()), ["agent"])
        self.ok("modifier.remove", name="Cube", modifier_name="Bevel")
        self.assertIsNone(self.k.shared.transaction_record)

    def test_a_copy_of_the_agents_object_is_the_persons(self):
        self.ok("mesh.create_cube", name="Prop")
        copy = bpy.data.objects["Prop"].copy()  # Shift+D: the copy carries the agent's tag
        copy.name = "Prop copy"
        bpy.context.scene.collection.objects.link(copy)
        self.assertEqual(copy[lock.CREATED_PROP], "agent")
        self.assertEqual(self.locked("object.delete", name="Prop copy")["details"]["rule"], "remove")
        self.ok("object.delete", name="Prop")

    def test_a_name_the_person_gave_away_and_took_again_is_the_persons(self):
        self.ok("mesh.create_cube", name="Prop")
        bpy.data.objects["Prop"].name = "Lamp"  # the person renames the agent's Prop...
        bpy.ops.mesh.primitive_cube_add()
        bpy.context.active_object.name = "Prop"  # ...and makes a new Prop
        self.locked("object.delete", name="Prop")
        if lock.uses_addresses():
            # 3.4: the record's address is checked against its name; renamed by the person, the
            # object is the person's (the safe side).
            self.locked("object.delete", name="Lamp")
        else:
            self.ok("object.delete", name="Lamp")  # the session UID followed the rename

    def test_the_agents_rename_keeps_it_the_agents(self):
        self.ok("mesh.create_cube", name="Prop")
        self.ok("object.rename", name="Prop", new_name="Crate")
        self.ok("object.delete", name="Crate")

    def test_a_deleted_object_takes_its_record_with_it(self):
        self.ok("mesh.create_cube", name="Box")
        self.ok("modifier.add", name="Box", modifier_type="BEVEL")
        self.assertEqual(len(self.k.shared.modifiers), 1)
        self.ok("object.delete", name="Box")
        self.assertEqual(self.k.shared.modifiers, {})


class CodeKeepsTheRecordTest(unittest.TestCase):
    def test_a_failed_python_exec_keeps_the_record(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        k = Kernel()
        k.state.features.add("code_exec")
        k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES + ["code_exec"]})
        k.call_deadline_ms = 5000
        self.assertTrue(k.call("modifier.add", {"name": "Cube", "modifier_type": "BEVEL"})["ok"])
        failed = k.call("python.exec", {"code": "import bpy\nbpy.data.objects['Cube'].location.x = 2\nraise ValueError('no')"})
        self.assertEqual(failed["error"]["code"], "execution_failed")  # rolled back: the file was reloaded
        removed = k.call("modifier.remove", {"name": "Cube", "modifier_name": "Bevel"})
        self.assertTrue(removed["ok"], removed)


if __name__ == "__main__":
    unittest.main()
