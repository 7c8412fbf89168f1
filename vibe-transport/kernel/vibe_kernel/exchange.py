"""Model exchange: file.import reads a glTF, OBJ, FBX, STL or USD file from the session's sandbox
into the scene, file.export writes mesh objects to one. Which formats a Blender has is found by
the operators it registers (and, for glTF, the numpy its add-on needs), never by its version:
Debian's Blender 3.4 has no USD and no numpy, the bpy wheels have all of them. The hello lists
them as `formats`."""

import importlib.util
import os

import bpy

from . import confine, files, import_guard, import_refs, lock
from .envelope import Refusal, invalid
from .tools import (opt_str, req_str, resolve, target_collection,
                    scene_objects, tool)

FORMATS = ("gltf", "glb", "obj", "fbx", "stl", "usd")
EXTENSIONS = {".gltf": "gltf", ".glb": "glb", ".obj": "obj", ".fbx": "fbx", ".stl": "stl",
              ".usd": "usd", ".usda": "usd", ".usdc": "usd", ".usdz": "usd"}
# Bundled add-ons a factory startup may leave disabled; enabled (not saved in the preferences)
# when present, so that their operators exist.
ADDONS = ("io_scene_gltf2", "io_scene_fbx", "io_mesh_stl", "io_scene_obj")
# For each format: the import and the export operators, the newest first.
OPERATORS = {
    "gltf": (("import_scene.gltf",), ("export_scene.gltf",)),
    "glb": (("import_scene.gltf",), ("export_scene.gltf",)),
    "obj": (("wm.obj_import", "import_scene.obj"), ("wm.obj_export", "export_scene.obj")),
    "fbx": (("import_scene.fbx",), ("export_scene.fbx",)),
    "stl": (("wm.stl_import", "import_mesh.stl"), ("wm.stl_export", "export_mesh.stl")),
    "usd": (("wm.usd_import",), ("wm.usd_export",)),
}
# What each exporter is asked beyond the selection (options an operator lacks are left out):
# geometry and transforms only, one deterministic file (ASCII STL, glTF as .gltf + .bin).
EXPORT_OPTIONS = {
    "gltf": {"export_format": "GLTF_SEPARATE", "export_materials": "NONE", "export_animations": False,
             "export_cameras": False, "export_lights": False},
    "glb": {"export_format": "GLB", "export_materials": "NONE", "export_animations": False,
            "export_cameras": False, "export_lights": False},
    "obj": {"export_materials": False, "export_animation": False},
    "fbx": {"object_types": {"MESH"}, "bake_anim": False},
    "stl": {"ascii_format": True, "ascii": True},
    "usd": {"export_materials": False, "export_animation": False},
}
SELECTION_OPTIONS = ("use_selection", "export_selected_objects", "selected_objects_only")
# What each importer is asked: to add objects and leave the scene's own settings alone (a USD
# stage's time range would become the scene's frame range, a glTF's scene extras custom
# properties on the person's Scene).
IMPORT_OPTIONS = {
    "usd": {"set_frame_range": False},
    "gltf": {"import_scene_extras": False},
    "glb": {"import_scene_extras": False},
}

_formats = None


def operator(dotted):
    """The operator `module.name` if this Blender registers it, else None."""
    module, name = dotted.split(".")
    op = getattr(getattr(bpy.ops, module), name)
    try:
        op.get_rna_type()
    except (AttributeError, KeyError, RuntimeError):
        return None
    return op


def first_operator(names):
    for name in names:
        op = operator(name)
        if op is not None:
            return op
    return None


def enable_addons():
    import addon_utils
    for module in ADDONS:
        loaded_default, loaded_state = addon_utils.check(module)
        if loaded_state:
            continue
        if not any(m.__name__ == module for m in addon_utils.modules()):
            continue
        try:
            addon_utils.enable(module, default_set=False)
        except Exception:  # an add-on that fails to load leaves its formats out, nothing more
            pass


def available_formats():
    """The formats this Blender can both import and export, found once."""
    global _formats
    if _formats is None:
        enable_addons()
        found = []
        for fmt in FORMATS:
            imports, exports = OPERATORS[fmt]
            if first_operator(imports) is None or first_operator(exports) is None:
                continue
            # The glTF add-on imports numpy when it runs; without it every call fails.
            if fmt in ("gltf", "glb") and importlib.util.find_spec("numpy") is None:
                continue
            found.append(fmt)
        _formats = found
    return list(_formats)


