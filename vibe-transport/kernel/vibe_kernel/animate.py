"""The animate pack: keyframes on object transforms (keyframe.set), the scene's timeline
(timeline.set) and an object's animation read back and evaluated (animation.read).

Blender keeps an object's keys in F-curves of its action, one F-curve per component (location
x, y, z). Where the action keeps them depends on the version: Blender 4.4 and later have slotted
actions (layers, strips and one channelbag per slot; 5.0 dropped the legacy `action.fcurves`),
3.4 has `action.fcurves`. `fcurves` hides the difference.

A key of this pack holds all three components at one frame. Keys are written with explicit
interpolation and auto-clamped handles on F-curves with Blender's default smoothing (continuous
acceleration), so a Bezier curve is the same whatever the person's preferences and on every
version. After a change the scene is posed at its current frame (`frame_set`), as Blender does
on a frame change: keyed properties take their animated values.

The property table (`PROPERTIES`) is the only list of what can be keyed (MockBlender has its
twin); a camera's lens or a light's energy can join it with their component counts."""

import bpy

from . import lock
from .envelope import Refusal, invalid
from .tools import finite_float, req_str, resolve, scene, tool

# What can be keyed: property (an object's data path) -> number of components.
PROPERTIES = {"location": 3, "rotation_euler": 3, "scale": 3}
INTERPOLATIONS = ("CONSTANT", "LINEAR", "BEZIER")
MAX_FRAME = 1048574  # Blender's MAXFRAME: keys and the current frame within +-MAXFRAME
MAX_KEYS = 256  # keys or frames in one keyframe.set call
MAX_VALUE = 1.0e6
MAX_FPS = 240


# ---------------------------------------------------------------- F-curves on every version

def fcurves(obj):
    """The F-curves of the object's action (an empty list without one): the action slot's
    channelbag on Blender 4.4 and later, `action.fcurves` before."""
    anim = obj.animation_data
    if anim is None or anim.action is None:
        return []
    action = anim.action
    if not hasattr(action, "layers"):
        return action.fcurves
    bag = channelbag(anim)
    return bag.fcurves if bag is not None else []


def channelbag(anim):
    """The channelbag of the object's action slot (Blender 4.4+), or None."""
    slot = getattr(anim, "action_slot", None)
    if slot is None:
        return None
    for layer in anim.action.layers:
        for strip in layer.strips:
            bag = strip.channelbag(slot)
            if bag is not None:
                return bag
    return None


def component_curves(obj, prop):
    """The property's F-curves by component index ({} when it is not animated)."""
    return {fc.array_index: fc for fc in fcurves(obj) if fc.data_path == prop and len(fc.keyframe_points)}


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
    keys = []
    for frame in frames:
        value, interpolation = [], None
        for i in range(PROPERTIES[prop]):
            fc = curves.get(i)
            point = point_at(fc, frame) if fc is not None else None
            if point is not None:
                value.append(float(point.co[1]))
                interpolation = interpolation or point.interpolation
            elif fc is not None:
                value.append(float(fc.evaluate(frame)))
            else:
                value.append(float(getattr(obj, prop)[i]))
        keys.append({"frame": frame, "value": value, "interpolation": interpolation})
    return keys


def animation_of(obj):
    """{property: keys} for every keyed property of the table."""
    out = {}
    for prop in PROPERTIES:
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


def property_arg(params):
    prop = req_str(params, "property")
    if prop not in PROPERTIES:
        raise invalid("property", "`property` must be one of %s" % ", ".join(PROPERTIES))
    return prop


def frames_arg(params):
    frames = params.get("frames")
    if not isinstance(frames, list) or not 1 <= len(frames) <= MAX_KEYS:
        raise invalid("frames", "`frames` must be a list of 1 to %d entries" % MAX_KEYS)
    return frames


def key_arg(entry, size):
    """One key {frame, value, interpolation} checked."""
    if not isinstance(entry, dict) or set(entry) - {"frame", "value", "interpolation"}:
        raise invalid("frames", "each key must be {frame, value, interpolation}")
    frame = whole("frames", entry.get("frame"), -MAX_FRAME, MAX_FRAME)
    value = entry.get("value")
    if not isinstance(value, list) or len(value) != size:
        raise invalid("frames", "a key's `value` must be %d numbers" % size)
    value = [finite_float("frames", v, "%d numbers" % size) for v in value]
    if any(abs(v) > MAX_VALUE for v in value):
        raise invalid("frames", "a key's values must be within +-%g" % MAX_VALUE)
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
    prop = property_arg(params)
    delete = params.get("delete", False)
    if not isinstance(delete, bool):
        raise invalid("delete", "`delete` must be a boolean")
    entries = frames_arg(params)
    if delete:
        frames = [whole("frames", f, -MAX_FRAME, MAX_FRAME) for f in entries]
        no_repeats(frames)
        delete_keys(obj, prop, frames)
    else:
        keys = [key_arg(entry, PROPERTIES[prop]) for entry in entries]
        no_repeats([frame for frame, _, _ in keys])
        insert_keys(k, obj, prop, keys)
    pose()
    return {"name": obj.name, "property": prop, "keys": keys_of(obj, prop)}


def delete_keys(obj, prop, frames):
    """Deletes the keys at `frames` after checking each has one; an F-curve left empty goes."""
    have = {key["frame"] for key in keys_of(obj, prop)}
    for frame in frames:
        if frame not in have:
            raise Refusal("not_found", "%s has no %s key at frame %d" % (obj.name, prop, frame),
                          field="frames", name=obj.name, frame=frame)
    owner = fcurves(obj)
    for fc in list(component_curves(obj, prop).values()):
        for frame in frames:
            point = point_at(fc, frame)
            if point is not None:
                fc.keyframe_points.remove(point)
        if len(fc.keyframe_points) == 0:
            owner.remove(fc)
        else:
            fc.update()


def insert_keys(k, obj, prop, keys):
    had_action = obj.animation_data is not None and obj.animation_data.action is not None
    for i in range(PROPERTIES[prop]):
        fc = component_curve(obj, prop, i, keys[0][0])
        for frame, value, interpolation in keys:
            point = fc.keyframe_points.insert(frame, value[i])
            point.interpolation = interpolation
            point.handle_left_type = "AUTO_CLAMPED"
            point.handle_right_type = "AUTO_CLAMPED"
        fc.update()
    if not had_action:
        lock.mark_created(k, obj.animation_data.action, "action")


def component_curve(obj, prop, index, frame):
    """The F-curve of component `index`, made when missing: `keyframe_insert` makes the action,
    its slot and channelbag as this Blender does (its key at `frame` is replaced at once)."""
    for fc in fcurves(obj):
        if fc.data_path == prop and fc.array_index == index:
            return fc
    obj.keyframe_insert(prop, index=index, frame=frame)
    for fc in fcurves(obj):
        if fc.data_path == prop and fc.array_index == index:
            fc.auto_smoothing = "CONT_ACCEL"
            return fc
    raise Refusal("execution_failed", "Blender made no F-curve for %s[%d] of %s" % (prop, index, obj.name),
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
        evaluated = {}
        for prop in out["animation"]:
            curves = component_curves(obj, prop)
            evaluated[prop] = [float(curves[i].evaluate(at)) if i in curves else float(getattr(obj, prop)[i])
                               for i in range(PROPERTIES[prop])]
        out["at_frame"] = at
        out["evaluated"] = evaluated
    return out
