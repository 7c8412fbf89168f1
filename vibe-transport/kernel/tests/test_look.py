"""The look pack (look.py) against real bpy: camera and light settings, aiming, the world
background, and what the snapshot and the change fingerprint report of them. Expected values are
worked out here independently: the aim by turning (0, 0, -1) with the resulting rotation and by
Blender's own to_track_quat. Runs like test_kernel.py:

    python -m unittest discover -s vibe-transport/kernel/tests      (a Python with bpy)
    blender -b --factory-startup --python-exit-code 1 --python vibe-transport/kernel/tests/run_in_blender.py
"""

import math
import os
import sys
import unittest

KERNEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, KERNEL_DIR)

import bpy  # noqa: E402
from mathutils import Euler, Vector  # noqa: E402

from vibe_kernel import snapshot  # noqa: E402
from vibe_kernel.look import aim_euler  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import KernelCalls  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "transactions"]


class LookTest(KernelCalls, unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES})

    def assertClose(self, actual, expected, places=5):
        self.assertEqual(len(actual), len(expected))
        for a, e in zip(actual, expected):
            self.assertAlmostEqual(a, e, places=places, msg="%r != %r" % (actual, expected))

    # ------------------------------------------------------------ factory and new data

    def test_factory_settings_are_what_the_mock_starts_from(self):
        info = self.ok("object.info", name="Camera")["data"]
        self.assertEqual(info["camera_type"], "PERSP")
        self.assertClose([info["lens"], info["sensor_width"], info["clip_start"], info["clip_end"]],
                         [50, 36, 0.1, 100])
        light = self.ok("object.info", name="Light")["data"]
        self.assertEqual((light["light_type"], light["spot_size"], light["spot_blend"]), ("POINT", None, None))
        self.assertClose([light["energy"], light["size"]] + light["color"], [1000, 0.1, 1, 1, 1])
        snap = self.ok("scene.snapshot")
        self.assertEqual(snap["camera"], "Camera")
        self.assertEqual(snap["world"]["name"], "World")
        self.assertClose(snap["world"]["color"] + [snap["world"]["strength"]], [0.050876] * 3 + [1.0])

    def test_new_lights_have_the_same_radius_on_every_version(self):
        for kind in ("POINT", "SPOT"):
            self.ok("object.create", name=kind, type="LIGHT", light_type=kind)
            self.assertAlmostEqual(bpy.data.objects[kind].data.shadow_soft_size, 0.25)
        data = self.ok("object.info", name="SPOT")["data"]
        self.assertClose([data["energy"], data["size"], data["spot_size"], data["spot_blend"]],
                         [10, 0.25, math.pi / 4, 0.15])

    # ------------------------------------------------------------ camera.set

    def test_camera_settings_land_and_make_active_moves_the_scene_camera(self):
        self.ok("object.create", name="Cam2", type="CAMERA")
        out = self.ok("camera.set", name="Cam2", lens=85, sensor_width=24, clip_start=0.5, clip_end=250,
                      type="ORTHO", ortho_scale=12.5, make_active=True)
        self.assertEqual((out["name"], out["active"], out["type"]), ("Cam2", True, "ORTHO"))
        cam = bpy.data.objects["Cam2"].data
        self.assertClose([cam.lens, cam.sensor_width, cam.clip_start, cam.clip_end, cam.ortho_scale],
                         [85, 24, 0.5, 250, 12.5])
        self.assertEqual(bpy.context.scene.camera.name, "Cam2")
        self.assertFalse(self.ok("camera.set", name="Camera")["active"])

    def test_camera_refusals_change_nothing(self):
        before = snapshot.fingerprint()
        self.assertEqual(self.refused("camera.set", "invalid_arguments", name="Cube")["details"]["field"], "name")
        self.refused("camera.set", "not_found", name="Nope")
        # The factory camera's far clip is 100: a start of 100 is not below it.
        self.assertEqual(self.refused("camera.set", "invalid_arguments", name="Camera", clip_start=100)
                         ["details"]["field"], "clip_start")
        self.assertEqual(self.refused("camera.set", "invalid_arguments", name="Camera", clip_start=5, clip_end=2)
                         ["details"]["field"], "clip_start")
        self.refused("camera.set", "invalid_arguments", name="Camera", lens=0.5)
        self.refused("camera.set", "invalid_arguments", name="Camera", type="PANO")
        self.refused("camera.set", "invalid_arguments", name="Camera", ortho_scale=0)
        self.assertEqual(snapshot.fingerprint(), before)

    # ------------------------------------------------------------ object.aim

    def forward(self, obj):
        """Where the object's -Z axis points in the world, by its rotation."""
        return Euler(obj.rotation_euler, "XYZ").to_matrix() @ Vector((0, 0, -1))

    def test_hand_computed_aims(self):
        self.ok("object.create", name="Eye", type="CAMERA", location=[0, -10, 0])
        self.assertClose(self.ok("object.aim", name="Eye", target=[0, 0, 0])["rotation_euler"],
                         [math.pi / 2, 0, 0])
        self.ok("object.set_transform", name="Eye", location=[10, 0, 0])
        self.assertClose(self.ok("object.aim", name="Eye", target_object="Cube")["rotation_euler"],
                         [math.pi / 2, 0, math.pi / 2])
        self.ok("object.set_transform", name="Eye", location=[0, 0, 5])
        self.assertClose(self.ok("object.aim", name="Eye", target=[0, 0, 0])["rotation_euler"], [0, 0, 0])

    def test_minus_z_points_at_the_target_as_track_to_would(self):
        for start, target in (([7.36, -6.93, 4.96], [0, 0, 0]), ([1, 2, 3], [-4, 0.5, 1]), ([-3, 8, -2], [2, -1, 6])):
            self.ok("object.set_transform", name="Camera", location=start)
            self.ok("object.aim", name="Camera", target=target)
            wanted = (Vector(target) - Vector(start)).normalized()
            self.assertClose(list(self.forward(bpy.data.objects["Camera"])), list(wanted))
            track = (Vector(target) - Vector(start)).to_track_quat("-Z", "Y").to_matrix()
            ours = Euler(bpy.data.objects["Camera"].rotation_euler, "XYZ").to_matrix()
            for row in range(3):
                self.assertClose(list(ours[row]), list(track[row]), places=4)

    def test_aim_euler_matches_to_track_quat_away_from_the_poles(self):
        for direction in ((1, 2, 3), (-3, 4, -5), (0.3, -0.1, 0.9), (-2, -2, 0.01)):
            ours = Euler(aim_euler(direction), "XYZ").to_matrix()
            track = Vector(direction).to_track_quat("-Z", "Y").to_matrix()
            for row in range(3):
                self.assertClose(list(ours[row]), list(track[row]), places=5)

    def test_aim_refusals(self):
        self.assertEqual(self.refused("object.aim", "invalid_arguments", name="Cube", target=[0, 0, 0])
                         ["details"]["field"], "target")
        self.assertEqual(self.refused("object.aim", "invalid_arguments", name="Cube", target_object="Cube")
                         ["details"]["field"], "target_object")
        self.refused("object.aim", "invalid_arguments", name="Cube")
        self.refused("object.aim", "invalid_arguments", name="Cube", target=[1, 0, 0], target_object="Light")
        self.refused("object.aim", "not_found", name="Cube", target_object="Nope")

    # ------------------------------------------------------------ light.set

    def test_light_settings_by_type(self):
        self.ok("object.create", name="Key", type="LIGHT")
        out = self.ok("light.set", name="Key", light_type="SPOT", energy=500, color=[1, 0.5, 0.25], size=0.3,
                      spot_size=0.8, spot_blend=0.4)
        self.assertEqual(out["light_type"], "SPOT")
        light = bpy.data.objects["Key"].data
        self.assertClose([light.energy, light.shadow_soft_size, light.spot_size, light.spot_blend],
                         [500, 0.3, 0.8, 0.4])
        self.ok("light.set", name="Key", light_type="AREA", size=2)
        self.assertAlmostEqual(bpy.data.objects["Key"].data.size, 2)
        out = self.ok("light.set", name="Key", light_type="SUN", size=0.05, energy=3)
        self.assertAlmostEqual(bpy.data.objects["Key"].data.angle, 0.05)
        self.assertEqual((out["spot_size"], out["spot_blend"]), (None, None))

    def test_light_refusals(self):
        before = snapshot.fingerprint()
        self.assertEqual(self.refused("light.set", "invalid_arguments", name="Light", spot_size=0.5)
                         ["details"]["field"], "spot_size")
        self.refused("light.set", "invalid_arguments", name="Light", light_type="SUN", size=4)
        self.refused("light.set", "invalid_arguments", name="Camera", energy=5)
        self.refused("light.set", "invalid_arguments", name="Light", color=[2, 0, 0])
        self.assertEqual(snapshot.fingerprint(), before)

    # ------------------------------------------------------------ world.set

    def test_world_colour_and_strength_through_the_background_node(self):
        out = self.ok("world.set", color=[0.2, 0.3, 0.4], strength=2.5)
        self.assertEqual((out["world"], out["created"]), ("World", False))
        node = next(n for n in bpy.context.scene.world.node_tree.nodes if n.type == "BACKGROUND")
        self.assertClose(list(node.inputs["Color"].default_value), [0.2, 0.3, 0.4, 1])
        self.assertAlmostEqual(node.inputs["Strength"].default_value, 2.5)

    def test_a_scene_without_a_world_gets_one(self):
        bpy.context.scene.world = None
        for world in list(bpy.data.worlds):
            bpy.data.worlds.remove(world)
        out = self.ok("world.set", strength=3)
        self.assertTrue(out["created"])
        self.assertClose(out["color"] + [out["strength"]], [0.05, 0.05, 0.05, 3])
        self.assertEqual(bpy.context.scene.world.name, out["world"])

    def test_a_persons_own_world_shader_is_never_unwired(self):
        world = bpy.context.scene.world
        if world.node_tree is None or (bpy.app.version < (5, 0, 0) and not world.use_nodes):
            world.use_nodes = True
        tree = world.node_tree
        for node in [n for n in tree.nodes if n.type == "BACKGROUND"]:
            tree.nodes.remove(node)
        output = next(n for n in tree.nodes if n.type == "OUTPUT_WORLD")
        sky = tree.nodes.new("ShaderNodeEmission")
        tree.links.new(sky.outputs[0], output.inputs["Surface"])
        before = snapshot.fingerprint()
        error = self.refused("world.set", "contract_violation", color=[1, 0, 0])
        self.assertEqual((error["details"]["reason"], error["details"]["rule"], error["details"]["name"]),
                         ("actuator_lock", "unlink", sky.name))
        self.assertEqual(output.inputs["Surface"].links[0].from_node.name, sky.name)
        self.assertEqual(len([n for n in tree.nodes if n.type == "BACKGROUND"]), 0)
        self.assertEqual(snapshot.fingerprint(), before)

    def test_the_change_fingerprint_sees_look_settings(self):
        before = snapshot.fingerprint()
        self.ok("world.set", strength=0.5)
        self.ok("camera.set", name="Camera", clip_end=300)
        changed = {c["name"]: c["what"] for c in snapshot.differences(before, snapshot.fingerprint())}
        self.assertEqual(changed, {"world": "changed", "Camera": "settings changed"})


if __name__ == "__main__":
    unittest.main()
