"""Taking the scene back to an earlier state, two ways.

Headless (`blender -b`, the bpy module): exact file snapshots. A `.blend` that keeps every
data-block, used data or not: Blender does not write data-blocks nobody uses (a material made
but not yet assigned, a mesh whose object was deleted) unless they have a fake user, so a plain
copy loses them and a rollback would delete them. Before a save, every unused data-block gets a
fake user; their names are kept in the file itself (a custom property of the scene, removed at
once from the live scene); after a load, those fake users are taken off again, so the loaded
scene equals the saved one, user counts included.

In the GUI: Blender's own undo history, never a file load (a load would take the human's file
path, undo history and unsaved state away). Every successful change by the agent is one undo
step named after the tool and its object (`Vibe: object.move Cube`), so Ctrl+Z takes it back;
a transaction marks where it began (a hidden scene property, `UNDO_MARK`, in its own step
`Vibe: begin tx-N`) and a rollback steps back until the mark is gone. Fingerprints of the scene
(`fingerprint`, `differences`) tell what the human changed meanwhile, and `human_activity` when
the human is in the middle of something an undo step cannot be made around (busy).
"""

import array
import contextlib
import json
import os
import tempfile
import traceback
import zlib

import bpy

from . import lock
from .envelope import Refusal, sanitize

MARK = "vibe_fake_users"


def id_collections():
    for attr in dir(bpy.data):
        value = getattr(bpy.data, attr, None)
        if isinstance(value, bpy.types.bpy_prop_collection) and attr not in ("window_managers", "screens",
                                                                               "workspaces", "libraries"):
            yield attr, value


def unused():
    """(collection, name) of every local data-block without users and without a fake user."""
    found = []
    for attr, collection in id_collections():
        for block in collection:
            if getattr(block, "library", None) is None and block.users == 0 and not block.use_fake_user:
                found.append((attr, block.name))
    return found


def save(path, file_op):
    """Saves an exact copy of the scene to `path` through `file_op` (the kernel's busy-aware
    file operation)."""
    marked = unused()
    for attr, name in marked:
        getattr(bpy.data, attr)[name].use_fake_user = True
    scene = bpy.context.scene
    scene[MARK] = json.dumps(marked)
    try:
        file_op(lambda: bpy.ops.wm.save_as_mainfile(filepath=path, copy=True, check_existing=False, compress=False))
    finally:
        del scene[MARK]
        for attr, name in marked:
            block = getattr(bpy.data, attr).get(name)
            if block is not None:
                block.use_fake_user = False


def load(path, file_op):
    """Loads `path` (saved by `save`) with Python auto-execution off and takes the fake users
    `save` added off again."""
    file_op(lambda: bpy.ops.wm.open_mainfile(filepath=path, load_ui=False, use_scripts=False))
    for scene in bpy.data.scenes:
        text = scene.get(MARK)
        if text is None:
            continue
        del scene[MARK]
        try:
            marked = json.loads(text)
        except ValueError:
            marked = []
        for attr, name in marked:
            collection = getattr(bpy.data, str(attr), None)
            block = collection.get(name) if collection is not None else None
            if block is not None:
                block.use_fake_user = False


def save_to_temp(file_op, prefix):
    """A snapshot in a new private temporary folder; its path (see `discard`)."""
    path = os.path.join(tempfile.mkdtemp(prefix=prefix), "snapshot.blend")
    save(path, file_op)
    return path


def discard(kept):
    """Forgets what a transaction or a python.exec kept: a snapshot file and its folder
    (headless), or the mark of an undo `Position` (GUI)."""
    if isinstance(kept, Position):
        clear_mark(kept.mark)
        return
    if not isinstance(kept, str):
        return
    try:
        os.remove(kept)
        os.rmdir(os.path.dirname(kept))
    except OSError:
        pass


# ================================================================ the GUI: Blender's undo history

