//! The pre-scan: the gate's depth limits, checked on Ruff's own tokens before the parser runs.
//!
//! The parser, the visitor and the tree's drop all recurse; Ruff's lexer does not (it keeps its
//! nesting in counters and vectors), so the scan answers any input in linear time on a small,
//! constant stack. It bounds [`MAX_NESTING`] (brackets, f-string fields and indented blocks,
//! counted together) and [`MAX_EXPRESSION_DEPTH`] (the depth of the tree, estimated on tokens).
//!
//! # What the parser reads differently, and why f-strings are scanned apart
//!
//! The parser does not always read the tokens the scan saw. When it recovers from an error
//! inside a bracket (`[1 def]`), it has the lexer lower its bracket count and, after a line
//! break, read on from there:
//!
//! - outside f-strings that only turns the bracket's line breaks into statement ends and
//!   indentation. The blocks that appear are bounded by the source size (a staircase of
//!   [`MAX_SOURCE_BYTES`](super::policy::MAX_SOURCE_BYTES) is about 1,450 blocks deep), and
//!   the parser's own thread has the stack for them
//!   ([`PARSE_STACK_BYTES`](super::policy::PARSE_STACK_BYTES));
//! - inside an f-string's replacement field, the lowered count makes the lexer leave the field
//!   early: what follows is read as the f-string's text, and text as code, up to the f-string's
//!   closing quote, or past it if a quote inside the field is taken for it. A string literal
//!   inside a field could then become a million brackets of code.
//!
//! Two rules keep that inside the f-string and bounded:
//!
//! - a replacement field may not hold a string literal, a nested f-string or t-string, a comment
//!   or a line break (`fstring_field_unsupported`). With none of them, the field holds no quote
//!   and no brace or backslash of another string, so however it is read the f-string ends where
//!   the scan saw it end. Python 3.10 and 3.11, the kernel's language on most targets, refuse
//!   most of these too;
//! - inside an f-string the estimate never goes down: every operator and bracket of the whole
//!   f-string adds up, closers and commas included, so however its closers are read the parser
//!   stays inside [`MAX_EXPRESSION_DEPTH`].

use ruff_python_ast::token::TokenKind;
use ruff_python_parser::{Mode, lexer};
use ruff_text_size::TextSize;

use super::policy::{MAX_EXPRESSION_DEPTH, MAX_NESTING};

/// Why the scan refused.
#[derive(Debug)]
pub(super) enum Refusal {
    /// A limit or a rule: its name, the explanation, and the line (counted on newline tokens: a
    /// multi-line string before it shifts it).
    Rule {
        rule: &'static str,
        detail: String,
        line: usize,
    },
    /// The lexer's own error, met before the scan refused a replacement field: mostly an
    /// f-string left open, which is what the author needs to hear.
    Lexical { message: String, at: TextSize },
}

/// One level of brackets, f-string fields or blocks, named by the token that opened it. A *run*
/// is the tokens of one expression at this level (commas and statement ends start a new one);
/// its depth is bounded by its operator count, the deepest bracket inside it, and the `lambda`s
/// and `yield`s since the statement began (they nest across commas).
struct Level {
    opener: TokenKind,
    /// The estimated depth of the levels below, when this one opened.
    base: usize,
    best: usize,
    ops: usize,
    child: usize,
    sticky: usize,
}

impl Level {
    fn new(opener: TokenKind, base: usize) -> Self {
        let (best, ops, child, sticky) = (0, 0, 0, 0);
        Level {
            opener,
            base,
            best,
            ops,
            child,
            sticky,
        }
    }
    fn run(&self) -> usize {
        self.ops + self.child + self.sticky + 1
    }
    fn end_run(&mut self) {
        self.best = self.best.max(self.run());
        self.ops = 0;
        self.child = 0;
    }
}

/// The token that opens what `closer` closes.
fn opener_of(closer: TokenKind) -> Option<TokenKind> {
    Some(match closer {
        TokenKind::Rpar => TokenKind::Lpar,
        TokenKind::Rsqb => TokenKind::Lsqb,
        TokenKind::Rbrace => TokenKind::Lbrace,
        TokenKind::FStringEnd => TokenKind::FStringStart,
        TokenKind::TStringEnd => TokenKind::TStringStart,
        TokenKind::Dedent => TokenKind::Indent,
        _ => return None,
    })
}

fn opens_a_string(kind: TokenKind) -> bool {
    matches!(kind, TokenKind::FStringStart | TokenKind::TStringStart)
}