def chosen_format(params, relative):
    """The format of the call: `format` if given (it must agree with the path's extension),
    else the extension's; one this Blender lacks is refused naming those it has."""
    given = opt_str(params, "format")
    by_extension = EXTENSIONS.get(os.path.splitext(relative)[1].lower())
    if given is not None and given not in FORMATS:
        raise invalid("format", "unknown format %r; the formats are %s" % (given, ", ".join(FORMATS)))
    if given is None and by_extension is None:
        raise invalid("format", "path %r has no known model extension (%s); name the format"
                      % (relative, ", ".join(sorted(EXTENSIONS))))
    if given is not None and by_extension != given:
        raise invalid("path", "path %r does not end in an extension of format %r" % (relative, given))
    fmt = given or by_extension
    have = available_formats()
    if fmt not in have:
        raise Refusal("capability_missing", "this Blender cannot import or export %s; it has: %s"
                      % (fmt, ", ".join(have) or "none"), field="format", format=fmt, formats=have)
    return fmt


def run_operator(op, **options):
    """Runs `op` with the options it has (the same format's operator differs between versions)."""
    known = set(op.get_rna_type().properties.keys())
    result = op(**{key: value for key, value in options.items() if key in known})
    if "FINISHED" not in result:
        raise Refusal("execution_failed", "the %s operator did not finish: %s" % (op.idname_py(), sorted(result)))


# ---------------------------------------------------------------- import

# What an import makes that counts as the agent's for the actuator lock, beside its objects.
MADE_KINDS = (("material", "materials"), ("image", "images"), ("action", "actions"), ("node_group", "node_groups"))


@tool("file.import")
def file_import(k, params):
    relative = req_str(params, "path")
    fmt = chosen_format(params, relative)
    path = files.sandbox_path(k, relative, reading=True)
    coll = target_collection(params)
    # VIBE_KERNEL_GATE=off (honoured only in a full jail) turns the kernel's own checks off, so
    # that tests show the jail alone refusing the read.
    checked = not confine.GATE_OFF
    if checked:
        import_refs.check(k, relative, path, fmt)
    before = import_guard.Before()
    op = first_operator(OPERATORS[fmt][0])
    try:
        run_operator(op, filepath=path, **IMPORT_OPTIONS.get(fmt, {}))
    except (RuntimeError, Refusal) as e:
        before.take_back()
        raise Refusal("execution_failed", "could not import %r as %s: %s" % (relative, fmt, e), field="path")
    if checked:
        import_guard.check(k, relative, before)
    made = sorted(before.new("objects"), key=lambda o: o.name)
    for obj in made:
        for other in list(obj.users_collection):
            other.objects.unlink(obj)
        coll.objects.link(obj)
        lock.mark_created(k, obj, "object")
        k.state.seen[obj.name] = lock.stable_id(obj)
    for kind, attribute in MADE_KINDS:
        for block in before.new(attribute):
            lock.mark_created(k, block, kind)
    return {"format": fmt, "objects": [o.name for o in made],
            "materials": sorted(m.name for m in before.new("materials"))}


# ---------------------------------------------------------------- export

def export_objects(k, params):
    names = params.get("objects")
    if names is None:
        chosen = sorted((o for o in scene_objects() if o.type == "MESH"), key=lambda o: o.name)
        if not chosen:
            raise invalid("objects", "the scene has no mesh object to export")
        return chosen
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise invalid("objects", "`objects` must be a non-empty list of object names")
    chosen = []
    for name in names:
        obj = resolve(k, "objects", name)
        if obj.type != "MESH":
            raise invalid("objects", "%r is a %s; only mesh objects are exported" % (name, obj.type))
        if obj not in chosen:
            chosen.append(obj)
    return chosen


@tool("file.export", keeps_structure=True)
def file_export(k, params):
    relative = req_str(params, "path")
    fmt = chosen_format(params, relative)
    path = files.sandbox_path(k, relative)
    chosen = export_objects(k, params)
    if fmt == "gltf":  # the .bin the exporter writes beside the .gltf
        files.sandbox_path(k, os.path.splitext(relative)[0] + ".bin")
    layer = bpy.context.view_layer
    layer.update()  # objects linked since the last update are not in layer.objects before it
    for obj in chosen:
        if layer.objects.get(obj.name) is None:
            raise invalid("objects", "%r is not in the view layer, so it cannot be selected for export" % obj.name)
    selected = [o for o in layer.objects if o.select_get()]
    active = layer.objects.active
    try:
        for obj in layer.objects:
            obj.select_set(obj in chosen)
        layer.objects.active = chosen[0]
        options = dict(EXPORT_OPTIONS[fmt])
        options.update({key: True for key in SELECTION_OPTIONS})
        try:
            run_operator(first_operator(OPERATORS[fmt][1]), filepath=path, check_existing=False, **options)
        except RuntimeError as e:
            raise Refusal("execution_failed", "could not export %s to %r: %s" % (fmt, relative, e), field="path")
    finally:
        for obj in layer.objects:
            obj.select_set(obj in selected)
        layer.objects.active = active
    if not os.path.isfile(path):
        raise Refusal("execution_failed", "the %s exporter wrote no file at %r" % (fmt, relative), field="path")
    return {"format": fmt, "path": relative, "bytes": os.path.getsize(path)}
