"""python.exec inside Blender: the AST policy checked again, restricted builtins, captured and
capped stdout, and a deadline that interrupts runaway code while the kernel keeps serving.

The bridge's Rust gate (vibe-exec `code::gate`, tables in `code::policy`) is the first line; this
is the second, so a bridge bug or a kernel reached by another client still cannot run a blocked
pattern. It mirrors the Rust policy: the same tables, the same rule names. Both are filters that
explain refusals early, not the boundary: Python and the bpy API have too many ways to reach
files, processes and evaluators for any text check to close them. The boundary is the operating
system's jail around the kernel, and a deadline is enforced by the bridge killing the kernel; the
interrupt here is the fast path that spares a merely slow script a restart.

Rules (every refusal names its rule and says why):

  source_too_large    more than MAX_SOURCE_BYTES of code.
  nesting_too_deep    brackets nested deeper than MAX_NESTING (checked before parsing), a syntax
                      tree deeper than MAX_AST_DEPTH, or input on which CPython's parser or
                      compiler runs out of stack (RecursionError, MemoryError): refused, never a
                      crash.
  import_not_allowed  modules off the allowlist, relative imports, star imports outside
                      STAR_IMPORT_ALLOWLIST, and imported names or submodules that break any rule.
  builtin_denied      eval, exec, compile, open, getattr, ... (not in the restricted builtins).
  dunder_access       __dunder__ names and attributes; the one exception is a call
                      `super().__init__(...)` (a class's __init__ must be able to run its base's).
  private_access      attributes starting with `_`: allowed modules keep os, sys and loaders
                      there (random._os, bpy.utils._test_import, typing._eval_type).
  frame_access        frame, traceback, code, generator and coroutine internals (gi_frame,
                      cr_frame, ag_frame, tb_frame, f_back, f_globals, co_code, ...).
  module_attribute    (kernel) public names under which allowed modules re-export modules that
                      are not allowed: enum.bltns is builtins, datetime.sys is sys, json.codecs...
  attribute_denied    handlers, timers, drivers, key configurations, text blocks, preferences,
                      auto-run and script loading.
  operator_denied     operators that touch files, quit, load code, start programs or evaluate
                      data-path strings (wm.context_*, wm.properties_*, ...), through any alias.
  file_writer         exporters, saves, image.save_render, libraries.write, unpack, mixdown,
                      sysinfo, wm.save_userpref: writes the sandbox does not control.
  dynamic_attribute   attribute lookups by run-time strings: attrgetter, methodcaller,
                      string.Formatter, get_field, vformat, str.format / format_map on a
                      non-literal or with `{x.attr}` / `{x[key]}` fields, type() with other than
                      one argument (or `type` used as a value), functional Enum(...) and wraps.
  string_evaluation   helpers that evaluate strings as Python (get_type_hints, ForwardRef,
                      bpy.utils.units.to_value, ...), string annotations (singledispatch evaluates
                      them), bpy.ops.node.*(settings=...).
  dunder_definition   dunder methods outside DUNDER_METHODS_ALLOWED or outside a class body:
                      __del__ runs after the call returned; __getattr__, __getattribute__,
                      __init_subclass__, __set_name__, __class_getitem__ and __reduce__* hook
                      attribute lookup, class creation or pickling.
  metaclass_denied    metaclass= and any class keyword, bases unpacked at run time, metaclasses
                      by name (ABCMeta, EnumMeta, ...).
  registered_class    Blender's registered classes (*_OT_*, *_MT_*, ...): run directly they
                      evaluate data paths or run Python on redraw.
  module_patch        assigning to or deleting an attribute of an imported module (or through
                      type(x)): it patches the module for the kernel too.
  kernel_access       the kernel's own package.
  dunder_string       a string literal naming a dunder.
  script_node         script nodes run arbitrary code.
"""

import ast
import builtins
import gc
import io
import re
import string
import sys
import threading
import time
import traceback
import unicodedata

from . import confine
from .envelope import escape_surrogates

MAX_SOURCE_BYTES = 1024 * 1024
# Brackets nested deeper than this are refused before parsing (CPython itself stops at 200, and
# long unbracketed chains overflow its parser and compiler: those are caught, see `parse`).
MAX_NESTING = 100
# A syntax tree deeper than this is refused before compiling (the Rust gate's
# MAX_EXPRESSION_DEPTH, which it estimates on tokens; here it is the real depth, so never
# stricter). Well under the depth where CPython's compiler raises RecursionError.
MAX_AST_DEPTH = 256

IMPORT_ALLOWLIST = {"bpy", "bmesh", "mathutils", "math", "random", "json", "itertools", "functools", "collections",
                    "statistics", "colorsys", "copy", "string", "re", "datetime", "enum", "typing", "time"}
