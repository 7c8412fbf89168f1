//! The default stages of the pipeline, by phase.

mod execute;
mod guards;
mod plan;
mod ret;
mod storage;
mod validate;
mod verify;

pub use execute::ExecuteStage;
pub use guards::{
    ActuatorLock, BreakerGuard, BusyGuard, CodeGateGuard, ContractCheck, ReadOnlyGuard,
    SandboxGuard, SanityGuard, TransactionGuard,
};
pub use plan::PolygonBudget;
pub use ret::{ImageStage, MetaStage, SealStage};
pub use storage::{MAX_SANDBOX_ENTRIES, SandboxListing, TempStorageAfter, TempStorageBefore};
pub use validate::{INLINE_VALIDATION_BYTES, MAX_ECHO_CHARS, SchemaStage, clip};
pub use verify::ReadBack;

/// The arguments that hold sandbox-relative paths, checked against the sandbox: files the agent
/// writes (`path`) and images it puts on a material (`texture`, read from the sandbox only).
pub const PATH_ARGUMENTS: [&str; 2] = ["path", "texture"];

/// The arguments that hold paths of files the agent opens, checked against the project roots
/// and the sandbox.
pub const READ_PATH_ARGUMENTS: [&str; 1] = ["file"];
