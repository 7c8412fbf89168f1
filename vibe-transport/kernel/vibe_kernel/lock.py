"""The actuator lock: what the agent may not do to data-blocks it did not make.

A data-block is the agent's when this session made it: an object made by object.create,
mesh.create_cube or mesh.create_plane (tagged with CREATED_PROP = the session id), a modifier
added by modifier.add (in the kernel's record, `Shared.modifiers`), and every modifier of an
object of the agent's. Property edits stay allowed everywhere.

Typed tools (`refuse_object`, `refuse_modifier`): object.rename, object.delete, object.assign_collection
with mode "move", and modifier.remove are refused on a data-block that is not the agent's, after
the names are resolved and before the tool's other checks. The refusal is contract_violation
with reason actuator_lock and `rule` remove / rename / unlink.

Agent code (`inventory`, `violations`; seed 000): after agent code ran, every object the agent did not
create still exists under its name, linked into the same scene collections, with its own object
data. The bridge applies the same rule as a boundary, on a fresh kernel that loaded the scene the
code left (agent code can rewrite anything in its own process); here it is the cheaper in-kernel
check, a filter: code that disarms this module, or marks another object as its own through the
`vibe_created_by` property, passes it."""

import bpy

from .envelope import Refusal

CREATED_PROP = "vibe_created_by"


# ---------------------------------------------------------------- whose is it

def created_by_agent(k, obj):
    """Whether this session made `obj` (a linked object never is: its tag cannot be taken off)."""
    return obj.library is None and obj.get(CREATED_PROP) == k.state.session_id


def modifier_is_agents(k, obj, name):
    return created_by_agent(k, obj) or k.state.modifiers.get((obj.as_pointer(), name)) == k.state.session_id


def record_modifier(k, obj, name):
    k.state.modifiers[(obj.as_pointer(), name)] = k.state.session_id


def forget_modifier(k, obj, name):
    k.state.modifiers.pop((obj.as_pointer(), name), None)


def forget_object(k, obj):
    """Before `obj` is removed: a later object at the same address must not inherit its record."""
    pointer = obj.as_pointer()
    for key in [key for key in k.state.modifiers if key[0] == pointer]:
        del k.state.modifiers[key]


def modifiers_by_name(shared):
    """The modifier record as (object name, modifier name, session id), to carry it over a reload
    of the same document (a rollback), where every pointer changes."""
    names = {o.as_pointer(): o.name for o in bpy.data.objects}
    return [(names[pointer], modifier, session) for (pointer, modifier), session in shared.modifiers.items()
            if pointer in names]


def restore_modifiers(shared, entries):
    """The record back from `modifiers_by_name`, for the objects and modifiers that exist."""
    shared.modifiers.clear()
    for object_name, modifier, session in entries:
        obj = bpy.data.objects.get(object_name)
        if obj is not None and obj.modifiers.get(modifier) is not None:
            shared.modifiers[(obj.as_pointer(), modifier)] = session


def untag_all():
    """After a file load everything in the file is the human's: the CREATED_PROP tags go (from
    the data in memory; the file on disk stays as it was)."""
    for blocks in (bpy.data.objects, bpy.data.materials, bpy.data.collections):
        for block in blocks:
            if block.library is None and CREATED_PROP in block:
                del block[CREATED_PROP]


# ---------------------------------------------------------------- typed tools

MESSAGES = {
    "remove": 'security block: cannot delete object "%s", which the agent did not create in this session',
    "rename": 'security block: cannot rename object "%s", which the agent did not create in this session',
    "unlink": 'security block: cannot move object "%s", which the agent did not create in this session, out of '
              'its collections; mode "link" adds a collection and keeps them',
}


def refuse_object(k, obj, rule, field="name"):
    """Refuses `rule` (remove, rename, unlink) on an object the agent did not create."""
    if created_by_agent(k, obj):
        return
    raise Refusal("contract_violation", MESSAGES[rule] % obj.name, reason="actuator_lock", rule=rule,
                  kind="object", name=obj.name, field=field)


def refuse_modifier(k, obj, name, field="modifier_name"):
    """Refuses modifier.remove of a modifier the agent did not add."""
    if modifier_is_agents(k, obj, name):
        return
    raise Refusal("contract_violation", 'security block: cannot remove modifier "%s" of "%s", which the agent '
                  "did not add in this session" % (name, obj.name), reason="actuator_lock", rule="remove",
                  kind="modifier", name=name, object=obj.name, field=field)


