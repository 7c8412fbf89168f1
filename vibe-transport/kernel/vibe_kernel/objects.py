"""The tools that make and edit objects and collections: creation (empties, cameras, lights,
mesh primitives), moves and transforms, rename, delete, collection links, parents, the active
object. The actuator lock's rules are in lock.py."""

import bmesh
import bpy

from . import lock, look
from .envelope import invalid, not_found
from .tools import (MASTER, check_name, collection_by_name, collection_parent, find_collection,
                    floats, has_collection, object_json, opt_num, opt_str, opt_vec, req_str, resolve, target_collection,
                    tool)


@tool("scene.create_collection")
def create_collection(k, params):
    name = req_str(params, "name")
    check_name("name", name)
    parent = opt_str(params, "parent")
    if parent == MASTER:
        parent = None
    if parent is not None:
        check_name("parent", parent)
        if not has_collection(parent):
            raise not_found("parent", "collection", parent)
    if name == MASTER:
        raise invalid("name", "the master collection cannot be created")
    existing = find_collection(name)
    if existing is not None:
        if collection_parent(existing) != parent:
            raise invalid("name", "collection %r exists under another parent" % name, reason="name_taken")
        return {"name": name, "parent": parent, "created": False}
    if name in bpy.data.collections:
        raise invalid("name", "a collection named %r exists outside this scene" % name, reason="name_taken")
    coll = bpy.data.collections.new(name)
    lock.mark_created(k, coll, "collection")
    collection_by_name(parent or MASTER).children.link(coll)
    return {"name": coll.name, "parent": parent, "created": True}


# ---------------------------------------------------------------- creation

def new_object(k, params, make_data):
    """Checks every argument, then creates the object named exactly `name`."""
    name = req_str(params, "name")
    check_name("name", name)
    if name in bpy.data.objects:
        raise invalid("name", "an object named %r exists; choose another name" % name, reason="name_taken")
    coll = target_collection(params)
    location = opt_vec(params, "location", 3)
    rotation = opt_vec(params, "rotation_euler", 3)
    scale = opt_vec(params, "scale", 3)
    obj = bpy.data.objects.new(name, make_data(name))
    coll.objects.link(obj)
    if location is not None:
        obj.location = location
    if rotation is not None:
        obj.rotation_euler = rotation
    if scale is not None:
        obj.scale = scale
    lock.mark_created(k, obj, "object")
    k.state.seen[obj.name] = lock.stable_id(obj)
    return object_json(obj)


def mesh_maker(primitive, size):
    def make(name):
        bm = bmesh.new()
        try:
            if primitive == "cube":
                bmesh.ops.create_cube(bm, size=size)
            elif primitive == "plane":
                bmesh.ops.create_grid(bm, x_segments=1, y_segments=1, size=size / 2.0)
            elif primitive == "uv_sphere":
                bmesh.ops.create_uvsphere(bm, u_segments=32, v_segments=16, radius=size / 2.0)
            elif primitive == "cylinder":
                bmesh.ops.create_cone(bm, cap_ends=True, cap_tris=False, segments=32,
                                      radius1=size / 2.0, radius2=size / 2.0, depth=size)
            elif primitive == "monkey":
                bmesh.ops.create_monkey(bm)
            me = bpy.data.meshes.new(name)
            bm.to_mesh(me)
            return me
        finally:
            bm.free()
    return make


PRIMITIVES = ("cube", "plane", "uv_sphere", "cylinder", "monkey")


@tool("object.create")
def object_create(k, params):
    kind = req_str(params, "type")
    primitive = opt_str(params, "primitive")
    light_type = opt_str(params, "light_type")
    if primitive is not None and kind != "MESH":
        raise invalid("primitive", "`primitive` applies to MESH only")
    if light_type is not None and kind != "LIGHT":
        raise invalid("light_type", "`light_type` applies to LIGHT only")
    if kind == "EMPTY":
        make = lambda name: None  # noqa: E731
    elif kind == "CAMERA":
        make = lambda name: bpy.data.cameras.new(name)  # noqa: E731
    elif kind == "LIGHT":
        lt = light_type or "POINT"
        if lt not in ("POINT", "SUN", "SPOT", "AREA"):
            raise invalid("light_type", "`light_type` must be POINT, SUN, SPOT or AREA")
        make = lambda name: look.new_light(name, lt)  # noqa: E731
    elif kind == "MESH":
        if primitive is None:
            raise invalid("primitive", "a MESH needs a `primitive`")
        if primitive not in PRIMITIVES:
            raise invalid("primitive", "unknown primitive %r" % primitive)
        make = mesh_maker(primitive, 2.0)
    else:
        raise invalid("type", "unknown object type %r" % kind)
    return new_object(k, params, make)


