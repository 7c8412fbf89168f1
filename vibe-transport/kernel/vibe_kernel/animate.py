"""The animate pack: keyframes on object transforms and on the look pack's camera and light
settings (keyframe.set), the scene's timeline (timeline.set) and an object's animation read back
and evaluated (animation.read).

Blender keeps keys in F-curves of an action, one F-curve per component (location x, y, z). A
transform's keys are in the object's action; a camera's `lens` and a light's `energy` and
`color` live on the object's data (the camera or light data-block), whose own animation data
holds them: an action of its own on 3.4 (`CameraAction`, `LightAction`), a slot of its own from
4.4 (in the object's action when that has one: Blender keys it so). Their keys are read back
under the same property names as the object's. Where an action keeps its F-curves depends on
the version: Blender 4.4 and later have slotted actions (layers, strips and one channelbag per
slot; 5.0 dropped the legacy `action.fcurves`), 3.4 has `action.fcurves`. `fcurves` hides the
difference, for an object and a data-block alike.

A key of this pack holds all components at one frame: three for a vector (a list), one for a
scalar such as `lens` (a number). Keys are written with explicit interpolation and auto-clamped
handles on F-curves with Blender's default smoothing (continuous acceleration), so a Bezier
curve is the same whatever the person's preferences and on every version. After a change the
scene is posed at its current frame (`frame_set`), as Blender does on a frame change: keyed
properties take their animated values, a camera's and a light's data included. Data shared by
several objects shares its keys too, as in Blender.

The property table (`PROPERTIES`) is the only list of what can be keyed (MockBlender has its
twin in mock/animation.rs), with each property's components, owner and bounds."""

import array
from collections import namedtuple

import bpy

from . import lock
from .envelope import Refusal, invalid
from .tools import finite_float, req_str, resolve, scene, tool

MAX_FRAME = 1048574  # Blender's MAXFRAME: keys and the current frame within +-MAXFRAME
MAX_KEYS = 256  # keys or frames in one keyframe.set call
MAX_VALUE = 1.0e6
MAX_FPS = 240
INTERPOLATIONS = ("CONSTANT", "LINEAR", "BEZIER")

# One keyable property: its number of components (1: a single number), the type of object whose
# data holds it (None: the object itself), the bounds of every component, and the bounds in words.
Keyable = namedtuple("Keyable", "size data_of low high bounds")

# What can be keyed: property (a data path of the object or of its data) -> Keyable.
PROPERTIES = {
    "location": Keyable(3, None, -MAX_VALUE, MAX_VALUE, "within +-1e6"),
    "rotation_euler": Keyable(3, None, -MAX_VALUE, MAX_VALUE, "within +-1e6"),
    "scale": Keyable(3, None, -MAX_VALUE, MAX_VALUE, "within +-1e6"),
    "lens": Keyable(1, "CAMERA", 1.0, 5000.0, "1 to 5000 (mm)"),
    "energy": Keyable(1, "LIGHT", 0.0, MAX_VALUE, "0 to 1e6 (W)"),
    "color": Keyable(3, "LIGHT", 0.0, 1.0, "0 to 1 per channel"),
}


# ---------------------------------------------------------------- F-curves on every version

def fcurves(block):
    """The F-curves of the action of `block`, an object or a camera or light data-block (an
    empty list without one): the action slot's channelbag on Blender 4.4 and later,
    `action.fcurves` before."""
    anim = block.animation_data
    if anim is None or anim.action is None:
        return []
    action = anim.action
    if not hasattr(action, "layers"):
        return action.fcurves
    bag = channelbag(anim)
    return bag.fcurves if bag is not None else []


def channelbag(anim):
    """The channelbag of the action slot of `anim` (Blender 4.4+), or None."""
    slot = getattr(anim, "action_slot", None)
    if slot is None:
        return None
    for layer in anim.action.layers:
        for strip in layer.strips:
            bag = strip.channelbag(slot)
            if bag is not None:
                return bag
    return None


