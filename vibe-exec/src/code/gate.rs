//! The code gate: agent-written Python parsed with a real Python parser (Ruff's, as RustPython
//! publishes it) and checked against an AST policy ([`super::policy`]) before anything reaches
//! Blender.
//!
//! # A filter, not a boundary
//!
//! The gate explains refusals early; it does not confine anything (DESIGN §9). Python and the
//! bpy API offer more ways to files, processes and evaluators than any text check can close, so
//! the kernel runs jailed by the operating system and the bridge keeps every safety fact. What
//! the gate cannot see, by construction:
//!
//! - values: it follows names, not objects. A module reached through anything but an import or
//!   a plain assignment (`[json][0].dumps = f`, `for m in [json]: m.dumps = f`, a function that
//!   returns the module) is patched unseen; `w = bpy.ops.wm; w.link(...)` passes where only the
//!   group names the operator; a metaclass fetched as `type(cls)` and called with three
//!   arguments, or the functional API of the agent's own `Enum` subclass, builds a class from
//!   run-time names;
//! - strings built at run time (slices, `bytes.decode`, joins): they only matter when handed to
//!   something that looks names up or evaluates them, and those helpers are refused by name
//!   (`getattr`, `vars`, `attrgetter`, `Formatter`, non-literal `str.format`, `get_type_hints`,
//!   `ForwardRef`, `bpy.utils.units.to_value`, `wm.context_*`); a helper missing from the tables
//!   passes (on Python 3.14, `typing.get_args(List['code'])[0].evaluate()`: `evaluate` is also
//!   `FCurve.evaluate`, so it stays allowed);
//! - code that runs after the call returned without a special method: a suspended generator's
//!   `finally` runs when it is collected;
//! - what the bpy API does with allowed calls: `bpy.ops.render.render(write_still=True)` writes
//!   to `render.filepath`, bakes write cache folders, `images.load` and `libraries.load` read
//!   files, presets are written to the config folder; C-level work (`max(itertools.count())`,
//!   a catastrophic regex, `10 ** 10 ** 10`, `time.sleep`) hangs. That is the jail's and the
//!   deadline's work.
//!
//! # Limits
//!
//! The parser, the visitor and the tree's drop all recurse. Code that parses is bounded on Ruff's
//! tokens before the parser runs (the pre-scan, which does not recurse). Code that does not parse
//! is bounded by its size alone: recovering from an error the parser reads the tokens differently
//! from the pre-scan, but every level it recurses into consumes a byte. So the parse runs on a
//! stack of its own whose size grows with the source ([`PARSE_STACK_PER_BYTE`]): a segment the
//! caller's thread switches to and back (no thread hand-off, which cost more than the parse on
//! a busy machine), or a thread of its own where the platform cannot switch stacks or the
//! segment's memory is not there. Any input answers, whatever the caller's stack, and never
//! overflows or panics.
//!
//! | Limit | Value | Rule |
//! |---|---|---|
//! | [`MAX_SOURCE_BYTES`] | 128 KiB | `source_too_large` |
//! | [`MAX_NESTING`](super::policy::MAX_NESTING): brackets, f-string fields, blocks | 100 | `nesting_too_deep` |
//! | [`MAX_EXPRESSION_DEPTH`](super::policy::MAX_EXPRESSION_DEPTH): estimated tree depth | 256 | `nesting_too_deep` |
//! | [`MAX_FSTRING_NESTING`](super::policy::MAX_FSTRING_NESTING): f-strings in f-strings' fields | 4 | `nesting_too_deep` |
//! | code the lexer already finds wrong (an unclosed string or bracket) | not parsed | a syntax error |
//! | [`MAX_BINDING_PATH`](super::policy::MAX_BINDING_PATH): a binding's dotted path followed | 64 names | longer is not followed |
//! | [`PARSE_STACK_BASE`] + [`PARSE_STACK_PER_BYTE`] per byte: the parser's stack, reserved | 8 MiB + 8 KiB per byte | `gate_unavailable` if neither a segment nor a thread can have it |
//! | [`MAX_VIOLATIONS`]: violations reported | 50 | |
//!
//! # Rules
//!
//! `import_not_allowed`, `dunder_access`, `private_access` (any attribute starting with `_`),
//! `frame_access`, `builtin_denied`, `attribute_denied`, `operator_denied`, `file_writer`,
//! `dynamic_attribute`, `string_evaluation`, `dunder_definition`, `metaclass_denied`,
//! `registered_class`, `module_patch`, `kernel_access`, `dunder_string`, `script_node`, and the
//! refusals of the table above. Every violation names its rule, says why, and gives line and column.
//! Classes are allowed, with the special methods of [`super::policy::DUNDER_METHODS_ALLOWED`]
//! defined in a class body and `super().__init__(...)`.
//!
//! Identifiers are compared after NFKC normalization, as Python itself normalizes them, so
//! `ｅｘｅｃ` is `exec` here too.