# A custom property of the scene from a GUI transaction's begin step on (Scene > Custom
# Properties shows it while the transaction is open); the value names the kernel and transaction.
UNDO_MARK = "_vibe_transaction"
STEP_NAME_BYTES = 63  # Blender keeps undo step names of up to 63 bytes
# Tools that push no step of their own: the transaction tools manage the history themselves,
# file.open replaces it, and file.save and render.still leave the scene as it was.
NO_STEP = ("transaction.begin", "transaction.commit", "transaction.rollback", "file.save", "file.open",
           "render.still")
# Jobs during which the scene must not change under Blender (the human started them).
BUSY_JOBS = (("RENDER", "rendering"), ("OBJECT_BAKE", "baking"), ("COMPOSITE", "compositing"))
GEOMETRY_HASH_MAX_VERTICES = 200000  # bigger meshes are compared by their counts only


def uses_undo():
    """Whether changes are taken back through Blender's undo history (the GUI) rather than file
    snapshots (headless). The kernel's tests turn it on headless, where undo runs too."""
    return not bpy.app.background


class Position:
    """Where a GUI transaction began in the undo history, and what the agent did since."""

    def __init__(self, tx_id, mark, begin):
        self.tx_id = tx_id
        self.mark = mark  # the value of UNDO_MARK from the begin step on
        self.begin = begin  # the scene's fingerprint at begin
        self.last = begin  # the fingerprint as the agent's last call left it
        self.steps = 0  # undo steps the agent pushed since its begin step
        self.human = []  # what the human changed between the agent's calls


class Guard:
    """The state before one python.exec, to return to if the run fails or breaks the actuator
    lock: a file snapshot headless, the last undo step in the GUI. `restore` says whether the
    scene is as it was."""

    def __init__(self, k):
        self.k = k
        self.path = None
        if not uses_undo():
            self.path = save_to_temp(k.file_op, "vibe-exec-")
            return
        why = undo_unavailable()
        if why is not None:
            raise undo_refusal(why, "python.exec could not be taken back if it failed")
        self.before = fingerprint()

    def restore(self):
        if self.path is not None:
            load(self.path, self.k.file_op)
            return True
        return take_back("Vibe: python.exec (failed, taken back)") and fingerprint() == self.before

    def close(self):
        discard(self.path)


def take_back(message):
    """Returns the scene to the last undo step from changes that are in no step. Stepping back
    and forth would not: Blender's undo keeps, as they are in memory, the data-blocks that are
    alike in both steps, which is where such changes are. So the changes become a step of their
    own (which is then the next redo, until a new step replaces it) and that step is undone."""
    push(message)
    return step("undo")


# ---------------------------------------------------------------- steps

def window_override():
    """A context with a window, which Blender's undo operators need (a timer in the GUI has one;
    anything else falls back to the first window)."""
    if bpy.context.window is not None:
        return contextlib.nullcontext()
    windows = bpy.context.window_manager.windows
    if not windows:
        raise RuntimeError("Blender has no window to step through the undo history in")
    return bpy.context.temp_override(window=windows[0])


def push(message):
    """One undo step holding the scene as it is now."""
    message = message.encode("utf-8")[:STEP_NAME_BYTES].decode("utf-8", "ignore")
    with window_override():
        bpy.ops.ed.undo_push(message=message)


def can_step(direction):
    with window_override():
        return (bpy.ops.ed.undo if direction == "undo" else bpy.ops.ed.redo).poll()


def step(direction):
    """One step back ("undo") or forward ("redo") through the history; False at its end."""
    with window_override():
        operator = bpy.ops.ed.undo if direction == "undo" else bpy.ops.ed.redo
        return operator.poll() and "FINISHED" in operator()


def steps(direction, count):
    """`count` steps in `direction`; whether all of them were taken."""
    return all(step(direction) for _ in range(count))


def step_name(tool, params):
    """`Vibe: object.move Cube`: the tool and the object (or collection, material) it named."""
    name = params.get("name")
    return "Vibe: %s %s" % (tool, name) if isinstance(name, str) else "Vibe: %s" % tool


def undo_unavailable():
    """Why Blender's undo cannot take the agent's changes back, or None."""
    edit = bpy.context.preferences.edit
    if edit.undo_steps < 2:
        return "Undo Steps is %d in Preferences > Editing > Undo" % edit.undo_steps
    if not getattr(edit, "use_global_undo", True):
        return "Global Undo is off in Preferences > Editing > Undo"
    return None


