//! Agent-written code: the gate, extraction from model output, error classification, the fast
//! retry loop (seed 003), the retry manager, execution history and result verification
//! (seed 004).

mod classify;
mod extract;
mod fixer;
mod gate;
mod history;
pub mod lock;
pub mod policy;
mod stage;
mod verifier;

pub use classify::{ErrorKind, TABLE as CLASSIFIER_TABLE, classify};
pub use extract::{FormatFailure, extract_code};
pub use fixer::{
    CodeFixer, FastRetry, FixRequest, Iteration, MAX_FAST_RETRIES, RetryManager, failure_class,
};
pub use gate::{
    CodeGateMode, DENIED_ATTRIBUTES, DENIED_NAMES, DENIED_OPERATORS, IMPORT_ALLOWLIST, SyntaxIssue,
    Verdict, Violation, check, normalize,
};
pub use history::{DEFAULT_HISTORY_CAPACITY, ExecutionHistory, ExecutionRecord};
pub use stage::CodeGateStage;
pub use verifier::{Check, Expectation, ResultVerifier, Verification};