use std::collections::{HashMap, HashSet};
use std::fmt;

use ruff_python_ast::visitor::{
    Visitor, walk_annotation, walk_comprehension, walk_expr, walk_interpolated_string_element,
    walk_stmt,
};
use ruff_python_ast::{
    Arguments, Comprehension, Expr, ExprAttribute, ExprCall, ExprContext,
    InterpolatedStringElement, Stmt, StringLiteral,
};
use ruff_text_size::{Ranged, TextSize};
use unicode_normalization::UnicodeNormalization;

pub use super::policy::{DENIED_ATTRIBUTES, DENIED_NAMES, DENIED_OPERATORS, IMPORT_ALLOWLIST};
use super::policy::{
    DUNDER_METHODS_ALLOWED, MAX_BINDING_PATH, MAX_SOURCE_BYTES, MAX_VIOLATIONS, PARSE_STACK_BASE,
    PARSE_STACK_PER_BYTE, STAR_IMPORT_ALLOWLIST, STRING_PATH_METHODS, Use,
    format_reaches_attributes, identifier_rule, is_dunder, operator_rule, path_rule, string_rule,
};
use super::prescan::{Refusal, prescan};

/// How the gate acts on a violation, as the contract's `constraints.code_gate` says.
pub use vibe_contract::CodeGateMode;

/// One finding of the gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule that caught it (e.g. `import_not_allowed`, `dunder_access`).
    pub rule: &'static str,
    /// What was found, and why it is refused.
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
    /// Refused: these violations (in source order, at most [`MAX_VIOLATIONS`]).
    Violations(Vec<Violation>),
    /// Did not parse.
    Syntax(SyntaxIssue),
}

/// NFKC, as Python normalizes identifiers.
pub fn normalize(identifier: &str) -> String {
    identifier.nfkc().collect()
}

/// Parses and checks `source`. The parse runs on a stack of its own with
/// [`PARSE_STACK_BASE`] plus [`PARSE_STACK_PER_BYTE`] for each byte of source, so the caller's
/// stack only holds the pre-scan, which does not recurse.
pub fn check(source: &str) -> Verdict {
    check_on_stack(source, parse_stack(source.len()))
}

/// The parser's stack for `bytes` of source.
pub fn parse_stack(bytes: usize) -> usize {
    PARSE_STACK_BASE + PARSE_STACK_PER_BYTE * bytes.min(MAX_SOURCE_BYTES)
}

/// [`check`] with the parser's stack given: for the tests that measure what the limits
/// leave room for, not for use.
#[doc(hidden)]
pub fn check_on_stack(source: &str, stack_bytes: usize) -> Verdict {
    let limit = |rule, detail, line| {
        let column = 1;
        Verdict::Violations(vec![Violation {
            rule,
            detail,
            line,
            column,
        }])
    };
    if source.len() > MAX_SOURCE_BYTES {
        let detail = format!(
            "{} bytes of code; MAX_SOURCE_BYTES = {MAX_SOURCE_BYTES}",
            source.len()
        );
        return limit("source_too_large", detail, 1);
    }
    match prescan(source) {
        Ok(()) => {}
        Err(Refusal::Limit { detail, line }) => return limit("nesting_too_deep", detail, line),
        Err(Refusal::Lexical { message, at }) => return syntax_error(source, message, at),
    }
    // The parse runs on a stack of its own, with the room its size can need (the caller's
    // depth does not matter): see `PARSE_STACK_PER_BYTE`.
    let parsed = match parse_on_segment(source, stack_bytes) {
        Segment::Parsed(outcome) => Ok(outcome),
        Segment::Unavailable => parse_on_thread(source, stack_bytes),
    };
    match parsed {
        Ok(Ok(verdict)) => verdict,
        Ok(Err(_)) => limit(
            "gate_unavailable",
            "the parser failed on this code; it is refused unread".to_owned(),
            1,
        ),
        Err(error) => limit(
            "gate_unavailable",
            format!("the gate could not reserve its parser's stack ({error}); the code is refused"),
            1,
        ),
    }
}

