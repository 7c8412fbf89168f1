//! The code gate: agent-written Python parsed with a real Python parser (Ruff's, as RustPython
//! publishes it) and checked against an AST policy before anything reaches Blender.
//!
//! Why Ruff's parser: it is a complete, maintained Python 3 parser in pure Rust with exact
//! source ranges (for line and column in errors) and a visitor over every node, including the
//! expressions inside f-strings. `tree-sitter-python` would add a C build and a concrete syntax
//! tree to interpret; the older `rustpython-parser` lags the language. A regex gate is not a
//! gate: `exec` spelled in full-width letters, attribute chains and format strings walk past it.
//!
//! Identifiers are compared after NFKC normalization, as Python itself normalizes them, so
//! `ｅｘｅｃ` is `exec` here too.

use std::fmt;

use ruff_python_ast::visitor::{Visitor, walk_expr, walk_stmt};
use ruff_python_ast::{Expr, Stmt};
use ruff_text_size::{Ranged, TextSize};
use unicode_normalization::UnicodeNormalization;

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

/// Builtins agent code may not name.
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

/// Attribute names that reach Blender's persistent callbacks or script execution.
pub const DENIED_ATTRIBUTES: [&str; 16] = [
    "handlers",
    "timers",
    "driver_namespace",
    "msgbus",
    "execfile",
    "register_class",
    "unregister_class",
    "register_module",
    "unregister_module",
    "load_scripts",
    "register_submodule_factory",
    "as_module",
    "use_module",
    "draw_handler_add",
    "register_tool",
    "refresh_script_paths",
];

/// `bpy.ops.<group>.<operator>` pairs that touch files, quit, or load code; `*` is any operator.
pub const DENIED_OPERATORS: [(&str, &str); 20] = [
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
    ("preferences", "*"),
    ("script", "*"),
    ("text", "run_script"),
    ("wm", "addon_*"),
];

/// Operator names refused whatever the chain that reaches them (an alias of `bpy.ops.wm` or
/// `bpy.ops.script` included).
pub const OPERATOR_NAMES: [&str; 19] = [
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
    "addon_install",
    "addon_enable",
];

/// String literals that name something the policy forbids (a script node, a dunder).
pub const DENIED_STRINGS: [&str; 2] = ["ShaderNodeScript", "NodeScript"];

/// How the gate acts on a violation, as the contract's `constraints.code_gate` says.
pub use vibe_contract::CodeGateMode;

/// One finding of the gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule that caught it (e.g. `import_not_allowed`, `dunder_access`).
    pub rule: &'static str,
    /// What was found.
    pub detail: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {}, column {}: {}",
            self.rule, self.line, self.column, self.detail
        )
    }
}

/// The code does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxIssue {
    /// What the parser said.
    pub message: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

/// What the gate found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Parsed, and nothing the policy forbids.
    Clean,
    /// Parsed, and these violations (all of them, in source order).
    Violations(Vec<Violation>),
    /// Did not parse.
    Syntax(SyntaxIssue),
}

