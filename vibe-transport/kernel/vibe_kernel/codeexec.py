"""python.exec inside Blender: the AST policy checked again, restricted builtins, captured and
capped stdout, and a deadline that interrupts runaway code while the kernel keeps serving.

Agent code is checked by the kernel's code gate (code_gate.py, rules in code_policy.py) and runs
under a deadline (deadline.py). The gate is a filter that explains refusals early, not the
boundary: Python and the bpy API have too many ways to reach files, processes and evaluators for
any text check to close them. The boundary is the operating system's jail around the kernel, and
a deadline is enforced by the bridge killing the kernel; the interrupt here is the fast path that
spares a merely slow script a restart.
"""

import builtins
import gc
import io
import sys
import threading
import traceback
import types

from . import confine, kernel_state
from .code_gate import check, compile_checked, parse
from .code_policy import IMPORT, IMPORT_ALLOWLIST, identifier_rule, norm
from .deadline import Deadline, Interrupted
from .envelope import escape_surrogates
from .module_views import Views, fields_view, is_struct_sequence

SAFE_BUILTINS = ["abs", "all", "any", "bool", "bytes", "callable", "chr", "dict", "divmod", "enumerate", "filter",
                 "float", "format", "frozenset", "hash", "hex", "int", "isinstance", "issubclass", "iter", "len",
                 "list", "map", "max", "min", "next", "oct", "ord", "pow", "print", "range", "repr", "reversed",
                 "round", "set", "slice", "sorted", "str", "sum", "tuple", "type", "zip", "object", "property",
                 "staticmethod", "classmethod", "super", "BaseException", "Exception", "ValueError", "TypeError",
                 "KeyError", "IndexError", "AttributeError", "RuntimeError", "ZeroDivisionError", "StopIteration",
                 "NameError", "ArithmeticError", "LookupError", "AssertionError", "NotImplementedError",
                 "OverflowError", "ImportError", "True", "False", "None",
                 # `class` statements compile to a call of __build_class__.
                 "__build_class__"]
MAX_STDOUT_CHARS = 65536

# The run in progress (at most one: the kernel serves one call at a time), for a cancel; and
# whether the call being served was cancelled before its code started (while it was checked or
# its rollback point saved). Both under RUN_LOCK.
RUNNING = None
CANCELLED_EARLY = False
RUN_LOCK = threading.Lock()


def new_call():
    """A call starts: no cancel of it yet."""
    global CANCELLED_EARLY
    with RUN_LOCK:
        CANCELLED_EARLY = False


def cancel_running():
    """A cancel of the call being served: the run in progress to stop, or None when its code has
    not started, which then stops as soon as it starts."""
    global CANCELLED_EARLY
    with RUN_LOCK:
        if RUNNING is None:
            CANCELLED_EARLY = True
        return RUNNING


