"""What `import` gives agent code: a view of the module made for its run, never the module the
kernel shares.

A view is a fresh module object holding those of the module's attributes that pass the gate's
attribute rules (code_policy.identifier_rule): denied names (handlers, timers, register_class,
...), private names and modules re-exported from off the allowlist are not in it, so no spelling
of the code reaches them through a module (the gate refuses the names as text; the view does not
have them at all). Submodules of allowed packages are views too, and a struct sequence such as
`bpy.app`, whose iteration yields its fields without naming them (the handlers, the timers, the
driver namespace), is a fields view: its allowed fields by name, no iteration, no indexing.

A view is read-only: storing on it or deleting from it (`[math][0].isfinite = spy`, `m =
bpy.path; m.abspath = f`) raises AttributeError, and the kernel's modules keep theirs (a name
deleted from a view would also make `from m import name` fall back to the kernel's own module in
sys.modules). Views are made per run. A module's own functions keep using the module itself
(their globals), so what a view leaves out never breaks them.

`bpy.context` is a context view: the context's members by name, those the attribute rules
allow (no `preferences`); `copy()` gives the same members as a dict (the context's own `copy`
hands out every member by a string key, `preferences` among them); `path_resolve` judges its
path with the gate's path rule at run time. It forwards to the real context, so overrides made
with `temp_override` show through. Callbacks Blender calls itself (a property's update
function) still get the real context; kernel_state.py compares the preferences after the run.

Containers a module holds at top level (dicts, lists, sets) are copied into its view, one level
deep, so an item the code stores through one (`copy.dispatch_table[C] = f`: the kernel's
copy.copy would call f) stays in its run.

The functions of `bpy.props` refuse Python callbacks (update, get, set, poll, search, items as
a function): Blender calls them later, outside the call, with the real context.

Views cover modules, struct sequences, the context and top-level containers. The objects their
attributes lead to are the kernel's own: the classes of an allowed module (json.JSONEncoder), of
bpy's Python modules (through `type(x)`) and bpy's classes are shared; kernel_state.py checks
after each run that their Python-level attributes are what they were.
"""

import functools
import types

from .code_policy import ATTRIBUTE, IMPORT_ALLOWLIST, identifier_rule, norm, path_rule

# Py_TPFLAGS_IMMUTABLETYPE: built-in and extension types whose attributes cannot be set.
IMMUTABLE_TYPE = 1 << 8
# The special names a view keeps: what the import system, `from m import *` and the module
# attribute protocol (bpy.ops resolves its operator groups through a module __getattr__) read.
KEPT_SPECIAL = ("__name__", "__doc__", "__package__", "__all__", "__getattr__", "__dir__")


# Containers a module holds at top level are copied into its view (one level: what they hold is
# shared), so an item stored through a view (`copy.dispatch_table`, `json.decoder.BACKSLASH`)
# stays in the run.
SHARED_CONTAINERS = (dict, list, set, bytearray)


@functools.lru_cache(maxsize=8192)  # module attribute names: a bounded set, each judged once
def allowed(name):
    return identifier_rule(name, ATTRIBUTE) is None


def is_struct_sequence(value):
    return isinstance(value, tuple) and hasattr(type(value), "n_fields")


def fields_view(value):
    """A struct sequence's allowed fields by name; no iteration, no indexing, no stores."""

    class FieldsView:
        __slots__ = ()

        def __getattr__(self, name):
            if not allowed(name):
                raise AttributeError("%s is not available to agent code" % name)
            return getattr(value, name)

        def __dir__(self):
            return [name for name in dir(value) if allowed(name)]

        def __repr__(self):
            return "<view of %s>" % type(value).__name__

    FieldsView.__name__ = FieldsView.__qualname__ = type(value).__name__
    return FieldsView()