STAR_IMPORT_ALLOWLIST = {"math", "mathutils", "random", "itertools", "colorsys", "statistics"}
DENIED_NAMES = {"eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "globals", "locals", "vars",
                "breakpoint", "input", "help", "exit", "quit"}
DENIED_ATTRIBUTES = {"handlers", "timers", "driver_namespace", "driver_add", "drivers", "msgbus", "execfile",
                     "register_class", "unregister_class", "register_classes_factory", "register_module",
                     "unregister_module", "register_cli_command", "load_scripts", "load_scripts_extensions",
                     "modules_from_path", "register_submodule_factory", "as_module", "use_module",
                     "draw_handler_add", "register_tool", "refresh_script_paths", "keyconfigs", "keyconfig_set",
                     "keyconfig_init", "texts", "preferences", "user_preferences", "use_scripts_auto_execute",
                     "use_scripts_auto_exec", "autoexec_paths"}
FRAME_ATTRIBUTES = {"f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_trace", "f_lasti", "f_lineno",
                    "f_generator", "func_globals", "func_code", "func_closure", "func_defaults", "func_dict",
                    "im_func", "im_self", "im_class", "cell_contents", "f_trace_lines", "f_trace_opcodes",
                    "tb_frame"}
# Generator, coroutine, async-generator, traceback and code-object attributes; Blender's
# keyframe `co_ui` is exempt.
FRAME_PREFIXES = ("gi_", "cr_", "ag_", "tb_", "co_")
# Public names under which allowed modules re-export modules that are not allowed (found by
# walking the allowed modules on bpy 5.0.1 and Blender 3.4), and the obvious others. Kernel only.
MODULE_ATTRIBUTES = {"bltns", "builtins", "sys", "os", "posix", "nt", "codecs", "contextlib", "copyreg", "operator",
                     "types", "warnings", "importlib", "subprocess", "shutil", "socket", "ctypes", "io", "gc",
                     "inspect", "threading", "marshal", "pickle", "pathlib", "runpy", "linecache", "tokenize",
                     "traceback", "signal", "tempfile", "glob", "platform", "sysconfig", "site", "weakref"}
DYNAMIC_ATTRIBUTE_NAMES = {"attrgetter", "methodcaller", "Formatter", "get_field", "vformat", "getattr_static"}
STRING_EVALUATORS = {"get_type_hints", "ForwardRef", "evaluate_forward_ref", "_eval_type", "get_annotations",
                     "call_evaluate_function", "call_annotate_function", "to_value"}
FILE_WRITERS = {"save", "save_render", "filepath_raw", "write", "unpack", "mixdown", "sysinfo"}
FILE_WRITER_PREFIXES = ("save_", "export", "screenshot", "unpack_")
METACLASS_NAMES = {"ABCMeta", "EnumMeta", "EnumType", "GenericMeta"}
DUNDER_METHODS_ALLOWED = {"__init__", "__repr__", "__str__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
                          "__ge__", "__hash__", "__len__", "__bool__", "__iter__", "__next__", "__contains__",
                          "__getitem__", "__setitem__", "__enter__", "__exit__", "__add__", "__sub__", "__mul__",
                          "__truediv__", "__neg__"}
KERNEL_MODULE = "vibe_kernel"
# `bpy.ops.<group>.<operator>`; `*` is any operator, a trailing `*` a prefix. Refused when the
# chain goes through `ops`.
DENIED_OPERATORS = {("wm", "open_mainfile"), ("wm", "save_mainfile"), ("wm", "save_as_mainfile"),
                    ("wm", "save_homefile"), ("wm", "quit_blender"), ("wm", "read_homefile"),
                    ("wm", "read_factory_settings"), ("wm", "read_userpref"), ("wm", "recover_last_session"),
                    ("wm", "recover_auto_save"), ("wm", "revert_mainfile"), ("wm", "link"), ("wm", "append"),
                    ("wm", "url_open"), ("wm", "url_open_preset"), ("wm", "path_open"), ("wm", "call_menu*"),
                    ("wm", "call_panel"), ("preferences", "*"), ("script", "*"), ("console", "*"), ("text", "*"),
                    ("extensions", "*"), ("wm", "addon_*"),
                    # the undo history: in the GUI it holds the person's steps too
                    ("ed", "*")}
# Refused through any chain (an alias of bpy.ops.wm included).
OPERATOR_NAMES = {"open_mainfile", "save_mainfile", "save_as_mainfile", "save_homefile", "quit_blender",
                  "read_homefile", "read_factory_settings", "read_userpref", "recover_last_session",
                  "recover_auto_save", "revert_mainfile", "url_open", "url_open_preset", "path_open", "run_script",
                  "python_file_run", "execute_preset", "operator_pie_enum", "external_edit", "play_rendered_anim",
                  # kernel: eval data paths taken from F-curves; start programs; delete files
                  "update_animated_transform_constraints", "open_containing_blend_file", "delete_proxy",
                  "operator_presets_cleanup",
                  # the undo history: in the GUI it holds the person's steps too
                  "undo", "redo", "undo_history", "undo_redo", "undo_push"}