def create_primitive(k, params, primitive):
    size = opt_num(params, "size")
    if size is not None and not 0.0 < size <= 1.0e4:
        raise invalid("size", "`size` must be in (0, 10000]")
    return new_object(k, params, mesh_maker(primitive, 2.0 if size is None else size))


@tool("mesh.create_cube")
def create_cube(k, params):
    return create_primitive(k, params, "cube")


@tool("mesh.create_plane")
def create_plane(k, params):
    return create_primitive(k, params, "plane")


# ---------------------------------------------------------------- edits

@tool("object.move", keeps_structure=True)
def object_move(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    location = opt_vec(params, "location", 3)
    delta = opt_vec(params, "delta", 3)
    if (location is None) == (delta is None):
        raise invalid("delta", "give exactly one of `location` and `delta`")
    if location is not None:
        obj.location = location
    else:
        old = floats(obj.location)
        obj.location = [old[i] + delta[i] for i in range(3)]
    return object_json(obj)


@tool("object.set_transform", keeps_structure=True)
def set_transform(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    location = opt_vec(params, "location", 3)
    rotation = opt_vec(params, "rotation_euler", 3)
    scale = opt_vec(params, "scale", 3)
    if location is None and rotation is None and scale is None:
        raise invalid("location", "give at least one of `location`, `rotation_euler`, `scale`")
    if location is not None:
        obj.location = location
    if rotation is not None:
        obj.rotation_euler = rotation
    if scale is not None:
        obj.scale = scale
    return object_json(obj)


@tool("object.rename")
def rename(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    lock.refuse_object(k, obj, "rename")
    wanted = req_str(params, "new_name")
    check_name("new_name", wanted)
    old = obj.name
    if wanted == old:
        return {"old_name": old, "name": old}
    # Never Blender's unique-name rule: 3.4 renames the object that holds the name instead, and
    # newer versions make names longer than ours; a taken name is refused.
    if wanted in bpy.data.objects:
        raise invalid("new_name", "an object named %r exists; choose another name" % wanted, reason="name_taken")
    obj.name = wanted
    lock.renamed(k, obj)
    k.state.seen.pop(old, None)
    k.state.seen[obj.name] = lock.stable_id(obj)
    return {"old_name": old, "name": obj.name}


@tool("object.delete")
def delete(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    lock.refuse_object(k, obj, "remove")
    children = sorted(c.name for c in obj.children)
    if children:
        raise invalid("name", "%r has children (%s); unparent or delete them first" % (obj.name, ", ".join(children)),
                      children=children)
    name, data = obj.name, obj.data
    k.state.identity.pop(name, None)
    lock.forget_object(k, obj)
    bpy.data.objects.remove(obj, do_unlink=True)
    # The object's own data goes with it, so that its materials lose that user too.
    if data is not None and data.users == 0:
        if isinstance(data, bpy.types.Mesh):
            bpy.data.meshes.remove(data)
        elif isinstance(data, bpy.types.Light):
            bpy.data.lights.remove(data)
        elif isinstance(data, bpy.types.Camera):
            bpy.data.cameras.remove(data)
    k.state.seen.pop(name, None)
    return {"deleted": name}


@tool("object.assign_collection")
def assign_collection(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    coll_name = req_str(params, "collection")
    check_name("collection", coll_name)
    if not has_collection(coll_name):
        raise not_found("collection", "collection", coll_name)
    mode = opt_str(params, "mode") or "move"
    if mode not in ("move", "link"):
        raise invalid("mode", "`mode` must be move or link")
    if mode == "move":
        lock.refuse_object(k, obj, "unlink")
    target = collection_by_name(coll_name)
    if obj.name not in target.objects:
        target.objects.link(obj)
    if mode == "move":
        for c in list(obj.users_collection):
            if c != target:
                c.objects.unlink(obj)
    return object_json(obj)


@tool("object.set_parent", keeps_structure=True)
def set_parent(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    if "parent" not in params or not (params["parent"] is None or isinstance(params["parent"], str)):
        raise invalid("parent", "`parent` must be an object name or null")
    parent = None if params["parent"] is None else resolve(k, "parent", params["parent"])
    if parent is not None:
        walk = parent
        while walk is not None:
            if walk == obj:
                raise invalid("parent", "parenting %r to %r would make a cycle" % (obj.name, parent.name), reason="cycle")
            walk = walk.parent
    obj.parent = parent
    # The parent inverse keeps the object where it was in the world; its local transform (what
    # the answer shows) stays as it was.
    if parent is not None:
        obj.matrix_parent_inverse = parent.matrix_world.inverted()
    else:
        obj.matrix_parent_inverse.identity()
    return object_json(obj)


@tool("selection.set_active_object", keeps_structure=True)
def set_active(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    bpy.context.view_layer.objects.active = obj
    return {"active_object": obj.name}
