"""The look pack: camera settings, aiming an object, light settings and the world background
(camera.set, object.aim, light.set, world.set), with the same checks in the same order as
MockBlender's look.rs, and the answer shapes of camera, light and world data.

These are property edits of what exists, which the actuator lock allows on the human's objects
(as object.set_transform). world.set makes a world only when the scene has none; it is not
recorded as the agent's (the lock removes no worlds), and the human's world may be edited like
the inputs of the human's material."""

import math

import bpy

from .envelope import Refusal, invalid
from .tools import floats, opt_num, opt_str, opt_vec, req_str, resolve, scene, tool

# Below this share of its length a direction counts as straight up or down (the horizontal part
# that would orient the object's up axis is noise). MockBlender's AIM_VERTICAL_EPSILON.
AIM_VERTICAL_EPSILON = 1e-9
# Blender's spot cone limits: 1 and 180 degrees, in radians.
SPOT_SIZE_RANGE = (0.017453292519943295, math.pi)
LIGHT_TYPES = ("POINT", "SUN", "SPOT", "AREA")
# A new light's radius on every version (3.4 makes 0.25, 4.x and later 0).
NEW_LIGHT_RADIUS = 0.25
# What a world made for a scene without one starts at.
NEW_WORLD_COLOR = (0.05, 0.05, 0.05)


# ---------------------------------------------------------------- answer shapes

def camera_data_json(cam):
    return {"type": "CAMERA", "camera_type": cam.type, "lens": float(cam.lens),
            "sensor_width": float(cam.sensor_width), "clip_start": float(cam.clip_start),
            "clip_end": float(cam.clip_end), "ortho_scale": float(cam.ortho_scale)}


def light_size(light):
    """The one size setting of the light's type: a point or spot light's radius, an area light's
    side, a sun's angle in radians."""
    if light.type == "AREA":
        return float(light.size)
    if light.type == "SUN":
        return float(light.angle)
    return float(light.shadow_soft_size)


def light_data_json(light):
    spot = light.type == "SPOT"
    return {"type": "LIGHT", "light_type": light.type, "energy": float(light.energy), "color": floats(light.color),
            "size": light_size(light), "spot_size": float(light.spot_size) if spot else None,
            "spot_blend": float(light.spot_blend) if spot else None}


def background(world):
    """The world's Background node, if its node tree has one."""
    if world.node_tree is None:
        return None
    return next((n for n in world.node_tree.nodes if n.type == "BACKGROUND"), None)


def world_json(world):
    node = background(world)
    if node is None:
        return {"name": world.name, "color": floats(world.color), "strength": 1.0}
    return {"name": world.name, "color": floats(node.inputs["Color"].default_value[:3]),
            "strength": float(node.inputs["Strength"].default_value)}


def new_light(name, light_type):
    """A light as object.create makes it: the same radius on every version."""
    light = bpy.data.lights.new(name, light_type)
    light.shadow_soft_size = NEW_LIGHT_RADIUS
    return light


# ---------------------------------------------------------------- arguments

def bounded(params, field, low, high, what):
    value = opt_num(params, field)
    if value is not None and not low <= value <= high:
        raise invalid(field, "`%s` must be %s" % (field, what))
    return value


def rgb(params, field):
    colour = opt_vec(params, field, 3)
    if colour is not None and any(not 0.0 <= c <= 1.0 for c in colour):
        raise invalid(field, "`%s` must be 3 numbers 0..1" % field)
    return colour


def opt_bool(params, field):
    value = params.get(field)
    if value is not None and not isinstance(value, bool):
        raise invalid(field, "`%s` must be a boolean" % field)
    return value


def not_a(obj, wanted):
    return invalid("name", "%r is a %s object, not %s" % (obj.name, obj.type, wanted))


# ---------------------------------------------------------------- camera.set

