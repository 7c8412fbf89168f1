"""Exact scene snapshots: a `.blend` that keeps every data-block, used data or not.

Blender does not write data-blocks nobody uses (a material made but not yet assigned, a mesh
whose object was deleted) unless they have a fake user, so a plain copy loses them and a
rollback would delete them. Before a save, every unused data-block gets a fake user; their
names are kept in the file itself (a custom property of the scene, removed at once from the
live scene); after a load, those fake users are taken off again, so the loaded scene equals
the saved one, user counts included."""

import json

import bpy

MARK = "vibe_fake_users"


def id_collections():
    for attr in dir(bpy.data):
        value = getattr(bpy.data, attr, None)
        if isinstance(value, bpy.types.bpy_prop_collection) and attr not in ("window_managers", "screens",
                                                                               "workspaces", "libraries"):
            yield attr, value


def unused():
    """(collection, name) of every local data-block without users and without a fake user."""
    found = []
    for attr, collection in id_collections():
        for block in collection:
            if getattr(block, "library", None) is None and block.users == 0 and not block.use_fake_user:
                found.append((attr, block.name))
    return found


def save(path, file_op):
    """Saves an exact copy of the scene to `path` through `file_op` (the kernel's busy-aware
    file operation)."""
    marked = unused()
    for attr, name in marked:
        getattr(bpy.data, attr)[name].use_fake_user = True
    scene = bpy.context.scene
    scene[MARK] = json.dumps(marked)
    try:
        file_op(lambda: bpy.ops.wm.save_as_mainfile(filepath=path, copy=True, check_existing=False, compress=False))
    finally:
        del scene[MARK]
        for attr, name in marked:
            block = getattr(bpy.data, attr).get(name)
            if block is not None:
                block.use_fake_user = False


def load(path, file_op):
    """Loads `path` (saved by `save`) with Python auto-execution off and takes the fake users
    `save` added off again."""
    file_op(lambda: bpy.ops.wm.open_mainfile(filepath=path, load_ui=False, use_scripts=False))
    for scene in bpy.data.scenes:
        text = scene.get(MARK)
        if text is None:
            continue
        del scene[MARK]
        try:
            marked = json.loads(text)
        except ValueError:
            marked = []
        for attr, name in marked:
            collection = getattr(bpy.data, str(attr), None)
            block = collection.get(name) if collection is not None else None
            if block is not None:
                block.use_fake_user = False