class AgentError(Exception):
    """The agent's code raised; `message` is its one-line description, made while the deadline
    still applied (so an agent's __str__ never runs unguarded in the kernel)."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


def restricted_import(views):
    """The agent's __import__: allowed modules only, each as this run's view of it
    (module_views.py), never the module the kernel shares."""

    def restricted(name, globals=None, locals=None, fromlist=(), level=0):
        parts = norm(name).split(".")
        names = [norm(n) for n in fromlist or () if n != "*"]
        # Private names are among the rules (no allowed top-level module starts with `_`).
        if (level or parts[0] not in IMPORT_ALLOWLIST
                or any(identifier_rule(p, IMPORT) is not None for p in parts[1:] + names)):
            raise ImportError("import of %r is not allowed" % name)
        module = builtins.__import__(name, globals, locals, fromlist, level)
        if isinstance(module, types.ModuleType):
            return views.of(module)
        return fields_view(module) if is_struct_sequence(module) else module

    return restricted


def safe_builtins(views):
    table = {name: getattr(builtins, name) for name in SAFE_BUILTINS if hasattr(builtins, name)}
    table["__import__"] = restricted_import(views)
    return table


class CappedOutput(io.StringIO):
    """Agent stdout: capped, and made of exact str (never an agent's str subclass)."""

    def __init__(self):
        super().__init__()
        self.truncated = False

    def write(self, text):
        # Unpaired surrogates (`print("\ud800")`) escaped here, before the cap counts them: the
        # bridge's JSON parser refuses them.
        text = escape_surrogates(str.__str__(text) if isinstance(text, str) else str.__str__(repr(text)))
        room = MAX_STDOUT_CHARS - self.tell()
        if room <= 0:
            self.truncated = True
            return len(text)
        if len(text) > room:
            self.truncated = True
            text = text[:room]
        return super().write(text)


def describe(exc):
    """One line for an exception of the agent's code (runs while the deadline still applies). A
    NameError of one of Python's builtins that agent code does not get (`hasattr`, `open`) says
    so, where Python's own message reads like a typo."""
    try:
        if (type(exc) is NameError and isinstance(exc.name, str) and exc.name in vars(builtins)
                and exc.name not in SAFE_BUILTINS):
            return "NameError: %s is a Python builtin not available to agent code" % exc.name
        return "".join(traceback.format_exception_only(type(exc), exc))
    except Interrupted:
        raise
    except BaseException:  # noqa: BLE001 - an agent's __str__ may raise anything, SystemExit included
        return "%s (its message could not be shown)" % type(exc).__name__


class KernelStateChanged(Exception):
    """The run changed what agent code must leave alone (kernel_state.py); it is put back."""

    def __init__(self, changed):
        super().__init__(", ".join(changed))
        self.changed = changed


def run(code, deadline_s, tree=None, watch=False):
    """Checks and runs `code` (or its `tree`, parsed already); returns (stdout, truncated).
    Raises SyntaxError, GateViolation, KernelStateChanged (with `watch`: the run changed what
    kernel_state.py compares, put back where it can be), Interrupted (the deadline passed, even when the
    code caught the interrupt), or AgentError (whatever the code raised, as text)."""
    if tree is None:
        tree = parse(code)
    # In a jail, tests switch the gate off to show the jail holds without it (see confine.py).
    ungated = confine.GATE_OFF
    suspends = True if ungated else check(tree).suspends
    compiled = compile_checked(tree)
    out = CappedOutput()
    views = Views()
    watched = kernel_state.Watch() if watch else None
    no_evaluation = kernel_state.NoEvaluation()
    scope = {"__builtins__": builtins.__dict__ if ungated else safe_builtins(views), "__name__": "__agent__"}
    global RUNNING
    deadline = Deadline(deadline_s)
    with RUN_LOCK:
        RUNNING = deadline
        if CANCELLED_EARLY:
            deadline.stop_now()
    failure = None
    saved_stdout = sys.stdout
    try:
        sys.stdout = out
        no_evaluation.on()
        if watched is not None:
            watched.hook()
        deadline.start()
        try:
            exec(compiled, scope)  # noqa: S102 - the gate above is the point of this module
        except Interrupted:
            pass
        except BaseException as exc:  # noqa: BLE001 - the agent's own error, SystemExit included
            failure = describe(exc)
        # What the code left behind is finalized while the deadline still applies: a suspended
        # generator runs its `finally` when collected, which must not happen later, unguarded,
        # in the kernel. (An interrupt inside a finalizer is reported as unraisable and the
        # clearing goes on.) A full collection (~20 ms in Blender) only for code that makes
        # generators or coroutines: without them nothing it left runs its code when collected
        # (__del__ is refused).
        for _ in range(3):
            try:
                scope.clear()
                if suspends:
                    gc.collect()
                break
            except Interrupted:
                continue
    except Interrupted:
        pass
    finally:
        # A plain attribute store: no point where CPython delivers an asynchronous exception.
        # From here on the watchdog and the tracer stop re-arming; the nested tries absorb what
        # was already on its way (see Deadline.settle), with no delivery point between them.
        deadline.active = False
        try:
            deadline.settle()
        except Interrupted:
            try:
                deadline.settle()
            except Interrupted:
                deadline.settle()
        deadline.finish()
        if watched is not None:
            watched.unhook()
        no_evaluation.off()
        sys.stdout = saved_stdout
        RUNNING = None
    changed = watched.changes(views) if watched is not None else []
    if changed:
        raise KernelStateChanged(changed)
    if deadline.fired:
        interrupted = Interrupted()
        interrupted.cancelled = deadline.cancelled
        raise interrupted
    if failure is not None:
        raise AgentError(failure)
    return out.getvalue(), out.truncated
