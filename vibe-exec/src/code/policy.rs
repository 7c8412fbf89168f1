//! The code gate's policy: its limits and how depth is measured before parsing, the tables of
//! names it refuses and the rule each one falls under. [`super::check`] applies them.
//!
//! The gate is a filter, not a boundary (DESIGN §9): these tables make the common escapes fail
//! early with an explanation. The operating-system jail around the kernel is what holds.

/// Largest source the gate parses (`source_too_large`, refused before it is lexed). The parser
/// recurses, and on code with syntax errors its depth is bounded by nothing but the source's size
/// (see [`PARSE_STACK_PER_BYTE`]); agent code is a script, not a data channel, and 128 KiB of it
/// (some 3,000 lines) is far beyond any real one.
pub const MAX_SOURCE_BYTES: usize = 128 * 1024;

/// Deepest nesting of brackets, f-string replacement fields and indented blocks, all counted
/// together (`nesting_too_deep`). CPython itself stops at 200 brackets and 100 indents.
pub const MAX_NESTING: usize = 100;

/// Deepest nesting of f-strings and t-strings inside one another's replacement fields
/// (`nesting_too_deep`). Python 3.11, the kernel's language on most targets, cannot nest more
/// than four (one per quote style); the parser's work on a field grows with the fields around
/// it (it scans each field's whole range for backslashes, nested fields included).
pub const MAX_FSTRING_NESTING: usize = 4;

/// Longest dotted path the checker follows through a binding (`w = bpy.ops.wm; w.quit_blender()`).
/// A longer one names no real module attribute and is not followed, which keeps the checker
/// linear: following it would copy the path at every use.
pub const MAX_BINDING_PATH: usize = 64;

/// Largest estimated depth of the syntax tree (`nesting_too_deep`). The estimate is taken on
/// tokens, before the parser (which recurses) runs: every operator, keyword, dot, call and
/// bracket counts as a level, commas and statement ends start a new count (except after
/// `lambda` and `yield`, which nest across commas), and nested brackets and blocks add up. It is
/// never below the real depth of code that parses, so at this limit the parser, the visitor and
/// the tree's drop stay inside 1 MiB of stack even in a debug build. A bracket level costs two,
/// so [`MAX_NESTING`] brackets fit; a 256-term sum on one line is refused.
pub const MAX_EXPRESSION_DEPTH: usize = 256;

/// Stack the gate's parser gets per byte of source, on top of [`PARSE_STACK_BASE`].
///
/// The pre-scan's estimate bounds the tree of code that parses, not the parser on code that does
/// not: recovering from an error, the parser skips tokens and has the lexer read on differently
/// (an f-string's text as code, a bracket's lines as blocks), which no estimate on the lexer's
/// tokens foresees. What always holds is that every level it recurses into consumes at least one
/// byte of source. Measured in a debug build, the costliest byte is an unclosed `{` at about
/// 5 KiB of stack; 8 KiB leaves a margin, and an optimized build needs several times less.
pub const PARSE_STACK_PER_BYTE: usize = 8 * 1024;

/// Stack of the gate's parser before [`PARSE_STACK_PER_BYTE`]: the checker's own frames.
/// The stack is reserved, not used: pages are touched only as deep as a parse goes, so
/// [`MAX_SOURCE_BYTES`] of code reserves about 1 GiB of address space and ordinary code touches
/// a few pages of it.
pub const PARSE_STACK_BASE: usize = 8 * 1024 * 1024;

/// Violations reported at most; the gate stops collecting after these.
pub const MAX_VIOLATIONS: usize = 50;

/// Modules agent code may import (and their submodules).
pub const IMPORT_ALLOWLIST: [&str; 18] = [
    "bpy",
    "bmesh",
    "mathutils",
    "math",
    "random",
    "json",
    "itertools",
    "functools",
    "collections",
    "statistics",
    "colorsys",
    "copy",
    "string",
    "re",
    "datetime",
    "enum",
    "typing",
    "time",
];

/// Modules `from m import *` may read: their public names are harmless. A star import from
/// anything else (`from bpy.app import *` binds `handlers`) is refused.
pub const STAR_IMPORT_ALLOWLIST: [&str; 6] = [
    "math",
    "mathutils",
    "random",
    "itertools",
    "colorsys",
    "statistics",
];