def undo_refusal(why, consequence):
    return Refusal("contract_violation", "Blender's undo is not available (%s): %s; the human can turn it on"
                   % (why, consequence), rule="undo_unavailable", why=why)


def gui_position(k):
    """The undo position of this session's open transaction, or None."""
    tx = k.state.transaction
    return tx[1] if tx is not None and isinstance(tx[1], Position) else None


def set_mark(mark):
    bpy.context.scene[UNDO_MARK] = mark


def marked(mark):
    return any(scene.get(UNDO_MARK) == mark for scene in bpy.data.scenes)


def clear_mark(mark):
    for scene in bpy.data.scenes:
        if scene.library is None and scene.get(UNDO_MARK) == mark:
            del scene[UNDO_MARK]


def clear_other_marks(keep):
    """Takes the marks of ended transactions off (a step back into their history brings them
    back), so that the agent's steps do not carry them into the human's file."""
    for scene in bpy.data.scenes:
        if scene.library is None and UNDO_MARK in scene and scene[UNDO_MARK] != keep:
            del scene[UNDO_MARK]


# ---------------------------------------------------------------- one agent call, one step

def run_as_step(k, name, fn, params):
    """Runs a mutating tool in the GUI as one undo step named after it. Inside a transaction it
    first notes what the human changed since the agent's last call, and refuses a step that
    could push the transaction's begin out of the history; afterwards it keeps the fingerprint
    the call left. A tool that fails unexpectedly (typed tools check everything before changing
    anything, so this is rare) is taken back to the last step."""
    if name in NO_STEP:
        return fn(k, params)
    position = gui_position(k)
    if position is not None:
        room_for(position, 2 if name == "python.exec" else 1)
        note_human_changes(position)
    try:
        result = fn(k, params)
    except Refusal:
        raise
    except Exception as exc:  # noqa: BLE001 - taken back, then an envelope
        message = sanitize("".join(traceback.format_exception_only(type(exc), exc)))
        k.state.log_console(name, message)
        record = lock.record_by_name(k.shared)
        rolled_back = take_back("Vibe: %s (failed, taken back)" % name)
        lock.restore_record(k.shared, record)
        raise Refusal("execution_failed", message, reason="mutation_failed", rolled_back=rolled_back)
    clear_other_marks(position.mark if position is not None else None)
    push(step_name(name, params))
    if position is not None:
        position.steps += 1
        position.last = fingerprint()
    return result


def room_for(position, pushes):
    """Refuses a call whose steps could push the transaction's begin out of Blender's history
    (it keeps Preferences > Editing > Undo Steps steps; stepping back to before the begin takes
    one step more than the agent made)."""
    limit = bpy.context.preferences.edit.undo_steps
    if position.steps + 1 + pushes > limit:
        raise Refusal("contract_violation", "transaction %s holds %d undo steps and Blender keeps %d (Preferences > "
                      "Editing > Undo Steps); one more could push its begin out of the history: commit or roll "
                      "back first" % (position.tx_id, position.steps + 1, limit), rule="undo_history_full",
                      transaction=position.tx_id, steps=position.steps + 1, undo_steps=limit)


def note_human_changes(position):
    for change in differences(position.last, fingerprint()):
        if change not in position.human:
            position.human.append(change)


# ---------------------------------------------------------------- transactions

def begin(k, tx_id, label):
    """The state a transaction returns to: a snapshot file headless, a `Position` in the GUI
    (its own undo step `Vibe: begin tx-N`, whose scene carries the mark)."""
    if not uses_undo():
        return save_to_temp(k.file_op, "vibe-tx-")
    why = undo_unavailable()
    if why is not None:
        raise undo_refusal(why, "a transaction could not be rolled back without reloading the human's file")
    mark = "%s/%s" % (k.instance, tx_id)
    set_mark(mark)
    push("Vibe: begin %s%s" % (tx_id, " (%s)" % label if label else ""))
    return Position(tx_id, mark, fingerprint())