/// How a parse on a stack segment of the caller's thread went.
enum Segment {
    /// The parse ran on the segment: its verdict, or its panic.
    Parsed(std::thread::Result<Verdict>),
    /// No segment: this build or platform does not switch stacks, or the memory was not there.
    Unavailable,
}

/// Runs the parse on a stack segment of `stack_bytes` that the caller's own thread switches to
/// and back (the `stacker` crate; the switch is its code, this crate has none that is unsafe).
/// A thread of its own gives the same room, but handing the parse to it and back costs two
/// thread wake-ups, which on a busy machine took longer than the parse (measured beside a kernel
/// answering agent code: 130-170 us per check against 15 us on a segment). The segment is
/// reserved, not committed (an anonymous mapping with a guard page at each end), and unmapped
/// when the parse returns or panics.
///
/// Only on Unix with unwinding panics: on Windows a segment is a fiber whose stack is committed
/// whole, and without unwinding the segment's failed allocation (a panic in `stacker`) would end
/// the process where a thread that cannot start is a refusal.
#[cfg(all(unix, panic = "unwind"))]
fn parse_on_segment(source: &str, stack_bytes: usize) -> Segment {
    let started = std::cell::Cell::new(false);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stacker::grow(stack_bytes, || {
            started.set(true);
            // The room left must be the segment's (its size to within its rounding and the
            // frames before this one): where `stacker` cannot switch stacks it runs this on the
            // caller's stack, and the parse goes to a thread instead.
            let on_segment = stacker::remaining_stack().is_some_and(|left| {
                left <= stack_bytes + SEGMENT_ROUNDING && left + SEGMENT_ROUNDING >= stack_bytes
            });
            on_segment.then(|| parse_and_check(source))
        })
    }));
    match outcome {
        Ok(Some(verdict)) => Segment::Parsed(Ok(verdict)),
        Ok(None) => Segment::Unavailable,
        // A panic before the switch is the segment's allocation failing, not the parser.
        Err(_) if !started.get() => Segment::Unavailable,
        Err(panic) => Segment::Parsed(Err(panic)),
    }
}

#[cfg(not(all(unix, panic = "unwind")))]
fn parse_on_segment(_source: &str, _stack_bytes: usize) -> Segment {
    Segment::Unavailable
}

/// How far the room on a segment may be from the size asked for: its rounding up to whole pages
/// above, the frames between the switch and the parse below.
#[cfg(all(unix, panic = "unwind"))]
const SEGMENT_ROUNDING: usize = 64 << 10;

/// Runs the parse on a thread of its own with `stack_bytes` of stack.
fn parse_on_thread(
    source: &str,
    stack_bytes: usize,
) -> std::io::Result<std::thread::Result<Verdict>> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("vibe-code-gate".into())
            .stack_size(stack_bytes)
            .spawn_scoped(scope, || parse_and_check(source))
            .map(|parse| parse.join())
    })
}