/// Builtins agent code may not name (`builtin_denied`).
pub const DENIED_NAMES: [&str; 15] = [
    "eval",
    "exec",
    "compile",
    "open",
    "getattr",
    "setattr",
    "delattr",
    "globals",
    "locals",
    "vars",
    "breakpoint",
    "input",
    "help",
    "exit",
    "quit",
];

/// Attribute names that reach Blender's persistent callbacks, script execution, key maps, text
/// blocks, drivers or the preferences (`attribute_denied`). Any attribute holding `driver`
/// (`anim.driver_button_add`, `paste_driver_button`) or starting with `register_` or
/// `unregister` (`bpy.utils.register_manual_map`) counts too: registrations outlive the call.
/// `register` itself is an ABC's registry (`collections.abc.Mapping.register(list)` changes what
/// the kernel's own `isinstance` checks answer) and `bpy.app.translations.register`.
pub const DENIED_ATTRIBUTES: [&str; 31] = [
    "register",
    "handlers",
    "timers",
    "driver_namespace",
    "driver_add",
    "drivers",
    "msgbus",
    "execfile",
    "register_class",
    "unregister_class",
    "register_classes_factory",
    "register_module",
    "unregister_module",
    "register_cli_command",
    "load_scripts",
    "modules_from_path",
    "register_submodule_factory",
    "as_module",
    "use_module",
    "draw_handler_add",
    "register_tool",
    "refresh_script_paths",
    "keyconfigs",
    "keyconfig_set",
    "keyconfig_init",
    "texts",
    "preferences",
    "user_preferences",
    "use_scripts_auto_execute",
    "use_scripts_auto_exec",
    "autoexec_paths",
];

/// Underscored attributes that are public API: `collections.namedtuple`'s methods.
pub const PRIVATE_ALLOWED: [&str; 5] =
    ["_replace", "_asdict", "_fields", "_make", "_field_defaults"];

/// Frame, code, generator, coroutine and traceback internals (`frame_access`): a frame's
/// `f_globals` is any module's namespace. Any attribute with one of [`FRAME_PREFIXES`] counts.
pub const FRAME_ATTRIBUTES: [&str; 20] = [
    "f_back",
    "f_builtins",
    "f_code",
    "f_globals",
    "f_locals",
    "f_trace",
    "f_lasti",
    "f_lineno",
    "f_generator",
    "func_globals",
    "func_code",
    "func_closure",
    "func_defaults",
    "func_dict",
    "im_func",
    "im_self",
    "im_class",
    "cell_contents",
    "f_trace_lines",
    "f_trace_opcodes",
];

/// Prefixes of generator (`gi_`), coroutine (`cr_`), async-generator (`ag_`), traceback (`tb_`)
/// and code-object (`co_`) attributes (`frame_access`); Blender's keyframe `co_ui` is exempt.
pub const FRAME_PREFIXES: [&str; 5] = ["gi_", "cr_", "ag_", "tb_", "co_"];

/// Helpers that look an attribute up by a run-time string (`dynamic_attribute`).
pub const DYNAMIC_ATTRIBUTE_NAMES: [&str; 6] = [
    "attrgetter",
    "methodcaller",
    "Formatter",
    "get_field",
    "vformat",
    "getattr_static",
];

/// Helpers that evaluate a string as Python (`string_evaluation`); `to_value` is
/// `bpy.utils.units.to_value`, which evaluates its input.
pub const STRING_EVALUATORS: [&str; 8] = [
    "get_type_hints",
    "ForwardRef",
    "evaluate_forward_ref",
    "_eval_type",
    "get_annotations",
    "call_evaluate_function",
    "call_annotate_function",
    "to_value",
];

/// Data-API methods, properties and operators that write files (`file_writer`): `image.save`,
/// `save_render`, `filepath_raw`, `libraries.write`, `unpack`, `sound.mixdown`, `wm.sysinfo`;
/// any attribute starting with one of [`FILE_WRITER_PREFIXES`] or holding `_export` counts too
/// (`bpy.ops.export_scene`, `wm.obj_export`, `wm.save_userpref`, `image.save_as`). Setting
/// `render.filepath` stays allowed: the jail decides where files go.
pub const FILE_WRITERS: [&str; 7] = [
    "save",
    "save_render",
    "filepath_raw",
    "write",
    "unpack",
    "mixdown",
    "sysinfo",
];

/// Prefixes of file-writing attributes, see [`FILE_WRITERS`].
pub const FILE_WRITER_PREFIXES: [&str; 4] = ["save_", "export", "screenshot", "unpack_"];

