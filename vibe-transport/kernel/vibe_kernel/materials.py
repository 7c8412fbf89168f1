"""The tools for materials and modifiers: Principled materials, assigning them to meshes, adding
and removing modifiers within the session's sanity limits."""

import bpy

from . import lock
from .envelope import Refusal, invalid, not_found
from .tools import (DEFAULT_MODIFIER_NAMES, MODIFIER_TYPES, check_name, estimate, estimated_polygons, object_json,
                    opt_num, opt_str, opt_uint, opt_vec, principled_json, principled_node, req_str, resolve, tool)


@tool("material.ensure_principled", keeps_structure=True)
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


@tool("mesh.assign_material", keeps_structure=True)
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


@tool("modifier.add", keeps_structure=True)
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


@tool("modifier.remove", keeps_structure=True)
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