def applies(obj, prop):
    """Whether `prop` can be keyed on `obj`: transforms on every object, data properties on
    objects of their type."""
    data_of = PROPERTIES[prop].data_of
    return data_of is None or (obj.type == data_of and obj.data is not None)


def owner(obj, prop):
    """Where `prop` lives: the object, or its data (a camera's lens, a light's energy)."""
    return obj if PROPERTIES[prop].data_of is None else obj.data


def current(obj, prop):
    """The property's value now, as a list of its components."""
    value = getattr(owner(obj, prop), prop)
    return [float(value)] if PROPERTIES[prop].size == 1 else [float(v) for v in value]


def shaped(prop, components):
    """A value as the tools answer it: a number for a scalar, a list for a vector."""
    return components[0] if PROPERTIES[prop].size == 1 else components


def component_curves(obj, prop):
    """The property's F-curves by component index ({} when it is not animated)."""
    return {fc.array_index: fc for fc in fcurves(owner(obj, prop))
            if fc.data_path == prop and len(fc.keyframe_points)}


def point_at(fc, frame):
    for point in fc.keyframe_points:
        if round(point.co[0]) == frame:
            return point
    return None


def keys_of(obj, prop):
    """The property's keys sorted by frame: [{frame, value, interpolation}]. A key holds every
    component: a component without a key at that frame (a person keyed only x) reads its F-curve
    there, or the property's value when it has none. Keys at subframes read at the nearest frame."""
    curves = component_curves(obj, prop)
    frames = sorted({round(p.co[0]) for fc in curves.values() for p in fc.keyframe_points})
    now = current(obj, prop) if frames else []
    keys = []
    for frame in frames:
        value, interpolation = [], None
        for i in range(PROPERTIES[prop].size):
            fc = curves.get(i)
            point = point_at(fc, frame) if fc is not None else None
            if point is not None:
                value.append(float(point.co[1]))
                interpolation = interpolation or point.interpolation
            elif fc is not None:
                value.append(float(fc.evaluate(frame)))
            else:
                value.append(now[i])
        keys.append({"frame": frame, "value": shaped(prop, value), "interpolation": interpolation})
    return keys


def evaluated_at(obj, prop, frame):
    """The property's value at `frame` as its F-curves evaluate (a component without one: its
    value now)."""
    curves = component_curves(obj, prop)
    now = current(obj, prop)
    return shaped(prop, [float(curves[i].evaluate(frame)) if i in curves else now[i]
                         for i in range(PROPERTIES[prop].size)])


def animation_of(obj):
    """{property: keys} for every keyed property of the table that applies to the object,
    the object's own and its data's."""
    out = {}
    for prop in PROPERTIES:
        if not applies(obj, prop):
            continue
        keys = keys_of(obj, prop)
        if keys:
            out[prop] = keys
    return out


def with_summary(out, obj):
    """A snapshot's object with its animation summary, {property: number of keys}, under
    `animation` when it has keys (an object without keys is as before)."""
    counts = {prop: len(keys) for prop, keys in animation_of(obj).items()}
    if counts:
        out["animation"] = counts
    return out


def animation_signature(obj):
    """Every key of the object's F-curves and of its data's, for the GUI's check for the person's
    changes (snapshot.fingerprint): per F-curve its owner, data path and index, and each key's
    frame, value and interpolation, read in bulk (`foreach_get`) so that long animations stay
    cheap. Any property's keys, not only this pack's. None without keys."""
    curves = []
    for owner_name, block in (("object", obj), ("data", obj.data)):
        if block is None or getattr(block, "animation_data", None) is None:
            continue
        for fc in fcurves(block):
            points = fc.keyframe_points
            count = len(points)
            coordinates = array.array("f", bytes(8 * count))  # frame and value of every key
            points.foreach_get("co", coordinates)
            interpolations = array.array("i", bytes(4 * count))
            points.foreach_get("interpolation", interpolations)
            curves.append((owner_name, fc.data_path, fc.array_index, coordinates.tobytes(),
                           interpolations.tobytes()))
    return tuple(sorted(curves)) or None


