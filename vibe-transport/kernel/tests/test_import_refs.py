"""file.import of model files that name files outside the sandbox (import_refs.py before the
importer, import_guard.py after it): written as an attacker would write them (absolute paths,
`..`, file: URIs, percent-encoding, backslashes, links), each is refused with contract_violation,
reason sandbox, and nothing of it enters the scene (the fingerprint and every data-block are as
before the call); the same file naming a file inside the sandbox imports. Runs like
test_kernel.py (a Python with bpy, or run_in_blender.py in Blender)."""

import base64
import json
import os
import shutil
import struct
import sys
import tempfile
import unittest
import zlib

KERNEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, KERNEL_DIR)

import bpy  # noqa: E402

from vibe_kernel import confine, exchange, import_refs, snapshot  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import KernelCalls  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "transactions", "file.read", "file.write", "code_exec"]
# Three vertices of a triangle, as 9 little-endian floats (36 bytes): the secret a glTF buffer
# would leak as vertex data.
TRIANGLE = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
SECRET = struct.pack("<9f", *TRIANGLE)


def png_bytes():
    """A 1x1 red PNG, written by hand (signature, IHDR, IDAT, IEND)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
            + chunk(b"IEND", b""))


def gltf_document(buffer_uri, image_uri=None):
    doc = {"asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": [0]}], "nodes": [{"mesh": 0, "name": "Tri"}],
           "meshes": [{"primitives": [{"attributes": {"POSITION": 0}}]}],
           "buffers": [{"uri": buffer_uri, "byteLength": 36}],
           "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": 36}],
           "accessors": [{"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3",
                          "min": [0, 0, 0], "max": [1, 1, 0]}]}
    if image_uri is not None:
        doc["images"] = [{"uri": image_uri}]
        doc["textures"] = [{"source": 0}]
        doc["materials"] = [{"name": "Skin", "pbrMetallicRoughness": {"baseColorTexture": {"index": 0}}}]
        doc["meshes"][0]["primitives"][0]["material"] = 0
    return doc


def glb_bytes(doc):
    text = json.dumps(doc).encode("utf-8")
    text += b" " * (-len(text) % 4)
    return struct.pack("<4sII", b"glTF", 2, 12 + 8 + len(text)) + struct.pack("<I4s", len(text), b"JSON") + text


USD_TRIANGLE = """#usda 1.0
(
    defaultPrim = "Tri"
    upAxis = "Z"
)