def roll_back(k, kept, force):
    """Returns the scene to a transaction's begin: reloads its snapshot headless (the active
    object kept by name), steps back through the undo history in the GUI (`step_back`)."""
    if isinstance(kept, Position):
        # Stepping through the history empties the modifier record (wire.install_busy_handlers);
        # a refused rollback walks back and forth and must leave it as it was.
        record = lock.record_by_name(k.shared)
        try:
            step_back(kept, force)
        finally:
            lock.restore_record(k.shared, record)
        return
    active = bpy.context.view_layer.objects.active
    active_name = active.name if active else None
    load(kept, k.file_op)
    objects = bpy.context.scene.objects
    if active_name and active_name in objects:
        bpy.context.view_layer.objects.active = objects[active_name]


def step_back(position, force):
    """Rolls a GUI transaction back through the undo history to where it began. Refused, with the
    scene and the history as they were and the transaction still open, when the human changed
    the scene since the begin (unless `force`, which takes the human's steps back too), or when
    the begin is no longer in the history."""
    if not marked(position.mark):
        back_from_before_begin(position, force)
        return
    changed = position.human + [c for c in differences(position.last, fingerprint()) if c not in position.human]
    if changed and not force:
        raise human_edits(position, changed)
    # Back until the mark is gone: the step before the begin (the begin added nothing but the mark).
    limit = bpy.context.preferences.edit.undo_steps + 1
    undone = 0
    while marked(position.mark) and undone < limit and step("undo"):
        undone += 1
    if marked(position.mark):
        steps("redo", undone)
        raise Refusal("execution_failed", "transaction %s began further back than Blender's undo history reaches "
                      "(it keeps %d steps); nothing was rolled back" % (position.tx_id, limit - 1),
                      reason="undo_history_exhausted", rolled_back=False, transaction=position.tx_id)
    extra = undone - 1 - position.steps
    if extra > 0 and not force:
        steps("redo", undone)
        raise human_edits(position, changed, extra)
    if fingerprint() != position.begin:
        # Something that was in no undo step yet when the transaction began is in its begin step.
        if not (step("redo") and fingerprint() == position.begin):
            differ = differences(position.begin, fingerprint())
            went_back = undone - 1 if marked(position.mark) else undone
            steps("redo", went_back)
            raise Refusal("execution_failed", "stepping back to transaction %s did not give the scene it began "
                          "with (%s); nothing was rolled back" % (position.tx_id, describe(differ)),
                          reason="undo_mismatch", rolled_back=False, changed=differ[:20],
                          transaction=position.tx_id)
        clear_mark(position.mark)


def back_from_before_begin(position, force):
    """The human undid past the transaction's begin. If the scene is as it began, that is the
    rollback; otherwise `force` steps forward to the begin (redoing what the human undid)."""
    now = fingerprint()
    if now == position.begin:
        return
    if not force:
        changed = differences(position.begin, now) or [{"name": "", "what": "undid past transaction.begin"}]
        raise human_edits(position, changed)
    limit = bpy.context.preferences.edit.undo_steps + 1
    redone = 0
    while not marked(position.mark) and redone < limit and step("redo"):
        redone += 1
    if not marked(position.mark) or fingerprint() != position.begin:
        steps("undo", redone)
        raise Refusal("execution_failed", "the human undid past transaction %s and changed the scene since: its "
                      "begin is no longer in Blender's undo history; nothing was rolled back" % position.tx_id,
                      reason="undo_history_lost", rolled_back=False, transaction=position.tx_id)
    clear_mark(position.mark)


def human_edits(position, changed, extra_steps=0):
    changed = list(changed)
    if extra_steps and not changed:
        changed = [{"name": "", "what": "%d undo steps the agent did not make (a selection or a setting the kernel "
                    "does not compare)" % extra_steps}]
    return Refusal("contract_violation", "the human changed the scene since transaction %s began (%s): rolling back "
                   "would revert their work too. The transaction stays open: commit keeps both, rollback with "
                   "`force: true` reverts both" % (position.tx_id, describe(changed)), rule="human_edits",
                   transaction=position.tx_id, changed=changed[:20], more=max(0, len(changed) - 20),
                   human_steps=max(0, extra_steps))


