"""The file tools: file.save and render.still write into the session's sandbox, file.open loads
a `.blend` from a project root or the sandbox. Whatever the bridge checked before, the paths are
checked again here after resolving links, and nothing is ever written into a project root."""

import os
import stat

import bpy

from .envelope import Refusal, invalid, not_found
from .state import inside
from .tools import opt_str, opt_uint, req_str, scene, tool

HUMAN_ONLY = "HUMAN_ONLY"


# ---------------------------------------------------------------- writing into the sandbox

def sandbox_refusal(relative, why, field="path"):
    return Refusal("contract_violation", "%s %r %s" % (field, relative, why), reason="sandbox", field=field)


def is_human_only(component):
    # Case-insensitive, and as Windows reads names: trailing dots and spaces do not count.
    return component.rstrip(". ").upper() == HUMAN_ONLY


def sandbox_path(k, relative, companions=(), field="path", reading=False):
    """The same rules as the bridge's sandbox guard, enforced again here: a portable relative
    path, then checked again after resolving links. Both the sandbox and the target are resolved
    (os.path.realpath: every symlink, on any component, the last one included, dangling or not),
    the target must lie inside the sandbox by path components (a string prefix would let
    `/x/sandbox-evil` pass for `/x/sandbox`), and no component inside the sandbox may be
    HUMAN_ONLY in any case; nor may it lie inside a project root (configure keeps the sandbox out
    of them; a link could still lead there). Returns the resolved path, which is what Blender writes to: the path
    that was checked is the path that is written (short of a link swapped in between, which is
    the jail's to stop). `reading`: a file the tool reads, which must exist (not_found) and for
    which no folder is made."""
    root = k.state.sandbox
    if not root:
        raise Refusal("contract_violation", "this session has no sandbox folder", reason="sandbox", field=field)
    ok_chars = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._- /")
    parts = relative.split("/")
    if (not relative or len(relative) > 255 or any(c not in ok_chars for c in relative) or relative.startswith("/")
            or any(p in ("", ".", "..") for p in parts)):
        raise sandbox_refusal(relative, "is not a portable path inside the sandbox", field)
    if any(is_human_only(p) for p in parts):
        raise sandbox_refusal(relative, "is inside HUMAN_ONLY, which is for people only", field)
    root = os.path.realpath(root)
    resolved = os.path.realpath(os.path.join(root, *parts))
    for project in k.state.project_roots:
        if inside(project, resolved):
            raise Refusal("contract_violation", "%s %r resolves into a project root, which is never written"
                          % (field, relative), reason="sandbox", field=field, rule="project_root")
    check_resolved(root, relative, resolved, field)
    if os.path.isdir(resolved):
        raise sandbox_refusal(relative, "is a folder, not a file", field)
    if reading:
        if not os.path.isfile(resolved):
            raise not_found(field, "file", relative)
        return resolved
    # Files Blender writes beside the target (a save goes to `<path>@`, then is renamed): a link
    # planted there would be written through.
    check_writable(relative, resolved, field)
    for suffix in companions:
        if os.path.lexists(resolved + suffix):
            check_resolved(root, relative + suffix, os.path.realpath(resolved + suffix), field)
            check_writable(relative + suffix, os.path.realpath(resolved + suffix), field)
    os.makedirs(os.path.dirname(resolved), exist_ok=True)
    return resolved


def check_writable(relative, resolved, field="path"):
    """A file a tool writes is new or a plain file of its own: a FIFO, socket or device would
    block Blender's writer or write somewhere else, and a file with another hard link is also a
    file outside the sandbox (a path check cannot see a hard link), which the write would
    change."""
    try:
        st = os.lstat(resolved)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise sandbox_refusal(relative, "cannot be examined (%s)" % (exc.strerror or "error"), field)
    if not stat.S_ISREG(st.st_mode):
        raise sandbox_refusal(relative, "is not a regular file (a pipe, socket or device is never written)", field)
    if st.st_nlink > 1:
        raise sandbox_refusal(relative, "has other hard links, which may lie outside the sandbox; remove it first", field)


def check_resolved(root, relative, resolved, field="path"):
    if resolved == root or not inside(root, resolved):
        raise sandbox_refusal(relative, "resolves outside the sandbox (through a link)", field)
    if any(is_human_only(p) for p in os.path.relpath(resolved, root).split(os.sep)):
        raise sandbox_refusal(relative, "resolves into HUMAN_ONLY (through a link), which is for people only", field)


@tool("file.save", keeps_structure=True)
def file_save(k, params):
    path = sandbox_path(k, req_str(params, "path"), companions=("@",))
    k.file_op(lambda: bpy.ops.wm.save_as_mainfile(filepath=path, copy=True, check_existing=False))
    return {"path": params["path"], "bytes": os.path.getsize(path)}


QUALITIES = ("final", "preview")


