"""blender-core v1 against real bpy: one function per tool, data-first (no UI context, no
selection), with the same semantics as MockBlender. Every tool validates everything before it
changes anything, so a refused call leaves the scene as it was.

This module holds the tool table (`tool`, `TOOLS`, built from the registry shipped beside the
kernel in registry.json: what each tool changes and needs), the argument checks and the scene access
and answer shapes the tools share. The tools themselves are by family: reads.py, objects.py
(objects and collections), materials.py (materials and modifiers), transactions.py,
agent_code.py (python.exec) and files.py (file.save, file.open, render.still); the actuator
lock's rules are in lock.py."""

import array
import json
import math
import os

import bpy

from . import lock
from .index import SCENE_INDEX
from .envelope import Refusal, invalid, not_found

MASTER = "Scene Collection"
MAX_NAME_BYTES = 63
MODIFIER_TYPES = ("SUBSURF", "BEVEL", "ARRAY", "MIRROR", "SOLIDIFY")
DEFAULT_MODIFIER_NAMES = {"SUBSURF": "Subdivision", "BEVEL": "Bevel", "ARRAY": "Array",
                          "MIRROR": "Mirror", "SOLIDIFY": "Solidify"}
TOOLS = {}
STRUCTURAL = set()  # mutating tools after which the scene index is rebuilt


def load_registry():
    """The registry's tool table: name -> {"mutates": bool, "capabilities": [...], "quick": bool}.
    The bridge writes registry.json from its registry (a Rust test keeps the shipped file equal to it)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "registry.json")) as f:
        return json.load(f)["tools"]


REGISTRY = load_registry()


# Tools that may run long: not of the quick time class, or agent code (which runs as long as
# its code does). Looked up once per frame, so a set.
MAY_RUN_LONG = frozenset(name for name, spec in REGISTRY.items()
                         if not spec.get("quick", True) or "code_exec" in spec["capabilities"])


def runs_briefly(name):
    """Whether a call of `name` is over in moments (not in MAY_RUN_LONG). Unknown names, and
    names that are not even strings, are refused at once."""
    return not isinstance(name, str) or name not in MAY_RUN_LONG


def tool(name, keeps_structure=False):
    """Registers `fn` as tool `name`, which changes the scene and needs the capabilities the
    registry says. A name the registry does not have stops the kernel at import: the kernel
    implements the registry, nothing else. `keeps_structure`: a mutating tool that never
    creates, deletes, renames or relinks objects or collections, so the scene index (index.py)
    stays valid over it."""
    spec = REGISTRY.get(name)
    if spec is None:
        raise LookupError("tool %s is not in the shipped registry" % name)

    def register(fn):
        mutates = bool(spec["mutates"])
        TOOLS[name] = (fn, mutates, frozenset(spec["capabilities"]))
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


def target_collection(params):
    """The collection `params` names in "collection" (it must exist), else the default one."""
    name = opt_str(params, "collection")
    if name is None:
        return default_collection()
    check_name("collection", name)
    if not has_collection(name):
        raise not_found("collection", "collection", name)
    return collection_by_name(name)


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


# A mesh's extent is rounded to this many decimals: float noise (a UV sphere of radius 1 is
# 1.9999987 across) and platform sin/cos differences stay below it, so every Blender build and
# MockBlender report the same numbers.
EXTENT_DECIMALS = 4


def mesh_extent(me):
    """The size [dx, dy, dz] of the box around the mesh's own vertices (local space: not the
    object's scale, not modifiers), so that a mesh's size is part of the scene's content."""
    count = len(me.vertices)
    if count == 0:
        return [0.0, 0.0, 0.0]
    # One copy of the coordinates and min/max in C: linear, no Python loop over vertices.
    co = array.array("f", bytes(12 * count))
    me.vertices.foreach_get("co", co)
    extent = []
    for axis in range(3):
        values = co[axis::3]
        extent.append(round(max(values) - min(values), EXTENT_DECIMALS))
    return extent


