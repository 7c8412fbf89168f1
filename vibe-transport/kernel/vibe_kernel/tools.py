"""blender-core v1 against real bpy: one function per tool, data-first (no UI context, no
selection), with the same semantics as MockBlender. Every tool validates everything before it
changes anything, so a refused call leaves the scene as it was. The file tools (file.save,
file.open, render.still) are in files.py; the actuator lock's rules in lock.py."""

import math
import traceback

import bmesh
import bpy

from . import lock, snapshot
from .index import SCENE_INDEX
from .envelope import Refusal, escape_surrogates, invalid, not_found, redact_paths, sanitize
from .lock import created_by_agent

MASTER = "Scene Collection"
MAX_NAME_BYTES = 63
MODIFIER_TYPES = ("SUBSURF", "BEVEL", "ARRAY", "MIRROR", "SOLIDIFY")
DEFAULT_MODIFIER_NAMES = {"SUBSURF": "Subdivision", "BEVEL": "Bevel", "ARRAY": "Array",
                          "MIRROR": "Mirror", "SOLIDIFY": "Solidify"}
TOOLS = {}
STRUCTURAL = set()  # mutating tools after which the scene index is rebuilt


def tool(name, mutates, *capabilities, keeps_structure=False):
    """Registers `fn` as tool `name`, which changes the scene when `mutates` and needs every one
    of `capabilities` (the registry's `requires.capabilities`: a Rust test checks they agree).
    `keeps_structure`: a mutating tool that never creates, deletes, renames or relinks objects
    or collections, so the scene index (index.py) stays valid over it."""
    def register(fn):
        TOOLS[name] = (fn, mutates, frozenset(capabilities))
        if mutates and not keeps_structure:
            STRUCTURAL.add(name)
        return fn
    return register


# ---------------------------------------------------------------- arguments

def req_str(params, field):
    value = params.get(field)
    if not isinstance(value, str):
        raise invalid(field, "`%s` must be a string" % field)
    return value


def opt_str(params, field):
    value = params.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(field, "`%s` must be a string" % field)
    return value