/// Parses and checks `source`, already pre-scanned; the tree is dropped here too.
fn parse_and_check(source: &str) -> Verdict {
    let parsed = match ruff_python_parser::parse_module(source) {
        Ok(parsed) => parsed,
        Err(error) => {
            return syntax_error(source, error.error.to_string(), error.location.start());
        }
    };
    let mut checker = Checker {
        source,
        lines: Lines::default(),
        found: Vec::new(),
        class_body: false,
        in_annotation: false,
        bindings: HashMap::new(),
        paths_judged: HashSet::new(),
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

/// The verdict for code that does not lex or parse: `message`, at `at` in `source`.
fn syntax_error(source: &str, message: String, at: TextSize) -> Verdict {
    let (line, column) = Lines::default().locate(source, at);
    Verdict::Syntax(SyntaxIssue {
        message,
        line,
        column,
    })
}

/// Line starts, computed on the first violation.
#[derive(Default)]
struct Lines(Vec<usize>);

impl Lines {
    fn locate(&mut self, source: &str, offset: TextSize) -> (usize, usize) {
        if self.0.is_empty() {
            self.0.push(0);
            let newlines = source.bytes().enumerate().filter(|(_, b)| *b == b'\n');
            self.0.extend(newlines.map(|(i, _)| i + 1));
        }
        let offset = usize::from(offset).min(source.len());
        let line = self.0.partition_point(|start| *start <= offset);
        let start = self.0[line - 1];
        let column = source.get(start..offset).map_or(0, |s| s.chars().count()) + 1;
        (line, column)
    }
}

/// The chain under an attribute (`a.b.c`): its names outermost last, and what it starts from.
fn chain(attribute: &ExprAttribute) -> (Vec<&ExprAttribute>, &Expr) {
    let mut links = vec![attribute];
    let mut base = &*attribute.value;
    while let Expr::Attribute(inner) = base {
        links.push(inner);
        base = &inner.value;
    }
    links.reverse();
    (links, base)
}

/// The dotted path of a plain `Name`/`Attribute` chain as written, normalized.
fn dotted(expr: &Expr) -> Option<Vec<String>> {
    let (links, base) = match expr {
        Expr::Attribute(attribute) => chain(attribute),
        _ => (Vec::new(), expr),
    };
    let Expr::Name(root) = base else { return None };
    let mut path = vec![normalize(root.id.as_str())];
    path.extend(links.iter().map(|link| normalize(link.attr.as_str())));
    Some(path)
}

fn is_name(expr: &Expr, id: &str) -> bool {
    matches!(expr, Expr::Name(name) if normalize(name.id.as_str()) == id)
}

/// The last name of a callee (`f`, `m.f`), normalized.
fn callee_name(func: &Expr) -> Option<String> {
    match func {
        Expr::Name(name) => Some(normalize(name.id.as_str())),
        Expr::Attribute(attr) => Some(normalize(attr.attr.as_str())),
        _ => None,
    }
}

struct Checker<'s> {
    source: &'s str,
    lines: Lines,
    found: Vec<Violation>,
    /// The statements visited are a class body (a `def` there defines a method).
    class_body: bool,
    /// Inside an annotation (a string there is evaluated by typing helpers).
    in_annotation: bool,
    /// Names bound to a module or a plain attribute chain of one: name → dotted path.
    bindings: HashMap<String, Vec<String>>,
    /// Where a [`STRING_PATH_METHODS`] name is called on the spot and its path was judged.
    paths_judged: HashSet<TextSize>,
}

impl Checker<'_> {
    fn full(&self) -> bool {
        self.found.len() >= MAX_VIOLATIONS
    }

    fn flag(&mut self, rule: &'static str, detail: String, at: TextSize) {
        if self.full() {
            return;
        }
        let (line, column) = self.lines.locate(self.source, at);
        self.found.push(Violation {
            rule,
            detail,
            line,
            column,
        });
    }

    fn check_import(&mut self, module: &str, names: &[String], at: TextSize) {
        let top = module.split('.').next().unwrap_or("");
        if !IMPORT_ALLOWLIST.contains(&top) {
            let allowed = IMPORT_ALLOWLIST.join(", ");
            self.flag(
                "import_not_allowed",
                format!("import of {module:?} (allowed: {allowed})"),
                at,
            );
            return;
        }
        let parts = module.split('.').skip(1).map(str::to_owned);
        for part in parts.chain(names.iter().cloned()) {
            if part == "*" && !STAR_IMPORT_ALLOWLIST.contains(&module) {
                let detail = format!("from {module} import *: a star import hides what it binds");
                self.flag("import_not_allowed", detail, at);
            } else if let Some((rule, why)) = identifier_rule(&part, Use::Import) {
                let detail = format!("{part} in an import from {module}: {why} ({rule})");
                self.flag("import_not_allowed", detail, at);
            }
        }
    }

    /// The dotted path a plain `Name`/`Attribute` chain resolves to through the bindings.
    fn resolve(&self, expr: &Expr) -> Option<Vec<String>> {
        let (links, base) = match expr {
            Expr::Attribute(attribute) => chain(attribute),
            _ => (Vec::new(), expr),
        };
        let Expr::Name(root) = base else { return None };
        let bound = self.bindings.get(&normalize(root.id.as_str()))?;
        if bound.len() + links.len() > MAX_BINDING_PATH {
            return None;
        }
        let mut path = bound.clone();
        path.extend(links.iter().map(|link| normalize(link.attr.as_str())));
        Some(path)
    }

    /// Assigning to (or deleting) an attribute of an imported module patches it for the kernel
    /// too; `bpy.context` and `bpy.data` are the scene, and stay writable.
    fn check_store(&mut self, target: &Expr) {
        match target {
            Expr::Tuple(tuple) => tuple.elts.iter().for_each(|t| self.check_store(t)),
            Expr::List(list) => list.elts.iter().for_each(|t| self.check_store(t)),
            Expr::Starred(starred) => self.check_store(&starred.value),
            Expr::Attribute(attribute) => {
                if normalize(attribute.attr.as_str()) == "bl_rna" {
                    let detail = "bl_rna is Blender's description of a class, read through every \
                                  instance of it (the kernel's reads too)";
                    self.flag("module_patch", detail.into(), attribute.attr.start());
                }
                let (_, base) = chain(attribute);
                let through_type = matches!(base, Expr::Call(call) if is_name(&call.func, "type"));
                let patched = self.resolve(target).is_some_and(|path| {
                    !(path[0] == "bpy"
                        && path.len() > 2
                        && ["context", "data"].contains(&&*path[1]))
                });
                if patched || through_type {
                    let detail = "assigning to an attribute of a module or a class patches it for \
                                  the kernel too";
                    self.flag("module_patch", detail.into(), attribute.attr.start());
                }
            }
            _ => {}
        }
    }

    fn check_string(&mut self, text: &str, at: TextSize) {
        let text = normalize(text);
        if let Some((rule, why)) = string_rule(&text) {
            self.flag(rule, why.into(), at);
        }
        if self.in_annotation {
            let why = "a string annotation is evaluated by typing helpers (get_type_hints, \
                       singledispatch)";
            self.flag("string_evaluation", why.into(), at);
        }
    }

    fn check_function(&mut self, name: &str, at: TextSize) {
        let name = normalize(name);
        if !is_dunder(&name) || (self.class_body && DUNDER_METHODS_ALLOWED.contains(&&*name)) {
            return;
        }
        let detail = if !self.class_body {
            format!("{name} defined outside a class body")
        } else if name == "__del__" {
            "__del__ runs when the object is collected, after the call returned".into()
        } else {
            format!(
                "{name} hooks attribute lookup, class creation or pickling (allowed: {})",
                DUNDER_METHODS_ALLOWED.join(", ")
            )
        };
        self.flag("dunder_definition", detail, at);
    }

    /// An attribute chain, walked without recursion: each name against the tables, the whole
    /// chain against the operator rules, then what it starts from.
    fn visit_chain(&mut self, attribute: &ExprAttribute) {
        let (links, base) = chain(attribute);
        let mut path: Vec<String> = match base {
            Expr::Name(name) => vec![normalize(name.id.as_str())],
            _ => Vec::new(),
        };
        // The same chain through the bindings (`o = bpy.ops; o.wm.append` is bpy.ops.wm.append).
        let mut resolved = match base {
            Expr::Name(name) => self
                .bindings
                .get(&normalize(name.id.as_str()))
                .filter(|bound| bound.len() + links.len() <= MAX_BINDING_PATH)
                .cloned(),
            _ => None,
        };
        let mut operator_flagged = false;
        for link in links {
            let name = normalize(link.attr.as_str());
            let at = link.attr.start();
            path.push(name.clone());
            if let Some(resolved) = resolved.as_mut() {
                resolved.push(name.clone());
            }
            let named = identifier_rule(&name, Use::Attribute);
            // The chain as an operator call first (`bpy.ops.wm.save_mainfile` is refused as
            // one), unless only an alias reaches it and the name has a rule of its own.
            let operator = |chain: &Vec<String>| {
                let through_ops = chain.iter().any(|p| p == "ops");
                (through_ops || named.is_none()).then(|| operator_rule(chain))?
            };
            let refused = operator(&path).map(|rule| (rule, &path)).or_else(|| {
                resolved
                    .as_ref()
                    .and_then(|r| operator(r).map(|rule| (rule, r)))
            });
            if !operator_flagged
                && base.is_name_expr()
                && let Some((rule, chain)) = refused
            {
                let detail = format!(
                    "{} touches files, quits, loads or evaluates code",
                    chain.join(".")
                );
                self.flag(rule, detail, at);
                operator_flagged = true;
                continue;
            }
            // Setting a property named `format` (`render.ffmpeg.format`) looks nothing up.
            let stored = link.ctx != ExprContext::Load;
            if (name == "format" || name == "format_map") && !stored {
                let literal = match &*link.value {
                    Expr::StringLiteral(s) => Some(s.value.to_str()),
                    _ => None,
                };
                if literal.is_none_or(format_reaches_attributes) {
                    let detail = format!(
                        ".{name} looks attributes up from its format string: only a literal \
                         format string without `.` or `[` in a field is allowed"
                    );
                    self.flag("dynamic_attribute", detail, at);
                }
            } else if let Some((rule, why)) = named {
                self.flag(rule, format!("attribute .{name}: {why}"), at);
            } else if STRING_PATH_METHODS.contains(&&*name) && !self.paths_judged.contains(&at) {
                let detail = format!(
                    ".{name} looks attributes up by a run-time string: call it on the spot with \
                     a literal path (x.{name}(\"location\"))"
                );
                self.flag("dynamic_attribute", detail, at);
            }
        }
        self.visit_expr(base);
    }

    /// `x.path_resolve("a.b")` and the like, called on the spot: the path must be one literal
    /// whose every word passes the attribute rules. A path that is not one is left unjudged, and
    /// the chain refuses the method as a run-time lookup.
    fn judge_string_path(&mut self, method: &ExprAttribute, args: &Arguments) {
        if args.args.iter().any(Expr::is_starred_expr)
            || args.keywords.iter().any(|k| k.arg.is_none())
        {
            return;
        }
        let named = args.keywords.iter().filter(|k| {
            k.arg
                .as_ref()
                .is_some_and(|a| ["path", "attr", "property"].contains(&a.as_str()))
        });
        let given: Vec<&Expr> = match args.args.first() {
            Some(first) => vec![first],
            None => named.map(|k| &k.value).collect(),
        };
        let [Expr::StringLiteral(literal)] = given.as_slice() else {
            return;
        };
        let name = normalize(method.attr.as_str());
        let path = normalize(literal.value.to_str());
        self.paths_judged.insert(method.attr.start());
        if let Some((rule, why)) = path_rule(&path) {
            self.flag(
                rule,
                format!(".{name}({path:?}): {why}"),
                method.attr.start(),
            );
        }
    }

    /// Calls with a rule of their own; `true` when the call was visited here.
    fn visit_call(&mut self, call: &ExprCall) -> bool {
        let args = &call.arguments;
        let keyword = |names: &[&str]| {
            args.keywords
                .iter()
                .any(|k| k.arg.as_ref().is_none_or(|a| names.contains(&a.as_str())))
        };
        let callee = callee_name(&call.func).unwrap_or_default();
        let at = call.func.start();
        if is_name(&call.func, "type") {
            if args.args.len() != 1 || !args.keywords.is_empty() || args.args[0].is_starred_expr() {
                let detail =
                    "type() with more than one argument builds a class from run-time names";
                self.flag("dynamic_attribute", detail.into(), at);
            }
            self.visit_arguments(args);
            return true;
        }
        let dynamic = match callee.as_str() {
            "Type" => true,
            "Enum" | "IntEnum" | "Flag" | "IntFlag" | "StrEnum" => {
                args.args.len() > 1 || keyword(&["names"])
            }
            "wraps" => args.args.len() > 1 || keyword(&["assigned", "updated"]),
            "update_wrapper" => args.args.len() > 2 || keyword(&["assigned", "updated"]),
            _ => false,
        };
        if dynamic {
            let detail =
                format!("{callee}(...) here copies attributes or builds a class by run-time names");
            self.flag("dynamic_attribute", detail, at);
        }
        // `bpy.ops.node.add_node(settings=[...])` evaluates each setting's value as Python; as
        // written and through the bindings (`add = bpy.ops.node.add_node; add(settings=...)`).
        let node_operator = [dotted(&call.func), self.resolve(&call.func)]
            .iter()
            .flatten()
            .any(|path| {
                path.len() >= 2 && path.iter().any(|p| p == "ops") && path[path.len() - 2] == "node"
            });
        if node_operator && keyword(&["settings"]) {
            let detail = "bpy.ops.node.*(settings=...) evaluates each setting's value as Python";
            self.flag("string_evaluation", detail.into(), at);
        }
        if let Expr::Attribute(method) = &*call.func
            && STRING_PATH_METHODS.contains(&&*normalize(method.attr.as_str()))
        {
            self.judge_string_path(method, args);
        }
        // `super().__init__(...)`: the one special attribute a class may reach.
        if let Expr::Attribute(attr) = &*call.func
            && attr.attr.as_str() == "__init__"
            && matches!(&*attr.value, Expr::Call(inner) if is_name(&inner.func, "super"))
        {
            self.visit_expr(&attr.value);
            self.visit_arguments(args);
            return true;
        }
        false
    }
}