/// Checks [`MAX_NESTING`], [`MAX_EXPRESSION_DEPTH`] and what f-string fields may hold (see the
/// module docs) on the lexer's tokens.
pub(super) fn prescan(source: &str) -> Result<(), Refusal> {
    use TokenKind as T;
    let mut lexer = lexer::lex(source, Mode::Module);
    let mut stack = vec![Level::new(T::EndOfFile, 0)];
    let mut line = 1;
    // The f-strings and t-strings open on the stack, and the estimate of the outermost one,
    // which only grows.
    let (mut strings, mut string_depth) = (0usize, 0usize);
    loop {
        let kind = lexer.next_token();
        let top = stack.last_mut().expect("the root level stays");
        if strings > 0 && !opens_a_string(top.opener) && field_may_not_hold(kind) {
            // `finish` hands over the errors met so far: all of them before this token.
            let first_error = lexer.finish().into_iter().next();
            return Err(match first_error {
                Some(error) => Refusal::Lexical {
                    at: error.location().start(),
                    message: error.into_error().to_string(),
                },
                None => field_refusal(kind, line),
            });
        }
        // What the token adds to an f-string's estimate.
        let cost = match kind {
            T::EndOfFile => return Ok(()),
            T::Newline | T::Semi => {
                top.end_run();
                top.sticky = 0;
                line += usize::from(kind == T::Newline);
                0
            }
            T::NonLogicalNewline => {
                line += 1;
                0
            }
            T::Comma => {
                top.end_run();
                0
            }
            // The parser's recovery for `yield` in a tuple recurses twice as deep.
            T::Lambda => {
                top.sticky += 1;
                1
            }
            T::Yield => {
                top.sticky += 2;
                2
            }
            T::Lpar | T::Lsqb | T::Lbrace | T::FStringStart | T::TStringStart | T::Indent => {
                // A block costs two levels: its statement and the statements inside.
                let block = usize::from(kind == T::Indent);
                top.ops += 1 - block;
                let base = top.base + top.run() + block;
                stack.push(Level::new(kind, base));
                if stack.len() > MAX_NESTING + 1 {
                    let detail = format!(
                        "brackets, f-string fields and indented blocks nest deeper than \
                         MAX_NESTING = {MAX_NESTING}"
                    );
                    return Err(Refusal::Rule {
                        rule: "nesting_too_deep",
                        detail,
                        line,
                    });
                }
                if opens_a_string(kind) {
                    strings += 1;
                    if strings == 1 {
                        string_depth = base;
                    }
                }
                2
            }
            T::Name | T::Int | T::Float | T::Complex | T::String | T::FStringMiddle => 0,
            T::TStringMiddle | T::Comment | T::Ellipsis | T::None | T::True | T::False => 0,
            _ => match opener_of(kind) {
                // The root never matches: its opener is `EndOfFile`.
                Some(opener) if top.opener == opener => {
                    let mut done = stack.pop().expect("more than the root");
                    done.end_run();
                    let top = stack.last_mut().expect("the root level stays");
                    let block = usize::from(opener == T::Indent);
                    top.child = top.child.max(done.best + block);
                    if block == 1 {
                        top.end_run();
                    }
                    strings -= usize::from(opens_a_string(opener));
                    0
                }
                _ => {
                    top.ops += 1;
                    1
                }
            },
        };
        string_depth += cost;
        let top = stack.last().expect("the root level stays");
        let inside_a_string = strings > 0 && string_depth > MAX_EXPRESSION_DEPTH;
        if top.base + top.run() > MAX_EXPRESSION_DEPTH || inside_a_string {
            let detail = format!(
                "the code nests deeper than MAX_EXPRESSION_DEPTH = {MAX_EXPRESSION_DEPTH} \
                 (estimated on tokens: operators, dots, calls, lambdas and brackets in one \
                 expression add up, and in an f-string all of them)"
            );
            return Err(Refusal::Rule {
                rule: "nesting_too_deep",
                detail,
                line,
            });
        }
    }
}

/// A replacement field may not hold these (see the module docs).
fn field_may_not_hold(kind: TokenKind) -> bool {
    use TokenKind as T;
    matches!(
        kind,
        T::String | T::FStringStart | T::TStringStart | T::Comment | T::NonLogicalNewline
    )
}

