//! Agent-written code: the gate, extraction from model output, error classification, the fast
//! retry loop (seed 003), the retry manager, execution history, result verification (seed 004)
//! and the visual verifier that judges a render (seed 003's verification cycle).

mod classify;
mod extract;
mod fixer;
mod gate;
mod history;
pub mod lock;
pub mod policy;
mod prescan;
mod stage;
mod verifier;
mod visual;

pub use classify::{ErrorKind, TABLE as CLASSIFIER_TABLE, classify};
pub use extract::{FormatFailure, extract_code};
pub use fixer::{
    CodeFixer, FastRetry, FixRequest, Iteration, MAX_FAST_RETRIES, RetryManager, failure_class,
};
pub use gate::{
    CodeGateMode, DENIED_ATTRIBUTES, DENIED_NAMES, DENIED_OPERATORS, IMPORT_ALLOWLIST, SyntaxIssue,
    Verdict, Violation, check, check_on_stack, normalize, parse_stack,
};
pub use history::{DEFAULT_HISTORY_CAPACITY, ExecutionHistory, ExecutionRecord};
pub use stage::CodeGateStage;
pub use verifier::{Check, Expectation, ResultVerifier, Verification};
pub use visual::{
    DEFAULT_JUDGE_TIMEOUT, ImageVerifier, MAX_FEEDBACK_CHARS, VisualCheck, VisualOutcome,
    VisualRequest, VisualVerdict,
};
