"""file.import and file.export (exchange.py): a cube exported in every format this Blender has
comes back with the same vertices where they were; paths outside the sandbox, missing files,
unknown formats and formats this Blender lacks are refused. Runs like test_kernel.py:

    python -m unittest discover -s vibe-transport/kernel/tests      (a Python with bpy)
    blender -b --factory-startup --python-exit-code 1 --python vibe-transport/kernel/tests/run_in_blender.py
"""

import os
import shutil
import sys
import tempfile
import unittest

KERNEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, KERNEL_DIR)

import bpy  # noqa: E402

from vibe_kernel import exchange  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import KernelCalls  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "transactions", "file.read", "file.write"]
EXTENSION = {"gltf": "gltf", "glb": "glb", "obj": "obj", "fbx": "fbx", "stl": "stl", "usd": "usda"}


def world_vertices(name):
    """The distinct world-space vertex positions of a mesh object, rounded to 1e-4 (importers
    split vertices by normal, glTF per face, STL per triangle: the positions are what stays)."""
    obj = bpy.data.objects[name]
    return {tuple(round(c, 4) for c in obj.matrix_world @ v.co) for v in obj.data.vertices}


class ExchangeTest(KernelCalls, unittest.TestCase):
    def setUp(self):
        self.sandbox = os.path.realpath(tempfile.mkdtemp(prefix="vibe-exchange-"))
        self.addCleanup(shutil.rmtree, self.sandbox, True)
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES, "sandbox": self.sandbox})
        self.ok("mesh.create_cube", name="Box", size=2, location=[1, 2, 3])
        # What the cube's 8 corners are, by hand: 1 +- 1, 2 +- 1, 3 +- 1.
        self.corners = {(x, y, z) for x in (0.0, 2.0) for y in (1.0, 3.0) for z in (2.0, 4.0)}

    def test_the_hello_lists_the_formats_found_by_operator(self):
        formats = self.k.hello(False)["formats"]
        self.assertTrue(set(formats) <= set(exchange.FORMATS), formats)
        # Every Blender the kernel supports has the OBJ and STL operators (3.4's and later's).
        self.assertIn("obj", formats)
        self.assertIn("stl", formats)

    def round_trip(self, fmt):
        if fmt not in exchange.available_formats():
            self.skipTest("this Blender %s lacks %s (it has %s)" % (bpy.app.version_string, fmt,
                                                                   exchange.available_formats()))
        path = "out/box." + EXTENSION[fmt]
        exported = self.ok("file.export", path=path, objects=["Box"])
        self.assertEqual((exported["format"], exported["path"]), (fmt, path))
        self.assertEqual(exported["bytes"], os.path.getsize(os.path.join(self.sandbox, path)))
        self.assertGreater(exported["bytes"], 0)
        imported = self.ok("file.import", path=path)
        self.assertEqual(imported["format"], fmt)
        meshes = [n for n in imported["objects"] if bpy.data.objects[n].type == "MESH"]
        self.assertEqual(len(meshes), 1, imported)
        self.assertNotIn("Box", imported["objects"])  # the original keeps its name
        self.assertEqual(world_vertices(meshes[0]), self.corners)
        for name in imported["objects"]:
            self.assertEqual([c.name for c in bpy.data.objects[name].users_collection], ["Collection"])
        # The imported objects are the agent's: the actuator lock lets it delete them.
        for name in imported["objects"]:
            self.ok("object.delete", name=name)

    def test_obj_round_trip(self):
        self.round_trip("obj")

    def test_stl_round_trip(self):
        self.round_trip("stl")

    def test_gltf_round_trip(self):
        self.round_trip("gltf")

    def test_glb_round_trip(self):
        self.round_trip("glb")

    def test_fbx_round_trip(self):
        self.round_trip("fbx")

    def test_usd_round_trip(self):
        self.round_trip("usd")

    def test_an_import_leaves_the_scenes_frame_range_alone(self):
        if "usd" not in exchange.available_formats():
            self.skipTest("this Blender %s lacks usd" % bpy.app.version_string)
        with open(os.path.join(self.sandbox, "stage.usda"), "w") as f:
            f.write('#usda 1.0\n(\n    startTimeCode = 500\n    endTimeCode = 900\n)\n\n'
                    'def Mesh "Tri"\n{\n    int[] faceVertexCounts = [3]\n    int[] faceVertexIndices = [0, 1, 2]\n'
                    '    point3f[] points = [(0, 0, 0), (1, 0, 0), (0, 1, 0)]\n}\n')
        scene = bpy.context.scene
        before = (scene.frame_start, scene.frame_end)
        imported = self.ok("file.import", path="stage.usda")
        self.assertEqual(len(imported["objects"]), 1, imported)
        self.assertEqual((scene.frame_start, scene.frame_end), before)

    def test_obj_import_names_clashes_and_lays_y_up_down(self):
        self.ok("file.export", path="box.obj", objects=["Box"])
        imported = self.ok("file.import", path="box.obj")
        self.assertEqual(imported["objects"], ["Box.001"])
        info = self.ok("object.info", name="Box.001")
        self.assertEqual((info["data"]["vertices"], info["data"]["polygons"]), (8, 6))
        self.assertAlmostEqual(info["rotation_euler"][0], 1.5707963, places=6)

    def test_import_into_a_collection(self):
        self.ok("scene.create_collection", name="Imports")
        self.ok("file.export", path="box.stl")
        imported = self.ok("file.import", path="box.stl", collection="Imports")
        self.assertEqual(imported["objects"], ["box"])  # STL: one object named after the file
        self.assertEqual([c.name for c in bpy.data.objects["box"].users_collection], ["Imports"])
        self.refused("file.import", "not_found", path="box.stl", collection="Nope")

    def test_paths_outside_the_sandbox_are_refused(self):
        for tool in ("file.export", "file.import"):
            for path in ("../box.obj", "/tmp/box.obj", "HUMAN_ONLY/box.obj"):
                error = self.refused(tool, "contract_violation", path=path)
                self.assertEqual(error["details"]["reason"], "sandbox", error)

    def test_a_missing_file_is_not_found(self):
        error = self.refused("file.import", "not_found", path="missing.obj")
        self.assertEqual(error["details"]["field"], "path")

    def test_unknown_formats_and_disagreeing_extensions_are_invalid(self):
        self.refused("file.export", "invalid_arguments", path="box.ply")
        self.refused("file.export", "invalid_arguments", path="box.ply", format="ply")
        self.refused("file.export", "invalid_arguments", path="box.obj", format="stl")
        self.refused("file.import", "invalid_arguments", path="box.txt")

    def test_a_format_this_blender_lacks_names_those_it_has(self):
        lacking = [f for f in exchange.FORMATS if f not in exchange.available_formats()]
        if not lacking:
            self.skipTest("this Blender %s has every format" % bpy.app.version_string)
        error = self.refused("file.export", "capability_missing", path="box." + EXTENSION[lacking[0]])
        self.assertEqual(error["details"]["formats"], exchange.available_formats())

    def test_only_meshes_are_exported(self):
        self.refused("file.export", "invalid_arguments", path="cam.obj", objects=["Camera"])
        self.refused("file.export", "not_found", path="x.obj", objects=["Nope"])

    def test_a_gltf_naming_a_buffer_outside_the_sandbox_is_refused(self):
        if "gltf" not in exchange.available_formats():
            self.skipTest("this Blender %s lacks gltf" % bpy.app.version_string)
        with open(os.path.join(self.sandbox, "evil.gltf"), "w") as f:
            f.write('{"asset": {"version": "2.0"}, "buffers": [{"uri": "../../etc/hostname", "byteLength": 4}]}')
        error = self.refused("file.import", "contract_violation", path="evil.gltf")
        self.assertEqual(error["details"]["reason"], "sandbox", error)


if __name__ == "__main__":
    unittest.main()
