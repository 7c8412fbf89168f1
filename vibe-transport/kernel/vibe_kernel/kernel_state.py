"""What agent code must leave as it found it in the kernel's own process, checked at run time
after each run that may write (the read-only proof stores into nothing but its own names):

- the handler lists of bpy.app.handlers: a function left there runs on the next frame change,
  load or save, outside the call's deadline, rollback and actuator lock (and a rollback's own
  reload fires load_post);
- the Python-level attributes of shared classes: those the modules of the allowed packages, of
  bpy's Python side and of the kernel define or hold (a patched `json.JSONEncoder.encode` writes
  the kernel's next answers; `type(bpy.ops.mesh.primitive_cube_add).idname_py` runs in the
  kernel's next save), and bpy's classes, which the code reaches through `type(x)`
  (`Context.copy`, a panel's `draw`, `Mesh.from_pydata`), with the attributes of the functions
  they hold (`mesh.from_pydata.x`, a bound method, reads the function's `x`) and their `bl_rna`;
- the draw-function lists of menus, panels and headers (`Menu.append(f)`: f runs on redraw);
- the lists, dicts and sets those classes hold themselves under names that do not start with
  `_`, changed in place (no store on the class: a preset operator's `preset_defines`, lines
  its `execute` runs with `exec` and writes into the preset's file when a person adds a
  preset; an operator class is reached through `bl_rna_get_subclass_py` or an operator run
  with undo, `window_manager.operators`), compared item by item by identity and put back;
- the key configurations, key maps and key map items of the window manager (an item added
  runs its operator on a key press in the GUI; they are not in the .blend, so no rollback
  removes them): key configurations, maps and items the run added are removed, and a run that
  removed some is refused (they cannot be put back);
- the text blocks registered as modules (`use_module`): one newly registered or rewritten runs
  unconfined when the file is opened with auto-run on. The scene's rollback puts these back;
- the writable settings of the preferences' file paths, editing and system sections (script
  directories, auto-run and its exclusions, undo steps and memory, ...; not those Blender
  writes itself, PREFERENCES_BLENDER_WRITES) and the list of add-ons:
  agent code reaches the preferences only through a callback Blender hands the real context
  (an update function of a property it defines; `bpy.context` itself is a view, see
  module_views.py), and a change there outlives the call (and the file) once the preferences
  are saved. Values are put back; items added to their lists are removed; items removed and
  add-ons enabled or disabled are named, not put back.

A change is put back before the scene is rolled back, and the call is refused (contract_violation,
reason `security_block`, rule `kernel_state`, naming what changed). For bpy's classes whose
metaclass is Python's (`_RNAMeta`: panels, menus, operators, most of bpy.types) a hook on that
metaclass notes each store, put on only while agent code runs (Blender sets attributes on them
itself when it unregisters at exit). The others are compared with a copy of their attributes
made before the run (~1,000 classes), and those bpy made during the run (on the first
`type(x)` of their kind) with what bpy gives a new class (`bl_rna`, special names, RNA
functions). A `bl_rna` that appears, changes or goes during the run passes only as a
description of a struct or none (bpy sets it on new classes, on 3.4 on a class's first use, on
5.2 anew or not at all during some operators). Not compared: the code's own
classes and special names, which agent code cannot spell (Python makes an empty
`__annotations__` on the first read). This is the boundary for these objects in a kernel that
lives on after agent code (the GUI add-on, an unconfined kernel); a jailed kernel that ran agent
code is retired anyway.

Not covered here: timers (Blender cannot list them; agent code reaches bpy.app.timers only
through bpy.app, whose view leaves them out, see module_views.py); classes not held by a
module at its top level; changes to existing key map items in place; objects the modules
share beyond their views' copies (the attributes of a module's functions, containers inside
containers, a container a class came to hold since the last listing), which agent_code.WRITING_CODE_RAN
answers for the read-only path (read_only.reaches_no_leftovers: code that reaches only Blender's
data, whose Python side is the classes compared here and the attributes of the functions they
hold, which a method read through an instance reads).
"""

import collections
import sys
import types
import weakref

import bpy

