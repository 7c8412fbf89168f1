"""What a tool writes stays the file it checked (files.sandbox_path, files.render_with): a file
with another hard link (maybe outside the sandbox) or a pipe is never written, nor a companion
Blender writes beside the target; a person's compositor never writes its File Output files during
a render. Runs like test_kernel.py:

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

from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import KernelCalls  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "file.read", "file.write", "render"]


def add_file_output(scene, folder):
    """A person's compositor: the render layer into a File Output node writing into `folder`."""
    if bpy.app.version >= (5, 0, 0):
        tree = bpy.data.node_groups.new("Comp", "CompositorNodeTree")
        scene.compositing_node_group = tree
        layers = tree.nodes.new("CompositorNodeRLayers")
        output = tree.nodes.new("CompositorNodeOutputFile")
        output.directory = folder + os.sep
        output.file_name = "written_"
        output.file_output_items.new("RGBA", "Image")
    else:
        scene.use_nodes = True
        tree = scene.node_tree
        layers = tree.nodes.get("Render Layers") or tree.nodes.new("CompositorNodeRLayers")
        output = tree.nodes.new("CompositorNodeOutputFile")
        output.base_path = os.path.join(folder, "written_")
    tree.links.new(layers.outputs["Image"], output.inputs[0])


class WrittenFiles(KernelCalls, unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.sandbox = os.path.realpath(tempfile.mkdtemp(prefix="vibe-written-"))
        self.outside = os.path.realpath(tempfile.mkdtemp(prefix="vibe-outside-"))
        self.addCleanup(shutil.rmtree, self.sandbox, True)
        self.addCleanup(shutil.rmtree, self.outside, True)
        self.k = Kernel()
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES, "sandbox": self.sandbox})

    def test_a_hard_link_to_a_file_outside_is_never_written_through(self):
        precious = os.path.join(self.outside, "precious")
        with open(precious, "wb") as f:
            f.write(b"the person's bytes")
        for name, tool, params in [("a.png", "render.still", {"width": 16, "height": 16, "quality": "preview"}),
                                   ("a.blend", "file.save", {})]:
            os.link(precious, os.path.join(self.sandbox, name))
            error = self.refused(tool, "contract_violation", path=name, **params)
            self.assertEqual(error["details"]["reason"], "sandbox")
            self.assertIn("hard links", error["message"])
        with open(precious, "rb") as f:
            self.assertEqual(f.read(), b"the person's bytes")

    def test_a_pipe_is_never_written_and_nothing_blocks(self):
        os.mkfifo(os.path.join(self.sandbox, "a.png"))
        os.mkfifo(os.path.join(self.sandbox, "b.blend@"))  # where a save writes before renaming
        for name, tool, params in [("a.png", "render.still", {"width": 16, "height": 16, "quality": "preview"}),
                                   ("b.blend", "file.save", {})]:
            error = self.refused(tool, "contract_violation", path=name, **params)
            self.assertIn("not a regular file", error["message"])

    def test_a_plain_file_of_the_agents_is_overwritten(self):
        with open(os.path.join(self.sandbox, "a.blend"), "wb") as f:
            f.write(b"old")
        self.ok("file.save", path="a.blend")
        with open(os.path.join(self.sandbox, "a.blend"), "rb") as f:
            self.assertNotEqual(f.read(3), b"old")

    def test_a_persons_compositor_writes_nothing_during_a_render(self):
        scene = bpy.context.scene
        add_file_output(scene, self.outside)
        compositing = scene.render.use_compositing
        out = self.ok("render.still", path="r.png", width=16, height=16, samples=1)
        self.assertEqual(out["path"], "r.png")
        self.assertTrue(os.path.isfile(os.path.join(self.sandbox, "r.png")))
        self.assertEqual(os.listdir(self.outside), [])
        # The person's settings are theirs again after the render.
        self.assertEqual(scene.render.use_compositing, compositing)


if __name__ == "__main__":
    unittest.main()