OPERATOR_PREFIXES = ("addon_", "context_", "properties_", "keyconfig_", "doc_view", "previews_batch_",
                     "app_template_")
DENIED_STRINGS = ("ShaderNodeScript", "NodeScript")
REGISTERED_CLASS_INFIXES = ("_OT_", "_MT_", "_PT_", "_HT_", "_UL_", "_GT_")

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
# After the deadline the watchdog raises the interrupt again this often until the code stops,
# so that catching it (`except BaseException:`, a bare `except:`) only delays it.
REFIRE_S = 0.001

_monotonic = time.monotonic  # bound once: agent code may replace time.monotonic

# The run in progress (at most one: the kernel serves one call at a time), for a cancel.
RUNNING = None


class GateViolation(Exception):
    def __init__(self, rule, detail, node=None, line=None):
        line = getattr(node, "lineno", 0) if line is None else line
        super().__init__("%s at line %d: %s" % (rule, line, detail))
        self.rule, self.detail, self.line = rule, detail, line


class Interrupted(BaseException):
    """The deadline passed, or the run was cancelled (`cancelled`). BaseException so that
    `except Exception` cannot swallow it; raised again and again until the code stops, so that
    `except BaseException` cannot either."""

    cancelled = False


class AgentError(Exception):
    """The agent's code raised; `message` is its one-line description, made while the deadline
    still applied (so an agent's __str__ never runs unguarded in the kernel)."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


def norm(name):
    return unicodedata.normalize("NFKC", name)


def is_dunder(name):
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def dotted(node):
    """The dotted path of a Name / Attribute chain, normalized (iterative: chains may be long)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(norm(node.attr))
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(norm(node.id))
    parts.reverse()
    return parts


# ---------------------------------------------------------------- nesting

_BRACKETS_AND_STRINGS = re.compile(r"[#'\"()\[\]{}]")


def nesting_violation(code, limit=MAX_NESTING):
    """The line where brackets first nest deeper than `limit` (strings and comments skipped), or
    None. Linear in the input; an unterminated string ends the scan (the parser refuses it)."""
    depth, pos = 0, 0
    search = _BRACKETS_AND_STRINGS.search
    while True:
        m = search(code, pos)
        if m is None:
            return None
        c, i = m.group(), m.start()
        if c == "#":
            end = code.find("\n", i)
            if end < 0:
                return None
            pos = end + 1
        elif c in "'\"":
            quote = c * 3 if code.startswith(c * 3, i) else c
            j = i + len(quote)
            while True:
                k = code.find(quote, j)
                if k < 0:
                    return None
                b = k
                while b > j and code[b - 1] == "\\":
                    b -= 1
                if (k - b) % 2 == 0:
                    break
                j = k + 1
            pos = k + len(quote)
        elif c in "([{":
            depth += 1
            if depth > limit:
                return code.count("\n", 0, i) + 1
            pos = i + 1
        else:
            depth = max(0, depth - 1)
            pos = i + 1


def parse(code):
    """ast.parse with the nesting rules: deep input is refused with `nesting_too_deep`, never a
    RecursionError or MemoryError out of CPython's parser."""
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        raise GateViolation("source_too_large", "%d bytes of code; MAX_SOURCE_BYTES = %d" % (size, MAX_SOURCE_BYTES),
                            line=1)
    line = nesting_violation(code)
    if line is not None:
        raise GateViolation("nesting_too_deep", "brackets nest deeper than MAX_NESTING = %d levels; split the "
                            "expression into named steps" % MAX_NESTING, line=line)
    try:
        return ast.parse(code, filename="<agent>", mode="exec")
    except ValueError as e:  # null bytes (a SyntaxError from 3.12 on)
        raise SyntaxError(str(e)) from None
    except (RecursionError, MemoryError):
        raise GateViolation("nesting_too_deep", "the code is nested too deeply for the parser; split long "
                            "chains and nested expressions into named steps", line=0) from None


def compile_checked(tree):
    try:
        return compile(tree, "<agent>", "exec")
    except (RecursionError, MemoryError):
        raise GateViolation("nesting_too_deep", "the code is nested too deeply to compile; split long chains "
                            "and nested expressions into named steps", line=0) from None


# ---------------------------------------------------------------- the policy

NAME, ATTRIBUTE, IMPORT = "name", "attribute", "import"


