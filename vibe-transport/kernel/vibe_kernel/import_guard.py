"""file.import's check after the importer ran (defence in depth behind import_refs.py): every
data-block the import made that names a file on disk (an image, a library, a cache file, a volume,
a sound, a movie clip, a font) must name one inside the sandbox, by the same rules as any path
the session reads. A packed block passes only if the file it names does not exist: its data then
came from the model file itself (an FBX's embedded texture); the glTF importer packs the images it
read from disk, which must be inside. If one
names a file outside, everything the import made is removed again (objects, meshes, materials,
images, actions, every other new data-block), the selection is put back, and the call is refused
with contract_violation, reason `sandbox`: the scene is as it was before the call.

For FBX, whose texture paths sit in a binary format this kernel does not parse, this is the
check: the importer may have opened the outside file, but nothing of it stays in the scene. It
is a check in the kernel's own process, a filter; in the jail the operating system refuses the
read itself (the boundary)."""

import os

import bpy

from . import files
from .envelope import Refusal
from .state import inside

# The bpy.data collections whose blocks name a file on disk.
FILE_BLOCKS = ("images", "libraries", "cache_files", "volumes", "sounds", "movieclips", "fonts")


def id_collections():
    """Every bpy.data collection of data-blocks this Blender has, by attribute name."""
    found = []
    for name in dir(bpy.data):
        if name.startswith("_") or name in ("window_managers", "screens", "workspaces"):
            continue
        try:
            value = getattr(bpy.data, name)
        except AttributeError:
            continue
        if isinstance(value, bpy.types.bpy_prop_collection):
            rna = getattr(value, "bl_rna", None)
            if rna is not None and rna.identifier.startswith("Blend"):
                found.append(name)
    return found


class Before:
    """What the scene held before the import: every data-block by address, the selection and
    the active object."""

    def __init__(self):
        self.blocks = {name: {b.as_pointer() for b in getattr(bpy.data, name)} for name in id_collections()}
        layer = bpy.context.view_layer
        self.selected = [o.name for o in layer.objects if o.select_get()]
        self.active = layer.objects.active.name if layer.objects.active else None

    def new(self, name):
        """The blocks of bpy.data.`name` the import made."""
        known = self.blocks.get(name)
        if known is None:
            return []
        return [b for b in getattr(bpy.data, name) if b.as_pointer() not in known]

    def take_back(self):
        """Removes every data-block the import made and puts the selection back."""
        made = [b for name in self.blocks for b in self.new(name)]
        if made:
            bpy.data.batch_remove(made)
        layer = bpy.context.view_layer
        for obj in layer.objects:
            obj.select_set(obj.name in self.selected)
        layer.objects.active = layer.objects.get(self.active) if self.active else None


def source_of(block):
    """The file a block reads, as an absolute path, or None when it reads none."""
    path = getattr(block, "filepath", "")
    if not path or path.startswith("<"):  # "<builtin>" font
        return None
    path = bpy.path.abspath(path, library=getattr(block, "library", None))
    if getattr(block, "packed_file", None) is not None and not os.path.exists(path):
        return None  # packed from the model file's own content (an FBX's embedded texture)
    return path


def outside(k, path):
    """Why `path` is not a file this session may read, or None."""
    root = os.path.realpath(k.state.sandbox)
    for candidate in (path, os.path.dirname(path)):  # a UDIM or sequence pattern names its folder
        resolved = os.path.realpath(candidate)
        if any(inside(project, resolved) for project in k.state.project_roots):
            return "resolves into a project root"
        if resolved == root and candidate != path:
            continue
        if not inside(root, resolved) or resolved == root:
            return "resolves outside the sandbox"
        if any(files.is_human_only(p) for p in os.path.relpath(resolved, root).split(os.sep)):
            return "resolves into HUMAN_ONLY, which is for people only"
    return None


def check(k, relative, before):
    """After a successful import: refuses (having taken everything back) if a block it made
    names a file outside the sandbox."""
    for name in FILE_BLOCKS:
        for block in before.new(name):
            source = source_of(block)
            why = outside(k, source) if source else None
            if why is not None:
                what = "%s %r (%s)" % (name[:-1].replace("_", " "), block.name, block.filepath)
                before.take_back()
                raise Refusal("contract_violation", "path %r made %s, which %s; the import was taken back"
                              % (relative, what, why), reason="sandbox", field="path", reference=source)
