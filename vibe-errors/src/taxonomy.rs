//! The failure taxonomy: seed 000's failure table made into typed reasons.
//!
//! A [`Reason`] travels as `details.reason`. Each known reason has one [`TaxonomyEntry`] that says
//! which [`ErrorCode`] carries it, how severe it is, what the bridge does about it, what an HTTP
//! front would answer, which failure class (E0-E3 of the fast-retry loop) it belongs to, whether a
//! retry can help, and what the agent should do next.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::code::ErrorCode;

/// Why a call failed, as `details.reason`. Open for forward compatibility like [`ErrorCode`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// A peer sent a malformed frame or JSON; the session halts.
    ContractViolation,
    /// The code gate found a blocked pattern; the bridge turns read-only.
    SecurityBlock,
    /// Blender's main thread did not answer within the deadline; the circuit breaker opens.
    Deadlock,
    /// A path leads into `HUMAN_ONLY/` or out of the session's sandbox folder.
    Sandbox,
    /// Blender raised during a mutation; the call was rolled back.
    MutationFailed,
    /// A mutation arrived while Blender loads or saves a file; wait for ready.
    Busy,
    /// The arguments exceed a sanity limit (e.g. subdivision levels above 3).
    SanityLimit,
    /// A known target is no longer where it was; re-discovery by name is due.
    IdentityDrift,
    /// A delete of an object the agent did not create in this session.
    ActuatorLock,
    /// Read-only mode (the `KILL_VIBE` kill switch, or switched on) refuses every mutation.
    ReadOnly,
    /// The arguments do not fit the tool's input schema (the answer names the field).
    Schema,
    /// Agent code does not parse.
    Syntax,
    /// Agent code printed output the verifier could not read in the asked format.
    Format,
    /// A number is not finite (NaN or infinity).
    NonFinite,
    /// The name is already taken by another data-block of the kind.
    NameTaken,
    /// The change would make a parent cycle.
    Cycle,
    /// A macro's precondition does not hold before its first step.
    Precondition,
    /// A macro's postcondition does not hold after its last step.
    Postcondition,
    /// The read-back after a call does not show what the call asked for.
    VerifyMismatch,
    /// A GUI rollback found the undo history not where the transaction left it.
    UndoMismatch,
    /// A GUI rollback found the undo history cleared (a file load, an undo past the mark).
    UndoHistoryLost,
    /// A GUI rollback needs more undo steps than Blender's history keeps.
    UndoHistoryExhausted,
    /// A reason this version does not know; kept verbatim.
    Other(String),
}

impl Reason {
    /// The reasons of the taxonomy, in table order.
    pub const KNOWN: [Reason; 10] = [
        Reason::ContractViolation,
        Reason::SecurityBlock,
        Reason::Deadlock,
        Reason::Sandbox,
        Reason::MutationFailed,
        Reason::Busy,
        Reason::SanityLimit,
        Reason::IdentityDrift,
        Reason::ActuatorLock,
        Reason::ReadOnly,
    ];

    /// The detail reasons: named causes without a taxonomy row of their own (the error's code
    /// gives its class, retryability and recovery).
    pub const DETAIL: [Reason; 12] = [
        Reason::Schema,
        Reason::Syntax,
        Reason::Format,
        Reason::NonFinite,
        Reason::NameTaken,
        Reason::Cycle,
        Reason::Precondition,
        Reason::Postcondition,
        Reason::VerifyMismatch,
        Reason::UndoMismatch,
        Reason::UndoHistoryLost,
        Reason::UndoHistoryExhausted,
    ];