impl<'a> Visitor<'a> for Checker<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if self.full() {
            return;
        }
        match stmt {
            Stmt::Import(import) => {
                for alias in &import.names {
                    let module = normalize(alias.name.as_str());
                    self.check_import(&module, &[], alias.start());
                    let path: Vec<String> = module.split('.').map(str::to_owned).collect();
                    match &alias.asname {
                        Some(name) => self.bindings.insert(normalize(name.as_str()), path),
                        None => self.bindings.insert(path[0].clone(), vec![path[0].clone()]),
                    };
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
                let module = import.module.as_ref().map(|m| normalize(m.as_str()));
                let module = module.unwrap_or_default();
                let names: Vec<String> = import
                    .names
                    .iter()
                    .map(|a| normalize(a.name.as_str()))
                    .collect();
                self.check_import(&module, &names, import.start());
                for (alias, name) in import.names.iter().zip(names) {
                    let bound = alias
                        .asname
                        .as_ref()
                        .map_or(name.clone(), |a| normalize(a.as_str()));
                    let mut path: Vec<String> = module.split('.').map(str::to_owned).collect();
                    path.push(name);
                    self.bindings.insert(bound, path);
                }
            }
            Stmt::FunctionDef(function) => {
                self.check_function(function.name.as_str(), function.name.start());
                let outer = std::mem::replace(&mut self.class_body, false);
                walk_stmt(self, stmt);
                self.class_body = outer;
                return;
            }
            Stmt::ClassDef(class) => {
                for base in class.arguments.iter().flat_map(|a| a.args.iter()) {
                    if base.is_starred_expr() {
                        self.flag(
                            "metaclass_denied",
                            "bases unpacked at run time".into(),
                            base.start(),
                        );
                    }
                }
                for keyword in class.arguments.iter().flat_map(|a| a.keywords.iter()) {
                    let detail = match &keyword.arg {
                        Some(arg) if arg.as_str() == "metaclass" => {
                            "metaclass= runs code of its own when the class is built".into()
                        }
                        Some(arg) => format!("class keyword {arg}= reaches __init_subclass__"),
                        None => "class keywords unpacked at run time".into(),
                    };
                    self.flag("metaclass_denied", detail, keyword.start());
                }
                let outer = std::mem::replace(&mut self.class_body, true);
                walk_stmt(self, stmt);
                self.class_body = outer;
                return;
            }
            Stmt::Assign(assign) => {
                assign.targets.iter().for_each(|t| self.check_store(t));
                if let [Expr::Name(name)] = &assign.targets[..] {
                    let id = normalize(name.id.as_str());
                    match self.resolve(&assign.value) {
                        Some(path) => self.bindings.insert(id, path),
                        None => self.bindings.remove(&id),
                    };
                }
            }
            Stmt::AugAssign(assign) => self.check_store(&assign.target),
            Stmt::AnnAssign(assign) => self.check_store(&assign.target),
            Stmt::Delete(delete) => delete.targets.iter().for_each(|t| self.check_store(t)),
            Stmt::For(for_) => self.check_store(&for_.target),
            Stmt::With(with) => {
                for item in &with.items {
                    item.optional_vars.iter().for_each(|t| self.check_store(t));
                }
            }
            _ => {}
        }
        walk_stmt(self, stmt);
    }

    fn visit_annotation(&mut self, expr: &'a Expr) {
        let outer = std::mem::replace(&mut self.in_annotation, true);
        walk_annotation(self, expr);
        self.in_annotation = outer;
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if self.full() {
            return;
        }
        match expr {
            Expr::Name(name) => {
                let id = normalize(name.id.as_str());
                if id == "type" && name.ctx == ExprContext::Load {
                    let detail = "type is allowed only as type(x)".into();
                    self.flag("dynamic_attribute", detail, name.start());
                } else if let Some((rule, why)) = identifier_rule(&id, Use::Name) {
                    self.flag(rule, format!("name {id}: {why}"), name.start());
                }
            }
            Expr::Attribute(attribute) => return self.visit_chain(attribute),
            Expr::Call(call) if self.visit_call(call) => return,
            Expr::StringLiteral(literal) => {
                return self.check_string(literal.value.to_str(), literal.start());
            }
            _ => {}
        }
        walk_expr(self, expr);
    }

    fn visit_comprehension(&mut self, comprehension: &'a Comprehension) {
        // `[0 for C.attr in [v]]` stores like a for loop.
        self.check_store(&comprehension.target);
        walk_comprehension(self, comprehension);
    }

    fn visit_string_literal(&mut self, literal: &'a StringLiteral) {
        self.check_string(&literal.value, literal.start());
    }

    fn visit_interpolated_string_element(&mut self, element: &'a InterpolatedStringElement) {
        if let InterpolatedStringElement::Literal(literal) = element {
            self.check_string(&literal.value, literal.start());
        }
        walk_interpolated_string_element(self, element);
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
    fn lines_and_columns_count_characters() {
        let mut lines = Lines::default();
        let source = "é = 1\nab = é.__class__";
        assert_eq!(lines.locate(source, TextSize::from(0)), (1, 1));
        let at = source.find("__class__").unwrap() as u32;
        assert_eq!(lines.locate(source, TextSize::from(at)), (2, 8));
    }

    /// The parse gives the same verdict on a segment of the caller's thread as on a thread of
    /// its own (the fallback), for clean code, a violation and a syntax error; on Unix with
    /// unwinding the segment is there.
    #[test]
    fn a_segment_and_a_thread_give_the_same_verdicts() {
        let sources = [
            "print(1)\n",
            "import os\nos.system('x')\n",
            "x = (1,\n",
            "o.__class__\n",
        ];
        for source in sources {
            let stack = parse_stack(source.len());
            let on_thread = parse_on_thread(source, stack).unwrap().unwrap();
            match parse_on_segment(source, stack) {
                Segment::Parsed(Ok(verdict)) => assert_eq!(verdict, on_thread, "{source:?}"),
                Segment::Parsed(Err(_)) => panic!("{source:?}: the parser panicked"),
                Segment::Unavailable if cfg!(all(unix, panic = "unwind")) => {
                    panic!("{source:?}: no segment")
                }
                Segment::Unavailable => {}
            }
            assert_eq!(check(source), on_thread, "{source:?}");
        }
        assert!(matches!(check(sources[1]), Verdict::Violations(_)));
        assert!(matches!(check(sources[2]), Verdict::Syntax(_)));
    }
}