def Mesh "Tri"
{
    int[] faceVertexCounts = [3]
    int[] faceVertexIndices = [0, 1, 2]
    point3f[] points = [(0, 0, 0), (1, 0, 0), (0, 1, 0)]
}
"""


class ImportReferencesTest(KernelCalls, unittest.TestCase):
    def setUp(self):
        self.sandbox = os.path.realpath(tempfile.mkdtemp(prefix="vibe-refs-sandbox-"))
        self.outside = os.path.realpath(tempfile.mkdtemp(prefix="vibe-refs-outside-"))
        self.addCleanup(shutil.rmtree, self.sandbox, True)
        self.addCleanup(shutil.rmtree, self.outside, True)
        for folder in (self.sandbox, self.outside):
            with open(os.path.join(folder, "secret.bin"), "wb") as f:
                f.write(SECRET)
            with open(os.path.join(folder, "secret.png"), "wb") as f:
                f.write(png_bytes())
            with open(os.path.join(folder, "layer.usda"), "w") as f:
                f.write(USD_TRIANGLE)
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.k.state.features.add("code_exec")
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES, "sandbox": self.sandbox})
        self.k.call_deadline_ms = 10000

    def need(self, fmt):
        if fmt not in exchange.available_formats():
            self.skipTest("this Blender %s lacks %s" % (bpy.app.version_string, fmt))

    def write(self, relative, content):
        path = os.path.join(self.sandbox, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
        return relative

    def data_names(self):
        return {name: sorted(b.name for b in getattr(bpy.data, name))
                for name in ("objects", "meshes", "materials", "images", "actions", "textures", "node_groups",
                             "collections", "libraries", "cache_files")}

    def refused_cleanly(self, relative):
        """The import of `relative` is refused for the sandbox and leaves the scene as it was."""
        print_before, names_before = snapshot.fingerprint(), self.data_names()
        error = self.refused("file.import", "contract_violation", path=relative)
        self.assertEqual(error["details"]["reason"], "sandbox", error)
        self.assertEqual(self.data_names(), names_before)
        self.assertEqual(snapshot.fingerprint(), print_before)
        return error

    def outside_forms(self, name):
        """The ways a file naming `name` outside the sandbox might write it, from the sandbox's
        top folder."""
        target = os.path.join(self.outside, name)
        up = os.path.relpath(target, self.sandbox)
        return {"absolute": target, "dotdot": up, "file uri": "file://" + target,
                "percent": up.replace("..", "%2e%2e"), "backslash": up.replace("/", "\\"),
                "linked folder": "link/" + name, "linked file": "alias-" + name,
                "lexical": "deep/../../" + name}

    def plant_links(self, name):
        os.symlink(self.outside, os.path.join(self.sandbox, "link"))
        os.symlink(os.path.join(self.outside, name), os.path.join(self.sandbox, "alias-" + name))
        os.makedirs(os.path.join(self.sandbox, "a", "b"))
        os.symlink(os.path.join(self.sandbox, "a", "b"), os.path.join(self.sandbox, "deep"))

    # ------------------------------------------------------------ glTF

    def test_a_gltf_buffer_outside_is_refused_in_every_form(self):
        self.need("gltf")
        self.plant_links("secret.bin")
        for label, uri in self.outside_forms("secret.bin").items():
            with self.subTest(label):
                self.refused_cleanly(self.write("evil.gltf", json.dumps(gltf_document(uri))))

    def test_a_gltf_image_outside_is_refused(self):
        self.need("gltf")
        self.plant_links("secret.png")
        for label, uri in self.outside_forms("secret.png").items():
            with self.subTest(label):
                self.refused_cleanly(self.write("evil.gltf", json.dumps(gltf_document("secret.bin", uri))))

    def test_a_gltf_naming_files_inside_imports(self):
        self.need("gltf")
        self.write("models/tri.gltf", json.dumps(gltf_document("../secret.bin", "..%2Fsecret.png")))
        imported = self.ok("file.import", path="models/tri.gltf")
        self.assertEqual(imported["objects"], ["Tri"])
        vertices = {tuple(round(c, 4) for c in v.co) for v in bpy.data.objects["Tri"].data.vertices}
        # glTF's Y-up (x, y, z) is Blender's (x, -z, y).
        self.assertEqual(vertices, {(0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 0.0, 1.0)})
        embedded = "data:application/octet-stream;base64," + base64.b64encode(SECRET).decode("ascii")
        self.write("embedded.gltf", json.dumps(gltf_document(embedded)))
        self.assertEqual(len(self.ok("file.import", path="embedded.gltf")["objects"]), 1)

    def test_a_glb_whose_json_names_a_buffer_outside_is_refused(self):
        self.need("glb")
        for uri in (os.path.join(self.outside, "secret.bin"), "../" + os.path.basename(self.outside) + "/secret.bin"):
            with self.subTest(uri):
                self.refused_cleanly(self.write("evil.glb", glb_bytes(gltf_document(uri))))
        self.write("tri.glb", glb_bytes(gltf_document("secret.bin")))
        self.assertEqual(self.ok("file.import", path="tri.glb")["objects"], ["Tri"])

    # ------------------------------------------------------------ OBJ and MTL

    def obj_with(self, mtllib):
        return "mtllib %s\no Tri\nv 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl Skin\nf 1 2 3\n" % mtllib

    def test_an_obj_material_library_outside_is_refused(self):
        with open(os.path.join(self.outside, "evil.mtl"), "w") as f:
            f.write("newmtl Skin\nKd 1 0 0\nmap_Kd secret.png\n")
        self.plant_links("evil.mtl")
        for label, name in self.outside_forms("evil.mtl").items():
            if label in ("file uri", "percent"):
                continue  # OBJ names files, not URIs
            with self.subTest(label):
                self.refused_cleanly(self.write("evil.obj", self.obj_with(name)))

    def test_a_texture_map_outside_is_refused_after_its_options(self):
        self.plant_links("secret.png")
        forms = self.outside_forms("secret.png")
        lines = ["map_Kd -s 1 1 1 %s" % forms["absolute"], "map_Bump -bm 0.5 %s" % forms["dotdot"],
                 "bump %s" % forms["backslash"], "norm %s" % forms["linked folder"], "disp %s" % forms["linked file"],
                 "map_Kd %s" % forms["lexical"], "refl -type sphere %s" % forms["absolute"]]
        for line in lines:
            with self.subTest(line):
                self.write("skin.mtl", "newmtl Skin\nKd 1 0 0\n%s\n" % line)
                self.refused_cleanly(self.write("evil.obj", self.obj_with("skin.mtl")))

    def test_an_obj_whose_textures_are_inside_imports_and_its_material_is_the_agents(self):
        self.write("mats/skin.mtl", "newmtl Skin\nKd 1 0 0\nmap_Kd -s 1 1 1 ../secret.png\n")
        self.write("tri.obj", self.obj_with("mats/skin.mtl"))
        imported = self.ok("file.import", path="tri.obj")
        self.assertEqual((imported["objects"], imported["materials"]), (["Tri"], ["Skin"]))
        self.assertIn("Skin", bpy.data.materials)
        images = [i for i in bpy.data.images if i.filepath]
        self.assertEqual([os.path.realpath(bpy.path.abspath(i.filepath)) for i in images],
                         [os.path.join(self.sandbox, "secret.png")])
        # The actuator lock: the imported material and image are the agent's, the human's are not.
        bpy.data.materials.new("Human")
        gone = self.k.call("python.exec", {"code": "import bpy\nbpy.data.materials.remove(bpy.data.materials['Skin'])\n"
                                                   "bpy.data.images.remove(bpy.data.images['secret.png'])"})
        self.assertTrue(gone["ok"], gone)
        kept = self.k.call("python.exec", {"code": "import bpy\nbpy.data.materials.remove(bpy.data.materials['Human'])"})
        self.assertFalse(kept["ok"], kept)
        self.assertEqual(kept["error"]["details"]["reason"], "actuator_lock", kept)
        self.assertIn("Human", bpy.data.materials)

    def test_a_texture_name_the_importer_would_find_in_the_working_folder_is_refused(self):
        # Blender's OBJ importer tries a texture's name as given before the MTL's folder: a bare
        # name is then read from the working folder, wherever that is.
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(self.outside)
        self.write("mats/skin.mtl", "newmtl Skin\nKd 1 0 0\nmap_Kd secret.png\n")
        self.refused_cleanly(self.write("evil.obj", self.obj_with("mats/skin.mtl")))

    def test_with_the_reference_check_off_the_check_after_the_import_takes_everything_back(self):
        # Defence in depth: the importer runs (and may open the file), nothing of it stays.
        original = import_refs.check
        import_refs.check = lambda *args: None
        self.addCleanup(setattr, import_refs, "check", original)
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(self.outside)
        self.write("mats/skin.mtl", "newmtl Skin\nKd 1 0 0\nmap_Kd %s\n" % os.path.join(self.outside, "secret.png"))
        error = self.refused_cleanly(self.write("evil.obj", self.obj_with("mats/skin.mtl")))
        self.assertIn("taken back", error["message"])
        self.write("mats/skin.mtl", "newmtl Skin\nKd 1 0 0\nmap_Kd secret.png\n")
        self.refused_cleanly("evil.obj")
        if "gltf" in exchange.available_formats():
            self.write("evil.gltf", json.dumps(gltf_document("secret.bin", os.path.join(self.outside, "secret.png"))))
            self.assertIn("taken back", self.refused_cleanly("evil.gltf")["message"])

    # ------------------------------------------------------------ USD

    def test_usd_layers_and_assets_outside_are_refused(self):
        self.need("usd")
        self.plant_links("layer.usda")
        for label, name in self.outside_forms("layer.usda").items():
            if label in ("file uri", "percent"):
                continue
            for how in ("sublayer", "reference", "asset"):
                with self.subTest(label=label, how=how):
                    if how == "sublayer":
                        text = '#usda 1.0\n(\n    subLayers = [@%s@]\n)\n' % name
                    elif how == "reference":
                        text = '#usda 1.0\n\ndef Xform "X" (\n    references = @%s@\n)\n{\n}\n' % name
                    else:
                        text = USD_TRIANGLE + '\ndef Shader "S"\n{\n    asset inputs:file = @%s@\n}\n' % name
                    self.refused_cleanly(self.write("evil.usda", text))
        # A layer inside that names one outside is followed.
        self.write("middle.usda", '#usda 1.0\n(\n    subLayers = [@%s@]\n)\n' % self.outside_forms("layer.usda")["absolute"])
        self.refused_cleanly(self.write("top.usda", '#usda 1.0\n(\n    subLayers = [@./middle.usda@]\n)\n'))

    def test_usd_layers_inside_import(self):
        self.need("usd")
        self.write("top.usda", '#usda 1.0\n(\n    subLayers = [@./layer.usda@]\n)\n')
        self.assertIn("Tri", self.ok("file.import", path="top.usda")["objects"])

    def test_binary_usd_is_imported_only_in_the_jail(self):
        self.need("usd")
        self.ok("mesh.create_cube", name="Box")
        self.ok("file.export", path="box.usdc", objects=["Box"])
        with open(os.path.join(self.sandbox, "box.usdc"), "rb") as f:
            self.assertEqual(f.read(8), b"PXR-USDC")
        shutil.copy(os.path.join(self.sandbox, "box.usdc"), os.path.join(self.sandbox, "box.usd"))
        for path in ("box.usdc", "box.usd"):
            error = self.refused_cleanly(path)
            self.assertIn("jail", error["message"])
        saved = dict(confine.STATE)
        confine.STATE["filesystem"] = True  # as the launcher reports it in the jail
        self.addCleanup(lambda: (confine.STATE.clear(), confine.STATE.update(saved)))
        self.assertTrue(self.ok("file.import", path="box.usd")["objects"])

    def test_the_limits_are_refused_not_read_in_part(self):
        self.need("usd")
        # MAX_FILES: a chain of layers one longer than the check follows.
        for n in range(import_refs.MAX_FILES + 1):
            self.write("chain/%d.usda" % n, '#usda 1.0\n(\n    subLayers = [@./%d.usda@]\n)\n' % (n + 1))
        self.write("chain/%d.usda" % (import_refs.MAX_FILES + 1), USD_TRIANGLE)
        self.assertIn("past the %d files" % import_refs.MAX_FILES, self.refused_cleanly("chain/0.usda")["message"])
        if "gltf" in exchange.available_formats():
            # MAX_JSON_BYTES, made small for the test: a document above it is not parsed in part.
            original = import_refs.MAX_JSON_BYTES
            import_refs.MAX_JSON_BYTES = 100
            self.addCleanup(setattr, import_refs, "MAX_JSON_BYTES", original)
            error = self.refused_cleanly(self.write("big.gltf", json.dumps(gltf_document("secret.bin"))))
            self.assertIn("larger than the 100 bytes", error["message"])

    # ------------------------------------------------------------ FBX (the check after the import)

    def fbx_naming(self, image_path, relative):
        """An FBX of a triangle whose material's texture is `image_path`, written by Blender's own
        exporter with relative paths (the importer reads
        RelativeFilename beside the FBX: `../<outside>/secret.png`); the scene is then put back to the factory one."""
        mesh = bpy.data.meshes.new("Tri")
        mesh.from_pydata([TRIANGLE[0:3], TRIANGLE[3:6], TRIANGLE[6:9]], [], [(0, 1, 2)])
        obj = bpy.data.objects.new("Tri", mesh)
        bpy.context.scene.collection.objects.link(obj)
        material = bpy.data.materials.new("Skin")
        material.use_nodes = True
        node = material.node_tree.nodes.new("ShaderNodeTexImage")
        node.image = bpy.data.images.load(image_path)
        bsdf = material.node_tree.nodes["Principled BSDF"]
        material.node_tree.links.new(node.outputs["Color"], bsdf.inputs["Base Color"])
        mesh.materials.append(material)
        for other in bpy.context.view_layer.objects:
            other.select_set(other == obj)
        bpy.ops.export_scene.fbx(filepath=os.path.join(self.sandbox, relative), use_selection=True,
                                 path_mode="RELATIVE", object_types={"MESH"})
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.k.state.features.add("code_exec")
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES, "sandbox": self.sandbox})

    def test_an_fbx_texture_outside_is_taken_back_and_refused(self):
        self.need("fbx")
        self.fbx_naming(os.path.join(self.outside, "secret.png"), "evil.fbx")
        error = self.refused_cleanly("evil.fbx")
        self.assertIn("taken back", error["message"])
        self.assertNotIn("Skin", bpy.data.materials)

    def test_an_fbx_texture_inside_imports(self):
        self.need("fbx")
        self.fbx_naming(os.path.join(self.sandbox, "secret.png"), "tri.fbx")
        self.assertIn("Tri", self.ok("file.import", path="tri.fbx")["objects"])
        self.assertIn("Skin", bpy.data.materials)


if __name__ == "__main__":
    unittest.main()