def identifier_rule(name, use):
    """(rule, why) for an identifier used as a variable name, an attribute or an imported name /
    module path component, or None. The order and the rules are the Rust gate's `identifier_rule`."""
    if KERNEL_MODULE in name:
        return "kernel_access", "the kernel's own module is out of reach"
    if name in STRING_EVALUATORS:
        return "string_evaluation", "evaluates a string as Python"
    if name in DYNAMIC_ATTRIBUTE_NAMES:
        return "dynamic_attribute", "looks attributes up by a run-time string"
    if is_dunder(name):
        return "dunder_access", "special attributes reach the interpreter"
    if use != NAME and name.startswith("_"):
        return ("private_access", "private attributes of modules reach their imports (os, sys, loaders); "
                "name your own attributes without a leading underscore")
    if use != NAME and name != "co_ui" and (name in FRAME_ATTRIBUTES or name.startswith(FRAME_PREFIXES)):
        return "frame_access", "frames, code and tracebacks reach other modules' globals and the real builtins"
    if use != ATTRIBUTE and name in DENIED_NAMES:
        return "builtin_denied", "not available to agent code"
    if use != NAME and name in MODULE_ATTRIBUTES:
        return "module_attribute", "a module off the import allowlist, re-exported by an allowed one"
    if use != NAME and name in DENIED_ATTRIBUTES:
        return ("attribute_denied", "reaches handlers, timers, drivers, key maps, text blocks, preferences or "
                "script loading")
    if use != NAME and (name in FILE_WRITERS or name.startswith(FILE_WRITER_PREFIXES) or "_export" in name):
        return ("file_writer", "writes files; exports and saves are not for agent code (file.save and "
                "render.still write into the sandbox)")
    if name in METACLASS_NAMES:
        return "metaclass_denied", "a metaclass builds classes from run-time names"
    if any(infix in name for infix in REGISTERED_CLASS_INFIXES):
        return "registered_class", "Blender's registered classes evaluate data paths or run Python on redraw"
    return None


def _pattern_matches(pattern, name):
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def operator_rule(path):
    """'operator_denied' when the dotted chain `path` reaches a refused operator, else None."""
    if len(path) < 2:
        return None
    group, op = path[-2], path[-1]
    named = op in OPERATOR_NAMES or op.startswith(OPERATOR_PREFIXES)
    grouped = "ops" in path and any(g == group and _pattern_matches(o, op) for g, o in DENIED_OPERATORS)
    return "operator_denied" if named or grouped else None


def string_rule(text):
    if any(is_dunder(word) for word in re.findall(r"\w+", text)):
        return "dunder_string", "a string naming a dunder attribute"
    if any(s in text for s in DENIED_STRINGS):
        return "script_node", "script nodes run arbitrary code"
    if KERNEL_MODULE in text:
        return "kernel_access", "a string naming the kernel's own module"
    if text in OPERATOR_NAMES or any(text == o for _, o in DENIED_OPERATORS if "*" not in o):
        return "operator_denied", "a string naming a refused operator"
    return None


def format_reaches_attributes(text):
    """A str.format string with a field that goes on with `.` or `[` ({0.attr}, {x[0]}), in the
    string or in a nested format spec; a malformed one counts too (format would raise)."""
    try:
        pieces = list(string.Formatter().parse(text))
    except ValueError:
        return True
    for _, field, spec, _ in pieces:
        if field and ("." in field or "[" in field):
            return True
        if spec and "{" in spec and format_reaches_attributes(spec):
            return True
    return False


def _is_name(node, name):
    return isinstance(node, ast.Name) and norm(node.id) == name


def _callee_name(func):
    if isinstance(func, ast.Name):
        return norm(func.id)
    if isinstance(func, ast.Attribute):
        return norm(func.attr)
    return None