def finite_float(field, value, what):
    """`value` (an int or float, not a bool) as a finite float, or an invalid_arguments refusal
    naming the field. NaN and infinities come in through JSON that allows them (`NaN`,
    `Infinity`, `1e999`) and would poison the scene and every later answer."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(field, "`%s` must be %s" % (field, what))
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise invalid(field, "`%s` must be a finite number, not %r" % (field, value if isinstance(value, float)
                                                                          else "an integer that large"),
                      reason="non_finite")
    return number


def opt_num(params, field):
    value = params.get(field)
    if value is None:
        return None
    return finite_float(field, value, "a number")


def opt_uint(params, field):
    value = params.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 0xFFFFFFFF:
        raise invalid(field, "`%s` must be a non-negative integer" % field)
    return value


def opt_vec(params, field, n):
    value = params.get(field)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != n:
        raise invalid(field, "`%s` must be %d numbers" % (field, n))
    return [finite_float(field, v, "%d numbers" % n) for v in value]


def check_name(field, name):
    if not name or len(name.encode("utf-8")) > MAX_NAME_BYTES or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise invalid(field, "`%s` must be 1-63 bytes without control characters" % field)


def glob_match(pattern, name):
    """`*` any run, `?` one character, everything else literal (the mock's matcher)."""
    p, n = pattern, name
    pi = ni = 0
    star, mark = -1, 0
    while ni < len(n):
        if pi < len(p) and (p[pi] == "?" or p[pi] == n[ni]):
            pi += 1
            ni += 1
        elif pi < len(p) and p[pi] == "*":
            star, mark = pi, ni
            pi += 1
        elif star >= 0:
            pi = star + 1
            mark += 1
            ni = mark
        else:
            return False
    return all(c == "*" for c in p[pi:])


# ---------------------------------------------------------------- scene access

def scene():
    return bpy.context.scene


def scene_objects():
    return sorted(scene().objects, key=lambda o: o.name)


def collections():
    return list(scene().collection.children_recursive)


def find_collection(name):
    for c in collections():
        if c.name == name:
            return c
    return None


def has_collection(name):
    return name == MASTER or find_collection(name) is not None


def collection_by_name(name):
    return scene().collection if name == MASTER else find_collection(name)


def default_collection():
    children = list(scene().collection.children)
    return children[0] if children else scene().collection


def surface_materials():
    return sorted((m for m in bpy.data.materials if not m.is_grease_pencil), key=lambda m: m.name)


def cached(k, name):
    """The identity cache: `scene.objects.get` scans the scene (~20 us at 1000 objects), so a
    reference resolved before is used when it is still valid and still has that name. (Checking
    that it is still linked to the scene would scan again; an object a person unlinked without
    deleting stays reachable by name until it is renamed, removed, or the file reloads.)"""
    obj = k.state.identity.get(name)
    if obj is None:
        return None
    try:
        if obj.name == name:
            return obj
    except ReferenceError:  # removed, or the file was reloaded
        pass
    k.state.identity.pop(name, None)
    return None


def resolve(k, field, name):
    """The object called `name`, telling identity drift (renamed behind the session's back)
    from a name that never existed."""
    check_name(field, name)
    obj = cached(k, name) or SCENE_INDEX.object_named(name)
    if obj is not None:
        k.state.identity[name] = obj
        k.state.seen[name] = lock.stable_id(obj)
        return obj
    identity = k.state.seen.get(name)
    if identity is not None:
        for other in scene().objects:
            if lock.stable_id(other) == identity:
                raise Refusal("not_found", "object %r was renamed to %r outside this session" % (name, other.name),
                              reason="identity_drift", field=field, name=name, current_name=other.name)
    raise not_found(field, "object", name)


def floats(values):
    return [float(v) for v in values]


def finite_or_none(value):
    value = float(value)
    return value if math.isfinite(value) else None


def transform(obj, field, non_finite):
    """A transform vector of `obj`; components that are NaN or infinite (a person or agent code
    set them) are null, and the field is listed in `non_finite`."""
    values = getattr(obj, field)[:]
    if all(map(math.isfinite, values)):
        return list(values)
    non_finite.append(field)
    return [finite_or_none(v) for v in values]


def modifier_json(m):
    if m.type == "SUBSURF":
        return {"name": m.name, "type": m.type, "levels": m.levels, "render_levels": m.render_levels}
    if m.type == "BEVEL":
        return {"name": m.name, "type": m.type, "width": float(m.width), "segments": m.segments}
    if m.type == "ARRAY":
        return {"name": m.name, "type": m.type, "count": m.count}
    if m.type == "SOLIDIFY":
        return {"name": m.name, "type": m.type, "thickness": float(m.thickness)}
    return {"name": m.name, "type": m.type}


def data_json(obj):
    if obj.type == "MESH":
        me = obj.data
        return {"type": "MESH", "vertices": len(me.vertices), "edges": len(me.edges),
                "polygons": len(me.polygons), "material_slots": len(obj.material_slots)}
    if obj.type == "LIGHT":
        return {"type": "LIGHT", "light_type": obj.data.type}
    if obj.type == "ARMATURE":
        return {"type": "ARMATURE", "bones": len(obj.data.bones)}
    return {"type": obj.type}


def object_json(obj):
    non_finite = []
    out = {
        "name": obj.name,
        "type": obj.type,
        "location": transform(obj, "location", non_finite),
        "rotation_euler": transform(obj, "rotation_euler", non_finite),
        "scale": transform(obj, "scale", non_finite),
        "parent": obj.parent.name if obj.parent else None,
        "collections": SCENE_INDEX.collections_of(obj),
        "materials": [s.material.name if s.material else None for s in obj.material_slots],
        "modifiers": [modifier_json(m) for m in obj.modifiers],
        "data": data_json(obj),
    }
    if non_finite:
        out["non_finite"] = non_finite
    return out


def principled_node(mat):
    if not mat.node_tree:
        return None
    for node in mat.node_tree.nodes:
        if node.type == "BSDF_PRINCIPLED":
            return node
    return None


def principled_json(node):
    # Non-finite values here (and anywhere else in an answer) become null in envelope.ok, which
    # lists their paths under `non_finite`.
    return {"base_color": floats(node.inputs["Base Color"].default_value),
            "metallic": float(node.inputs["Metallic"].default_value),
            "roughness": float(node.inputs["Roughness"].default_value)}


def collection_parent(coll):
    return SCENE_INDEX.parent_of(coll.name)


def collections_json():
    out = []
    for c in sorted(collections(), key=lambda c: c.name):
        out.append({"name": c.name, "parent": collection_parent(c),
                    "children": sorted(ch.name for ch in c.children),
                    "objects": sorted(o.name for o in c.objects)})
    return out


def materials_json():
    out = []
    for m in surface_materials():
        node = principled_node(m)
        out.append({"name": m.name, "principled": principled_json(node) if node else None, "users": m.users})
    return out


def polygons(obj):
    return len(obj.data.polygons) if obj.type == "MESH" else 0


def estimate(polys, kind, levels, count, segments):
    """The sanity estimate shared with the bridge and the mock."""
    if kind == "SUBSURF":
        return polys * 4 ** levels
    if kind == "ARRAY":
        return polys * count
    if kind in ("MIRROR", "SOLIDIFY"):
        return polys * 2
    if kind == "BEVEL":
        return polys * (segments + 1)
    return polys


def estimated_polygons(obj):
    p = polygons(obj)
    for m in obj.modifiers:
        levels = max(m.levels, m.render_levels) if m.type == "SUBSURF" else 0
        p = estimate(p, m.type, levels, getattr(m, "count", 1), getattr(m, "segments", 1))
    return p


# ---------------------------------------------------------------- reads

@tool("kernel.status", False, "scene.read")
def kernel_status(k, params):
    return {"state": "busy" if k.state.busy else "ready", "protocol": 1,
            "blender_version": k.blender_version, "transaction_open": k.state.transaction is not None,
            "file": k.file_name()}


@tool("scene.snapshot", False, "scene.read")
def scene_snapshot(k, params):
    return {"snapshot_version": 1, "scene": scene().name, "blender_version": k.blender_version,
            "objects": [object_json(o) for o in scene_objects()],
            "collections": collections_json(), "materials": materials_json()}


@tool("scene.telemetry", False, "scene.read")
def scene_telemetry(k, params):
    by_type = {}
    for o in scene().objects:
        by_type[o.type] = by_type.get(o.type, 0) + 1
    active = bpy.context.view_layer.objects.active
    return {"scene": scene().name, "object_count": len(scene().objects), "objects_by_type": by_type,
            "polygon_total": sum(polygons(o) for o in scene().objects),
            "collections": sorted(c.name for c in collections()),
            "materials": [m.name for m in surface_materials()],
            "active_object": active.name if active else None,
            "state": "busy" if k.state.busy else "ready"}


@tool("blender.errors", False, "scene.read")
def blender_errors(k, params):
    limit = opt_uint(params, "limit")
    limit = 50 if limit is None else limit
    if not 1 <= limit <= 200:
        raise invalid("limit", "`limit` must be 1-200")
    entries = list(k.state.console)[-limit:]
    return {"errors": entries, "dropped": k.state.console_dropped}


@tool("scene.list_collections", False, "scene.read")
def list_collections(k, params):
    return {"collections": collections_json()}


@tool("scene.create_collection", True, "scene.write")
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


@tool("object.list", False, "scene.read")
def object_list(k, params):
    kind = opt_str(params, "type")
    coll = opt_str(params, "collection")
    if coll is not None and not has_collection(coll):
        raise not_found("collection", "collection", coll)
    out = [{"name": o.name, "type": o.type} for o in scene_objects()
           if (kind is None or o.type == kind)
           and (coll is None or coll in SCENE_INDEX.collections_of(o))]
    return {"objects": out}


@tool("object.info", False, "scene.read")
def object_info(k, params):
    return object_json(resolve(k, "name", req_str(params, "name")))


@tool("scenegraph.find", False, "scene.read")
def scenegraph_find(k, params):
    glob = opt_str(params, "name_glob")
    kind = opt_str(params, "type")
    coll = opt_str(params, "collection")
    mat = opt_str(params, "material")
    has_parent = params.get("has_parent")
    if has_parent is not None and not isinstance(has_parent, bool):
        raise invalid("has_parent", "`has_parent` must be a boolean")
    matches = []
    for o in scene_objects():
        if glob is not None and not glob_match(glob, o.name):
            continue
        if kind is not None and o.type != kind:
            continue
        if coll is not None and coll not in SCENE_INDEX.collections_of(o):
            continue
        if mat is not None and mat not in [s.material.name for s in o.material_slots if s.material]:
            continue
        if has_parent is not None and has_parent != (o.parent is not None):
            continue
        matches.append(o.name)
    return {"matches": matches}


@tool("object.audit_identity", False, "scene.read")
def audit_identity(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    created = created_by_agent(k, obj)
    children = sorted(c.name for c in obj.children)
    reasons, high = [], False
    if obj.type == "ARMATURE":
        high = True
        reasons.append("an armature: deleting it breaks every mesh it deforms")
    if obj.library is not None:
        high = True
        reasons.append("linked from a library")
    if obj.override_library is not None:
        high = True
        reasons.append("a library override (proxy)")
    if children:
        high = True
        reasons.append("has %d children" % len(children))
    if not created:
        reasons.append("not created by the agent in this session")
    return {"name": obj.name, "type": obj.type, "is_proxy": obj.override_library is not None,
            "is_linked": obj.library is not None, "created_by_agent": created, "children": children,
            "risk": "high" if high else ("low" if created else "medium"), "risk_reasons": reasons}


@tool("material.list", False, "scene.read")
def material_list(k, params):
    return {"materials": materials_json()}


# ---------------------------------------------------------------- creation

def target_collection(params):
    coll = opt_str(params, "collection")
    if coll is None:
        return default_collection()
    check_name("collection", coll)
    if not has_collection(coll):
        raise not_found("collection", "collection", coll)
    return collection_by_name(coll)


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


@tool("object.create", True, "scene.write")
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
        make = lambda name: bpy.data.lights.new(name, lt)  # noqa: E731
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


@tool("mesh.create_cube", True, "scene.write")
def create_cube(k, params):
    return create_primitive(k, params, "cube")


@tool("mesh.create_plane", True, "scene.write")
def create_plane(k, params):
    return create_primitive(k, params, "plane")


# ---------------------------------------------------------------- edits

@tool("object.move", True, "scene.write", keeps_structure=True)
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


@tool("object.set_transform", True, "scene.write", keeps_structure=True)
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


@tool("object.rename", True, "scene.write")
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


@tool("object.delete", True, "scene.write")
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


@tool("object.assign_collection", True, "scene.write")
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


@tool("object.set_parent", True, "scene.write", keeps_structure=True)
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


@tool("selection.set_active_object", True, "scene.write", keeps_structure=True)
def set_active(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    bpy.context.view_layer.objects.active = obj
    return {"active_object": obj.name}


@tool("material.ensure_principled", True, "scene.write", keeps_structure=True)
def ensure_principled(k, params):
    name = req_str(params, "name")
    check_name("name", name)
    base_color = opt_vec(params, "base_color", 4)
    metallic = opt_num(params, "metallic")
    roughness = opt_num(params, "roughness")
    for field, value in (("metallic", metallic), ("roughness", roughness)):
        if value is not None and not 0.0 <= value <= 1.0:
            raise invalid(field, "`%s` must be in [0, 1]" % field)
    if base_color is not None and any(not 0.0 <= v <= 1.0 for v in base_color):
        raise invalid("base_color", "`base_color` components must be in [0, 1]")
    mat = bpy.data.materials.get(name)
    created = mat is None
    if created:
        mat = bpy.data.materials.new(name)
        lock.mark_created(k, mat, "material")
    # Blender 5 materials always use nodes (`use_nodes` is deprecated there); older ones may not.
    if mat.node_tree is None or (bpy.app.version < (5, 0, 0) and not mat.use_nodes):
        mat.use_nodes = True
    node = principled_node(mat)
    if node is None:
        node = mat.node_tree.nodes.new("ShaderNodeBsdfPrincipled")
        out = next((n for n in mat.node_tree.nodes if n.type == "OUTPUT_MATERIAL"), None) \
            or mat.node_tree.nodes.new("ShaderNodeOutputMaterial")
        mat.node_tree.links.new(node.outputs[0], out.inputs["Surface"])
    if base_color is not None:
        node.inputs["Base Color"].default_value = base_color
    if metallic is not None:
        node.inputs["Metallic"].default_value = metallic
    if roughness is not None:
        node.inputs["Roughness"].default_value = roughness
    out = principled_json(node)
    out["name"] = mat.name
    out["created"] = created
    return out


def mesh_object(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    if obj.type != "MESH":
        raise invalid("name", "%r is a %s, not a MESH" % (obj.name, obj.type))
    return obj


@tool("mesh.assign_material", True, "scene.write", keeps_structure=True)
def assign_material(k, params):
    obj = mesh_object(k, params)
    mat_name = req_str(params, "material")
    check_name("material", mat_name)
    mat = bpy.data.materials.get(mat_name)
    if mat is None or mat.is_grease_pencil:
        raise not_found("material", "material", mat_name)
    slot = opt_uint(params, "slot")
    slot = 0 if slot is None else slot
    slots = len(obj.data.materials)
    if slot > slots or slot > 31:
        raise invalid("slot", "slot %d is past the end; the object has %d slots" % (slot, slots))
    if slot == slots:
        obj.data.materials.append(mat)
    else:
        obj.data.materials[slot] = mat
    return object_json(obj)


def sanity_refusal(field, value, limit):
    return Refusal("invalid_arguments", "%s %d exceeds the sanity limit of %d" % (field, value, limit),
                   reason="sanity_limit", field=field, limit=limit)


@tool("modifier.add", True, "scene.write", keeps_structure=True)
def modifier_add(k, params):
    obj = mesh_object(k, params)
    kind = req_str(params, "modifier_type")
    if kind not in MODIFIER_TYPES:
        raise invalid("modifier_type", "unknown modifier type %r" % kind)
    for field, owner in (("levels", "SUBSURF"), ("count", "ARRAY"), ("width", "BEVEL"),
                         ("segments", "BEVEL"), ("thickness", "SOLIDIFY")):
        if field in params and kind != owner:
            raise invalid(field, "`%s` applies to %s only" % (field, owner))
    requested = opt_str(params, "modifier_name")
    if requested is not None:
        check_name("modifier_name", requested)
    sanity = k.state.sanity
    levels = opt_uint(params, "levels")
    count = opt_uint(params, "count")
    segments = opt_uint(params, "segments")
    width = opt_num(params, "width")
    thickness = opt_num(params, "thickness")
    if levels is not None and levels > sanity["max_subdivision_levels"]:
        raise sanity_refusal("levels", levels, sanity["max_subdivision_levels"])
    if kind == "SUBSURF" and levels is None and 2 > sanity["max_subdivision_levels"]:
        raise sanity_refusal("levels", 2, sanity["max_subdivision_levels"])
    if count is not None and count > sanity["max_array_count"]:
        raise sanity_refusal("count", count, sanity["max_array_count"])
    if segments is not None and segments > sanity["max_bevel_segments"]:
        raise sanity_refusal("segments", segments, sanity["max_bevel_segments"])
    eff_levels = levels if levels is not None else 2
    total = estimate(estimated_polygons(obj), kind, eff_levels, 2 if count is None else count,
                     1 if segments is None else segments)
    if total > sanity["max_polygons"]:
        raise Refusal("invalid_arguments", "the modifier would give about %d polygons, over the budget of %d"
                      % (total, sanity["max_polygons"]), reason="sanity_limit", field="modifier_type",
                      limit=sanity["max_polygons"], estimate=total)
    m = obj.modifiers.new(requested or DEFAULT_MODIFIER_NAMES[kind], kind)
    lock.record_modifier(k, obj, m.name)
    if levels is not None:
        m.levels = levels
        m.render_levels = levels
    if count is not None:
        m.count = count
    if segments is not None:
        m.segments = segments
    if width is not None:
        m.width = width
    if thickness is not None:
        m.thickness = thickness
    return object_json(obj)


@tool("modifier.remove", True, "scene.write", keeps_structure=True)
def modifier_remove(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    name = req_str(params, "modifier_name")
    m = obj.modifiers.get(name)
    if m is None:
        raise not_found("modifier_name", "modifier", name)
    lock.refuse_modifier(k, obj, name)
    obj.modifiers.remove(m)
    lock.forget_modifier(k, obj, name)
    return object_json(obj)


# ---------------------------------------------------------------- transactions

def tx_misuse(rule, message, **details):
    return Refusal("contract_violation", message, rule=rule, **details)


@tool("transaction.begin", True, "transactions", keeps_structure=True)
def tx_begin(k, params):
    label = opt_str(params, "label")
    if k.state.transaction is not None:
        raise tx_misuse("transaction_open", "transaction %s is open; transactions do not nest"
                        % k.state.transaction[0], transaction=k.state.transaction[0])
    tx_id = "tx-%d" % (k.state.transactions_started + 1)
    # Headless: a snapshot of the whole file. GUI: a mark in Blender's undo history (snapshot.py).
    kept = snapshot.begin(k, tx_id, label)
    k.state.transactions_started += 1
    k.state.transaction = (tx_id, kept)
    k.shared.transaction_record = lock.record_by_name(k.shared)
    return {"transaction": tx_id}


def take_transaction(k, action):
    """Closes this session's transaction: its (id, what it kept), and the modifier record as it
    was at its begin (what a rollback restores)."""
    if k.state.transaction is None:
        raise tx_misuse("no_transaction", "%s without an open transaction" % action)
    tx, record = k.state.transaction, k.shared.transaction_record
    k.state.transaction = None
    k.shared.transaction_record = None
    return tx, record


@tool("transaction.commit", True, "transactions", keeps_structure=True)
def tx_commit(k, params):
    (tx_id, kept), _ = take_transaction(k, "commit")
    snapshot.discard(kept)
    return {"transaction": tx_id, "committed": True}


@tool("transaction.rollback", True, "transactions")
def tx_rollback(k, params):
    force = params.get("force", False)
    if not isinstance(force, bool):
        raise invalid("force", "`force` must be a boolean")
    if k.state.transaction is not None:
        # Refused (human edits, a history too short) with the transaction still open.
        snapshot.roll_back(k, k.state.transaction[1], force)
    (tx_id, kept), record = take_transaction(k, "rollback")
    snapshot.discard(kept)
    lock.restore_record(k.shared, record)
    # Identities change with the reload or undo; names are what the session knows objects by.
    k.state.identity.clear()
    k.state.seen = {o.name: lock.stable_id(o) for o in scene().objects if o.name in k.state.seen}
    return {"transaction": tx_id, "rolled_back": True}


@tool("python.exec", True, "code_exec")
def python_exec(k, params):
    """Agent code, gated again here, under a deadline, atomic: a failed or interrupted run, or
    one that broke the actuator lock (see lock.py), is rolled back to the state before it (a file
    snapshot headless, the last undo step in the GUI; see snapshot.Guard), inside a transaction too.
    Code that provably only reads (codeexec.reads_only) has nothing to take back: it runs
    without the rollback point and the lock's inventories."""
    from . import codeexec

    code = req_str(params, "code")
    deadline_ms = k.call_deadline_ms
    if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, (int, float)) or not 0 < deadline_ms < 1e9:
        deadline_ms = 15000  # a frame's deadline_ms that is no sane number (NaN, infinite, negative)
    deadline_s = max(0.05, deadline_ms / 1000.0 * 0.8)
    try:
        tree = codeexec.parse(code)
        read_only = codeexec.reads_only(tree)
        if read_only:
            return read_only_run(k, tree, deadline_s)
        # What a failed run returns to: a file snapshot headless, the last undo step in the GUI.
        guard = snapshot.Guard(k)
    except SyntaxError as e:
        raise Refusal("invalid_arguments", "SyntaxError: %s (line %s)" % (e.msg, e.lineno), field="code",
                      reason="syntax", line=e.lineno or 0, column=e.offset or 0)
    except codeexec.GateViolation as v:
        raise gate_refusal(v)
    before = lock.inventory(k)
    before_blocks = lock.blocks(k)
    record = lock.record_by_name(k.shared)

    def restore():
        rolled_back = guard.restore()
        k.state.seen.clear()
        lock.restore_record(k.shared, record)
        return rolled_back

    # Agent code may delete, rename or undo anything: start and end with an empty identity cache.
    k.state.identity.clear()
    try:
        stdout, truncated = codeexec.run(code, deadline_s, tree)
    except codeexec.GateViolation as v:
        raise gate_refusal(v)
    except codeexec.Interrupted as interrupted:
        raise interrupted_refusal(interrupted, deadline_s, restore())
    except codeexec.AgentError as failure:
        raise failed_refusal(k, failure.message, restore())
    except Exception as exc:  # noqa: BLE001 - the kernel's own failure around the run: still atomic
        rolled_back = restore()
        raise failed_refusal(k, "".join(traceback.format_exception_only(type(exc), exc)), rolled_back)
    else:
        after = lock.inventory(k)
        after_blocks = lock.blocks(k)
        agent_modifiers = {(o, m) for o, m, session in record["modifiers"] if session == k.state.session_id}
        broken = (lock.violations(before, after) + lock.part_violations(before, after, agent_modifiers)
                  + lock.block_violations(before_blocks, after_blocks))
        if broken:
            rolled_back = restore()
            k.state.log_console("python.exec", "actuator lock: " + lock.describe(broken))
            raise Refusal("contract_violation",
                          "actuator lock: agent code may not delete, rename or unlink data it did not create (%s); "
                          "%s" % (lock.describe(broken), "the call was rolled back" if rolled_back else
                                  "taking the call back failed: its changes are still there"),
                          reason="actuator_lock", violations=broken, rolled_back=rolled_back)
        # No protected object was touched: everything else is the agent's (what it made, and its
        # own objects under the names it gave them). The other data-blocks it made are its too.
        protected = {record["uid"] for record in before.values() if not record["created"]}
        had = {record["uid"] for record in before.values()}
        made = sorted(name for name, record in after.items() if record["uid"] not in had or name not in before)
        for name, record in after.items():
            if record["uid"] not in protected:
                lock.mark_created(k, bpy.data.objects[name], "object")
        had = {(b["kind"], b["name"]) for b in before_blocks}
        for block in after_blocks:
            if (block["kind"], block["name"]) not in had:
                data = getattr(bpy.data, lock.KIND_ATTRIBUTES[block["kind"]])[block["name"]]
                lock.mark_created(k, data, block["kind"])
    finally:
        k.state.identity.clear()
        guard.close()
    return exec_answer(stdout, truncated, made)


def read_only_run(k, tree, deadline_s):
    """python.exec of code that only reads: the same run and answers, nothing to take back."""
    from . import codeexec

    try:
        stdout, truncated = codeexec.run(None, deadline_s, tree)
    except codeexec.GateViolation as v:
        raise gate_refusal(v)
    except codeexec.Interrupted as interrupted:
        raise interrupted_refusal(interrupted, deadline_s, True)
    except codeexec.AgentError as failure:
        raise failed_refusal(k, failure.message, True)
    return exec_answer(stdout, truncated, [])


def gate_refusal(violation):
    return Refusal("contract_violation", "security block: %s" % violation, reason="security_block", field="code",
                   rule=violation.rule, line=violation.line)


def interrupted_refusal(interrupted, deadline_s, rolled_back):
    why = ("python.exec was cancelled and interrupted" if interrupted.cancelled else
           "python.exec ran past its deadline of %.2f s and was interrupted" % deadline_s)
    return Refusal("timeout", why, cancelled=True, rolled_back=rolled_back,
                   partial_effects="none: rolled back" if rolled_back else "kept: they could not be taken back")


def failed_refusal(k, message, rolled_back):
    message = sanitize(message)
    k.state.log_console("python.exec", message)
    return Refusal("execution_failed", message, reason="mutation_failed", rolled_back=rolled_back)


def exec_answer(stdout, truncated, made):
    """What the code printed goes back to the agent and the bridge: escaped (an unpaired
    surrogate would halt the bridge's JSON parser; CappedOutput escapes them as they are
    written) and with absolute paths cut to their last component, as error messages are."""
    return {"stdout": redact_paths(escape_surrogates(stdout)), "truncated": truncated, "created": made}