def timeline_json():
    s = scene()
    return {"frame_start": s.frame_start, "frame_end": s.frame_end, "fps": s.render.fps,
            "frame_current": s.frame_current}


def pose():
    """Every animated object posed at the current frame, as Blender does on a frame change."""
    s = scene()
    s.frame_set(s.frame_current)


# ---------------------------------------------------------------- arguments

def whole(field, value, low, high):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(field, "`%s` must be a whole number %d to %d" % (field, low, high))
    return value


def property_arg(params, obj):
    prop = req_str(params, "property")
    if prop not in PROPERTIES:
        raise invalid("property", "`property` must be one of %s" % ", ".join(PROPERTIES))
    if not applies(obj, prop):
        raise invalid("property", "`%s` applies to %s objects; %r is a %s object"
                      % (prop, PROPERTIES[prop].data_of, obj.name, obj.type))
    return prop


def frames_arg(params):
    frames = params.get("frames")
    if not isinstance(frames, list) or not 1 <= len(frames) <= MAX_KEYS:
        raise invalid("frames", "`frames` must be a list of 1 to %d entries" % MAX_KEYS)
    return frames


def key_arg(entry, prop):
    """One key {frame, value, interpolation} of `prop` checked: a number for a scalar, a list of
    its components for a vector, every component within the property's bounds."""
    spec = PROPERTIES[prop]
    if not isinstance(entry, dict) or set(entry) - {"frame", "value", "interpolation"}:
        raise invalid("frames", "each key must be {frame, value, interpolation}")
    frame = whole("frames", entry.get("frame"), -MAX_FRAME, MAX_FRAME)
    value = entry.get("value")
    shape = "a number" if spec.size == 1 else "%d numbers" % spec.size
    if spec.size == 1:
        value = [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if not isinstance(value, list) or len(value) != spec.size:
        raise invalid("frames", "a key's `value` for %s must be %s" % (prop, shape))
    value = [finite_float("frames", v, shape) for v in value]
    if any(not spec.low <= v <= spec.high for v in value):
        raise invalid("frames", "a key's `value` for %s must be %s" % (prop, spec.bounds))
    interpolation = entry.get("interpolation", "BEZIER")
    if interpolation not in INTERPOLATIONS:
        raise invalid("frames", "`interpolation` must be one of %s" % ", ".join(INTERPOLATIONS))
    return frame, value, interpolation


def no_repeats(frames):
    seen = set()
    for frame in frames:
        if frame in seen:
            raise invalid("frames", "frame %d is given twice" % frame)
        seen.add(frame)


# ---------------------------------------------------------------- the tools

@tool("keyframe.set", keeps_structure=True)
def keyframe_set(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    prop = property_arg(params, obj)
    delete = params.get("delete", False)
    if not isinstance(delete, bool):
        raise invalid("delete", "`delete` must be a boolean")
    entries = frames_arg(params)
    if delete:
        frames = [whole("frames", f, -MAX_FRAME, MAX_FRAME) for f in entries]
        no_repeats(frames)
        delete_keys(k, obj, prop, frames)
    else:
        keys = [key_arg(entry, prop) for entry in entries]
        no_repeats([frame for frame, _, _ in keys])
        insert_keys(k, obj, prop, keys)
    pose()
    return {"name": obj.name, "property": prop, "keys": keys_of(obj, prop)}


def delete_keys(k, obj, prop, frames):
    """Deletes the keys at `frames` after checking each has one and that they are the agent's (in
    an action the agent made: a person's keys are their animation, which the actuator lock keeps,
    as it keeps their modifiers); an F-curve left empty goes."""
    have = {key["frame"] for key in keys_of(obj, prop)}
    for frame in frames:
        if frame not in have:
            raise Refusal("not_found", "%s has no %s key at frame %d" % (obj.name, prop, frame),
                          field="frames", name=obj.name, frame=frame)
    action = owner(obj, prop).animation_data.action
    if not lock.is_agents(k, action):
        raise Refusal("contract_violation", 'security block: the %s keys of "%s" are in action "%s", which the agent '
                      "did not make in this session; deleting them would take away the person's animation "
                      "(a key may be set again at that frame instead)" % (prop, obj.name, action.name),
                      reason="actuator_lock", rule="remove", kind="action", name=action.name, field="frames")
    curves = fcurves(owner(obj, prop))
    for fc in list(component_curves(obj, prop).values()):
        for frame in frames:
            point = point_at(fc, frame)
            if point is not None:
                fc.keyframe_points.remove(point)
        if len(fc.keyframe_points) == 0:
            curves.remove(fc)
        else:
            fc.update()


def insert_keys(k, obj, prop, keys):
    """Writes the keys; an action Blender made for them is recorded as the agent's. (From 4.4 on,
    keying a camera's data reuses its object's action with a slot of its own, and the other way
    round: an action that was there, the person's or the agent's, stays whose it was.)"""
    block = owner(obj, prop)
    before = {action.as_pointer() for action in bpy.data.actions}
    for i in range(PROPERTIES[prop].size):
        fc = component_curve(block, prop, i, keys[0][0])
        for frame, value, interpolation in keys:
            point = fc.keyframe_points.insert(frame, value[i])
            point.interpolation = interpolation
            point.handle_left_type = "AUTO_CLAMPED"
            point.handle_right_type = "AUTO_CLAMPED"
        fc.update()
    action = block.animation_data.action
    if action.as_pointer() not in before:
        lock.mark_created(k, action, "action")


def component_curve(block, prop, index, frame):
    """The F-curve of component `index` of `block` (an object or its data), made when missing:
    `keyframe_insert` makes the action, its slot and channelbag as this Blender does (its key at
    `frame` is replaced at once). A scalar's one F-curve is index 0, inserted with index -1."""
    for fc in fcurves(block):
        if fc.data_path == prop and fc.array_index == index:
            return fc
    block.keyframe_insert(prop, index=index if PROPERTIES[prop].size > 1 else -1, frame=frame)
    for fc in fcurves(block):
        if fc.data_path == prop and fc.array_index == index:
            fc.auto_smoothing = "CONT_ACCEL"
            return fc
    raise Refusal("execution_failed", "Blender made no F-curve for %s[%d] of %s" % (prop, index, block.name),
                  field="property")


@tool("timeline.set", keeps_structure=True)
def timeline_set(k, params):
    s = scene()
    start = params.get("frame_start")
    end = params.get("frame_end")
    fps = params.get("fps")
    current = params.get("frame_current")
    if start is None and end is None and fps is None and current is None:
        raise invalid("frame_start", "give at least one of `frame_start`, `frame_end`, `fps`, `frame_current`")
    new_start = s.frame_start if start is None else whole("frame_start", start, 0, MAX_FRAME)
    new_end = s.frame_end if end is None else whole("frame_end", end, 0, MAX_FRAME)
    if fps is not None:
        whole("fps", fps, 1, MAX_FPS)
    if current is not None:
        whole("frame_current", current, -MAX_FRAME, MAX_FRAME)
    if new_start > new_end:
        field = "frame_end" if end is not None else "frame_start"
        raise invalid(field, "frame_start (%d) must not be after frame_end (%d)" % (new_start, new_end))
    # Blender pushes the other end along when one passes it: set them in an order where neither does.
    if new_start > s.frame_end:
        s.frame_end, s.frame_start = new_end, new_start
    else:
        s.frame_start, s.frame_end = new_start, new_end
    if fps is not None:
        s.render.fps, s.render.fps_base = fps, 1.0
    if current is not None:
        s.frame_set(current)
    return timeline_json()


@tool("animation.read")
def animation_read(k, params):
    obj = resolve(k, "name", req_str(params, "name"))
    at = params.get("at_frame")
    if at is not None:
        whole("at_frame", at, -MAX_FRAME, MAX_FRAME)
    out = {"name": obj.name, "animation": animation_of(obj)}
    if at is not None:
        out["at_frame"] = at
        out["evaluated"] = {prop: evaluated_at(obj, prop, at) for prop in out["animation"]}
    return out