/// Metaclasses reachable from allowed modules (`metaclass_denied`).
pub const METACLASS_NAMES: [&str; 4] = ["ABCMeta", "EnumMeta", "EnumType", "GenericMeta"];

/// Special methods a class body may define (`dunder_definition` refuses the others: `__del__`
/// runs after the call returned, `__getattr__`, `__set_name__`, `__init_subclass__`,
/// `__class_getitem__` and `__reduce__` hook attribute lookup, class creation or pickling).
pub const DUNDER_METHODS_ALLOWED: [&str; 24] = [
    "__init__",
    "__repr__",
    "__str__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__hash__",
    "__len__",
    "__bool__",
    "__iter__",
    "__next__",
    "__contains__",
    "__getitem__",
    "__setitem__",
    "__enter__",
    "__exit__",
    "__add__",
    "__sub__",
    "__mul__",
    "__truediv__",
    "__neg__",
];

/// The Python kernel's own package (`kernel_access`): agent code must not reach or patch it.
pub const KERNEL_MODULE: &str = "vibe_kernel";

/// `bpy.ops.<group>.<operator>` pairs that touch files, quit, or load code, and the undo
/// history (`ed.*`: in the GUI it holds the person's steps too); `*` is any operator, a trailing
/// `*` a prefix. They are refused when the chain goes through `ops`.
pub const DENIED_OPERATORS: [(&str, &str); 25] = [
    ("wm", "open_mainfile"),
    ("wm", "save_mainfile"),
    ("wm", "save_as_mainfile"),
    ("wm", "save_homefile"),
    ("wm", "quit_blender"),
    ("wm", "read_homefile"),
    ("wm", "read_factory_settings"),
    ("wm", "read_userpref"),
    ("wm", "recover_last_session"),
    ("wm", "recover_auto_save"),
    ("wm", "revert_mainfile"),
    ("wm", "link"),
    ("wm", "append"),
    ("wm", "url_open"),
    ("wm", "url_open_preset"),
    ("wm", "path_open"),
    ("wm", "call_menu*"),
    ("wm", "call_panel"),
    ("preferences", "*"),
    ("script", "*"),
    ("console", "*"),
    ("text", "*"),
    ("extensions", "*"),
    ("wm", "addon_*"),
    ("ed", "*"),
];

/// Operator names refused whatever the chain that reaches them (an alias of `bpy.ops.wm` or
/// `bpy.ops.script` included): files, quitting, add-ons, external programs, the operators
/// that evaluate a data path or run a script (`wm.context_*`, `wm.properties_*`, presets, key
/// configurations), and the undo history's (in the GUI it holds the person's steps).
pub const OPERATOR_NAMES: [&str; 25] = [
    "open_mainfile",
    "save_mainfile",
    "save_as_mainfile",
    "save_homefile",
    "quit_blender",
    "read_homefile",
    "read_factory_settings",
    "read_userpref",
    "recover_last_session",
    "recover_auto_save",
    "revert_mainfile",
    "url_open",
    "url_open_preset",
    "path_open",
    "run_script",
    "python_file_run",
    "execute_preset",
    "operator_pie_enum",
    "external_edit",
    "play_rendered_anim",
    "undo",
    "redo",
    "undo_history",
    "undo_redo",
    "undo_push",
];

/// Prefixes and infixes of operator names refused through any chain, like [`OPERATOR_NAMES`].
pub const OPERATOR_PREFIXES: [&str; 7] = [
    "addon_",
    "context_",
    "properties_",
    "keyconfig_",
    "doc_view",
    "previews_batch_",
    "app_template_",
];

/// String literals that name something the policy forbids (a script node).
pub const DENIED_STRINGS: [&str; 2] = ["ShaderNodeScript", "NodeScript"];

/// RNA methods that take an attribute path or name as a string (`dynamic_attribute`):
/// `bpy.data.path_resolve("te" + "xts")` reaches what the attribute rules refuse by name. Only
/// a call on the spot with a literal path, every word of which passes the attribute rules
/// ([`path_rule`]), is allowed.
pub const STRING_PATH_METHODS: [&str; 4] = [
    "path_resolve",
    "foreach_get",
    "foreach_set",
    "property_unset",
];