def describe(changed, limit=5):
    text = "; ".join(("%s %s" % (c["name"], c["what"])).strip() for c in changed[:limit])
    return text + ("; %d more" % (len(changed) - limit) if len(changed) > limit else "")


# ---------------------------------------------------------------- fingerprints

def fingerprint():
    """The scene's content as the human would see it, cheap enough to take around every agent
    call in a GUI transaction (about 5 ms at 1000 objects): each object's type, data, transform,
    parent, collections, modifiers, materials, visibility, selection and data settings, its keys
    and its data's (`animation_signature`), each mesh's counts and vertex positions, the scene's
    collections, the surface materials, the scene camera, the world and the timeline's range and
    frame rate (not the current frame: scrubbing is no edit, and Blender's undo keeps it)."""
    from .animate import animation_signature  # here: animate imports the tools, which import this module

    scene = bpy.context.scene
    linked = {}
    for collection in [scene.collection] + list(scene.collection.children_recursive):
        for obj in collection.objects:
            linked.setdefault(obj.name, []).append(collection.name)
    active = bpy.context.view_layer.objects.active
    meshes = {}
    objects = {}
    for obj in scene.objects:
        data = obj.data
        if obj.type == "MESH" and data.name not in meshes:
            meshes[data.name] = mesh_signature(data)
        objects[obj.name] = {
            "type": obj.type,
            "data": data.name if data is not None else None,
            "location": obj.location[:],
            "rotation": obj.rotation_euler[:] + obj.rotation_quaternion[:] + (obj.rotation_mode,),
            "scale": obj.scale[:],
            "parent": obj.parent.name if obj.parent else None,
            "collections": tuple(sorted(linked.get(obj.name, ()))),
            "modifiers": tuple(modifier_signature(m) for m in obj.modifiers),
            "materials": tuple(s.material.name if s.material else None for s in obj.material_slots),
            "geometry": meshes.get(data.name) if obj.type == "MESH" else None,
            "settings": data_signature(obj),
            "visibility": (obj.hide_get(), obj.hide_viewport, obj.hide_render),
            "selection": (obj.select_get(), obj == active),
            "animation": animation_signature(obj),
        }
    collections = {c.name: (tuple(sorted(ch.name for ch in c.children)), tuple(sorted(o.name for o in c.objects)))
                   for c in scene.collection.children_recursive}
    materials = {m.name: material_signature(m) for m in bpy.data.materials if not m.is_grease_pencil}
    look = {"scene camera": scene.camera.name if scene.camera else None,
            "world": world_signature(scene.world),
            "timeline": (scene.frame_start, scene.frame_end, scene.render.fps, scene.render.fps_base)}
    return {"objects": objects, "collections": collections, "materials": materials, "look": look}


def mesh_signature(mesh):
    count = len(mesh.vertices)
    signature = (count, len(mesh.edges), len(mesh.polygons))
    if count > GEOMETRY_HASH_MAX_VERTICES:
        return signature
    coordinates = array.array("f", bytes(12 * count))
    mesh.vertices.foreach_get("co", coordinates)
    return signature + (zlib.crc32(coordinates),)


MODIFIER_SETTINGS = ("levels", "render_levels", "count", "width", "segments", "thickness", "show_viewport",
                     "show_render")


def modifier_signature(modifier):
    return (modifier.name, modifier.type) + tuple(getattr(modifier, f, None) for f in MODIFIER_SETTINGS)


LIGHT_SETTINGS = ("shadow_soft_size", "size", "angle", "spot_size", "spot_blend")


def data_signature(obj):
    data = obj.data
    if obj.type == "LIGHT":
        return (data.type, data.energy, tuple(data.color)) + tuple(getattr(data, f, None) for f in LIGHT_SETTINGS)
    if obj.type == "CAMERA":
        return (data.type, data.lens, data.ortho_scale, data.sensor_width, data.clip_start, data.clip_end)
    return None


