"""material.ensure_principled's inputs beyond the base colour (materials.py) and render.still's
preview (files.py), against real bpy. Runs like test_kernel.py:

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

from vibe_kernel.tools import EMISSION_COLOR, TRANSMISSION, principled_node, socket  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import KernelCalls  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "transactions", "file.write", "render"]


class MaterialInputsTest(KernelCalls, unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.sandbox = os.path.realpath(tempfile.mkdtemp(prefix="vibe-materials-"))
        self.addCleanup(shutil.rmtree, self.sandbox, True)
        self.k = Kernel()
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES, "sandbox": self.sandbox})

    def node(self, name):
        return principled_node(bpy.data.materials[name])

    def test_inputs_land_on_the_sockets_of_this_blender(self):
        out = self.ok("material.ensure_principled", name="Glow", emission_color=[1, 0.5, 0, 1],
                      emission_strength=4, alpha=0.25, transmission=0.75)
        node = self.node("Glow")
        # Blender 4 renamed the sockets: the values are on whichever this Blender has.
        self.assertEqual([round(v, 6) for v in socket(node, EMISSION_COLOR).default_value], [1, 0.5, 0, 1])
        self.assertEqual(node.inputs["Emission Strength"].default_value, 4)
        self.assertEqual(node.inputs["Alpha"].default_value, 0.25)
        self.assertEqual(socket(node, TRANSMISSION).default_value, 0.75)
        self.assertEqual((out["emission_strength"], out["alpha"], out["transmission"], out["texture"]),
                         (4.0, 0.25, 0.75, None))

    def test_a_new_material_emits_nothing_the_same_way_on_every_blender(self):
        self.ok("material.ensure_principled", name="Plain")
        node = self.node("Plain")
        self.assertEqual(list(socket(node, EMISSION_COLOR).default_value), [1, 1, 1, 1])
        self.assertEqual(node.inputs["Emission Strength"].default_value, 0)
        # A black emission colour (Blender 3.x's default, kept in its factory material) emits
        # nothing at any strength and reads as no emission.
        socket(node, EMISSION_COLOR).default_value = (0, 0, 0, 1)
        node.inputs["Emission Strength"].default_value = 1
        out = self.ok("material.ensure_principled", name="Plain")
        self.assertEqual((out["emission_color"], out["emission_strength"]), ([1, 1, 1, 1], 0))

    def render(self, path):
        return self.ok("render.still", path=path, width=32, height=24, samples=1)

    def test_a_texture_from_the_sandbox_goes_on_the_base_colour_once(self):
        self.render("shots/a.png")
        out = self.ok("material.ensure_principled", name="Label", texture="shots/a.png")
        self.assertEqual(out["texture"], {"image": "a.png", "path": "shots/a.png"})
        link = self.node("Label").inputs["Base Color"].links[0]
        self.assertEqual((link.from_node.type, link.from_node.image.size[:]), ("TEX_IMAGE", (32, 24)))
        # Again: the same node and the same image, nothing added.
        nodes = len(bpy.data.materials["Label"].node_tree.nodes)
        images = len(bpy.data.images)
        self.ok("material.ensure_principled", name="Label", texture="shots/a.png")
        self.assertEqual((len(bpy.data.materials["Label"].node_tree.nodes), len(bpy.data.images)), (nodes, images))
        # Another file of the same name is another image, named as Blender names it.
        self.render("more/a.png")
        out = self.ok("material.ensure_principled", name="Label", texture="more/a.png")
        self.assertEqual(out["texture"], {"image": "a.png.001", "path": "more/a.png"})
        out = self.ok("material.ensure_principled", name="Label", texture=None)
        self.assertIsNone(out["texture"])
        self.assertFalse(self.node("Label").inputs["Base Color"].links)

    def test_a_persons_wired_base_colour_is_never_unwired_or_its_image_replaced(self):
        # The factory "Material" is the person's: they paint an image and wire it to the base colour.
        mat = bpy.data.materials["Material"]
        if mat.node_tree is None or (bpy.app.version < (5, 0, 0) and not mat.use_nodes):
            mat.use_nodes = True
        painting = bpy.data.images.new("Painting", 8, 8)
        painting.use_fake_user = False
        theirs = mat.node_tree.nodes.new("ShaderNodeTexImage")
        theirs.image = painting
        mat.node_tree.links.new(theirs.outputs["Color"], self.node("Material").inputs["Base Color"])
        self.render("shots/a.png")
        images = len(bpy.data.images)
        for texture in ("shots/a.png", None):
            error = self.refused("material.ensure_principled", "contract_violation", name="Material",
                                 texture=texture, roughness=0.1)
            self.assertEqual((error["details"]["reason"], error["details"]["rule"], error["details"]["name"]),
                             ("actuator_lock", "unlink", theirs.name))
        link = self.node("Material").inputs["Base Color"].links[0]
        self.assertEqual((link.from_node.name, link.from_node.image.name), (theirs.name, "Painting"))
        self.assertEqual(painting.users, 1)
        self.assertEqual(len(bpy.data.images), images, "a refused texture leaves no image behind")
        self.assertNotAlmostEqual(self.node("Material").inputs["Roughness"].default_value, 0.1)
        # Without `texture` the other inputs are property edits, allowed.
        self.ok("material.ensure_principled", name="Material", roughness=0.1)

    def test_on_a_persons_unwired_material_the_texture_the_agent_put_is_its_own(self):
        self.render("shots/a.png")
        self.render("shots/b.png")
        self.ok("material.ensure_principled", name="Material", texture="shots/a.png")
        self.ok("material.ensure_principled", name="Material", texture="shots/b.png")
        out = self.ok("material.ensure_principled", name="Material", texture=None)
        self.assertIsNone(out["texture"])

    def test_a_texture_that_is_not_an_image_or_not_there_changes_nothing(self):
        with open(os.path.join(self.sandbox, "fake.png"), "w") as f:
            f.write("not a picture")
        before = (len(bpy.data.images), len(bpy.data.materials))
        self.refused("material.ensure_principled", "invalid_arguments", name="Fake", texture="fake.png")
        self.refused("material.ensure_principled", "not_found", name="Fake", texture="gone.png")
        error = self.refused("material.ensure_principled", "contract_violation", name="Fake", texture="../x.png")
        self.assertEqual((error["details"]["reason"], error["details"]["field"]), ("sandbox", "texture"))
        self.refused("material.ensure_principled", "invalid_arguments", name="Fake", texture="notes.txt")
        self.assertEqual((len(bpy.data.images), len(bpy.data.materials)), before)

    def test_a_preview_draws_with_workbench_and_puts_the_settings_back(self):
        scene = bpy.context.scene
        before = (scene.render.engine, scene.display.shading.color_type)
        out = self.ok("render.still", path="p.png", width=32, height=24, quality="preview")
        self.assertEqual((out["quality"], out["engine"]), ("preview", "BLENDER_WORKBENCH"))
        self.assertTrue(os.path.getsize(os.path.join(self.sandbox, "p.png")) > 0)
        self.assertEqual((scene.render.engine, scene.display.shading.color_type), before)
        self.refused("render.still", "invalid_arguments", path="q.png", quality="best")


if __name__ == "__main__":
    unittest.main()