/// Class-name infixes of Blender's registered classes (`WM_OT_context_set`, `VIEW3D_MT_add`):
/// an operator class run directly evaluates its data paths, a menu or header appended to runs
/// Python on every redraw after the call returned (`registered_class`).
pub const REGISTERED_CLASS_INFIXES: [&str; 6] = ["_OT_", "_MT_", "_PT_", "_HT_", "_UL_", "_GT_"];

/// `name` is `__x__`.
pub fn is_dunder(name: &str) -> bool {
    name.len() > 4 && name.starts_with("__") && name.ends_with("__")
}

/// `text` holds a `__word__` somewhere (a dunder built into a string).
pub fn contains_dunder(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(start) = text[i..].find("__").map(|s| s + i) {
        let word = bytes[start + 2..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count();
        if word > 2 && text[start + 2..start + 2 + word].ends_with("__") {
            return true;
        }
        i = start + 2;
    }
    false
}

/// A `str.format` string with a replacement field whose name goes on with `.` or `[`
/// (`"{0.__class__}"`, `"{x[0]}"`): `format` would look attributes or items up by name.
pub fn format_reaches_attributes(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' {
            if bytes.get(i + 1) == Some(&b'{') {
                i += 2;
                continue;
            }
            let field = bytes[i + 1..]
                .iter()
                .find(|b| matches!(b, b'.' | b'[' | b'!' | b':' | b'}' | b'{'));
            if matches!(field, Some(b'.' | b'[')) {
                return true;
            }
        }
        i += 1;
    }
    false
}

/// Where an identifier is used: the rules differ a little (a name may start with `_`, an
/// attribute may not; `compile` is refused as a name, not as `re.compile`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Use {
    /// A variable name read or bound by the code.
    Name,
    /// `x.attribute`.
    Attribute,
    /// A module path component or a name imported with `from m import name`.
    Import,
}

/// The rule an identifier breaks, with what it explains, or `None`.
pub fn identifier_rule(id: &str, used: Use) -> Option<(&'static str, &'static str)> {
    let in_list = |list: &[&str]| list.contains(&id);
    if id.contains(KERNEL_MODULE) {
        return Some(("kernel_access", "the kernel's own module is out of reach"));
    }
    if in_list(&STRING_EVALUATORS) {
        return Some(("string_evaluation", "evaluates a string as Python"));
    }
    if in_list(&DYNAMIC_ATTRIBUTE_NAMES) {
        return Some((
            "dynamic_attribute",
            "looks attributes up by a run-time string",
        ));
    }
    if is_dunder(id) {
        return Some(("dunder_access", "special attributes reach the interpreter"));
    }
    if used != Use::Name && id.starts_with('_') && !PRIVATE_ALLOWED.contains(&id) {
        return Some((
            "private_access",
            "private attributes of modules reach their imports",
        ));
    }
    if used != Use::Name
        && id != "co_ui"
        && (in_list(&FRAME_ATTRIBUTES) || FRAME_PREFIXES.iter().any(|p| id.starts_with(p)))
    {
        return Some((
            "frame_access",
            "frames, code and tracebacks reach other modules' globals",
        ));
    }
    if used != Use::Attribute && in_list(&DENIED_NAMES) {
        return Some(("builtin_denied", "not available to agent code"));
    }
    let registers = id.starts_with("register_") || id.starts_with("unregister");
    if used != Use::Name && (in_list(&DENIED_ATTRIBUTES) || registers || id.contains("driver")) {
        return Some((
            "attribute_denied",
            "reaches handlers, timers, drivers, key maps, text blocks, preferences or script loading",
        ));
    }
    if used != Use::Name
        && (in_list(&FILE_WRITERS)
            || FILE_WRITER_PREFIXES.iter().any(|p| id.starts_with(p))
            || id.contains("_export"))
    {
        return Some((
            "file_writer",
            "writes files; exports and saves are not for agent code",
        ));
    }
    if in_list(&METACLASS_NAMES) {
        return Some((
            "metaclass_denied",
            "a metaclass builds classes from run-time names",
        ));
    }
    if REGISTERED_CLASS_INFIXES.iter().any(|i| id.contains(i)) {
        return Some((
            "registered_class",
            "Blender's registered classes evaluate data paths or run Python on redraw",
        ));
    }
    None
}