# ---------------------------------------------------------------- agent code


def inventory():
    """One record per object: its name, its data's name, the scene collections it is linked
    into, and whether the scene holds it."""
    scene = bpy.context.scene
    in_scene = {o.as_pointer() for o in scene.objects}
    # One pass over the scene's collections (obj.users_collection searches every collection
    # for every object: quadratic on large scenes).
    linked = {}
    for collection in [scene.collection] + list(scene.collection.children_recursive):
        for obj in collection.objects:
            linked.setdefault(obj.as_pointer(), []).append(collection.name)
    records = {}
    for obj in bpy.data.objects:
        pointer = obj.as_pointer()
        data = obj.data
        records[obj.name] = {
            "name": obj.name,
            "data": data.name if data is not None else None,
            "collections": sorted(linked.get(pointer, ())),
            "in_scene": pointer in in_scene,
            "modifiers": [m.name for m in obj.modifiers],
            "vertex_groups": [g.name for g in obj.vertex_groups],
        }
    return records


# The other data-blocks agent code may not remove or rename: (kind, bpy.data collection).
BLOCK_KINDS = (("material", "materials"), ("collection", "collections"), ("action", "actions"),
               ("node_group", "node_groups"), ("image", "images"), ("text", "texts"))


def blocks():
    """Every data-block of BLOCK_KINDS as {"kind", "name", "created"} (`created`: the agent's
    tag, on materials and collections it made). Render results and viewer images are Blender's
    own, made and freed by renders: not listed."""
    found = []
    for kind, attribute in BLOCK_KINDS:
        for block in getattr(bpy.data, attribute, ()):
            if kind == "image" and block.type in ("RENDER_RESULT", "COMPOSITING"):
                continue
            found.append({"kind": kind, "name": block.name, "created": block.get(CREATED_PROP)})
    return found


def block_violations(before, after, session_id):
    """Data-blocks in `before` (from `blocks`) missing from `after` that the agent did not
    make: {"name", "what"} like `violations`."""
    now = {(b["kind"], b["name"]) for b in after}
    return [{"name": b["name"], "what": "(%s) deleted or renamed" % b["kind"].replace("_", " ")}
            for b in before if (b["kind"], b["name"]) not in now and b.get("created") != session_id]


def part_violations(before, after, created, agent_modifiers):
    """Modifiers and vertex groups gone from protected objects that still exist (a modifier
    the agent added is its own): {"name", "what"}."""
    found = []
    for name in sorted(before):
        was, now = before[name], after.get(name)
        if name in created or now is None or not was["in_scene"]:
            continue
        for modifier in was.get("modifiers", ()):
            if modifier not in now.get("modifiers", ()) and (name, modifier) not in agent_modifiers:
                found.append({"name": name, "what": 'lost its modifier "%s"' % modifier})
        for group in was.get("vertex_groups", ()):
            if group not in now.get("vertex_groups", ()):
                found.append({"name": name, "what": 'lost its vertex group "%s"' % group})
    return found


def violations(before, after, created):
    """What happened to each protected object (in the scene before, not created by the agent):
    a list of {"name", "what"} in name order."""
    found = []
    new_names = [name for name in after if name not in before]
    for name in sorted(before):
        was = before[name]
        if name in created or not was["in_scene"]:
            continue
        now = after.get(name)
        if now is None:
            renamed = [n for n in new_names if was["data"] is not None and after[n]["data"] == was["data"]]
            what = 'renamed to "%s"' % renamed[0] if renamed else "deleted"
            found.append({"name": name, "what": what})
        elif not now["in_scene"]:
            found.append({"name": name, "what": "unlinked from the scene"})
        elif set(was["collections"]) - set(now["collections"]):
            lost = sorted(set(was["collections"]) - set(now["collections"]))
            found.append({"name": name, "what": "unlinked from %s" % ", ".join(lost)})
        elif was["data"] is not None and now["data"] != was["data"]:
            what = "object data removed" if now["data"] is None else 'object data replaced by "%s"' % now["data"]
            found.append({"name": name, "what": what})
    return found


def describe(found):
    return "; ".join("%s %s" % (v["name"], v["what"]) for v in found)