from .code_policy import IMPORT_ALLOWLIST
from .module_views import IMMUTABLE_TYPE

MISSING = object()

# (class, name) -> what the class had under that name before the run's first store to it.
NOTED = {}


def _note(cls, name):
    NOTED.setdefault((cls, name), vars(cls).get(name, MISSING))


def _hooked_setattr(cls, name, value):
    _note(cls, name)
    type.__setattr__(cls, name, value)


def _hooked_delattr(cls, name):
    _note(cls, name)
    type.__delattr__(cls, name)


def rna_metaclass():
    """bpy's Python metaclass of registrable classes (_bpy_types._RNAMeta, bpy_types.RNAMeta)."""
    return type(bpy.types.Panel)


# Modules whose classes agent code can reach by `type(x)` of what they hand out: the allowed
# packages (code_policy.IMPORT_ALLOWLIST), bpy's Python modules and the kernel's own.
SHARED_MODULE_PREFIXES = ("bpy", "_bpy", "bl_", "bmesh", "addon_utils", "rna_", "nodeitems_", "gpu_extras",
                          "keyingsets_", "vibe_kernel")


def ignored(name):
    """Names libraries set on shared classes themselves and agent code cannot spell: special
    names (the gate refuses them as attributes; Python makes an empty `__annotations__` on the
    first read, as `isinstance(1, typing.SupportsInt)` does)."""
    return name.startswith("__") and name.endswith("__")


def bpy_description(cls, name, value):
    """Whether `value`, now under `name` in `cls` (MISSING: not there), is what bpy leaves as a
    class's `bl_rna`: a description of a struct (a `bpy.types.Struct`; on 3.4 an instance of the
    class itself), or none. bpy sets it when it makes a class, on 3.4 when the class is first
    used, and on 5.2 anew or not at all during some operators (`object.quick_fur` rebuilds the
    geometry-node interface structs and frees the old ones: putting an old description back
    would leave a dangling one). None of these runs code when read. Anything else there (agent
    code can spell it: `C = type(x); C.bl_rna = map(...)`) is read by every instance of the
    class, the kernel's own reads included."""
    if name != "bl_rna":
        return False
    return value is MISSING or type(value) is bpy.types.Struct or type(value) is cls


def relisted(make):
    """`make(*args)`, made again only when the key it is called with changes: lists that grow
    only when a module is imported or a class made (the key is a count of those)."""
    memo = {"key": None, "list": []}

    def listed(key, *args):
        if memo["key"] != key:
            memo.update(key=key, list=make(*args))
        return memo["list"]

    return listed


# metaclass -> whether the hook sees stores to its classes (a few metaclasses, ~1,000 classes).
_HOOKED = weakref.WeakKeyDictionary()


def hooked(cls):
    """Whether the hook sees stores to `cls`: its metaclass reaches the hooked one's
    __setattr__ without one of its own on the way (bpy's property-group metaclass has one)."""
    kind = type(cls)
    seen = _HOOKED.get(kind)
    if seen is None:
        seen = _HOOKED[kind] = metaclass_hooked(kind)
    return seen


def metaclass_hooked(kind):
    meta = rna_metaclass()
    for base in kind.__mro__:
        if base is meta:
            return True
        if "__setattr__" in vars(base) or "__delattr__" in vars(base):
            return False
    return False


def bpy_classes():
    """bpy's classes: bpy_struct and its subclasses (without recursion), but the code's own."""
    found, seen, stack = [], set(), [bpy.types.bpy_struct]
    while stack:
        cls = stack.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        if cls.__module__ != "__agent__":  # the code's own subclasses are its own
            found.append(cls)
        stack.extend(type.__subclasses__(cls))
    return found


def walk_bpy_classes(classes):
    """Of bpy's `classes`: those whose stores the hook does not see (their metaclass is not the
    hooked one), the draw-function lists of menus, panels and headers (`Menu.append(f)` grows
    one without storing on the class), and the ids of all."""
    unhooked, draw_lists, known = [], [], set()
    for cls in classes:
        known.add(id(cls))
        if not hooked(cls):
            unhooked.append(cls)
        draw_funcs = getattr(vars(cls).get("draw"), "_draw_funcs", None)
        if isinstance(draw_funcs, list):
            draw_lists.append(("%s.draw" % cls.__name__, draw_funcs, list(draw_funcs)))
    return unhooked, draw_lists, known


