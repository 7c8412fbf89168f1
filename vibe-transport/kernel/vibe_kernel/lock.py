"""The actuator lock: what the agent may not do to data-blocks it did not make.

A data-block is the agent's when this session made it: an object made by object.create,
mesh.create_cube or mesh.create_plane, a material or collection a typed tool made, the objects,
materials, images, actions and node groups file.import made (exchange.py), what agent code made, a modifier added by modifier.add, and every modifier of an object of the agent's.
Property edits stay allowed everywhere.

Identity, never the name alone (`stable_id`): the kernel records what a session made by
Blender's session UID (4.x and later; it follows renames and undo steps) or, on 3.4, by address
checked against the name (`Shared.created`, `Shared.modifiers`). The block also carries a tag
(CREATED_PROP = the session id); a block is the agent's only when record and tag agree, so a
copy of the agent's object (which copies the tag) is the human's. Over the kernel's own reloads
(a rollback, a failed call taken back, an undo step) the records are carried by name and tag
(`record_by_name`, `restore_record`, `reattach`); a replacement kernel starts from the tags
(`adopt_tags`); a file load empties them and takes the tags off (`untag_all`).

Typed tools (`refuse_object`, `refuse_modifier`): object.rename, object.delete, object.assign_collection
with mode "move", and modifier.remove are refused on a data-block that is not the agent's, after
the names are resolved and before the tool's other checks. The refusal is contract_violation
with reason actuator_lock and `rule` remove / rename / unlink.

Agent code (`inventory`, `violations`; seed 000): after agent code ran, every object the agent did not
create is still there, the same object (by identity) under its name, linked into the same scene
collections, with its own object data, modifiers, constraints and vertex groups; the other
data-blocks (`blocks`) are still there by name. The bridge applies the same rule as a boundary,
on a fresh kernel that loaded the scene the code left (agent code can rewrite anything in its own
process); here it is the cheaper in-kernel check, a filter: code that disarms this module passes
it. On 3.4 a new object at the freed address of a deleted one is not told apart."""

import bpy

from .envelope import Refusal

CREATED_PROP = "vibe_created_by"


# ---------------------------------------------------------------- whose is it

# The kinds the agent can make, and where bpy.data keeps them.
KIND_ATTRIBUTES = {"object": "objects", "material": "materials", "collection": "collections", "action": "actions",
                   "node_group": "node_groups", "image": "images", "text": "texts"}


def stable_id(block):
    """The data-block's identity in this kernel, never its name: Blender's session UID where the
    API has it (4.x and later; kept across renames and undo steps), else its address (3.4),
    which `is_agents` checks against the name the record holds (an address can be reused)."""
    uid = getattr(block, "session_uid", None)
    return "uid:%d" % uid if uid is not None else "ptr:%d" % block.as_pointer()


_HAS_SESSION_UID = hasattr(bpy.types.ID, "session_uid")  # 4.x and later; fixed for the process


def uses_addresses():
    return not _HAS_SESSION_UID


def mark_created(k, block, kind):
    """`block` is this session's: recorded by its identity, and tagged (CREATED_PROP) so that a
    reload of a state the kernel saved itself finds it again (`restore_record`)."""
    block[CREATED_PROP] = k.state.session_id
    k.shared.created[stable_id(block)] = (k.state.session_id, kind, block.name)


def is_agents(k, block):
    """Whether this session made `block`: its identity in the record, with this session's tag.
    A copy of an agent's object (Shift+D copies the tag) is a new identity, the human's; so is a
    new object at a reused address under another name (3.4). A linked block never is."""
    if getattr(block, "library", None) is not None or block.get(CREATED_PROP) != k.state.session_id:
        return False
    entry = k.shared.created.get(stable_id(block))
    if entry is None or entry[0] != k.state.session_id:
        return False
    return not uses_addresses() or entry[2] == block.name


def created_by_agent(k, obj):
    """Whether this session made the object `obj`."""
    return is_agents(k, obj)


