"""What agent code must leave as it found it in the kernel's own process, checked at run time
after each run that may write (the read-only proof stores into nothing but its own names):

- the handler lists of bpy.app.handlers: a function left there runs on the next frame change,
  load or save, outside the call's deadline, rollback and actuator lock (and a rollback's own
  reload fires load_post);
- the Python-level attributes of shared classes: those of the modules the code imported (a
  patched `json.JSONEncoder.encode` writes the kernel's next answers) and bpy's classes, which
  the code reaches through `type(x)` (`Context.copy`, a panel's `draw`, `Mesh.from_pydata`).

A change is put back before the scene is rolled back, and the call is refused (contract_violation,
reason `security_block`, rule `kernel_state`, naming what changed). For bpy's classes whose
metaclass is Python's (`_RNAMeta`: panels, menus, operators, most of bpy.types) a hook on that
metaclass notes each store, put on only while agent code runs (Blender sets attributes on them
itself when it unregisters at exit). The others (ID types, Context, property groups: ~120
classes) are compared with a copy of their attributes made before the run; those bpy makes
during the run (on the first `type(x)` of their kind) must hold nothing but special names and
bl_rna. This is the boundary for these objects in a kernel that lives on after agent code (the
GUI add-on, an unconfined kernel); a jailed kernel that ran agent code is retired anyway.

Not covered here: timers (Blender cannot list them; agent code reaches bpy.app.timers only
through bpy.app, whose view leaves them out, see module_views.py), and classes reached neither
through an imported module nor as bpy's (a private class of `typing` through `type(x)`).
"""

import bpy

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


def unhooked_classes():
    """bpy's classes whose stores the hook does not see (their metaclass is neither the hooked
    one nor one that keeps its __setattr__), walked from bpy_struct without recursion."""
    meta = rna_metaclass()
    found, seen, stack = [], set(), [bpy.types.bpy_struct]
    while stack:
        cls = stack.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        if type(cls) is not meta and not (issubclass(type(cls), meta)
                                          and type(cls).__setattr__ is getattr(meta, "__setattr__", None)):
            found.append(cls)
        stack.extend(type.__subclasses__(cls))
    return found


def handler_lists():
    handlers = bpy.app.handlers
    return [(name, getattr(handlers, name)) for name in dir(handlers)
            if not name.startswith("_") and isinstance(getattr(handlers, name), list)]


class Watch:
    """The state before one run; `changes` after it names and puts back what the run changed."""

    def __init__(self):
        NOTED.clear()
        self.handlers = [(name, items, list(items)) for name, items in handler_lists()]
        self.classes = [(cls, dict(vars(cls))) for cls in unhooked_classes()]

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
        """Puts back and names what the run changed: handler lists, and attributes of the
        unhooked bpy classes, of the hooked ones (NOTED) and of the views' classes."""
        changed = []
        for name, items, before in self.handlers:
            if len(items) != len(before) or any(a is not b for a, b in zip(items, before)):
                items[:] = before
                changed.append("bpy.app.handlers.%s" % name)
        # Classes bpy made during the run (on the first `type(x)` of their kind) start with
        # nothing of Python's own but special names and bl_rna: anything else the code put there.
        had = {id(cls) for cls, _ in self.classes}
        made = [(cls, {name: value for name, value in vars(cls).items() if name.startswith("__") or name == "bl_rna"})
                for cls in unhooked_classes() if id(cls) not in had]
        compared = list(self.classes) + made + list(views.classes.values())
        for cls, before in compared:
            now = vars(cls)
            for name in set(now) | set(before):
                if now.get(name, MISSING) is not before.get(name, MISSING):
                    NOTED.setdefault((cls, name), before.get(name, MISSING))
        for (cls, name), value in list(NOTED.items()):
            if vars(cls).get(name, MISSING) is value:
                continue  # stored and put back by the code itself
            try:  # the class's own metaclass puts it back (bpy's unregisters a property it made)
                if value is MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, value)
            except (AttributeError, TypeError):
                pass
            changed.append("%s.%s" % (cls.__name__, name))
        NOTED.clear()
        return sorted(set(changed))