@relisted
def _class_functions(classes):
    found, seen = [], set()
    for cls in classes:
        for value in list(vars(cls).values()):
            if isinstance(value, (classmethod, staticmethod)):
                value = value.__func__
            if isinstance(value, types.FunctionType) and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
    return found


def class_functions(classes):
    """The Python functions `classes` hold (methods, class and static methods), listed again
    only when the number of classes changed (a class store is compared on its own). A method
    read through an instance is a bound method, whose attribute reads fall through to the
    function's own attributes: `mesh.from_pydata.spy` reads what `type(mesh).from_pydata.spy =
    ...` stored, through Blender's data alone."""
    return _class_functions(len(classes), classes)


def function_attributes(functions):
    """[(function, a copy of its attributes, or None when it has none)]: bpy's own functions
    hold almost none (a draw function's `_draw_funcs`), so most cost a length."""
    return [(function, dict(now) if (now := vars(function)) else None) for function in functions]


def function_changes(before):
    """Puts back the attributes of the functions in `before` (from function_attributes) and
    names those changed."""
    changed = []
    for function, had in before:
        now = vars(function)
        if had is None:
            if not now:
                continue
            had = {}
        elif len(now) == len(had) and all(now.get(name, MISSING) is value for name, value in had.items()):
            continue
        for name in set(now) - set(had):
            del now[name]
        now.update(had)
        changed.append("%s (attributes of the function)" % function.__qualname__)
    return changed


# The containers whose items the check compares, by exact type: iterating them runs no code of
# theirs or of what they hold.
CONTAINER_TYPES = (list, dict, set, collections.OrderedDict, collections.defaultdict)


@relisted
def _class_containers(classes):
    return [(cls, name) for cls in classes for name, value in list(vars(cls).items())
            if type(value) in CONTAINER_TYPES and not name.startswith("_")]


def class_containers(classes):
    """[(owner, container, its items)] of the lists, dicts and sets `classes` hold themselves
    under names agent code can spell (~1,400 on bpy 5.0.1: a panel's `COMPAT_ENGINES`, an
    operator's `bl_options`, a preset operator's `preset_defines`, whose strings its `execute`
    runs with `exec` when a person adds a preset). Private names, which the gate refuses
    (`private_access`), are left out: Blender keeps its own bookkeeping there and operators
    change it (`wm.tool_set_by_id` notes a tool group's last tool in
    `VIEW3D_PT_tools_active._tool_group_active`). Which class holds one under which name is
    listed again only when the number of classes changed; a container a class comes to hold in
    between (a store, which the check compares on its own) is compared from the next listing."""
    found = []
    for cls, name in _class_containers(len(classes), classes):
        container = vars(cls).get(name)
        if type(container) in CONTAINER_TYPES:
            found.append(("%s.%s" % (cls.__name__, name), container, items_of(container)))
    return found


def items_of(container):
    """What `container` holds, read without hashing or comparing any of it: its items (a
    dict's as pairs), in order."""
    return list(container.items()) if isinstance(container, dict) else list(container)


def same_items(now, had, pairs):
    """Whether two readings of a container (items_of) hold the same objects in the same order,
    by identity; `pairs` for a dict's, new tuples each reading, whose halves are compared."""
    if len(now) != len(had):
        return False
    if pairs:
        return all(key is key_had and value is value_had for (key, value), (key_had, value_had) in zip(now, had))
    return all(item is item_had for item, item_had in zip(now, had))


def container_changes(before):
    """Puts back the containers in `before` (from class_containers) whose items changed in
    place (compared by identity: nothing the code put there runs) and names them."""
    changed = []
    for owner, container, had in before:
        if same_items(items_of(container), had, isinstance(container, dict)):
            continue
        if isinstance(container, list):
            container[:] = had
        else:  # the items put back are those it held: hashing them runs nothing of the code's
            container.clear()
            container.update(had)
        changed.append("%s (changed in place)" % owner)
    return changed


