"""The tools that read: kernel status, the scene snapshot and telemetry, Blender's errors,
collections, objects, the scene graph, identities and materials."""

import bpy

from . import look
from . import animate
from .envelope import invalid, not_found
from .index import SCENE_INDEX
from .lock import created_by_agent
from .tools import (collections, collections_json, glob_match, has_collection, materials_json, object_json, opt_str,
                    opt_uint, polygons, req_str, resolve, scene, scene_objects, surface_materials, tool)


@tool("kernel.status")
def kernel_status(k, params):
    return {"state": "busy" if k.state.busy else "ready", "protocol": 1,
            "blender_version": k.blender_version, "transaction_open": k.state.transaction is not None,
            "file": k.file_name()}


@tool("scene.snapshot")
def scene_snapshot(k, params):
    return {"snapshot_version": 1, "scene": scene().name, "blender_version": k.blender_version,
            "objects": [animate.with_summary(object_json(o), o) for o in scene_objects()],
            "collections": collections_json(), "materials": materials_json(k.state.sandbox),
            "camera": scene().camera.name if scene().camera else None,
            "world": look.world_json(scene().world) if scene().world else None,
            "timeline": animate.timeline_json()}


@tool("scene.telemetry")
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


@tool("blender.errors")
def blender_errors(k, params):
    limit = opt_uint(params, "limit")
    limit = 50 if limit is None else limit
    if not 1 <= limit <= 200:
        raise invalid("limit", "`limit` must be 1-200")
    entries = list(k.state.console)[-limit:]
    return {"errors": entries, "dropped": k.state.console_dropped}


@tool("scene.list_collections")
def list_collections(k, params):
    return {"collections": collections_json()}


@tool("object.list")
def object_list(k, params):
    kind = opt_str(params, "type")
    coll = opt_str(params, "collection")
    if coll is not None and not has_collection(coll):
        raise not_found("collection", "collection", coll)
    out = [{"name": o.name, "type": o.type} for o in scene_objects()
           if (kind is None or o.type == kind)
           and (coll is None or coll in SCENE_INDEX.collections_of(o))]
    return {"objects": out}


@tool("object.info")
def object_info(k, params):
    return object_json(resolve(k, "name", req_str(params, "name")))


@tool("scenegraph.find")
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


@tool("object.audit_identity")
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