def data_json(obj):
    if obj.type == "MESH":
        me = obj.data
        return {"type": "MESH", "vertices": len(me.vertices), "edges": len(me.edges),
                "polygons": len(me.polygons), "extent": mesh_extent(me),
                "material_slots": len(obj.material_slots)}
    if obj.type == "LIGHT":
        return look.light_data_json(obj.data)
    if obj.type == "CAMERA":
        return look.camera_data_json(obj.data)
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


# Principled BSDF sockets renamed in Blender 4.0: (4.0+ name, 3.x name).
EMISSION_COLOR = ("Emission Color", "Emission")
TRANSMISSION = ("Transmission Weight", "Transmission")
NO_EMISSION = [1.0, 1.0, 1.0, 1.0]  # what Blender 4+ writes for "no emission" (strength 0)


def socket(node, names):
    """The node's input socket under its name in this Blender (`names`: newest first)."""
    for name in names:
        if name in node.inputs:
            return node.inputs[name]
    raise KeyError(names[0])


def emission_json(node):
    """Emission colour and strength. A black emission colour emits nothing at any strength; it
    is reported as Blender 4+ writes no emission (white at strength 0), so Blender 3.x's default
    (black at strength 1) and Blender 4+'s read the same."""
    color = floats(socket(node, EMISSION_COLOR).default_value)
    strength = float(node.inputs["Emission Strength"].default_value)
    if color[:3] == [0.0, 0.0, 0.0]:
        return NO_EMISSION, 0.0
    return color, strength


def texture_node(node):
    """The image texture node feeding the Principled BSDF's base colour, if any."""
    links = node.inputs["Base Color"].links
    if links and links[0].from_node.type == "TEX_IMAGE":
        return links[0].from_node
    return None


def texture_json(node, sandbox):
    """`{image, path}` of the base colour's image texture: the image data-block's name and its
    file's path relative to the session's sandbox (null for a file elsewhere, whose path is the
    person's business, or an image without a file)."""
    tex = texture_node(node)
    if tex is None or tex.image is None:
        return None
    path = None
    if sandbox and tex.image.filepath:
        root = os.path.realpath(sandbox)
        full = os.path.realpath(bpy.path.abspath(tex.image.filepath))
        if full != root and full.startswith(root + os.sep):
            path = os.path.relpath(full, root).replace(os.sep, "/")
    return {"image": tex.image.name, "path": path}


def principled_json(node, sandbox=None):
    # Non-finite values here (and anywhere else in an answer) become null in envelope.ok, which
    # lists their paths under `non_finite`.
    emission_color, emission_strength = emission_json(node)
    return {"base_color": floats(node.inputs["Base Color"].default_value),
            "metallic": float(node.inputs["Metallic"].default_value),
            "roughness": float(node.inputs["Roughness"].default_value),
            "emission_color": emission_color, "emission_strength": emission_strength,
            "alpha": float(node.inputs["Alpha"].default_value),
            "transmission": float(socket(node, TRANSMISSION).default_value),
            "texture": texture_json(node, sandbox)}


def collection_parent(coll):
    return SCENE_INDEX.parent_of(coll.name)


def collections_json():
    out = []
    for c in sorted(collections(), key=lambda c: c.name):
        out.append({"name": c.name, "parent": collection_parent(c),
                    "children": sorted(ch.name for ch in c.children),
                    "objects": sorted(o.name for o in c.objects)})
    return out


def materials_json(sandbox=None):
    out = []
    for m in surface_materials():
        node = principled_node(m)
        out.append({"name": m.name, "principled": principled_json(node, sandbox) if node else None,
                    "users": m.users})
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


# The tools, by family (each module registers its own with `tool`).
from . import agent_code, animate, exchange, files, look, materials, objects, reads, transactions  # noqa: E402,F401


def check_complete():
    """Every tool of the shipped registry has its function (checked when a kernel starts, once
    every family module is imported)."""
    missing = sorted(set(REGISTRY) - set(TOOLS))
    if missing:
        raise LookupError("the kernel does not implement the registry's %s" % missing)