    /// The wire spelling of the reason.
    pub fn as_str(&self) -> &str {
        match self {
            Reason::ContractViolation => "contract_violation",
            Reason::SecurityBlock => "security_block",
            Reason::Deadlock => "deadlock",
            Reason::Sandbox => "sandbox",
            Reason::MutationFailed => "mutation_failed",
            Reason::Busy => "busy",
            Reason::SanityLimit => "sanity_limit",
            Reason::IdentityDrift => "identity_drift",
            Reason::ActuatorLock => "actuator_lock",
            Reason::ReadOnly => "read_only",
            Reason::Schema => "schema",
            Reason::Syntax => "syntax",
            Reason::Format => "format",
            Reason::NonFinite => "non_finite",
            Reason::NameTaken => "name_taken",
            Reason::Cycle => "cycle",
            Reason::Precondition => "precondition",
            Reason::Postcondition => "postcondition",
            Reason::VerifyMismatch => "verify_mismatch",
            Reason::UndoMismatch => "undo_mismatch",
            Reason::UndoHistoryLost => "undo_history_lost",
            Reason::UndoHistoryExhausted => "undo_history_exhausted",
            Reason::Other(reason) => reason,
        }
    }

    /// Parses a wire spelling; never fails, unknown spellings become [`Reason::Other`].
    pub fn parse(reason: &str) -> Reason {
        Reason::KNOWN
            .into_iter()
            .chain(Reason::DETAIL)
            .find(|known| known.as_str() == reason)
            .unwrap_or_else(|| Reason::Other(reason.to_owned()))
    }

    /// The taxonomy row of this reason; `None` for the [`Reason::DETAIL`] reasons and
    /// [`Reason::Other`].
    pub fn entry(&self) -> Option<TaxonomyEntry> {
        use FailureClass::*;
        use ProtocolAction as A;
        use Recovery as R;
        use Severity::*;
        let (code, severity, action, http_status, class, retryable, recovery) = match self {
            Reason::ContractViolation => (
                ErrorCode::ContractViolation,
                Terminal,
                A::Halt,
                500,
                E0,
                false,
                R::AskHuman,
            ),
            Reason::SecurityBlock => (
                ErrorCode::ContractViolation,
                Terminal,
                A::ReadOnly,
                403,
                E0,
                false,
                R::AskHuman,
            ),
            Reason::Deadlock => (
                ErrorCode::Timeout,
                Terminal,
                A::CircuitBreak,
                504,
                E0,
                false,
                R::AskHuman,
            ),
            Reason::Sandbox => (
                ErrorCode::ContractViolation,
                Terminal,
                A::Reject,
                403,
                E0,
                false,
                R::FixArguments,
            ),
            Reason::MutationFailed => (
                ErrorCode::ExecutionFailed,
                Recoverable,
                A::RollBack,
                422,
                E1,
                true,
                R::FixAndRetry,
            ),
            Reason::Busy => (
                ErrorCode::ContractViolation,
                Recoverable,
                A::WaitForReady,
                503,
                E0,
                true,
                R::WaitForReady,
            ),
            Reason::SanityLimit => (
                ErrorCode::InvalidArguments,
                Recoverable,
                A::Reject,
                422,
                E1,
                true,
                R::FixArguments,
            ),
            Reason::IdentityDrift => (
                ErrorCode::NotFound,
                Reconciliation,
                A::ReDiscover,
                404,
                E3,
                true,
                R::InspectScene,
            ),
            Reason::ActuatorLock => (
                ErrorCode::ContractViolation,
                Recoverable,
                A::Reject,
                403,
                E3,
                false,
                R::AskHuman,
            ),
            Reason::ReadOnly => (
                ErrorCode::ContractViolation,
                Terminal,
                A::ReadOnly,
                403,
                E0,
                false,
                R::AskHuman,
            ),
            _ => return None,
        };
        Some(TaxonomyEntry {
            reason: self.clone(),
            code,
            severity,
            action,
            http_status,
            class,
            retryable,
            recovery,
        })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let reason = Cow::<'de, str>::deserialize(deserializer)?;
        Ok(Reason::parse(&reason))
    }
}

impl JsonSchema for Reason {
    fn schema_name() -> Cow<'static, str> {
        "Reason".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let known: Vec<&str> = Reason::KNOWN
            .iter()
            .chain(&Reason::DETAIL)
            .map(Reason::as_str)
            .collect();
        json_schema!({
            "description": "A failure taxonomy reason; readers must accept other snake_case reasons.",
            "anyOf": [
                { "enum": known },
                { "type": "string", "pattern": "^[a-z][a-z0-9_]*$" }
            ]
        })
    }
}

