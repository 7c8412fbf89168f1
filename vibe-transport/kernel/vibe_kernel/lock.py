"""The actuator lock for agent code: what every object is, and what agent code did to the
objects the agent did not create.

The rule (seed 000): after agent code ran, every object the agent did not create still exists
under its name, linked into the same scene collections, with its own object data. Property
edits stay allowed. The bridge applies the same rule as a boundary, on a fresh kernel that
loaded the scene the code left (agent code can rewrite anything in its own process); here it
is the cheaper in-kernel check, a filter: code that disarms this module, or marks another
object as its own through the `vibe_created_by` property, passes it."""

import bpy


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
        }
    return records


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