/// The refusal of a field holding `kind`.
fn field_refusal(kind: TokenKind, line: usize) -> Refusal {
    let what = match kind {
        TokenKind::String => "a string literal",
        TokenKind::FStringStart => "a nested f-string",
        TokenKind::TStringStart => "a nested t-string",
        TokenKind::Comment => "a comment",
        _ => "a line break",
    };
    let detail = format!(
        "an f-string replacement field holds {what}; the gate cannot bound how the parser \
         would read it after an error. Bind the value to a name first \
         (`sep = ', '` then `f\"{{sep.join(names)}}\"`)"
    );
    Refusal::Rule {
        rule: "fstring_field_unsupported",
        detail,
        line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule, explanation and line of a refusal by rule.
    fn refused(source: &str) -> (&'static str, String, usize) {
        match prescan(source) {
            Err(Refusal::Rule { rule, detail, line }) => (rule, detail, line),
            other => panic!("{source:?}: {other:?}"),
        }
    }

    #[test]
    fn the_prescan_bounds_what_the_parser_would_recurse_on() {
        assert!(prescan("x = [(1, 2), {'a': -b}]\nif x:\n    y = f(x)[0].z\n").is_ok());
        let n = MAX_NESTING + 1;
        let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(refused(&deep).1.contains("MAX_NESTING = 100"));
        let long = format!("x = 1{}", " + 1".repeat(MAX_EXPRESSION_DEPTH));
        let (rule, detail, _) = refused(&long);
        assert_eq!(rule, "nesting_too_deep");
        assert!(detail.contains("MAX_EXPRESSION_DEPTH = 256"), "{detail}");
        let lambdas = format!("f = {}0", "lambda a, b: ".repeat(MAX_EXPRESSION_DEPTH));
        assert!(prescan(&lambdas).is_err());
        let yields = format!("x = {}1", "yield 1, ".repeat(MAX_EXPRESSION_DEPTH / 2));
        assert!(prescan(&yields).is_err());
        assert!(prescan("if x:\n    y = (1 +\n 2)\nz = -(((1)))").is_ok());
        assert_eq!(refused(&format!("\n\n{long}")).2, 3);
    }

    #[test]
    fn the_prescan_answers_sixteen_mebibytes_of_any_nesting() {
        for unit in [
            "(",
            "-",
            "not ",
            "lambda: ",
            "f\"{",
            "a.",
            "x[",
            "1 if 1 else ",
            "yield ",
        ] {
            let source = unit.repeat(16 * 1024 * 1024 / unit.len());
            assert!(prescan(&source).is_err(), "{unit:?}");
        }
    }

    #[test]
    fn replacement_fields_hold_expressions_without_strings_comments_or_breaks() {
        for clean in [
            "f'{x}'",
            "f\"{obj.name}: {len(xs)} {v:.3f} {d[k]!r:>{w}} {a if b else c}\"",
            "f'''{x}\n{y}'''",
            "t'{x}'",
            "f'{x}' f\"{y}\"",
            "x = f'a' 'b'\n# a comment\ny = [\n 1,\n]",
        ] {
            assert!(prescan(clean).is_ok(), "{clean}");
        }
        for (field, what) in [
            ("f\"{d['k']}\"", "a string literal"),
            ("f\"{', '.join(x)}\"", "a string literal"),
            ("f\"{f'{x}'}\"", "a nested f-string"),
            ("f\"{t'{x}'}\"", "a nested t-string"),
            ("f'''{x # no\n}'''", "a comment"),
            ("f'''{x +\n y}'''", "a line break"),
            ("f'{x:{\"w\"}}'", "a string literal"),
            ("t'{\"a\"}'", "a string literal"),
        ] {
            let (rule, detail, line) = refused(&format!("\n{field}\n"));
            assert_eq!(rule, "fstring_field_unsupported", "{field}");
            assert!(detail.contains(what), "{field}: {detail}");
            assert_eq!(line, 2, "{field}");
        }
        // A string left open in a field is reported as the lexer sees it.
        let open = prescan("x = f\"{d['k}\"\n");
        assert!(matches!(open, Err(Refusal::Lexical { .. })), "{open:?}");
    }

    #[test]
    fn inside_an_f_string_every_operator_and_bracket_adds_up() {
        // Each field costs 8 ({, (, [, +, unary -). Alone each is shallow; together they would
        // nest if the parser read the closers as text.
        let field = "{(a[b] + -c)}";
        let fits = format!("f\"{}\"", field.repeat(MAX_EXPRESSION_DEPTH / 12));
        assert!(prescan(&fits).is_ok());
        let across = format!("f\"{}\"", field.repeat(MAX_EXPRESSION_DEPTH / 8));
        assert_eq!(refused(&across).0, "nesting_too_deep");
        // The same expressions outside an f-string are separate runs.
        let plain = format!("x = [{}]", "(a[b] + -c), ".repeat(MAX_EXPRESSION_DEPTH));
        assert!(prescan(&plain).is_ok());
    }
}