def made_during_run(known):
    """bpy's classes made since `known` (from walk_bpy_classes) whose stores the hook does not
    see, with what bpy gives such a class: names `ignored` (special names) and its RNA
    functions (`bpy_func`: a node type's `input_template`), which run nothing when read; its
    `bl_rna` is judged by `bpy_description`. bpy makes such a class for a kind of data the first
    time code reaches it (`type(scene.render)`), and code could store on it before the run
    ends; the first walk cannot have listed it."""
    rna_function = bpy.types.bpy_func
    return [(cls, {name: value for name, value in vars(cls).items()
                   if ignored(name) or type(value) is rna_function})
            for cls in bpy_classes() if id(cls) not in known and not hooked(cls)]


@relisted
def _module_classes():
    found, seen = [], set()
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in IMPORT_ALLOWLIST and not name.startswith(SHARED_MODULE_PREFIXES):
            continue
        for value in list(getattr(module, "__dict__", {}).values()):
            if (isinstance(value, type) and not value.__flags__ & IMMUTABLE_TYPE
                    and id(value) not in seen and not hooked(value)):
                seen.add(id(value))
                found.append(value)
    return found


def module_classes():
    """The classes the shared modules define or hold, that Python lets code change and the hook
    does not see; listed again only when modules were imported since."""
    return _module_classes(len(sys.modules))


def handler_lists():
    handlers = bpy.app.handlers
    return [(name, getattr(handlers, name)) for name in dir(handlers)
            if not name.startswith("_") and isinstance(getattr(handlers, name), list)]


def key_map_key(km):
    return km.name, km.space_type, km.region_type


def last_id(items):
    return items[-1].id if len(items) else None


def key_maps():
    """[(key configuration's name, is it the user's, {key map: (item count, id of the last item)})]
    in order. By name, not by pointer: Blender rebuilds the user key configuration's maps (new
    pointers, the same names) when an operator finds the key maps changed."""
    user = bpy.context.window_manager.keyconfigs.user
    found = []
    for kc in bpy.context.window_manager.keyconfigs:
        maps = {}
        for km in kc.keymaps:
            items = km.keymap_items
            maps[key_map_key(km)] = (len(items), last_id(items))
        found.append((kc.name, kc == user, maps))
    return found


def registered_texts():
    """text block -> its source, for those registered as modules."""
    return {text.as_pointer(): text.as_string() for text in bpy.data.texts if text.use_module}


def key_map_changes(before):
    """Removes the key configurations, maps and items added since `before` and names them, with
    the maps whose items were removed or changed at the end (refused, not put back). In the
    user's configuration, which Blender rebuilds from the others, maps are compared by their
    item counts only and none is removed."""
    changed = []
    keyconfigs = bpy.context.window_manager.keyconfigs
    while len(keyconfigs) > len(before):  # key configurations are added at the end
        added = keyconfigs[len(keyconfigs) - 1]
        changed.append("key configuration %s" % added.name)
        keyconfigs.remove(added)
    for kc, (name, users, maps) in zip(list(keyconfigs), before):
        if kc.name != name:
            changed.append("key configuration %s (not put back)" % name)
            continue
        for km in list(kc.keymaps):
            had = maps.get(key_map_key(km))
            if had is None:
                changed.append("key map %s" % km.name)
                if not users:
                    kc.keymaps.remove(km)
                continue
            items = km.keymap_items
            count, last = had
            if len(items) > count:
                changed.append("key map %s" % km.name)
                while len(items) > count:
                    items.remove(items[len(items) - 1])
            if len(items) != count or (not users and last_id(items) != last):
                changed.append("key map %s (items removed, not put back)" % km.name)
        if len(kc.keymaps) < len(maps):
            changed.append("key configuration %s (maps removed, not put back)" % name)
    if len(keyconfigs) < len(before):
        changed.append("key configurations removed (not put back)")
    return changed