def world_signature(world):
    if world is None:
        return None
    node = next((n for n in world.node_tree.nodes if n.type == "BACKGROUND"), None) if world.node_tree else None
    if node is None:
        return (world.name, tuple(world.color))
    return (world.name, tuple(node.inputs["Color"].default_value), node.inputs["Strength"].default_value)


def material_signature(material):
    tree = material.node_tree
    if tree is None:
        return None
    for node in tree.nodes:
        if node.type == "BSDF_PRINCIPLED":
            return tuple(tuple(i.default_value) if hasattr(i.default_value, "__len__") else i.default_value
                         for i in node.inputs if i.name in ("Base Color", "Metallic", "Roughness"))
    return ()


OBJECT_CHANGES = (("type", "replaced"), ("data", "data replaced"), ("location", "moved"),
                  ("rotation", "rotated"), ("scale", "scaled"), ("parent", "parent changed"),
                  ("collections", "collections changed"), ("modifiers", "modifiers changed"),
                  ("materials", "materials changed"), ("geometry", "geometry edited"),
                  ("settings", "settings changed"), ("visibility", "hidden or shown"),
                  ("selection", "selection changed"), ("animation", "keys changed"))


def differences(old, new):
    """What changed from fingerprint `old` to `new`: [{"name", "what"}], objects first (added,
    removed, or what changed about them: "keys changed" for a key added, moved, removed or
    retimed on it or its data), then collections and materials, then the scene camera, the world
    and the timeline ("timeline": "changed")."""
    changed = []
    for name in sorted(set(old["objects"]) | set(new["objects"])):
        was, now = old["objects"].get(name), new["objects"].get(name)
        if was is None:
            changed.append({"name": name, "what": "added"})
        elif now is None:
            changed.append({"name": name, "what": "removed"})
        else:
            what = [word for key, word in OBJECT_CHANGES if was[key] != now[key]]
            if what:
                changed.append({"name": name, "what": ", ".join(what)})
    for kind in ("collection", "material"):
        was, now = old[kind + "s"], new[kind + "s"]
        for name in sorted(set(was) | set(now)):
            if name not in now:
                changed.append({"name": name, "what": kind + " removed"})
            elif name not in was:
                changed.append({"name": name, "what": kind + " added"})
            elif was[name] != now[name]:
                changed.append({"name": name, "what": kind + " changed"})
    for name, value in sorted(new.get("look", {}).items()):
        if old.get("look", {}).get(name) != value:
            changed.append({"name": name, "what": "changed"})
    return changed


# ---------------------------------------------------------------- what the human is doing

def human_activity():
    """What the human is in the middle of, during which the agent may not change the scene
    (busy), or None: a render, bake or compositing job (the scene must not change under it);
    a modal operator, such as a grab with the mouse (where Blender lists them: Window.modal_operators,
    not in 3.4); an object in Edit Mode, Sculpt Mode, Weight Paint and the like. In those modes
    an undo step holds the edited data only: an agent change then would be no undo step of its
    own (Ctrl+Z would not take it back, and stepping back and forth through the history could
    lose it), so every change waits, not only changes to the edited object."""
    for job, doing in BUSY_JOBS:
        try:
            if bpy.app.is_job_running(job):
                return doing
        except (AttributeError, TypeError):  # not in this Blender
            pass
    for window in bpy.context.window_manager.windows:
        for operator in getattr(window, "modal_operators", ()):
            return "running %s (%s)" % (operator.name, operator.bl_idname)
    layers = [w.view_layer for w in bpy.context.window_manager.windows] or [bpy.context.view_layer]
    for layer in layers:
        active = layer.objects.active
        if active is not None and active.mode != "OBJECT":
            editing = sorted(o.name for o in layer.objects if o.mode == active.mode)
            return "editing %s in %s mode" % (", ".join(editing), context_mode(active))
    return None


def context_mode(obj):
    """Blender's name of the mode `obj` is in, as the status bar knows it (EDIT_MESH, SCULPT,
    PAINT_WEIGHT...) when it is the context's, else the object's own (EDIT, SCULPT...)."""
    try:
        if bpy.context.view_layer.objects.active == obj and bpy.context.mode != "OBJECT":
            return bpy.context.mode
    except AttributeError:
        pass
    return obj.mode