def context_view(context):
    """bpy.context as agent code sees it: allowed members by name, `copy` and `path_resolve`
    within the same rules, stores forwarded under the same rules."""

    def refused(name):
        return AttributeError("context.%s is not available to agent code" % name)

    class ContextView:
        __slots__ = ()

        def __getattr__(self, name):
            if not allowed(name):
                raise refused(name)
            return getattr(context, name)

        def __setattr__(self, name, value):
            if not allowed(name):
                raise refused(name)
            setattr(context, name, value)

        def __delattr__(self, name):
            raise refused(name)

        def copy(self):
            return {name: value for name, value in context.copy().items() if allowed(name)}

        def path_resolve(self, path, coerce=True):
            found = path_rule(norm(path)) if isinstance(path, str) else None
            if found is not None:
                raise AttributeError("context.path_resolve(%r): %s" % (path, found[1]))
            return context.path_resolve(path, coerce)

        def __dir__(self):
            return [name for name in dir(context) if allowed(name)]

        def __repr__(self):
            return "<view of bpy.context>"

    ContextView.__name__ = ContextView.__qualname__ = "Context"
    return ContextView()


# Keywords of bpy.props' functions that take a Python function Blender calls later (on a redraw,
# a frame change, a key press): it would run after the call, outside its deadline, rollback and
# lock, and gets the real context.
PROPERTY_CALLBACKS = ("update", "get", "set", "poll", "search", "get_transform", "set_transform", "items")


def without_callbacks(function):
    """A bpy.props function as agent code gets it: refusing Python callbacks."""

    def checked(*args, **kwargs):
        given = [kwargs.get(name) for name in PROPERTY_CALLBACKS] + [a for a in args if not isinstance(a, type)]
        if any(callable(value) for value in given):
            raise TypeError("bpy.props.%s with a Python callback (%s): it would run after the call, outside its "
                            "deadline and rollback; not for agent code" % (function.__name__,
                                                                           ", ".join(PROPERTY_CALLBACKS)))
        return function(*args, **kwargs)

    checked.__name__ = checked.__qualname__ = function.__name__
    checked.__doc__ = function.__doc__
    return checked


class ModuleView(types.ModuleType):
    """A module as one run of agent code sees it: read-only. A name deleted from a view would
    make `from m import name` fall back to sys.modules, the kernel's own module."""

    def __setattr__(self, name, value):
        raise AttributeError("a module is read-only to agent code (it would patch it for the kernel too)")

    def __delattr__(self, name):
        raise AttributeError("a module is read-only to agent code (it would patch it for the kernel too)")


class Views:
    """The views one run's imports make, each module's made once (its submodules included)."""

    def __init__(self):
        self.made = {}  # id(module) -> (module, its view): the module kept alive while in use
        # id(class) -> (class, its attributes when the view was made, before the code had it):
        # the classes of the modules the code imported that Python lets it change.
        self.classes = {}

    def of(self, module):
        """The view of an allowed module: made on first use, with those of its submodules."""
        known = self.made.get(id(module))
        if known is not None:
            return known[1]
        view = ModuleView(module.__name__)
        self.made[id(module)] = (module, view)
        pending = [(module, view)]
        while pending:  # a package's submodules refer to each other: a work list, no recursion
            source, target = pending.pop()
            for name, value in list(vars(source).items()):
                if name.startswith("__") and name not in KEPT_SPECIAL:
                    continue
                if name not in KEPT_SPECIAL and not allowed(name):
                    continue
                if isinstance(value, types.ModuleType):
                    if str(getattr(value, "__name__", "")).split(".")[0] not in IMPORT_ALLOWLIST:
                        continue  # a module re-exported from off the allowlist (statistics.numbers)
                    known = self.made.get(id(value))
                    if known is None:
                        known = (value, ModuleView(value.__name__))
                        self.made[id(value)] = known
                        pending.append(known)
                    value = known[1]
                elif is_struct_sequence(value):
                    value = fields_view(value)
                elif name == "context" and source.__name__ == "bpy":
                    value = context_view(value)
                elif source.__name__ == "bpy.props" and callable(value) and not isinstance(value, type):
                    value = without_callbacks(value)
                elif type(value) in SHARED_CONTAINERS:
                    value = type(value)(value)  # a copy: see SHARED_CONTAINERS
                elif isinstance(value, type) and not value.__flags__ & IMMUTABLE_TYPE:
                    self.classes.setdefault(id(value), (value, dict(vars(value))))
                vars(target)[name] = value
        return view