@tool("render.still", keeps_structure=True)
def render_still(k, params):
    relative = req_str(params, "path")
    width = opt_uint(params, "width") or 320
    height = opt_uint(params, "height") or 240
    samples = opt_uint(params, "samples") or 8
    seed = opt_uint(params, "seed") or 0
    quality = opt_str(params, "quality") or "final"
    if not (16 <= width <= 1024 and 16 <= height <= 1024 and 1 <= samples <= 64):
        raise invalid("width", "width and height must be 16-1024, samples 1-64")
    if quality not in QUALITIES:
        raise invalid("quality", "`quality` must be final or preview")
    path = sandbox_path(k, relative)
    if "#" in path:  # Blender would replace it with the frame number: another file than checked
        raise sandbox_refusal(relative, "resolves to a name with '#', which Blender rewrites")
    sc = scene()
    if sc.camera is None:
        raise Refusal("invalid_arguments", "the scene has no camera to render from; make one with object.create "
                      "and make it the scene camera", field="path")
    if quality == "preview":
        try:
            engine = render_with(sc, path, width, height, "BLENDER_WORKBENCH", 1, seed)
        except RuntimeError:  # Workbench needs a GPU context, which some headless builds lack
            engine = render_with(sc, path, width, height, "CYCLES", 1, seed)
    else:
        engine = render_with(sc, path, width, height, "CYCLES", samples, seed)
    return {"path": relative, "width": width, "height": height, "seed": seed, "quality": quality, "engine": engine}


def render_with(sc, path, width, height, engine, samples, seed):
    """Renders the scene camera's view to `path` with `engine` and puts every render setting it
    touched back. Workbench draws solid shading in the materials' colours and image textures.
    The compositor, the sequencer and multiview are off for the render: a File Output node in a
    person's compositor writes wherever its base path points (outside the sandbox too), sequencer
    strips and compositor images read files by their own paths, and individual views write files
    beside the checked one. The answer is the camera's view, exactly at `path`."""
    r = sc.render
    shading = sc.display.shading
    saved = (r.engine, r.resolution_x, r.resolution_y, r.resolution_percentage, r.filepath,
             sc.cycles.samples, sc.cycles.seed, sc.cycles.device, r.use_file_extension, sc.cycles.use_denoising,
             shading.light, shading.color_type, r.use_compositing, r.use_sequencer, r.use_multiview)
    try:
        r.use_compositing = r.use_sequencer = r.use_multiview = False
        r.use_file_extension = False  # write exactly the checked path, never `<path>.png`
        r.engine = engine
        if engine == "CYCLES":
            sc.cycles.device = "CPU"
            # A build without a denoiser (Debian's Blender 3.4 has no OpenImageDenoise) fails a
            # render that asks for one: denoise only where the build can.
            if not sc.cycles.denoiser:
                sc.cycles.use_denoising = False
            sc.cycles.samples = samples
            sc.cycles.seed = seed
        else:
            shading.light = "STUDIO"
            shading.color_type = "TEXTURE"
        r.resolution_x, r.resolution_y, r.resolution_percentage = width, height, 100
        r.filepath = path
        r.image_settings.file_format = "PNG"
        bpy.ops.render.render(write_still=True)
    finally:
        (r.engine, r.resolution_x, r.resolution_y, r.resolution_percentage, r.filepath,
         sc.cycles.samples, sc.cycles.seed, sc.cycles.device, r.use_file_extension, sc.cycles.use_denoising,
         shading.light, shading.color_type, r.use_compositing, r.use_sequencer, r.use_multiview) = saved
    return engine


# ---------------------------------------------------------------- opening a .blend

def file_refusal(given, why):
    return Refusal("contract_violation", "file %r %s" % (given, why), reason="sandbox", field="file")


def readable_blend(k, given):
    """The real path of the `.blend` file.open may load: an absolute path whose name ends in
    `.blend` that, after resolving links (os.path.realpath), lies inside one of the session's
    project roots or its sandbox by path components, never through a HUMAN_ONLY component (in the
    path as given or as resolved). A missing file there is not_found."""
    if not os.path.isabs(given) or not given.endswith(".blend"):
        raise file_refusal(given, "is not an absolute path to a .blend file")
    if any(is_human_only(p) for p in given.replace(os.altsep or os.sep, os.sep).split(os.sep)):
        raise file_refusal(given, "is inside HUMAN_ONLY, which is for people only")
    resolved = os.path.realpath(given)
    folders = list(k.state.project_roots) + ([k.state.sandbox] if k.state.sandbox else [])
    for folder in folders:
        folder = os.path.realpath(folder)
        if resolved == folder or not inside(folder, resolved):
            continue
        if any(is_human_only(p) for p in os.path.relpath(resolved, folder).split(os.sep)):
            raise file_refusal(given, "resolves into HUMAN_ONLY (through a link), which is for people only")
        if not resolved.endswith(".blend"):
            raise file_refusal(given, "resolves to a file that is not a .blend (through a link)")
        if not os.path.isfile(resolved):
            raise not_found("file", "file", given)
        return resolved
    raise file_refusal(given, "is outside the project roots and the sandbox")


def open_blend(k, path):
    """Loads `path` with Python auto-execution off (no registered text block, no Python driver
    expression runs) as a file load: everything in it is the human's (Kernel.file_loaded)."""
    k.file_op(lambda: bpy.ops.wm.open_mainfile(filepath=path, load_ui=False, use_scripts=False))
    k.file_loaded()


@tool("file.open")
def file_open(k, params):
    given = req_str(params, "file")
    path = readable_blend(k, given)
    tx = k.shared.transaction
    if tx is not None:
        raise Refusal("contract_violation", "transaction %s is open; commit or roll it back before opening a file"
                      % tx[0], rule="transaction_open", transaction=tx[0])
    open_blend(k, path)
    k.state.seen.clear()
    return {"file": given, "scene": scene().name, "objects": len(scene().objects)}
