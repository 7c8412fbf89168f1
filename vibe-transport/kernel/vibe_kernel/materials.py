"""The tools for materials and modifiers: Principled materials (base colour, metallic, roughness,
emission, alpha, transmission, an image texture from the sandbox on the base colour), assigning
them to meshes, adding and removing modifiers within the session's sanity limits."""

import bpy

from . import files, lock
from .envelope import Refusal, invalid, not_found
from .tools import (DEFAULT_MODIFIER_NAMES, EMISSION_COLOR, MODIFIER_TYPES, NO_EMISSION, TRANSMISSION, check_name,
                    estimate, estimated_polygons, object_json, opt_num, opt_str, opt_uint, opt_vec, principled_json,
                    principled_node, req_str, resolve, socket, texture_node, tool)


UNIT_INPUTS = ("metallic", "roughness", "alpha", "transmission")


@tool("material.ensure_principled", keeps_structure=True)
def ensure_principled(k, params):
    name = req_str(params, "name")
    check_name("name", name)
    base_color = opt_vec(params, "base_color", 4)
    emission_color = opt_vec(params, "emission_color", 4)
    units = {field: opt_num(params, field) for field in UNIT_INPUTS}
    emission_strength = opt_num(params, "emission_strength")
    for field, value in units.items():
        if value is not None and not 0.0 <= value <= 1.0:
            raise invalid(field, "`%s` must be in [0, 1]" % field)
    for field, color in (("base_color", base_color), ("emission_color", emission_color)):
        if color is not None and any(not 0.0 <= v <= 1.0 for v in color):
            raise invalid(field, "`%s` components must be in [0, 1]" % field)
    if emission_strength is not None and not 0.0 <= emission_strength <= 1000.0:
        raise invalid("emission_strength", "`emission_strength` must be in [0, 1000]")
    texture = texture_argument(k, params)
    mat = bpy.data.materials.get(name)
    created = mat is None
    if "texture" in params and not created and not lock.is_agents(k, mat):
        try:
            check_base_colour_wiring(mat)
        except Refusal:
            if texture is not None and texture.users == 0:
                bpy.data.images.remove(texture)
            raise
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
    if created:
        # Blender 3.x starts a material's emission black at strength 1, Blender 4+ white at 0.
        socket(node, EMISSION_COLOR).default_value = NO_EMISSION
        node.inputs["Emission Strength"].default_value = 0.0
    sockets = {"base_color": node.inputs["Base Color"], "metallic": node.inputs["Metallic"],
               "roughness": node.inputs["Roughness"], "alpha": node.inputs["Alpha"],
               "transmission": socket(node, TRANSMISSION), "emission_color": socket(node, EMISSION_COLOR),
               "emission_strength": node.inputs["Emission Strength"]}
    values = dict(units, base_color=base_color, emission_color=emission_color, emission_strength=emission_strength)
    for field, value in values.items():
        if value is not None:
            sockets[field].default_value = value
    if "texture" in params:
        set_texture(mat, node, texture)
    out = principled_json(node, k.state.sandbox)
    out["name"] = mat.name
    out["created"] = created
    return out


def texture_argument(k, params):
    """The image a material's base colour is to show: the sandbox file `texture` names, loaded
    (an image of that file already loaded is reused), or None when `texture` is null or absent.
    A file Blender cannot read as an image is refused before anything changes."""
    relative = params.get("texture")
    if relative is None:
        return None
    if not isinstance(relative, str) or not relative.lower().endswith((".png", ".jpg", ".jpeg")):
        raise invalid("texture", "`texture` must be the path of a .png or .jpg file inside the sandbox")
    path = files.sandbox_path(k, relative, field="texture", reading=True)
    try:
        image = bpy.data.images.load(path, check_existing=True)
    except RuntimeError:
        raise invalid("texture", "%r is not an image Blender can read" % relative) from None
    if image.size[0] == 0 or image.size[1] == 0:
        if image.users == 0:
            bpy.data.images.remove(image)
        raise invalid("texture", "%r is not an image Blender can read" % relative)
    return image


# The mark on the image texture node `texture` makes: the node it may later change or take off.
TEXTURE_MARK = "vibe_texture"


def check_base_colour_wiring(mat):
    """On a person's material, `texture` changes only what it made: a base colour wired to any
    other node (the person's image, their node setup) would be unwired or its image replaced,
    and that image lost with its last user. Refused before anything changes."""
    node = principled_node(mat) if mat.node_tree is not None else None
    links = node.inputs["Base Color"].links if node is not None else ()
    if not links or links[0].from_node.get(TEXTURE_MARK):
        return
    source = links[0].from_node
    raise Refusal("contract_violation", 'security block: the base colour of material "%s" comes from node "%s", '
                  "which the agent did not make; `texture` would unwire it (set the other inputs without "
                  "`texture`, or make a material of the agent's own)" % (mat.name, source.name),
                  reason="actuator_lock", rule="unlink", kind="node", name=source.name, field="texture")


def set_texture(mat, node, image):
    """Puts `image` on the base colour through one image texture node (made once, marked, reused),
    or, with None, takes the texture node off."""
    tex = texture_node(node)
    if image is None:
        if tex is not None:
            mat.node_tree.nodes.remove(tex)
        return
    if tex is None:
        tex = mat.node_tree.nodes.new("ShaderNodeTexImage")
        tex[TEXTURE_MARK] = True
        tex.location = (node.location[0] - 300.0, node.location[1])
        mat.node_tree.links.new(tex.outputs["Color"], node.inputs["Base Color"])
    tex.image = image


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