/// The rule a `Name`/`Attribute` chain (`bpy.ops.wm.quit_blender`, normalized) breaks as an
/// operator call, or `None`.
pub fn operator_rule(path: &[String]) -> Option<&'static str> {
    let n = path.len();
    if n < 2 {
        return None;
    }
    let (group, op) = (path[n - 2].as_str(), path[n - 1].as_str());
    // A chain through `ops` (bpy.ops.wm.x, ops.wm.x) is an operator call. The operator names
    // themselves are distinctive, so they are refused through any alias (`w = bpy.ops.wm`) too;
    // only the catch-all groups need the `ops` in the chain.
    let grouped = path.iter().any(|p| p == "ops")
        && DENIED_OPERATORS
            .iter()
            .any(|(g, o)| *g == group && pattern_matches(o, op));
    (operator_named(op) || grouped).then_some("operator_denied")
}

/// An operator name refused through any chain ([`OPERATOR_NAMES`], [`OPERATOR_PREFIXES`]).
fn operator_named(name: &str) -> bool {
    OPERATOR_NAMES.contains(&name) || OPERATOR_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// A [`DENIED_OPERATORS`] pattern: a name, or a prefix with a trailing `*`.
fn pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// The rule a literal path given to one of the [`STRING_PATH_METHODS`] breaks, or `None`: every
/// identifier-like word in it is judged as an attribute, words inside brackets too (stricter than
/// RNA's own path syntax, never looser). The detail names the word.
pub fn path_rule(path: &str) -> Option<(&'static str, String)> {
    path.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| word.chars().next().is_some_and(|c| !c.is_numeric()))
        .find_map(|word| {
            identifier_rule(word, Use::Attribute)
                .map(|(rule, why)| (rule, format!("the path reaches {word}: {why}")))
        })
}

/// An operator's name written as a string, `group.name` (lower case, as `bpy.ops` spells it:
/// `Text.001` is an object's name) or `GROUP_OT_name`, as (group, name, written as a class name).
fn operator_string(text: &str) -> Option<(String, &str, bool)> {
    let word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    if let Some((group, name)) = text.split_once('.') {
        let lower_group = !group.is_empty()
            && group
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let starts = name
            .chars()
            .next()
            .is_some_and(|c| c.is_lowercase() || c == '_');
        return (lower_group && starts && word(name)).then(|| (group.to_owned(), name, false));
    }
    let (group, name) = text.split_once("_OT_")?;
    let upper_group = !group.is_empty()
        && group
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    (upper_group && word(name)).then(|| (group.to_ascii_lowercase(), name, true))
}

/// `group.name` names a refused operator: by its name, or by a group entry other than the bare
/// catch-all.
fn dotted_operator_denied(group: &str, name: &str) -> bool {
    operator_named(name)
        || DENIED_OPERATORS
            .iter()
            .any(|(g, o)| *g == group && *o != "*" && pattern_matches(o, name))
}

/// The rule a string literal breaks, with what it explains, or `None`.
pub fn string_rule(text: &str) -> Option<(&'static str, &'static str)> {
    if contains_dunder(text) {
        Some(("dunder_string", "a string naming a dunder attribute"))
    } else if DENIED_STRINGS.iter().any(|s| text.contains(s)) {
        Some(("script_node", "script nodes run arbitrary code"))
    } else if text.contains(KERNEL_MODULE) {
        Some(("kernel_access", "a string naming the kernel's own module"))
    } else if DENIED_OPERATORS
        .iter()
        .any(|(_, o)| !o.contains('*') && text == *o)
        || OPERATOR_NAMES.contains(&text)
    {
        Some(("operator_denied", "a string naming a refused operator"))
    } else if let Some((group, name, class_name)) = operator_string(text)
        // `GROUP_OT_name` is an operator whatever the name; `group.name` is one only when the
        // name is refused as such (a catch-all group would refuse `script.py`, `text.txt`).
        && (if class_name {
            operator_rule(&["ops".into(), group, name.into()]).is_some()
        } else {
            dotted_operator_denied(&group, name)
        })
    {
        Some((
            "operator_denied",
            "a string naming a refused operator (key map items, layouts and last-used settings \
             take operators by name)",
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_fields_that_look_attributes_up() {
        for text in ["{0.x}", "{x[0]}", "{:{0.x}}", "a {b.c} d"] {
            assert!(format_reaches_attributes(text), "{text}");
        }
        for text in ["{}", "{:.3f}", "{0} {1}", "{name!r:>{w}}", "{{x.y}}", "%s"] {
            assert!(!format_reaches_attributes(text), "{text}");
        }
    }
}
