"""The animate pack (animate.py) against real bpy: keys, the timeline, evaluation. Expected
values are worked out by hand: linear interpolation, constant steps, and the two-key Bezier
curve with auto-clamped handles (flat at both ends, a third of the interval long: x is linear in
t, y = y0 + (y1 - y0) * (3t^2 - 2t^3)). Runs like test_kernel.py:

    python -m unittest discover -s vibe-transport/kernel/tests      (a Python with bpy)
    blender -b --factory-startup --python-exit-code 1 --python vibe-transport/kernel/tests/run_in_blender.py
"""

import os
import sys
import unittest

KERNEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, KERNEL_DIR)

import bpy  # noqa: E402

from vibe_kernel import lock, snapshot  # noqa: E402
from vibe_kernel.animate import fcurves  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import KernelCalls  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "transactions"]


def key(frame, value, interpolation):
    return {"frame": frame, "value": value, "interpolation": interpolation}


def smoothstep_bezier(y0, y1, f0, f1, frame):
    """The two-key auto-clamped Bezier curve's value at `frame`, by hand."""
    t = (frame - f0) / (f1 - f0)
    return y0 + (y1 - y0) * (3 * t * t - 2 * t * t * t)


class AnimateTest(KernelCalls, unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES})

    def linear_location(self):
        return self.ok("keyframe.set", name="Cube", property="location", frames=[
            key(1, [0, 0, 0], "LINEAR"), key(11, [10, 2, -4], "LINEAR"), key(21, [10, 6, 0], "LINEAR")])

    def test_linear_keys_evaluate_by_linear_interpolation(self):
        out = self.linear_location()
        self.assertEqual(out["keys"], [key(1, [0.0, 0.0, 0.0], "LINEAR"), key(11, [10.0, 2.0, -4.0], "LINEAR"),
                                       key(21, [10.0, 6.0, 0.0], "LINEAR")])
        read = self.ok("animation.read", name="Cube", at_frame=6)
        self.assertEqual(read["evaluated"], {"location": [5.0, 1.0, -2.0]})
        self.assertEqual(self.ok("animation.read", name="Cube", at_frame=16)["evaluated"]["location"],
                         [10.0, 4.0, -2.0])
        # Before the first key and after the last: the end keys' values (constant extrapolation).
        self.assertEqual(self.ok("animation.read", name="Cube", at_frame=-5)["evaluated"]["location"], [0, 0, 0])
        self.assertEqual(self.ok("animation.read", name="Cube", at_frame=99)["evaluated"]["location"], [10, 6, 0])

    def test_constant_keys_hold_until_the_next(self):
        self.ok("keyframe.set", name="Cube", property="rotation_euler", frames=[
            key(1, [0, 0, 0], "CONSTANT"), key(10, [1, 0, 0.5], "CONSTANT")])
        self.assertEqual(self.ok("animation.read", name="Cube", at_frame=9)["evaluated"]["rotation_euler"], [0, 0, 0])
        self.assertEqual(self.ok("animation.read", name="Cube", at_frame=10)["evaluated"]["rotation_euler"],
                         [1, 0, 0.5])

    def test_two_bezier_keys_follow_the_auto_clamped_curve(self):
        self.ok("keyframe.set", name="Cube", property="location", frames=[
            {"frame": 1, "value": [0, 0, 1]}, {"frame": 24, "value": [24, 2, 1]}])
        read = self.ok("animation.read", name="Cube", at_frame=12)
        self.assertEqual([k["interpolation"] for k in read["animation"]["location"]], ["BEZIER", "BEZIER"])
        x, y, z = read["evaluated"]["location"]
        self.assertAlmostEqual(x, smoothstep_bezier(0, 24, 1, 24, 12), places=5)
        self.assertAlmostEqual(x, 11.217884, places=5)
        self.assertAlmostEqual(y, smoothstep_bezier(0, 2, 1, 24, 12), places=6)
        self.assertEqual(z, 1.0)  # flat: both keys 1
        curve = [fc for fc in fcurves(bpy.data.objects["Cube"]) if fc.array_index == 0][0]
        for point in curve.keyframe_points:
            self.assertEqual((point.handle_left_type, point.handle_right_type), ("AUTO_CLAMPED", "AUTO_CLAMPED"))
            self.assertEqual(point.handle_left[1], point.co[1])  # flat handles at the ends

    def test_bezier_keys_at_extremes_have_flat_handles_too(self):
        # 0, 1, 0 at frames 1, 11, 21: every key an extreme, so each segment is the two-key curve.
        self.ok("keyframe.set", name="Cube", property="location", frames=[
            {"frame": 1, "value": [0, 0, 0]}, {"frame": 11, "value": [1, 0, 0]}, {"frame": 21, "value": [0, 0, 0]}])
        x = self.ok("animation.read", name="Cube", at_frame=4)["evaluated"]["location"][0]
        self.assertAlmostEqual(x, 3 * 0.3 ** 2 - 2 * 0.3 ** 3, places=6)  # 0.216
        x = self.ok("animation.read", name="Cube", at_frame=14)["evaluated"]["location"][0]
        self.assertAlmostEqual(x, 1 - 0.216, places=6)

    def test_the_current_frame_poses_the_object(self):
        self.linear_location()
        timeline = self.ok("timeline.set", frame_start=1, frame_end=24, fps=24, frame_current=6)
        self.assertEqual(timeline, {"frame_start": 1, "frame_end": 24, "fps": 24, "frame_current": 6})
        self.assertEqual(self.ok("object.info", name="Cube")["location"], [5.0, 1.0, -2.0])
        # New keys pose the object at the current frame too.
        self.ok("keyframe.set", name="Cube", property="location", frames=[key(6, [1, 1, 1], "LINEAR")])
        self.assertEqual(self.ok("object.info", name="Cube")["location"], [1.0, 1.0, 1.0])

    def test_a_key_at_a_keyed_frame_replaces_it_and_delete_removes_keys(self):
        self.linear_location()
        out = self.ok("keyframe.set", name="Cube", property="location", frames=[key(11, [1, 2, 3], "CONSTANT")])
        self.assertEqual(out["keys"][1], key(11, [1.0, 2.0, 3.0], "CONSTANT"))
        self.assertEqual(len(out["keys"]), 3)
        out = self.ok("keyframe.set", name="Cube", property="location", frames=[11], delete=True)
        self.assertEqual([k["frame"] for k in out["keys"]], [1, 21])
        error = self.refused("keyframe.set", "not_found", name="Cube", property="location", frames=[1, 11],
                             delete=True)
        self.assertEqual(error["details"]["frame"], 11)
        self.assertEqual(len(self.ok("animation.read", name="Cube")["animation"]["location"]), 2)  # nothing went
        out = self.ok("keyframe.set", name="Cube", property="location", frames=[1, 21], delete=True)
        self.assertEqual(out["keys"], [])
        self.assertEqual(self.ok("animation.read", name="Cube")["animation"], {})

    def test_the_snapshot_reports_the_animation_and_the_timeline(self):
        self.linear_location()
        snap = self.ok("scene.snapshot")
        objects = {o["name"]: o for o in snap["objects"]}
        self.assertEqual(objects["Cube"]["animation"], {"location": 3})
        self.assertNotIn("animation", objects["Camera"])
        self.assertEqual(snap["timeline"], {"frame_start": 1, "frame_end": 250, "fps": 24, "frame_current": 1})

    def test_the_action_is_slotted_from_4_4_and_legacy_before(self):
        self.linear_location()
        action = bpy.data.objects["Cube"].animation_data.action
        self.assertEqual(len(fcurves(bpy.data.objects["Cube"])), 3)
        if bpy.app.version >= (4, 4, 0):
            self.assertTrue(len(action.layers) >= 1)
            self.assertIsNotNone(bpy.data.objects["Cube"].animation_data.action_slot)
        else:
            self.assertEqual(len(action.fcurves), 3)
        self.assertEqual(self.ok("animation.read", name="Camera"), {"name": "Camera", "animation": {}})

    def test_bad_arguments_are_refused_and_change_nothing(self):
        self.refused("animation.read", "not_found", name="Nope")
        self.refused("keyframe.set", "not_found", name="Nope", property="location", frames=[key(1, [0, 0, 0], "LINEAR")])
        self.refused("keyframe.set", "invalid_arguments", name="Cube", property="hide", frames=[key(1, [0, 0, 0], "LINEAR")])
        self.refused("keyframe.set", "invalid_arguments", name="Cube", property="location", frames=[])
        self.refused("keyframe.set", "invalid_arguments", name="Cube", property="location",
                     frames=[key(1, [0, 0, 0], "LINEAR"), key(1, [1, 0, 0], "LINEAR")])
        self.refused("keyframe.set", "invalid_arguments", name="Cube", property="location",
                     frames=[key(1048575, [0, 0, 0], "LINEAR")])
        self.refused("keyframe.set", "invalid_arguments", name="Cube", property="location",
                     frames=[key(1, [0, 0, 0], "EASE")])
        self.refused("keyframe.set", "invalid_arguments", name="Cube", property="location",
                     frames=[key(1, [0, 0, float("nan")], "LINEAR")])
        self.assertIsNone(bpy.data.objects["Cube"].animation_data)
        error = self.refused("timeline.set", "invalid_arguments", frame_start=30, frame_end=10)
        self.assertEqual(error["details"]["field"], "frame_end")
        self.refused("timeline.set", "invalid_arguments", frame_start=300)  # past the default end, 250
        self.refused("timeline.set", "invalid_arguments", fps=0)
        self.refused("timeline.set", "invalid_arguments", fps=241)
        self.refused("timeline.set", "invalid_arguments")
        self.refused("animation.read", "invalid_arguments", name="Cube", at_frame=1.5)
        self.assertEqual(self.ok("timeline.set", frame_start=300, frame_end=400),
                         {"frame_start": 300, "frame_end": 400, "fps": 24, "frame_current": 1})


    # ------------------------------------------------------------ camera and light settings

    def test_lens_keys_are_numbers_on_the_camera_data_and_evaluate_linearly(self):
        out = self.ok("keyframe.set", name="Camera", property="lens", frames=[
            key(1, 50, "LINEAR"), key(21, 100, "LINEAR")])
        self.assertEqual(out, {"name": "Camera", "property": "lens",
                               "keys": [key(1, 50.0, "LINEAR"), key(21, 100.0, "LINEAR")]})
        camera = bpy.data.objects["Camera"]
        # The keys are on the camera data-block's own action, not the object's.
        self.assertIsNone(camera.animation_data)
        self.assertEqual([(fc.data_path, fc.array_index) for fc in fcurves(camera.data)], [("lens", 0)])
        read = self.ok("animation.read", name="Camera", at_frame=6)
        # 50 + (100 - 50) * 5 / 20 = 62.5; at 12: 50 + 50 * 11 / 20 = 77.5.
        self.assertEqual(read["evaluated"], {"lens": 62.5})
        self.assertEqual(read["animation"], {"lens": [key(1, 50.0, "LINEAR"), key(21, 100.0, "LINEAR")]})
        self.assertEqual(self.ok("animation.read", name="Camera", at_frame=12)["evaluated"], {"lens": 77.5})

    def test_energy_and_colour_keys_on_the_light_data(self):
        self.ok("keyframe.set", name="Light", property="energy", frames=[
            key(1, 0, "LINEAR"), key(11, 1000, "LINEAR")])
        out = self.ok("keyframe.set", name="Light", property="color", frames=[
            key(1, [1, 0, 0], "LINEAR"), key(11, [0, 0.5, 1], "LINEAR")])
        self.assertEqual(out["keys"], [key(1, [1.0, 0.0, 0.0], "LINEAR"), key(11, [0.0, 0.5, 1.0], "LINEAR")])
        light = bpy.data.objects["Light"]
        self.assertIsNone(light.animation_data)
        self.assertEqual(sorted((fc.data_path, fc.array_index) for fc in fcurves(light.data)),
                         [("color", 0), ("color", 1), ("color", 2), ("energy", 0)])
        read = self.ok("animation.read", name="Light", at_frame=6)
        # Halfway: energy 500; colour channel by channel 1 -> 0, 0 -> 0.5, 0 -> 1.
        self.assertEqual(read["evaluated"], {"energy": 500.0, "color": [0.5, 0.25, 0.5]})
        # At frame 4: 0 + 1000 * 3 / 10 = 300; red 1 - 0.3 = 0.7, green 0.5 * 0.3 = 0.15, blue 0.3.
        read = self.ok("animation.read", name="Light", at_frame=4)
        self.assertAlmostEqual(read["evaluated"]["energy"], 300.0, places=4)
        for got, want in zip(read["evaluated"]["color"], [0.7, 0.15, 0.3]):
            self.assertAlmostEqual(got, want, places=6)

    def test_the_current_frame_poses_camera_and_light_settings(self):
        self.ok("keyframe.set", name="Camera", property="lens", frames=[
            key(1, 50, "LINEAR"), key(21, 100, "LINEAR")])
        self.ok("keyframe.set", name="Light", property="energy", frames=[
            key(1, 0, "LINEAR"), key(11, 1000, "LINEAR")])
        self.ok("timeline.set", frame_current=6)
        self.assertEqual(self.ok("object.info", name="Camera")["data"]["lens"], 62.5)
        self.assertEqual(self.ok("object.info", name="Light")["data"]["energy"], 500.0)
        self.assertEqual(self.ok("camera.set", name="Camera")["lens"], 62.5)
        snap = {o["name"]: o for o in self.ok("scene.snapshot")["objects"]}
        self.assertEqual(snap["Camera"]["animation"], {"lens": 2})
        self.assertEqual(snap["Light"]["animation"], {"energy": 2})
        self.assertEqual(snap["Camera"]["data"]["lens"], 62.5)
        # Deleting a key poses again: lens from 50 at frame 1 alone.
        self.ok("keyframe.set", name="Camera", property="lens", frames=[21], delete=True)
        self.assertEqual(bpy.data.objects["Camera"].data.lens, 50.0)

    def test_transform_and_data_keys_of_one_object_are_read_together(self):
        self.ok("keyframe.set", name="Camera", property="location", frames=[key(1, [0, 0, 0], "CONSTANT")])
        self.ok("keyframe.set", name="Camera", property="lens", frames=[key(1, 35, "CONSTANT")])
        animation = self.ok("animation.read", name="Camera", at_frame=1)
        self.assertEqual(set(animation["animation"]), {"location", "lens"})
        self.assertEqual(animation["evaluated"], {"location": [0.0, 0.0, 0.0], "lens": 35.0})
        camera = bpy.data.objects["Camera"]
        self.assertEqual(sorted(fc.data_path for fc in fcurves(camera)), ["location"] * 3)
        self.assertEqual([fc.data_path for fc in fcurves(camera.data)], ["lens"])
        if bpy.app.version >= (4, 4, 0):
            # Blender keys the data in the object's action, in a slot of the data's own.
            self.assertEqual(camera.data.animation_data.action, camera.animation_data.action)
            self.assertNotEqual(camera.data.animation_data.action_slot, camera.animation_data.action_slot)
        else:
            self.assertNotEqual(camera.data.animation_data.action, camera.animation_data.action)

    def test_a_property_of_another_type_or_shape_is_refused(self):
        error = self.refused("keyframe.set", "invalid_arguments", name="Light", property="lens",
                             frames=[key(1, 50, "LINEAR")])
        self.assertEqual(error["details"]["field"], "property")
        self.assertIn("CAMERA", error["message"])
        self.assertIn("LIGHT", error["message"])
        error = self.refused("keyframe.set", "invalid_arguments", name="Cube", property="energy",
                             frames=[key(1, 10, "LINEAR")])
        self.assertIn("MESH", error["message"])
        self.refused("keyframe.set", "invalid_arguments", name="Cube", property="color",
                     frames=[key(1, [1, 1, 1], "LINEAR")])
        for prop, value in (("lens", [50, 50, 50]), ("lens", 0.5), ("lens", 5001), ("lens", True),
                            ("energy", -1), ("energy", [1]), ("energy", 1e6 + 1),
                            ("color", 0.5), ("color", [1, 1]), ("color", [0.5, 1.5, 0]), ("color", [0, -0.1, 0])):
            name = "Camera" if prop == "lens" else "Light"
            error = self.refused("keyframe.set", "invalid_arguments", name=name, property=prop,
                                 frames=[key(1, value, "LINEAR")])
            self.assertEqual(error["details"]["field"], "frames", (prop, value))
        # The bounds themselves are keys.
        self.ok("keyframe.set", name="Camera", property="lens", frames=[key(1, 1, "LINEAR"), key(2, 5000, "LINEAR")])
        self.ok("keyframe.set", name="Light", property="energy", frames=[key(1, 0, "LINEAR"), key(2, 1e6, "LINEAR")])
        self.assertIsNone(bpy.data.objects["Cube"].animation_data)

    def test_data_keys_are_deleted_like_transform_keys(self):
        self.ok("keyframe.set", name="Light", property="color", frames=[
            key(1, [1, 1, 1], "LINEAR"), key(11, [0, 0, 0], "LINEAR")])
        self.refused("keyframe.set", "not_found", name="Light", property="color", frames=[5], delete=True)
        out = self.ok("keyframe.set", name="Light", property="color", frames=[1, 11], delete=True)
        self.assertEqual(out["keys"], [])
        self.assertEqual(self.ok("animation.read", name="Light"), {"name": "Light", "animation": {}})
        self.assertEqual(len(fcurves(bpy.data.objects["Light"].data)), 0)


    def test_an_action_that_was_there_stays_the_persons(self):
        camera = bpy.data.objects["Camera"]
        camera.keyframe_insert("location", frame=1)  # the person's own key, their action
        persons = camera.animation_data.action
        self.ok("keyframe.set", name="Camera", property="lens", frames=[key(1, 35, "LINEAR")])
        self.assertFalse(lock.is_agents(self.k, persons))
        # A light without keys gets an action Blender makes for the agent's keys: the agent's.
        self.ok("keyframe.set", name="Light", property="energy", frames=[key(1, 10, "LINEAR")])
        self.assertTrue(lock.is_agents(self.k, bpy.data.objects["Light"].data.animation_data.action))


    def test_the_persons_keys_are_never_deleted(self):
        cube = bpy.data.objects["Cube"]
        cube.keyframe_insert("location", frame=1)  # the person's own animation
        cube.keyframe_insert("location", frame=10)
        persons = cube.animation_data.action
        error = self.refused("keyframe.set", "contract_violation", name="Cube", property="location",
                             delete=True, frames=[10])
        self.assertEqual((error["details"]["reason"], error["details"]["rule"], error["details"]["name"]),
                         ("actuator_lock", "remove", persons.name))
        self.assertEqual([key["frame"] for key in self.ok("animation.read", name="Cube")["animation"]["location"]],
                         [1, 10])
        # Setting a key at their frame is an edit, allowed; the agent's own keys may go again.
        self.ok("keyframe.set", name="Cube", property="location", frames=[key(10, [0, 0, 3], "LINEAR")])
        self.ok("keyframe.set", name="Light", property="energy", frames=[key(1, 10, "LINEAR"), key(5, 20, "LINEAR")])
        self.ok("keyframe.set", name="Light", property="energy", delete=True, frames=[5])

    # ------------------------------------------------------------ the GUI's check for the person's changes

    def test_the_change_fingerprint_sees_keys_and_the_timeline(self):
        self.linear_location()
        self.ok("keyframe.set", name="Light", property="energy", frames=[key(1, 10, "LINEAR")])
        before = snapshot.fingerprint()
        cube, light = bpy.data.objects["Cube"], bpy.data.objects["Light"]
        # The person adds a key on the cube's scale, moves the light's energy key to frame 5 (the
        # light's energy stays what it was: nothing but the key changed) and widens the range.
        cube.keyframe_insert("scale", frame=30)
        point = fcurves(light.data)[0].keyframe_points[0]
        point.co = (5.0, point.co[1])
        bpy.context.scene.frame_end = 300
        changed = snapshot.differences(before, snapshot.fingerprint())
        self.assertEqual(changed, [{"name": "Cube", "what": "keys changed"}, {"name": "Light", "what": "keys changed"},
                                   {"name": "timeline", "what": "changed"}])

    def test_a_key_value_interpolation_or_frame_rate_change_is_seen_and_scrubbing_is_not(self):
        self.linear_location()
        before = snapshot.fingerprint()
        curve = [fc for fc in fcurves(bpy.data.objects["Cube"]) if fc.array_index == 2][0]
        curve.keyframe_points[1].interpolation = "CONSTANT"
        self.assertEqual(snapshot.differences(before, snapshot.fingerprint()),
                         [{"name": "Cube", "what": "keys changed"}])
        curve.keyframe_points[1].interpolation = "LINEAR"
        curve.keyframe_points[1].co = (11.0, -3.0)
        self.assertEqual(snapshot.differences(before, snapshot.fingerprint()),
                         [{"name": "Cube", "what": "keys changed"}])
        curve.keyframe_points[1].co = (11.0, -4.0)
        self.assertEqual(snapshot.differences(before, snapshot.fingerprint()), [])
        bpy.context.scene.render.fps = 30
        self.assertEqual(snapshot.differences(before, snapshot.fingerprint()),
                         [{"name": "timeline", "what": "changed"}])
        bpy.context.scene.render.fps = 24
        # A new current frame poses the cube (it moves) but is no change of the keys or the timeline.
        bpy.context.scene.frame_set(6)
        self.assertEqual(snapshot.differences(before, snapshot.fingerprint()), [{"name": "Cube", "what": "moved"}])

    def test_a_rollback_names_the_keys_the_person_added(self):
        original = snapshot.uses_undo
        snapshot.uses_undo = lambda: True  # the GUI's path, headless (see test_undo.py)
        self.addCleanup(setattr, snapshot, "uses_undo", original)
        bpy.ops.ed.undo_push(message="Original")
        self.ok("transaction.begin")
        self.ok("keyframe.set", name="Camera", property="lens", frames=[key(1, 35, "LINEAR"), key(11, 70, "LINEAR")])
        bpy.data.objects["Light"].data.keyframe_insert("energy", frame=4)  # the person's key
        bpy.ops.ed.undo_push(message="Insert Keyframe")
        error = self.refused("transaction.rollback", "contract_violation")
        self.assertEqual(error["details"]["rule"], "human_edits")
        self.assertEqual(error["details"]["changed"], [{"name": "Light", "what": "keys changed"}])
        self.ok("transaction.rollback", force=True)
        self.assertEqual(self.ok("animation.read", name="Camera")["animation"], {})
        self.assertEqual(self.ok("animation.read", name="Light")["animation"], {})


if __name__ == "__main__":
    unittest.main()