def renamed(k, block):
    """The agent renamed its own `block`: the record follows (it checks addresses against names)."""
    entry = k.shared.created.get(stable_id(block))
    if entry is not None:
        k.shared.created[stable_id(block)] = (entry[0], entry[1], block.name)


def modifier_is_agents(k, obj, name):
    return created_by_agent(k, obj) or k.state.modifiers.get((stable_id(obj), name)) == k.state.session_id


def record_modifier(k, obj, name):
    k.state.modifiers[(stable_id(obj), name)] = k.state.session_id


def forget_modifier(k, obj, name):
    k.state.modifiers.pop((stable_id(obj), name), None)


def forget_object(k, obj):
    """Before `obj` is removed: a later object at the same address must not inherit its records."""
    key = stable_id(obj)
    k.shared.created.pop(key, None)
    for entry in [entry for entry in k.state.modifiers if entry[0] == key]:
        del k.state.modifiers[entry]


def record_by_name(shared):
    """Both records by name, to carry them over a reload of the same document (a rollback, an
    undo step), where addresses change: {"created": [(session, kind, name)], "modifiers":
    [(object name, modifier name, session)]}."""
    names = {stable_id(o): o.name for o in bpy.data.objects}
    now = tagged()
    created = [(session, kind, now[key].name if key in now else recorded)
               for key, (session, kind, recorded) in shared.created.items()]
    modifiers = [(names[key], modifier, session) for (key, modifier), session in shared.modifiers.items()
                 if key in names]
    return {"created": created, "modifiers": modifiers}


def tagged():
    """Every data-block that carries a tag, by identity (one pass over the tagged kinds)."""
    found = {}
    for attribute in KIND_ATTRIBUTES.values():
        for block in getattr(bpy.data, attribute, ()):
            if block.get(CREATED_PROP) is not None:
                found[stable_id(block)] = block
    return found


def restore_record(shared, saved):
    """The records back from `record_by_name`, for what exists under the same name with the
    same session's tag (the tag is in the document the kernel saved or stepped back to). `None`
    (a record not known, as in a replacement kernel): `adopt_tags`."""
    if saved is None:
        adopt_tags(shared)
        return
    shared.created.clear()
    for session, kind, name in saved["created"]:
        block = getattr(bpy.data, KIND_ATTRIBUTES[kind]).get(name)
        if block is not None and block.library is None and block.get(CREATED_PROP) == session:
            shared.created[stable_id(block)] = (session, kind, name)
    shared.modifiers.clear()
    for object_name, modifier, session in saved["modifiers"]:
        obj = bpy.data.objects.get(object_name)
        if obj is not None and obj.modifiers.get(modifier) is not None:
            shared.modifiers[(stable_id(obj), modifier)] = session


def reattach(shared):
    """After an undo or redo step (which may reallocate data-blocks): the created record found
    again by identity where it survived (session UIDs do), else by its recorded name and tag. The
    modifier record is emptied: the agent's modifiers on the human's objects are the human's
    again, the safe side."""
    now = {} if uses_addresses() else tagged()
    saved = [(session, kind, now[key].name if key in now else name)
             for key, (session, kind, name) in shared.created.items()]
    restore_record(shared, {"created": saved, "modifiers": []})


def adopt_tags(shared):
    """A replacement kernel that loaded the bridge's checkpoint: what carries this kernel's tags
    is recorded again (the bridge holds its own record of what the agent made, by name)."""
    shared.created.clear()
    shared.modifiers.clear()
    for kind, attribute in KIND_ATTRIBUTES.items():
        for block in getattr(bpy.data, attribute, ()):
            session = block.get(CREATED_PROP) if block.library is None else None
            if isinstance(session, str):
                shared.created[stable_id(block)] = (session, kind, block.name)


def untag_all(shared):
    """After a file load everything in the file is the human's: the records are emptied and the
    CREATED_PROP tags go (from the data in memory; the file on disk stays as it was)."""
    shared.created.clear()
    shared.modifiers.clear()
    for attribute in KIND_ATTRIBUTES.values():
        for block in getattr(bpy.data, attribute, ()):
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