# The sections of the preferences compared, and how deep below them (structs in structs).
PREFERENCE_SECTIONS = ("filepaths", "edit", "system")
PREFERENCE_DEPTH = 3
# Settings Blender itself writes while agent code runs, none of which runs code or names a
# place code comes from: the GPU backend it picked, which bpy 5.2 writes over `AUTO` when a
# render first starts the GPU (a workbench `render.render()` was refused for it).
PREFERENCES_BLENDER_WRITES = frozenset({"preferences.system.gpu_preferred_device"})


def plain(value):
    """A setting's value as something `==` compares: arrays as tuples (nested ones too)."""
    if type(value).__name__ == "bpy_prop_array":
        return tuple(plain(v) for v in value)
    return value


def preference_settings():
    """path -> (struct, identifier, value) for each writable setting of PREFERENCE_SECTIONS, and
    path -> (collection, length) for their lists and the add-ons; walked afresh each time (an
    item the code removed must never be read through an old reference)."""
    prefs = bpy.context.preferences
    values, lists = {}, {"preferences.addons": (prefs.addons, len(prefs.addons))}
    stack = [(getattr(prefs, name), "preferences." + name, 0) for name in PREFERENCE_SECTIONS]
    while stack:
        struct, path, depth = stack.pop()
        for prop in struct.bl_rna.properties:
            name = prop.identifier
            if name == "rna_type":
                continue
            if prop.type == "POINTER":
                child = getattr(struct, name)
                if child is not None and depth < PREFERENCE_DEPTH and not isinstance(child, bpy.types.ID):
                    stack.append((child, "%s.%s" % (path, name), depth + 1))
            elif prop.type == "COLLECTION":
                items = getattr(struct, name)
                lists["%s.%s" % (path, name)] = (items, len(items))
                if depth < PREFERENCE_DEPTH:
                    stack.extend((item, "%s.%s[%d]" % (path, name, i), depth + 1) for i, item in enumerate(items))
            elif not prop.is_readonly and "%s.%s" % (path, name) not in PREFERENCES_BLENDER_WRITES:
                values["%s.%s" % (path, name)] = (struct, name, plain(getattr(struct, name)))
    return values, lists


def preference_changes(before):
    """Puts back the settings changed since `before` ({path: value}, {path: length}), removes
    the list items added, and names them, with what cannot be put back (items removed, add-ons
    enabled or disabled)."""
    changed = []
    before_values, before_lists = before
    values, lists = preference_settings()
    removed = False
    for path, (items, count) in lists.items():
        had = before_lists.get(path)
        if had is None:
            continue  # a list inside an item the code added: that item goes below
        if path != "preferences.addons":
            while len(items) > had and hasattr(items, "remove"):
                items.remove(items[len(items) - 1])
                removed = True
        if len(items) != had:
            changed.append("%s (not put back)" % path)
        elif count != had:
            changed.append(path)
    if removed:
        values = preference_settings()[0]  # again: the removals changed the paths
    for path, (struct, name, value) in values.items():
        had = before_values.get(path, MISSING)
        if had is not MISSING and had != value:
            try:
                setattr(struct, name, had)
                changed.append(path)
            except (AttributeError, TypeError, ValueError):
                changed.append("%s (not put back)" % path)
    changed += ["%s (not put back)" % path for path in before_values if path not in values]
    return changed


# bpy's Python modules whose code evaluates strings it is handed (bpy.ops.node.add_node's
# `settings` values, under any name the code calls the operator by); `eval` and `exec` refuse in
# them while agent code runs.
EVALUATING_MODULE_PREFIXES = ("bl_operators", "bl_ui", "bl_keymap_utils", "bl_app", "_bpy_types", "bpy_types",
                              "bpy_extras", "nodeitems_")


def _refuse_evaluation(*args, **kwargs):
    raise RuntimeError("this operator evaluates a string as Python (bpy.ops.node.*(settings=...)): not for agent "
                       "code")


@relisted
def _evaluating_namespaces():
    found = [getattr(module, "__dict__", None) for name, module in list(sys.modules.items())
             if name.startswith(EVALUATING_MODULE_PREFIXES)]
    return [names for names in found if isinstance(names, dict)]


def evaluating_namespaces():
    """The globals of the modules EVALUATING_MODULE_PREFIXES name; listed again only when modules
    were imported since (as module_classes)."""
    return _evaluating_namespaces(len(sys.modules))