/// How bad a failure is for the session (seed 000's three sections).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// State integrity or a trust boundary is at stake; a human looks at the audit log.
    Terminal,
    /// An operational error the bridge reverts or refuses without side effects.
    Recoverable,
    /// The scene's numerical truth is in doubt; inspect before acting again.
    Reconciliation,
}

/// What the bridge does when the failure happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolAction {
    /// Stop the session at once and audit it.
    Halt,
    /// Switch the bridge to read-only mode.
    ReadOnly,
    /// Open the circuit breaker and invalidate the session.
    CircuitBreak,
    /// Refuse the call mechanically, without side effects.
    Reject,
    /// Roll the scene back to its state before the call.
    RollBack,
    /// Refuse until the kernel reports ready.
    WaitForReady,
    /// Look the target up again by name.
    ReDiscover,
    /// Leave the decision to a human.
    AskHuman,
}

/// The failure classes of the fast-retry loop (seed 003).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum FailureClass {
    /// Infrastructure: Blender unreachable, crashed, or the session halted. Escalates.
    E0,
    /// Execution: Blender raised, an API was misused. Enters the fast retry loop.
    E1,
    /// Format: malformed arguments or model output. Enters the fast retry loop.
    E2,
    /// Semantic: the call ran (or was refused on meaning), the result is not what was wanted.
    E3,
}

impl FailureClass {
    /// Its name: `E0` to `E3`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::E0 => "E0",
            FailureClass::E1 => "E1",
            FailureClass::E2 => "E2",
            FailureClass::E3 => "E3",
        }
    }

    /// Whether this class enters the fast retry loop of seed 003 (E1 and E2 do).
    pub fn fast_retry(self) -> bool {
        matches!(self, FailureClass::E1 | FailureClass::E2)
    }
}

/// The next step an agent should take, as `details.recovery`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    /// Change the arguments and call again.
    FixArguments,
    /// Fix the code or the call that raised and run it again.
    FixAndRetry,
    /// Wait until the kernel reports ready, then call again.
    WaitForReady,
    /// Call `scene.telemetry` (and `blender.errors`) before doing anything else.
    InspectScene,
    /// Roll the open transaction back.
    RollBack,
    /// This tool cannot run here; use another one.
    ChooseAnotherTool,
    /// Stop and hand over to a human.
    AskHuman,
}

/// One row of the taxonomy table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaxonomyEntry {
    /// The reason this row describes.
    pub reason: Reason,
    /// The error code that carries the reason.
    pub code: ErrorCode,
    /// How bad the failure is.
    pub severity: Severity,
    /// What the bridge does.
    pub action: ProtocolAction,
    /// The HTTP-equivalent status an HTTP front would answer with.
    pub http_status: u16,
    /// The failure class of seed 003.
    pub class: FailureClass,
    /// Whether a retry (after the recovery step) can succeed.
    pub retryable: bool,
    /// What the agent should do next.
    pub recovery: Recovery,
}

/// All taxonomy rows, in table order.
pub fn taxonomy() -> Vec<TaxonomyEntry> {
    Reason::KNOWN.iter().filter_map(Reason::entry).collect()
}

fn wire<T: Serialize>(value: T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// The taxonomy as the markdown table shown in the crate docs (a test keeps the two in step).
pub fn taxonomy_markdown() -> String {
    let mut table = String::from(
        "| reason | code | severity | bridge action | HTTP | class | retryable | agent recovery |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for row in taxonomy() {
        table.push_str(&format!(
            "| `{}` | `{}` | {} | {} | {} | {} | {} | {} |\n",
            row.reason,
            row.code,
            wire(row.severity),
            wire(row.action),
            row.http_status,
            wire(row.class),
            if row.retryable { "yes" } else { "no" },
            wire(row.recovery),
        ));
    }
    table
}