class _Checker:
    """Walks the tree with an explicit stack (any input answers, no recursion), in source order,
    and raises GateViolation at the first node the policy forbids."""

    def __init__(self):
        self.skip = set()  # ids of nodes a parent already judged (type in type(x), super().__init__)
        self.bindings = {}  # name -> dotted path of the module or plain chain it is bound to
        self.suspends = False  # the code makes generators or coroutines (finalizers that run its code)

    def check(self, tree):
        stack = [(tree, 0, None, False)]
        while stack:
            node, depth, parent, in_annotation = stack.pop()
            if depth > MAX_AST_DEPTH:
                raise GateViolation("nesting_too_deep", "the syntax tree is deeper than MAX_AST_DEPTH = %d; split "
                                    "long chains and nested expressions into named steps" % MAX_AST_DEPTH, node)
            if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.AsyncFunctionDef)):
                self.suspends = True
            if id(node) not in self.skip:
                method = getattr(self, "visit_" + type(node).__name__, None)
                if method is not None:
                    method(node, parent, in_annotation)
            annotations = (getattr(node, "annotation", None), getattr(node, "returns", None))
            children = list(ast.iter_child_nodes(node))
            for child in reversed(children):
                stack.append((child, depth + 1, node,
                              in_annotation or any(child is a for a in annotations if a is not None)))

    # ------------------------------------------------ imports and bindings

    def check_import(self, module, names, node):
        parts = module.split(".")
        if parts[0] not in IMPORT_ALLOWLIST:
            raise GateViolation("import_not_allowed", "import of %r (allowed: %s)"
                                % (module, ", ".join(sorted(IMPORT_ALLOWLIST))), node)
        for part in parts[1:] + names:
            if part == "*":
                if module not in STAR_IMPORT_ALLOWLIST:
                    raise GateViolation("import_not_allowed", "from %s import *: a star import hides what it "
                                        "binds (allowed from: %s)" % (module, ", ".join(sorted(STAR_IMPORT_ALLOWLIST))),
                                        node)
                continue
            found = identifier_rule(part, IMPORT)
            if found is not None:
                raise GateViolation("import_not_allowed", "%s in an import from %s: %s (%s)"
                                    % (part, module, found[1], found[0]), node)

    def visit_Import(self, node, parent, in_annotation):
        for alias in node.names:
            module = norm(alias.name)
            self.check_import(module, [], node)
            path = module.split(".")
            if alias.asname:
                self.bindings[norm(alias.asname)] = path
            else:
                self.bindings[path[0]] = [path[0]]

    def visit_ImportFrom(self, node, parent, in_annotation):
        module = norm(node.module or "")
        if node.level:
            raise GateViolation("import_not_allowed", "relative import", node)
        names = [norm(a.name) for a in node.names]
        self.check_import(module, names, node)
        for alias, name in zip(node.names, names):
            self.bindings[norm(alias.asname) if alias.asname else name] = module.split(".") + [name]

    def resolve(self, expr):
        """The dotted path a plain Name / Attribute chain stands for through the bindings."""
        links = []
        while isinstance(expr, ast.Attribute):
            links.append(norm(expr.attr))
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        path = self.bindings.get(norm(expr.id))
        return None if path is None else path + links[::-1]

    def check_store(self, target):
        targets = [target]
        while targets:
            t = targets.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                targets.extend(t.elts)
            elif isinstance(t, ast.Starred):
                targets.append(t.value)
            elif isinstance(t, ast.Attribute):
                base = t
                while isinstance(base, ast.Attribute):
                    base = base.value
                through_type = isinstance(base, ast.Call) and _is_name(base.func, "type")
                path = self.resolve(t)
                patched = path is not None and not (path[0] == "bpy" and len(path) > 2
                                                    and path[1] in ("context", "data"))
                if patched or through_type:
                    raise GateViolation("module_patch", "assigning to an attribute of a module or a class patches "
                                        "it for the kernel too (bpy.context.* and bpy.data.* stay writable)", t)

    def visit_Assign(self, node, parent, in_annotation):
        for target in node.targets:
            self.check_store(target)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = norm(node.targets[0].id)
            path = self.resolve(node.value)
            if path is None:
                self.bindings.pop(name, None)
            else:
                self.bindings[name] = path

    def visit_AugAssign(self, node, parent, in_annotation):
        self.check_store(node.target)

    def visit_AnnAssign(self, node, parent, in_annotation):
        self.check_store(node.target)

    def visit_Delete(self, node, parent, in_annotation):
        for target in node.targets:
            self.check_store(target)

    def visit_For(self, node, parent, in_annotation):
        self.check_store(node.target)

    visit_AsyncFor = visit_For

    def visit_With(self, node, parent, in_annotation):
        for item in node.items:
            if item.optional_vars is not None:
                self.check_store(item.optional_vars)

    visit_AsyncWith = visit_With

    # ------------------------------------------------ definitions

    def visit_FunctionDef(self, node, parent, in_annotation):
        name = norm(node.name)
        if not is_dunder(name):
            return
        in_class_body = isinstance(parent, ast.ClassDef) and node in parent.body
        if in_class_body and name in DUNDER_METHODS_ALLOWED:
            return
        if not in_class_body:
            why = "%s defined outside a class body" % name
        elif name == "__del__":
            why = "__del__ runs when the object is collected, after the call returned"
        else:
            why = "%s hooks attribute lookup, class creation or pickling (allowed: %s)" % (
                name, ", ".join(sorted(DUNDER_METHODS_ALLOWED)))
        raise GateViolation("dunder_definition", why, node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node, parent, in_annotation):
        for base in node.bases:
            if isinstance(base, ast.Starred):
                raise GateViolation("metaclass_denied", "bases unpacked at run time", node)
        for keyword in node.keywords:
            if keyword.arg is None:
                why = "class keywords unpacked at run time"
            elif norm(keyword.arg) == "metaclass":
                why = "metaclass= runs code of its own when the class is built"
            else:
                why = "class keyword %s= reaches __init_subclass__" % keyword.arg
            raise GateViolation("metaclass_denied", why, node)
        found = identifier_rule(norm(node.name), NAME)
        if found is not None:
            raise GateViolation(found[0], "class %s: %s" % (node.name, found[1]), node)

    # ------------------------------------------------ expressions

    def visit_Name(self, node, parent, in_annotation):
        name = norm(node.id)
        if name == "type" and isinstance(node.ctx, ast.Load):
            raise GateViolation("dynamic_attribute", "type is allowed only as type(x): three-argument type() "
                                "builds a class from run-time names", node)
        found = identifier_rule(name, NAME)
        if found is not None:
            raise GateViolation(found[0], "name %s: %s" % (name, found[1]), node)

    def visit_Attribute(self, node, parent, in_annotation):
        name = norm(node.attr)
        if name in ("format", "format_map"):
            receiver = node.value
            literal = receiver.value if isinstance(receiver, ast.Constant) and isinstance(receiver.value, str) else None
            if literal is None or format_reaches_attributes(norm(literal)):
                raise GateViolation("dynamic_attribute", ".%s looks attributes up from its format string: only a "
                                    "literal format string without `.` or `[` in a field is allowed (or use an "
                                    "f-string)" % name, node)
        else:
            found = identifier_rule(name, ATTRIBUTE)
            if found is not None:
                raise GateViolation(found[0], "attribute .%s: %s" % (name, found[1]), node)
        path = dotted(node)
        if path is not None and operator_rule(path):
            raise GateViolation("operator_denied", "%s touches files, quits, loads or evaluates code (the "
                                "wm.context_* and wm.properties_* operators run data paths as Python)"
                                % ".".join(path), node)

    def visit_Call(self, node, parent, in_annotation):
        func = node.func
        callee = _callee_name(func)

        def keyword(*names):
            return any(k.arg is None or k.arg in names for k in node.keywords)

        if _is_name(func, "type"):
            if len(node.args) != 1 or node.keywords or isinstance(node.args[0], ast.Starred):
                raise GateViolation("dynamic_attribute", "type() with more than one argument builds a class from "
                                    "run-time names", node)
            self.skip.add(id(func))
            return
        dynamic = (callee == "Type"
                   or (callee in ("Enum", "IntEnum", "Flag", "IntFlag", "StrEnum")
                       and (len(node.args) > 1 or keyword("names")))
                   or (callee == "wraps" and (len(node.args) > 1 or keyword("assigned", "updated")))
                   or (callee == "update_wrapper" and (len(node.args) > 2 or keyword("assigned", "updated"))))
        if dynamic:
            raise GateViolation("dynamic_attribute", "%s(...) here copies attributes or builds a class by run-time "
                                "names" % callee, node)
        if (isinstance(func, ast.Call) and _is_name(func.func, "type")
                and (len(node.args) >= 3 or any(isinstance(a, ast.Starred) for a in node.args))):
            # type(cls)('X', (), {...}) is three-argument type() through the metaclass (kernel only)
            raise GateViolation("dynamic_attribute", "calling type(x) with three arguments builds a class from "
                                "run-time names", node)
        # super().__init__(...): the one special attribute a class may reach.
        if (isinstance(func, ast.Attribute) and norm(func.attr) == "__init__"
                and isinstance(func.value, ast.Call) and _is_name(func.value.func, "super")):
            self.skip.add(id(func))
        path = dotted(func)
        if path is not None and "ops" in path and len(path) >= 2 and path[-2] == "node" and keyword("settings"):
            raise GateViolation("string_evaluation", "bpy.ops.node.%s(settings=...) evaluates each setting's value "
                                "as Python" % path[-1], node)

    def visit_MatchClass(self, node, parent, in_annotation):
        # `case C(attr=p)` reads C's attribute `attr` by name: the attribute rules apply.
        for attr in node.kwd_attrs:
            found = identifier_rule(norm(attr), ATTRIBUTE)
            if found is not None:
                raise GateViolation(found[0], "pattern attribute %s: %s" % (attr, found[1]), node)

    def visit_Constant(self, node, parent, in_annotation):
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(value, str):
            return
        found = string_rule(norm(value))
        if found is not None:
            raise GateViolation(found[0], found[1], node)
        if in_annotation:
            raise GateViolation("string_evaluation", "a string annotation is evaluated by typing helpers "
                                "(get_type_hints, singledispatch)", node)


