"""python.exec inside Blender: the AST policy checked again, restricted builtins, captured and
capped stdout, and a deadline that interrupts runaway code while the kernel keeps serving.

The bridge's Rust gate is the first line; this is the second, so a bridge bug or a kernel
reached by another client still cannot run a blocked pattern."""

import ast
import builtins
import contextlib
import io
import sys
import time
import unicodedata

IMPORT_ALLOWLIST = {"bpy", "bmesh", "mathutils", "math", "random", "json", "itertools", "functools", "collections",
                    "statistics", "colorsys", "copy", "string", "re", "datetime", "enum", "typing", "time"}
DENIED_NAMES = {"eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "globals", "locals", "vars",
                "breakpoint", "input", "help", "exit", "quit"}
DENIED_ATTRIBUTES = {"handlers", "timers", "driver_namespace", "msgbus", "execfile", "register_class",
                     "unregister_class", "register_module", "unregister_module", "load_scripts",
                     "register_submodule_factory", "as_module", "use_module", "draw_handler_add", "register_tool",
                     "refresh_script_paths"}
DENIED_OPERATORS = {("wm", "open_mainfile"), ("wm", "save_mainfile"), ("wm", "save_as_mainfile"), ("wm", "save_homefile"),
                    ("wm", "quit_blender"), ("wm", "read_homefile"), ("wm", "read_factory_settings"),
                    ("wm", "read_userpref"), ("wm", "recover_last_session"), ("wm", "recover_auto_save"),
                    ("wm", "revert_mainfile"), ("wm", "link"), ("wm", "append"), ("wm", "url_open"),
                    ("wm", "url_open_preset"), ("wm", "path_open"), ("text", "run_script")}
DENIED_GROUPS = {"preferences", "script"}
# Distinctive operator names, refused through any alias of bpy.ops.wm / bpy.ops.script too.
OPERATOR_NAMES = {op for _, op in DENIED_OPERATORS if op not in ("link", "append")} | {
    "python_file_run", "execute_preset", "addon_install", "addon_enable"}
SAFE_BUILTINS = ["abs", "all", "any", "bool", "bytes", "callable", "chr", "dict", "divmod", "enumerate", "filter",
                 "float", "format", "frozenset", "hash", "hex", "int", "isinstance", "issubclass", "iter", "len",
                 "list", "map", "max", "min", "next", "oct", "ord", "pow", "print", "range", "repr", "reversed",
                 "round", "set", "slice", "sorted", "str", "sum", "tuple", "type", "zip", "object", "property",
                 "staticmethod", "classmethod", "super", "Exception", "ValueError", "TypeError", "KeyError",
                 "IndexError", "AttributeError", "RuntimeError", "ZeroDivisionError", "StopIteration", "NameError",
                 "ArithmeticError", "LookupError", "AssertionError", "NotImplementedError", "True", "False", "None"]
MAX_STDOUT_CHARS = 65536


class GateViolation(Exception):
    def __init__(self, rule, detail, node):
        super().__init__("%s at line %d: %s" % (rule, getattr(node, "lineno", 0), detail))
        self.rule, self.detail, self.line = rule, detail, getattr(node, "lineno", 0)


class Interrupted(BaseException):
    """Raised by the deadline tracer; BaseException so that `except Exception` cannot swallow it."""


def norm(name):
    return unicodedata.normalize("NFKC", name)


def is_dunder(name):
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def dotted(node):
    if isinstance(node, ast.Name):
        return [norm(node.id)]
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else base + [norm(node.attr)]
    return None


def check(tree):
    """Raises GateViolation for the first node the policy forbids."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if norm(alias.name).split(".")[0] not in IMPORT_ALLOWLIST:
                    raise GateViolation("import_not_allowed", alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            module = norm(node.module or "")
            if node.level or module.split(".")[0] not in IMPORT_ALLOWLIST:
                raise GateViolation("import_not_allowed", module or "relative import", node)
            for alias in node.names:
                name = norm(alias.name)
                if is_dunder(name) or name in DENIED_ATTRIBUTES or name in DENIED_NAMES:
                    raise GateViolation("import_not_allowed", "from %s import %s" % (module, name), node)
        elif isinstance(node, ast.Name):
            name = norm(node.id)
            if is_dunder(name):
                raise GateViolation("dunder_access", name, node)
            if name in DENIED_NAMES:
                raise GateViolation("builtin_denied", name, node)
        elif isinstance(node, ast.Attribute):
            attr = norm(node.attr)
            if attr.startswith("__"):
                raise GateViolation("dunder_access", attr, node)
            if attr in DENIED_ATTRIBUTES:
                raise GateViolation("attribute_denied", attr, node)
            if attr in OPERATOR_NAMES or attr.startswith("addon_"):
                raise GateViolation("operator_denied", attr, node)
            path = dotted(node)
            if path and "ops" in path and len(path) >= 2:
                group, op = path[-2], path[-1]
                if (group, op) in DENIED_OPERATORS or group in DENIED_GROUPS or (group == "wm" and op.startswith("addon_")):
                    raise GateViolation("operator_denied", "bpy.ops.%s.%s" % (group, op), node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = norm(node.value)
            if "ShaderNodeScript" in text or "NodeScript" in text:
                raise GateViolation("script_node", "script nodes run arbitrary code", node)
            if any(is_dunder(word) for word in _words(text)):
                raise GateViolation("dunder_string", "a string naming a dunder attribute", node)
            if any(text == op for _, op in DENIED_OPERATORS):
                raise GateViolation("operator_denied", text, node)


def _words(text):
    word = []
    for c in text + " ":
        if c.isalnum() or c == "_":
            word.append(c)
        elif word:
            yield "".join(word)
            word = []


def restricted_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level or norm(name).split(".")[0] not in IMPORT_ALLOWLIST:
        raise ImportError("import of %r is not allowed" % name)
    return builtins.__import__(name, globals, locals, fromlist, level)


def safe_builtins():
    table = {name: getattr(builtins, name) for name in SAFE_BUILTINS if hasattr(builtins, name)}
    table["__import__"] = restricted_import
    return table


class CappedOutput(io.StringIO):
    def __init__(self):
        super().__init__()
        self.truncated = False

    def write(self, text):
        room = MAX_STDOUT_CHARS - self.tell()
        if room <= 0:
            self.truncated = True
            return len(text)
        if len(text) > room:
            self.truncated = True
            text = text[:room]
        return super().write(text)


def run(code, deadline_s):
    """Checks and runs `code`; returns (stdout, truncated). Raises SyntaxError, GateViolation,
    Interrupted (deadline), or whatever the code raised."""
    tree = ast.parse(code, filename="<agent>", mode="exec")
    check(tree)
    compiled = compile(tree, "<agent>", "exec")
    stop_at = time.monotonic() + deadline_s

    def tracer(frame, event, arg):
        # Opcode events too: a one-line loop (`while True: pass`) may raise no line event.
        frame.f_trace_opcodes = True
        if time.monotonic() > stop_at:
            raise Interrupted()
        return tracer

    out = CappedOutput()
    scope = {"__builtins__": safe_builtins(), "__name__": "__agent__"}
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with contextlib.redirect_stdout(out):
            exec(compiled, scope)  # noqa: S102 - the gate above is the point of this module
    finally:
        sys.settrace(previous)
    return out.getvalue(), out.truncated
