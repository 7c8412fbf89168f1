"""The kernel's code policy: the tables and the rule of each identifier, operator chain and
string literal, which the gate (code_gate.py) applies to agent code. It mirrors the bridge's Rust
policy (vibe-exec `code::policy`): the same tables, the same rule names.

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
                      auto-run and script loading; any register_* / unregister* and any name
                      containing `driver` (as the Rust gate).
  operator_denied     operators that touch files, quit, load code, start programs or evaluate
                      data-path strings (wm.context_*, wm.properties_*, ...), through any alias,
                      and string literals naming one ("wm.context_set_value", "WM_OT_...").
  file_writer         exporters, saves, image.save_render, libraries.write, unpack, mixdown,
                      sysinfo, wm.save_userpref: writes the sandbox does not control.
  dynamic_attribute   attribute lookups by run-time strings: attrgetter, methodcaller,
                      string.Formatter, get_field, vformat, str.format / format_map on a
                      non-literal or with `{x.attr}` / `{x[key]}` fields, type() with other than
                      one argument (or `type` used as a value), functional Enum(...) and wraps,
                      and the RNA methods that take an attribute path as a string
                      (path_resolve, foreach_get, foreach_set, property_unset) unless it is a
                      literal whose every word passes the attribute rules.
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

import re
import string
import unicodedata

MAX_SOURCE_BYTES = 1024 * 1024
# Brackets nested deeper than this are refused before parsing (CPython itself stops at 200, and
# long unbracketed chains overflow its parser and compiler: those are caught, see
# `code_gate.parse`).
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
DENIED_ATTRIBUTES = {"register", "handlers", "timers", "driver_namespace", "driver_add", "drivers", "msgbus", "execfile",
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
# RNA methods that take an attribute path or name as a string: `bpy.data.path_resolve("te" + "xts")`
# reaches what the attribute rules refuse by name. Only a literal path, every word of which passes
# the attribute rules, is allowed.
STRING_PATH_METHODS = {"path_resolve", "foreach_get", "foreach_set", "property_unset"}
# An operator's name as a string: "group.name" (lower case, as bpy.ops spells it: "Text.001" is a
# name) or "GROUP_OT_name".
OPERATOR_STRING = re.compile(r"([a-z0-9]+)\.([a-z_]\w*)|([A-Z0-9]+)_OT_(\w+)")
REGISTERED_CLASS_INFIXES = ("_OT_", "_MT_", "_PT_", "_HT_", "_UL_", "_GT_")

NAME, ATTRIBUTE, IMPORT = "name", "attribute", "import"


def norm(name):
    return unicodedata.normalize("NFKC", name)


def is_dunder(name):
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


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
    if use != NAME and name == "types":
        return ("module_attribute", "bpy.types and bmesh.types (and Python's types module) hold the classes "
                "Blender registers and code patches; compare `obj.type` or `bl_idname`, or use `type(x)`")
    if use != NAME and name in MODULE_ATTRIBUTES:
        return "module_attribute", "a module off the import allowlist, re-exported by an allowed one"
    if use != NAME and (name in DENIED_ATTRIBUTES or name.startswith(("register_", "unregister")) or "driver" in name):
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


def _operator_named(name):
    """An operator name refused through any chain (OPERATOR_NAMES, OPERATOR_PREFIXES)."""
    return name in OPERATOR_NAMES or name.startswith(OPERATOR_PREFIXES)


def _pattern_matches(pattern, name):
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def operator_rule(path):
    """'operator_denied' when the dotted chain `path` reaches a refused operator, else None."""
    if len(path) < 2:
        return None
    group, op = path[-2], path[-1]
    grouped = "ops" in path and any(g == group and _pattern_matches(o, op) for g, o in DENIED_OPERATORS)
    return "operator_denied" if _operator_named(op) or grouped else None


def path_rule(text):
    """(rule, why) for a literal path given to a STRING_PATH_METHOD, or None: every identifier-like
    word in it is judged as an attribute (words inside brackets too: stricter than RNA's own path
    syntax, never looser)."""
    for word in re.findall(r"[^\W\d]\w*", text):
        found = identifier_rule(word, ATTRIBUTE)
        if found is not None:
            return found[0], "the path reaches %s: %s" % (word, found[1])
    return None


def dotted_operator_denied(group, op):
    """"group.op" names a refused operator: by its name, or by a group entry other than the bare
    catch-all."""
    return _operator_named(op) or any(g == group and o != "*" and _pattern_matches(o, op)
                                      for g, o in DENIED_OPERATORS)


def string_rule(text):
    if any(is_dunder(word) for word in re.findall(r"\w+", text)):
        return "dunder_string", "a string naming a dunder attribute"
    if any(s in text for s in DENIED_STRINGS):
        return "script_node", "script nodes run arbitrary code"
    if KERNEL_MODULE in text:
        return "kernel_access", "a string naming the kernel's own module"
    if text in OPERATOR_NAMES or any(text == o for _, o in DENIED_OPERATORS if "*" not in o):
        return "operator_denied", "a string naming a refused operator"
    named = OPERATOR_STRING.fullmatch(text)
    # "GROUP_OT_name" is an operator whatever the name; "group.name" is one only when the name is
    # refused as such (a catch-all group would refuse file names: "script.py", "text.txt").
    if named is not None and (operator_rule(["ops", named.group(3).lower(), named.group(4)]) if named.group(3)
                              else dotted_operator_denied(named.group(1), named.group(2))):
        return ("operator_denied", "a string naming a refused operator (key map items, layouts and last-used "
                "settings take operators by name)")
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