def check(tree):
    """Raises GateViolation for the first node the policy forbids; else the checker, which says
    whether the code makes generators or coroutines."""
    checker = _Checker()
    checker.check(tree)
    return checker


# ---------------------------------------------------------------- code that only reads

# Builtins that code proven read-only may call: positional arguments only (no `key=` or `file=`,
# the two ways to hand a builtin a callable or a writable object), none of them calls back into
# code the agent wrote (read-only code cannot define any) or writes to its arguments.
READ_ONLY_CALLS = frozenset(["abs", "all", "any", "bool", "chr", "divmod", "enumerate", "float", "format",
                             "frozenset", "hash", "int", "isinstance", "len", "list", "max", "min", "ord",
                             "print", "range", "repr", "reversed", "round", "set", "sorted", "str", "sum",
                             "tuple", "zip"])
# Node types code proven read-only may contain. Left out on purpose: function and class
# definitions, lambdas, decorators and `with` (ways to run code of its own from inside Blender
# or a builtin), augmented assignment (`v += d` writes through a Vector that wraps an object's
# location), `match`, `await`, `yield`, and f-string format specs are expressions like any other.
READ_ONLY_NODES = (ast.Module, ast.Expr, ast.Assign, ast.For, ast.While, ast.If, ast.Break, ast.Continue,
                   ast.Pass, ast.Import, ast.ImportFrom, ast.alias, ast.Try, ast.ExceptHandler, ast.Raise,
                   ast.Assert, ast.Delete, ast.Global, ast.Nonlocal, ast.Name, ast.Constant, ast.JoinedStr,
                   ast.FormattedValue, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Attribute,
                   ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.ListComp, ast.SetComp,
                   ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.Call, ast.Starred, ast.NamedExpr,
                   ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def reads_only(tree):
    """Whether the code provably changes nothing in Blender: it calls no function but the
    builtins of READ_ONLY_CALLS (by their own names, which it never rebinds), stores only into
    plain names, and contains no node outside READ_ONLY_NODES. Attribute reads stay allowed:
    Blender's properties do not change the scene when read. Such code runs without a rollback
    point and without the actuator lock's inventories (agent_code.python_exec): there is nothing to
    take back. A filter of the same kind as the gate, conservative by construction: anything it
    cannot tell is treated as code that may write."""
    if confine.GATE_OFF:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, READ_ONLY_NODES):
            return False
        # Stores and deletes through an attribute or an item (a starred target's value is one).
        if isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
            return False
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and node.id in READ_ONLY_CALLS:
            return False
        if isinstance(node, (ast.Global, ast.Nonlocal)) and any(n in READ_ONLY_CALLS for n in node.names):
            return False
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[0]) in READ_ONLY_CALLS:
            return False
        if isinstance(node, ast.ExceptHandler) and node.name in READ_ONLY_CALLS:
            return False
        if isinstance(node, ast.Call):
            if node.keywords or not (isinstance(node.func, ast.Name) and node.func.id in READ_ONLY_CALLS):
                return False
    return True


