//! The pre-scan: the gate's nesting limits, checked on Ruff's own tokens before the parser runs.
//!
//! Ruff's lexer keeps its nesting in counters and vectors and does not recurse, so the scan
//! answers any input in linear time on a small, constant stack. It bounds [`MAX_NESTING`]
//! (brackets, f-string fields and indented blocks, counted together) and
//! [`MAX_EXPRESSION_DEPTH`] (the depth of the tree, estimated on tokens), the limits agent code
//! is held to, as CPython holds its own.
//!
//! It also holds two things the parser's work depends on: f-strings nested in f-strings' fields
//! ([`MAX_FSTRING_NESTING`]), and code the lexer already finds wrong, which is answered with the
//! lexer's error and never parsed. An unclosed string is where the parser's recovery reads the
//! most differently: it can take the string's quote for an f-string's end and read the rest of
//! the file, which the lexer saw as one string, as code.
//!
//! The estimate bounds the tree of code that parses. It does not bound the parser on code that
//! does not: when the parser recovers from an error it reads the tokens differently (it skips
//! what it did not expect, it has the lexer lower its bracket count and read on from a line
//! break, which can turn an f-string's text into code or a bracket's lines into blocks). What
//! holds there is the size of the source, and the stack the gate gives its parser for it
//! ([`PARSE_STACK_PER_BYTE`](super::policy::PARSE_STACK_PER_BYTE)).

use ruff_python_ast::token::TokenKind;
use ruff_python_parser::{Mode, lexer};
use ruff_text_size::TextSize;

use super::policy::{MAX_EXPRESSION_DEPTH, MAX_FSTRING_NESTING, MAX_NESTING};

/// One level of brackets, f-string fields or blocks in the pre-scan, named by the token that
/// opened it. A *run* is the tokens of one expression at this level (commas and statement ends
/// start a new one); its depth is bounded by its operator count, the deepest bracket inside it,
/// and the `lambda`s and `yield`s since the statement began (they nest across commas).
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

/// Why the pre-scan refused.
#[derive(Debug)]
pub(super) enum Refusal {
    /// A nesting limit: the explanation and the line (counted on newline tokens: a multi-line
    /// string before it shifts it).
    Limit { detail: String, line: usize },
    /// The lexer's first error, and where it is.
    Lexical { message: String, at: TextSize },
}

/// Checks [`MAX_NESTING`], [`MAX_EXPRESSION_DEPTH`] and [`MAX_FSTRING_NESTING`] on the lexer's
/// tokens, then that the lexer found nothing wrong.
pub(super) fn prescan(source: &str) -> Result<(), Refusal> {
    use TokenKind as T;
    let mut lexer = lexer::lex(source, Mode::Module);
    let mut stack = vec![Level::new(T::EndOfFile, 0)];
    let mut line = 1;
    let mut strings = 0;
    loop {
        let kind = lexer.next_token();
        let top = stack.last_mut().expect("the root level stays");
        match kind {
            T::EndOfFile => {
                return match lexer.finish().into_iter().next() {
                    None => Ok(()),
                    Some(error) => Err(Refusal::Lexical {
                        at: error.location().start(),
                        message: error.into_error().to_string(),
                    }),
                };
            }
            T::Newline | T::Semi => {
                top.end_run();
                top.sticky = 0;
                line += usize::from(kind == T::Newline);
            }
            T::NonLogicalNewline => line += 1,
            T::Comma => top.end_run(),
            // The parser's recovery for `yield` in a tuple recurses twice as deep.
            T::Lambda => top.sticky += 1,
            T::Yield => top.sticky += 2,
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
                    return Err(Refusal::Limit { detail, line });
                }
                strings += usize::from(opens_a_string(kind));
                if strings > MAX_FSTRING_NESTING {
                    let detail = format!(
                        "f-strings and t-strings nest in each other's fields deeper than \
                         MAX_FSTRING_NESTING = {MAX_FSTRING_NESTING}"
                    );
                    return Err(Refusal::Limit { detail, line });
                }
            }
            T::Name | T::Int | T::Float | T::Complex | T::String | T::FStringMiddle => {}
            T::TStringMiddle | T::Comment | T::Ellipsis | T::None | T::True | T::False => {}
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
                }
                _ => top.ops += 1,
            },
        }
        let top = stack.last().expect("the root level stays");
        if top.base + top.run() > MAX_EXPRESSION_DEPTH {
            let detail = format!(
                "the code nests deeper than MAX_EXPRESSION_DEPTH = {MAX_EXPRESSION_DEPTH} \
                 (estimated on tokens: operators, dots, calls, lambdas and brackets in one \
                 expression add up)"
            );
            return Err(Refusal::Limit { detail, line });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The explanation and line of a refusal on a limit.
    fn limit(source: &str) -> (String, usize) {
        match prescan(source) {
            Err(Refusal::Limit { detail, line }) => (detail, line),
            other => panic!("{source:?}: {other:?}"),
        }
    }

    #[test]
    fn the_prescan_bounds_what_the_parser_would_recurse_on() {
        assert!(prescan("x = [(1, 2), {'a': -b}]\nif x:\n    y = f(x)[0].z\n").is_ok());
        let n = MAX_NESTING + 1;
        let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(limit(&deep).0.contains("MAX_NESTING = 100"));
        let long = format!("x = 1{}", " + 1".repeat(MAX_EXPRESSION_DEPTH));
        let refused = limit(&long);
        assert!(
            refused.0.contains("MAX_EXPRESSION_DEPTH = 256"),
            "{refused:?}"
        );
        let lambdas = format!("f = {}0", "lambda a, b: ".repeat(MAX_EXPRESSION_DEPTH));
        assert!(prescan(&lambdas).is_err());
        let yields = format!("x = {}1", "yield 1, ".repeat(MAX_EXPRESSION_DEPTH / 2));
        assert!(prescan(&yields).is_err());
        assert!(prescan("if x:\n    y = (1 +\n 2)\nz = -(((1)))").is_ok());
        assert_eq!(limit(&format!("\n\n{long}")).1, 3);
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
    fn f_strings_nest_four_deep_at_most() {
        let nested = |n: usize| format!("{}x{}", "f\"{".repeat(n), "}\"".repeat(n));
        assert!(prescan(&nested(MAX_FSTRING_NESTING)).is_ok());
        let (detail, line) = limit(&format!("\n{}", nested(MAX_FSTRING_NESTING + 1)));
        assert!(detail.contains("MAX_FSTRING_NESTING = 4"), "{detail}");
        assert_eq!(line, 2);
        // Side by side they do not add up.
        assert!(prescan(&nested(MAX_FSTRING_NESTING).repeat(10)).is_ok());
        assert!(prescan("t'{f\"{t'{x}'}\"}'").is_ok());
    }

    #[test]
    fn code_the_lexer_finds_wrong_is_answered_with_its_error() {
        // The string the parser would re-read as the f-string's end, and the rest as code.
        for source in [
            "f'''{a'''\nx = ((((\n",
            "x = 'open\n",
            "x = (1,\n",
            "x = 1 $ 2\n",
        ] {
            match prescan(source) {
                Err(Refusal::Lexical { message, at }) => {
                    assert!(!message.is_empty());
                    assert!(usize::from(at) <= source.len(), "{source:?}");
                }
                other => panic!("{source:?}: {other:?}"),
            }
        }
        assert!(prescan("x = 'closed'\ny = f'{x!r:>10}'\n").is_ok());
    }
}