fn line_column(source: &str, offset: TextSize) -> (usize, usize) {
    let offset = usize::from(offset).min(source.len());
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// NFKC, as Python normalizes identifiers.
pub fn normalize(identifier: &str) -> String {
    identifier.nfkc().collect()
}

fn is_dunder(name: &str) -> bool {
    name.len() > 4 && name.starts_with("__") && name.ends_with("__")
}

fn contains_dunder(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(start) = text[i..].find("__").map(|s| s + i) {
        let rest = &bytes[start + 2..];
        let word = rest
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

/// The dotted path of a `Name` / `Attribute` chain (`bpy.ops.wm.quit_blender`), normalized.
fn dotted(expr: &Expr) -> Option<Vec<String>> {
    match expr {
        Expr::Name(name) => Some(vec![normalize(name.id.as_str())]),
        Expr::Attribute(attr) => {
            let mut path = dotted(&attr.value)?;
            path.push(normalize(attr.attr.as_str()));
            Some(path)
        }
        _ => None,
    }
}

struct Checker<'s> {
    source: &'s str,
    found: Vec<Violation>,
}

impl Checker<'_> {
    fn flag(&mut self, rule: &'static str, detail: String, at: TextSize) {
        let (line, column) = line_column(self.source, at);
        self.found.push(Violation {
            rule,
            detail,
            line,
            column,
        });
    }

    fn check_import(&mut self, module: &str, at: TextSize) {
        let top = module.split('.').next().unwrap_or("");
        if !IMPORT_ALLOWLIST.contains(&top) {
            self.flag(
                "import_not_allowed",
                format!(
                    "import of {module:?} (allowed: {})",
                    IMPORT_ALLOWLIST.join(", ")
                ),
                at,
            );
        }
    }

    fn check_operator(&mut self, path: &[String], at: TextSize) {
        let n = path.len();
        if n < 2 {
            return;
        }
        let (group, op) = (path[n - 2].as_str(), path[n - 1].as_str());
        let denied = DENIED_OPERATORS.iter().any(|(g, o)| {
            *g == group
                && (*o == "*"
                    || *o == op
                    || (o.ends_with('*') && op.starts_with(o.trim_end_matches('*'))))
        });
        // A chain through `ops` (bpy.ops.wm.x, ops.wm.x) is an operator call. The operator names
        // themselves are distinctive, so they are refused through any alias (`w = bpy.ops.wm`)
        // too; only the catch-all groups need the `ops` in the chain.
        let named = OPERATOR_NAMES.contains(&op) || op.starts_with("addon_");
        if (denied && path.iter().any(|p| p == "ops")) || named {
            self.flag(
                "operator_denied",
                format!("bpy.ops.{group}.{op} touches files, quits or loads code"),
                at,
            );
        }
    }
}

impl<'a> Visitor<'a> for Checker<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(import) => {
                for alias in &import.names {
                    self.check_import(&normalize(alias.name.as_str()), alias.start());
                }
            }
            Stmt::ImportFrom(import) => {
                if import.level > 0 {
                    self.flag(
                        "import_not_allowed",
                        "relative import".into(),
                        import.start(),
                    );
                }
                let module = import
                    .module
                    .as_ref()
                    .map(|m| normalize(m.as_str()))
                    .unwrap_or_default();
                self.check_import(&module, import.start());
                for alias in &import.names {
                    let name = normalize(alias.name.as_str());
                    if is_dunder(&name)
                        || DENIED_ATTRIBUTES.contains(&name.as_str())
                        || DENIED_NAMES.contains(&name.as_str())
                    {
                        self.flag(
                            "import_not_allowed",
                            format!("from {module} import {name}"),
                            alias.start(),
                        );
                    }
                }
            }
            _ => {}
        }
        walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(name) => {
                let id = normalize(name.id.as_str());
                if is_dunder(&id) {
                    self.flag("dunder_access", format!("name {id}"), name.start());
                } else if DENIED_NAMES.contains(&id.as_str()) {
                    self.flag(
                        "builtin_denied",
                        format!("{id} is not available to agent code"),
                        name.start(),
                    );
                }
            }
            Expr::Attribute(attr) => {
                let name = normalize(attr.attr.as_str());
                if name.starts_with("__") {
                    self.flag("dunder_access", format!("attribute .{name}"), attr.start());
                } else if DENIED_ATTRIBUTES.contains(&name.as_str()) {
                    self.flag(
                        "attribute_denied",
                        format!("attribute .{name} reaches handlers, timers or script loading"),
                        attr.start(),
                    );
                }
                if let Some(path) = dotted(expr) {
                    self.check_operator(&path, attr.start());
                }
            }
            Expr::StringLiteral(literal) => {
                let text = normalize(literal.value.to_str());
                if contains_dunder(&text) {
                    self.flag(
                        "dunder_string",
                        "a string naming a dunder attribute".into(),
                        literal.start(),
                    );
                }
                if DENIED_STRINGS.iter().any(|s| text.contains(s)) {
                    self.flag(
                        "script_node",
                        "script nodes run arbitrary code".into(),
                        literal.start(),
                    );
                }
                let operator_names = DENIED_OPERATORS
                    .iter()
                    .filter(|(_, o)| !o.contains('*'))
                    .any(|(_, o)| text == *o);
                if operator_names {
                    self.flag(
                        "operator_denied",
                        format!("a string naming the operator {text:?}"),
                        literal.start(),
                    );
                }
            }
            _ => {}
        }
        walk_expr(self, expr);
    }
}

/// Parses and checks `source`.
pub fn check(source: &str) -> Verdict {
    let parsed = match ruff_python_parser::parse_module(source) {
        Ok(parsed) => parsed,
        Err(error) => {
            let (line, column) = line_column(source, error.location.start());
            return Verdict::Syntax(SyntaxIssue {
                message: error.error.to_string(),
                line,
                column,
            });
        }
    };
    let mut checker = Checker {
        source,
        found: Vec::new(),
    };
    for stmt in &parsed.syntax().body {
        checker.visit_stmt(stmt);
    }
    if checker.found.is_empty() {
        Verdict::Clean
    } else {
        Verdict::Violations(checker.found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_blender_code_passes() {
        let code = "import bpy\nfrom mathutils import Vector\nobj = bpy.data.objects['Cube']\nobj.location += Vector((1, 0, 0))\nprint(f'{obj.name} moved')\n";
        assert_eq!(check(code), Verdict::Clean);
    }

    #[test]
    fn syntax_errors_have_line_and_column() {
        match check("x = 1\ny = (2 +\n") {
            Verdict::Syntax(issue) => assert!(issue.line >= 2, "{issue:?}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn dunder_substrings() {
        assert!(contains_dunder("{0.__class__}"));
        assert!(!contains_dunder("snake_case__name"));
    }
}