def restricted_import(name, globals=None, locals=None, fromlist=(), level=0):
    parts = norm(name).split(".")
    if level or parts[0] not in IMPORT_ALLOWLIST or any(p.startswith("_") for p in parts):
        raise ImportError("import of %r is not allowed" % name)
    return builtins.__import__(name, globals, locals, fromlist, level)


def safe_builtins():
    table = {name: getattr(builtins, name) for name in SAFE_BUILTINS if hasattr(builtins, name)}
    table["__import__"] = restricted_import
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


# ---------------------------------------------------------------- the deadline

def _async_raiser():
    """PyThreadState_SetAsyncExc: raises an exception in a thread at its next bytecode boundary
    without going through the trace function (CPython removes a trace function that raises, so a
    raise from the tracer works once only). None where ctypes is missing."""
    try:
        import ctypes
        fn = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
            ("PyThreadState_SetAsyncExc", ctypes.pythonapi))
        return fn
    except Exception:  # noqa: BLE001 - no ctypes: the tracer raises directly (once)
        return None


_ASYNC = _async_raiser()


def _take_pending():
    """Runs a little bytecode: a pending asynchronous exception is raised at a function's start
    and at a loop's backward jump."""
    for _ in (0, 1):
        pass


class Deadline:
    """Interrupts the code running on this thread once `seconds` have passed.

    Two paths raise `Interrupted` in the agent's code:
      * the tracer (fast and exact): at the first trace event past the deadline. CPython removes
        a trace function as soon as it raises, so it cannot fire twice (and code that makes the
        trace call itself fail, with a RecursionError at the stack limit, removes it earlier);
      * a watchdog thread: from the deadline on, every REFIRE_S, until the code has stopped. It
        raises through PyThreadState_SetAsyncExc, which needs no tracer, so catching the
        interrupt (`except BaseException:`, a bare `except:`) only delays it by REFIRE_S.
    Neither stops C-level work (`sum(range(10**12))`, `time.sleep`): the bridge kills the kernel
    for those. A run that reached its deadline answers `timeout` even if the code caught every
    interrupt and returned."""

    def __init__(self, seconds):
        self.stop_at = _monotonic() + seconds
        self.cancelled = False
        self.thread_id = threading.get_ident()
        self.lock = threading.Lock()
        self.active = True
        self.fired = False
        self.done = threading.Event()
        self.wake = threading.Event()  # set by a cancel and by the end of the run
        self.previous = None
        self.switch_interval = None

    def tracer(self, frame, event, arg):
        # Opcode events too: a one-line loop (`while True: pass`) may raise no line event.
        frame.f_trace_opcodes = True
        if self.active and _monotonic() > self.stop_at:
            self.fired = True
            raise Interrupted()
        return self.tracer

    def stop_now(self):
        """A cancel (from the kernel's reader thread): the deadline is now."""
        self.cancelled = True
        self.stop_at = _monotonic()
        self.wake.set()

    def watch(self):
        # One wait until the deadline, cut short by a cancel (`wake`) or the end of the run.
        # (Not a polling loop: on Python 3.13 the watchdog's periodic wake-ups left the
        # runaway code uninterruptible.)
        self.wake.wait(max(0.0, self.stop_at - _monotonic()))
        if self.done.is_set():
            return
        while True:
            with self.lock:
                if not self.active:
                    return
                if self.switch_interval is None:
                    # This thread needs the GIL to fire: ask the running code to hand it over
                    # more often until it stops (restored by `stop`).
                    self.switch_interval = sys.getswitchinterval()
                    sys.setswitchinterval(min(self.switch_interval, REFIRE_S / 2))
                self.fired = True
                _ASYNC(self.thread_id, Interrupted)
            if self.done.wait(REFIRE_S):
                return

    def start(self):
        self.previous = sys.gettrace()
        if _ASYNC is not None:
            WATCHDOG.arm(self)
        sys.settrace(self.tracer)

    def settle(self):
        """Called once `active` is False: waits out a firing in flight, then takes delivery of an
        interrupt still pending for this thread, so that none escapes into the kernel. Raises
        Interrupted when it delivers one; after `active` went False at most two can be delivered
        (one pending, one in flight: the thread state holds one at a time), so the caller calls
        this up to three times, each in its own try. (Clearing a pending one with
        PyThreadState_SetAsyncExc(id, NULL) leaves CPython 3.11's eval breaker set, which hangs
        a traced frame: it is not used.)"""
        with self.lock:
            pass
        _take_pending()

    def finish(self):
        """After `settle`: nothing can interrupt any more; undo what `start` and `watch` set."""
        self.done.set()
        self.wake.set()
        sys.settrace(self.previous)
        if self.switch_interval is not None:
            sys.setswitchinterval(self.switch_interval)
            self.switch_interval = None