class NoEvaluation:
    """`eval` and `exec` shadowed in the globals of bpy's Python modules while agent code runs:
    what an operator's own code evaluates for the agent runs nowhere (the gate refuses
    `settings=` only where it can see the operator's name)."""

    def __init__(self):
        self.shadowed = []

    def on(self):
        for names in evaluating_namespaces():
            for builtin in ("eval", "exec"):
                if builtin not in names:
                    names[builtin] = _refuse_evaluation
                    self.shadowed.append((names, builtin))

    def off(self):
        for names, builtin in self.shadowed:
            if names.get(builtin) is _refuse_evaluation:
                del names[builtin]
        self.shadowed = []


class Watch:
    """The state before one run; `changes` after it names and puts back what the run changed."""

    def __init__(self):
        NOTED.clear()
        every = bpy_classes()
        unhooked, draw_lists, self.known = walk_bpy_classes(every)
        self.lists = [("bpy.app.handlers.%s" % name, items, list(items)) for name, items in handler_lists()]
        self.lists += draw_lists
        classes = {id(cls): cls for cls in unhooked}
        classes.update((id(cls), cls) for cls in module_classes())
        self.classes = [(cls, dict(vars(cls))) for cls in classes.values()]
        shared = every + [cls for cls in classes.values() if id(cls) not in self.known]
        self.functions = function_attributes(class_functions(shared))
        self.containers = class_containers(shared)
        self.key_maps = key_maps()
        self.texts = registered_texts()
        # Plain values and lengths only: no reference to Blender's structs outlives the check.
        values, lists = preference_settings()
        self.preferences = ({path: value for path, (_, _, value) in values.items()},
                            {path: count for path, (_, count) in lists.items()})

    def hook(self):
        """Notes stores to classes of bpy's Python metaclass until `unhook` (only while agent
        code runs: Blender itself sets attributes on them when it unregisters at exit)."""
        meta = rna_metaclass()
        self.meta_had = [(name, vars(meta).get(name, MISSING)) for name in ("__setattr__", "__delattr__")]
        meta.__setattr__ = _hooked_setattr
        meta.__delattr__ = _hooked_delattr

    def unhook(self):
        meta = rna_metaclass()
        for name, value in getattr(self, "meta_had", ()):
            if value is MISSING:
                type.__delattr__(meta, name)
            else:
                type.__setattr__(meta, name, value)
        self.meta_had = ()

    def changes(self, views):
        """Puts back and names what the run changed: the handler and draw-function lists, and
        the attributes of the classes compared (those listed before the run, the views', those
        bpy made during the run) or noted by the hook. The code's own classes are its own."""
        changed = []
        for name, items, before in self.lists:
            if len(items) != len(before) or any(a is not b for a, b in zip(items, before)):
                items[:] = before
                changed.append(name)
        compared = dict(views.classes)  # those of modules first imported by the run, and:
        compared.update((id(cls), (cls, before)) for cls, before in self.classes)
        compared.update((id(cls), (cls, before)) for cls, before in made_during_run(self.known))
        for cls, before in compared.values():
            now = vars(cls)
            for name in set(now) | set(before):
                if not ignored(name) and now.get(name, MISSING) is not before.get(name, MISSING):
                    NOTED.setdefault((cls, name), before.get(name, MISSING))
        for (cls, name), value in list(NOTED.items()):
            now = vars(cls).get(name, MISSING)
            if ignored(name) or now is value or bpy_description(cls, name, now):
                continue  # bpy's own, or stored and put back by the code itself
            try:  # the class's own metaclass puts it back (bpy's unregisters a property it made)
                if value is MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, value)
            except (AttributeError, TypeError):
                pass
            changed.append("%s.%s" % (cls.__name__, name))
        NOTED.clear()
        changed += function_changes(self.functions)
        changed += container_changes(self.containers)
        changed += key_map_changes(self.key_maps)
        changed += preference_changes(self.preferences)
        changed += ["text %s (registered as a module)" % text.name for text in bpy.data.texts
                    if text.use_module and self.texts.get(text.as_pointer()) != text.as_string()]
        return sorted(set(changed))