@tool("camera.set", keeps_structure=True)
def camera_set(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    if obj.type != "CAMERA":
        raise not_a(obj, "a camera")
    cam = obj.data
    make_active = opt_bool(params, "make_active")
    lens = bounded(params, "lens", 1.0, 5000.0, "1-5000 mm")
    sensor_width = bounded(params, "sensor_width", 1.0, 1000.0, "1-1000 mm")
    clip_start = bounded(params, "clip_start", 1e-6, 1e6, "1e-6 to 1e6")
    clip_end = bounded(params, "clip_end", 1e-6, 1e6, "1e-6 to 1e6")
    kind = opt_str(params, "type")
    if kind is not None and kind not in ("PERSP", "ORTHO"):
        raise invalid("type", "`type` must be PERSP or ORTHO")
    ortho_scale = opt_num(params, "ortho_scale")
    if ortho_scale is not None and not 0.0 < ortho_scale <= 1e6:
        raise invalid("ortho_scale", "`ortho_scale` must be in (0, 1e6]")
    start = float(cam.clip_start) if clip_start is None else clip_start
    end = float(cam.clip_end) if clip_end is None else clip_end
    if start >= end:
        raise invalid("clip_start" if clip_start is not None else "clip_end",
                      "clip_start (%r) must be below clip_end (%r)" % (start, end))
    for attribute, value in (("lens", lens), ("sensor_width", sensor_width), ("clip_start", clip_start),
                             ("clip_end", clip_end), ("ortho_scale", ortho_scale), ("type", kind)):
        if value is not None:
            setattr(cam, attribute, value)
    sc = scene()
    if make_active:
        sc.camera = obj
    return {"name": obj.name, "active": sc.camera == obj, "lens": float(cam.lens),
            "sensor_width": float(cam.sensor_width), "clip_start": float(cam.clip_start),
            "clip_end": float(cam.clip_end), "type": cam.type, "ortho_scale": float(cam.ortho_scale)}


# ---------------------------------------------------------------- object.aim

def aim_euler(direction):
    """The XYZ Euler rotation (radians) that turns an object's -Z axis along `direction` with its
    +Y axis up (towards world +Z), as `to_track_quat('-Z', 'Y')` does, read from the rotation's
    columns (the object's axes) as Blender reads a matrix into XYZ Euler angles (of its two
    solutions, the one with the smaller angles). Straight down is no rotation, straight up a half
    turn about Y. None for a zero direction. The same arithmetic as MockBlender's `aim_euler`, so
    both give the same angles to the last bit."""
    length = math.sqrt(direction[0] * direction[0] + direction[1] * direction[1] + direction[2] * direction[2])
    if not (math.isfinite(length) and length > 0.0):
        return None
    n = [c / length for c in direction]
    if math.sqrt(n[0] * n[0] + n[1] * n[1]) <= AIM_VERTICAL_EPSILON:
        return [0.0, 0.0, 0.0] if n[2] < 0.0 else [0.0, math.pi, 0.0]
    z = [-c + 0.0 for c in n]  # adding zero turns -0.0 into 0.0: no sign of zero picks -pi
    side = [-z[1], z[0], 0.0]
    side_length = math.sqrt(side[0] * side[0] + side[1] * side[1] + side[2] * side[2])
    x = [c / side_length for c in side]
    y = [z[1] * x[2] - z[2] * x[1], z[2] * x[0] - z[0] * x[2], z[0] * x[1] - z[1] * x[0]]
    cy = math.sqrt(x[0] * x[0] + x[1] * x[1])
    first = [math.atan2(y[2], z[2]), math.atan2(-x[2], cy), math.atan2(x[1], x[0])]
    second = [math.atan2(-y[2], -z[2]), math.atan2(-x[2], -cy), math.atan2(-x[1], -x[0])]
    best = second if sum(map(abs, first)) > sum(map(abs, second)) else first
    return [a + 0.0 for a in best]


def has_parent(field, obj):
    return invalid(field, "%r has a parent; object.aim works with objects without one (their location is their "
                          "place in the world)" % obj.name)


@tool("object.aim", keeps_structure=True)
def object_aim(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    given_point, given_object = params.get("target") is not None, params.get("target_object") is not None
    if given_point and not given_object:
        field = "target"
        target = opt_vec(params, "target", 3)
        if any(abs(c) > 1e6 for c in target):
            raise invalid("target", "`target` must be 3 numbers within ±1e6")
    elif given_object and not given_point:
        field = "target_object"
        other = resolve(k, "target_object", req_str(params, "target_object"))
        if other.parent is not None:
            raise has_parent("target_object", other)
        target = list(other.location)
    else:
        raise invalid("target", "give exactly one of `target` and `target_object`")
    if obj.parent is not None:
        raise has_parent("name", obj)
    direction = [target[i] - obj.location[i] for i in range(3)]
    euler = aim_euler(direction)
    if euler is None or math.sqrt(sum(c * c for c in direction)) <= 1e-6:
        raise invalid(field, "%r cannot be aimed at its own location" % obj.name)
    if obj.rotation_mode != "XYZ":
        obj.rotation_mode = "XYZ"
    obj.rotation_euler = euler
    return {"name": obj.name, "rotation_euler": floats(obj.rotation_euler)}


# ---------------------------------------------------------------- light.set

@tool("light.set", keeps_structure=True)
def light_set(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    if obj.type != "LIGHT":
        raise not_a(obj, "a light")
    light_type = opt_str(params, "light_type")
    if light_type is not None and light_type not in LIGHT_TYPES:
        raise invalid("light_type", "`light_type` must be POINT, SUN, SPOT or AREA")
    energy = bounded(params, "energy", 0.0, 1e6, "0-1e6 W")
    color = rgb(params, "color")
    size = bounded(params, "size", 0.0, 1e4, "0-1e4")
    spot_size = bounded(params, "spot_size", SPOT_SIZE_RANGE[0], SPOT_SIZE_RANGE[1], "1-180 degrees in radians")
    spot_blend = bounded(params, "spot_blend", 0.0, 1.0, "0-1")
    kind = light_type or obj.data.type
    for field, given in (("spot_size", spot_size), ("spot_blend", spot_blend)):
        if given is not None and kind != "SPOT":
            raise invalid(field, "`%s` applies to SPOT lights; %r is a %s light" % (field, obj.name, kind))
    if kind == "SUN" and size is not None and size > math.pi:
        raise invalid("size", "a sun's `size` is its angle in radians, at most pi")
    if obj.data.type != kind:
        obj.data.type = kind
    light = obj.data  # fetched again: the type decides its class (SpotLight, AreaLight, ...)
    if energy is not None:
        light.energy = energy
    if color is not None:
        light.color = color
    if size is not None:
        setattr(light, {"AREA": "size", "SUN": "angle"}.get(kind, "shadow_soft_size"), size)
    if spot_size is not None:
        light.spot_size = spot_size
    if spot_blend is not None:
        light.spot_blend = spot_blend
    answer = light_data_json(light)
    del answer["type"]
    answer["name"] = obj.name
    return answer


# ---------------------------------------------------------------- world.set

def ensure_background(world):
    """The world's Background node, wired to its output: nodes switched on (Blender before 5.0
    has worlds without them), the node made when missing."""
    if world.node_tree is None or (bpy.app.version < (5, 0, 0) and not world.use_nodes):
        world.use_nodes = True
    node = background(world)
    if node is None:
        tree = world.node_tree
        output = next((n for n in tree.nodes if n.type == "OUTPUT_WORLD"), None)
        if output is not None and output.inputs["Surface"].links:
            # A person's own world shader (a sky texture, an emission): wiring a Background in
            # its place would unwire their setup.
            source = output.inputs["Surface"].links[0].from_node
            raise Refusal("contract_violation", 'security block: world "%s" is lit by node "%s", which the agent did '
                          "not make and world.set would unwire; change that node's inputs with the person, or "
                          "leave the world as it is" % (world.name, source.name),
                          reason="actuator_lock", rule="unlink", kind="node", name=source.name)
        node = tree.nodes.new("ShaderNodeBackground")
        if output is None:
            output = tree.nodes.new("ShaderNodeOutputWorld")
        tree.links.new(node.outputs["Background"], output.inputs["Surface"])
    return node


def paint(world, node, color, strength):
    if color is not None:
        node.inputs["Color"].default_value = tuple(color) + (1.0,)
        world.color = color  # the viewport's world colour follows
    if strength is not None:
        node.inputs["Strength"].default_value = strength


@tool("world.set", keeps_structure=True)
def world_set(k, params):
    color = rgb(params, "color")
    strength = bounded(params, "strength", 0.0, 1e6, "0-1e6")
    sc = scene()
    created = sc.world is None
    if created:
        sc.world = bpy.data.worlds.new("World")
    world = sc.world
    node = ensure_background(world)
    if created:
        paint(world, node, NEW_WORLD_COLOR, 1.0)
    paint(world, node, color, strength)
    answer = world_json(world)
    return {"world": answer["name"], "created": created, "color": answer["color"], "strength": answer["strength"]}