class Watchdog:
    """The one thread that watches every run's deadline (`Deadline.watch`), started with the
    first run and kept: a thread per run cost ~1 ms to start in Blender's Python, more than the
    trivial code it watched. It watches one run at a time (runs are on the main thread, one
    after another)."""

    def __init__(self):
        self.condition = threading.Condition()
        self.armed = None  # the Deadline of the run in progress
        self.thread = None

    def arm(self, deadline):
        with self.condition:
            self.armed = deadline
            if self.thread is None or not self.thread.is_alive():
                try:
                    self.thread = threading.Thread(target=self.loop, name="vibe-deadline", daemon=True)
                    self.thread.start()
                except RuntimeError:  # no thread to spare: the tracer alone (the bridge's kill stays)
                    self.thread = None
            self.condition.notify()

    def loop(self):
        while True:
            with self.condition:
                while self.armed is None or self.armed.done.is_set():
                    self.condition.wait()
                deadline = self.armed
            deadline.watch()


WATCHDOG = Watchdog()


def describe(exc):
    """One line for an exception of the agent's code (runs while the deadline still applies)."""
    try:
        return "".join(traceback.format_exception_only(type(exc), exc))
    except Interrupted:
        raise
    except BaseException:  # noqa: BLE001 - an agent's __str__ may raise anything, SystemExit included
        return "%s (its message could not be shown)" % type(exc).__name__


def run(code, deadline_s, tree=None):
    """Checks and runs `code` (or its `tree`, parsed already); returns (stdout, truncated).
    Raises SyntaxError, GateViolation, Interrupted (the deadline passed, even when the code
    caught the interrupt), or AgentError (whatever the code raised, as text)."""
    if tree is None:
        tree = parse(code)
    # In a jail, tests switch the gate off to show the jail holds without it (see confine.py).
    ungated = confine.GATE_OFF
    suspends = True if ungated else check(tree).suspends
    compiled = compile_checked(tree)
    out = CappedOutput()
    scope = {"__builtins__": builtins.__dict__ if ungated else safe_builtins(), "__name__": "__agent__"}
    global RUNNING
    deadline = Deadline(deadline_s)
    RUNNING = deadline
    failure = None
    saved_stdout = sys.stdout
    try:
        sys.stdout = out
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
        sys.stdout = saved_stdout
        RUNNING = None
    if deadline.fired:
        interrupted = Interrupted()
        interrupted.cancelled = deadline.cancelled
        raise interrupted
    if failure is not None:
        raise AgentError(failure)
    return out.getvalue(), out.truncated