def inventory(k, all_parts=False):
    """One record per object: its identity (`uid`, meaningful inside this kernel only), whether
    this session made it, its data's name, the scene collections it is linked into, whether the
    scene holds it, and the names of its modifiers, constraints and vertex groups: of every
    object with `all_parts` (the bridge's inventory, which judges whose an object is by its own
    record too), else only of those this session did not make (`part_violations` reads no more)."""
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
        record = records[obj.name] = {
            "name": obj.name,
            "uid": stable_id(obj),
            "created": is_agents(k, obj),
            "data": data.name if data is not None else None,
            "collections": sorted(linked.get(pointer, ())),
            "in_scene": pointer in in_scene,
        }
        if all_parts or not record["created"]:
            # keys(): the names in one call, not an RNA object per item (a third of the time).
            record["modifiers"] = obj.modifiers.keys()
            record["constraints"] = obj.constraints.keys()
            record["vertex_groups"] = obj.vertex_groups.keys()
    return records


# The other data-blocks agent code may not remove or rename: (kind, bpy.data collection).
BLOCK_KINDS = tuple((kind, attribute) for kind, attribute in KIND_ATTRIBUTES.items() if kind != "object")


def blocks(k):
    """Every data-block of BLOCK_KINDS as {"kind", "name", "created"} (`created`: this session
    made it). Render results and viewer images are Blender's own, made and freed by renders: not
    listed."""
    found = []
    for kind, attribute in BLOCK_KINDS:
        for block in getattr(bpy.data, attribute, ()):
            if kind == "image" and block.type in ("RENDER_RESULT", "COMPOSITING"):
                continue
            found.append({"kind": kind, "name": block.name, "created": is_agents(k, block)})
    return found


def block_violations(before, after):
    """Data-blocks in `before` (from `blocks`) missing from `after` that the agent did not
    make: {"name", "what"} like `violations`."""
    now = {(b["kind"], b["name"]) for b in after}
    return [{"name": b["name"], "what": "(%s) deleted or renamed" % b["kind"].replace("_", " ")}
            for b in before if (b["kind"], b["name"]) not in now and not b["created"]]


# The parts of an object agent code may not take from the human's: (inventory key, word).
PARTS = (("modifiers", "modifier"), ("constraints", "constraint"), ("vertex_groups", "vertex group"))


def part_violations(before, after, agent_modifiers):
    """Modifiers, constraints and vertex groups gone from protected objects that are still
    there, the same object (a modifier the agent added is its own): {"name", "what"}."""
    found = []
    for name in sorted(before):
        was, now = before[name], after.get(name)
        if was["created"] or now is None or now["uid"] != was["uid"] or not was["in_scene"]:
            continue
        for key, word in PARTS:
            for part in was.get(key, ()):
                if part not in now.get(key, ()) and (key != "modifiers" or (name, part) not in agent_modifiers):
                    found.append({"name": name, "what": 'lost its %s "%s"' % (word, part)})
    return found


def violations(before, after):
    """What happened to each protected object (in the scene before, not created by the agent):
    a list of {"name", "what"} in name order. Objects are followed by identity: a new object
    that took a protected one's name is not it (on 3.4, where identity is an address, a new
    object at the freed address of a deleted one is not told apart)."""
    found = []
    by_uid = {record["uid"]: record for record in after.values()}
    new_names = [name for name in after if name not in before]
    for name in sorted(before):
        was = before[name]
        if was["created"] or not was["in_scene"]:
            continue
        now = after.get(name)
        same = by_uid.get(was["uid"])
        if now is not None and now["uid"] != was["uid"]:
            what = 'renamed to "%s"' % same["name"] if same is not None else "deleted"
            found.append({"name": name, "what": what + '; a new object took the name "%s"' % name})
        elif now is None:
            if same is None:
                # An address of an object that went may be reused: the data's name tells a rename.
                same = next((after[n] for n in new_names if was["data"] is not None and after[n]["data"] == was["data"]),
                            None)
            what = 'renamed to "%s"' % same["name"] if same is not None else "deleted"
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
