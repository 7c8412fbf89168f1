//! The six phases of a tool call (seed 001) and the stage trait that fills them.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;
use vibe_contract::ToolSpec;
use vibe_errors::{Envelope, ErrorBody, Meta};

use crate::session::Session;

/// The phases, in the order every call goes through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// 1. Arguments against the tool's JSON Schema.
    Validate = 1,
    /// 2. Contract, capabilities, limits, Blender range, and the guards.
    Check = 2,
    /// 3. Pre-flight without side effects (targets exist, budgets).
    Plan = 3,
    /// 4. The call through the transport.
    Execute = 4,
    /// 5. Read-back of what changed.
    Verify = 5,
    /// 6. The envelope: determinism class, echoed seed, fingerprint.
    Return = 6,
}

impl Phase {
    /// Whether a refusal in this phase is guaranteed to happen before the transport is used.
    pub fn precedes_transport(self) -> bool {
        self < Phase::Plan
    }
}

/// One call as it moves through the pipeline.
#[derive(Debug)]
pub struct CallContext {
    /// The call id: one for the whole call, whatever is repeated underneath (the audit, cancel
    /// and history use it).
    pub id: u64,
    /// Fires when [`Pipeline::cancel`](crate::Pipeline::cancel) names this call: a stage that
    /// waits should stop waiting, and the call's sends carry it to the transport.
    pub cancel: vibe_transport::CancellationToken,
    /// The tool.
    pub tool: String,
    /// The tool's registry entry, once the contract check found it.
    pub spec: Option<Arc<ToolSpec>>,
    /// The arguments.
    pub params: Value,
    /// The call's deadline.
    pub deadline: Duration,
    /// The answer, once a stage produced one (a refusal, or the kernel's envelope as it came:
    /// the return phase's `seal` stage seals a snapshot and completes an error's guidance, so
    /// stages before it see the kernel's own data).
    pub answer: Option<Envelope>,
    /// Extra information for the answer's `_meta`.
    pub meta: Meta,
    /// How many transport calls this call made (execute, plan reads, re-discovery).
    pub transport_calls: u32,
    /// The scene's inventory before agent code ran (the code lock's boundary mode).
    pub scene_before: Option<Value>,
    /// The sandbox's files before a call that may write files (the temporary storage check).
    pub sandbox_before: Option<crate::stages::SandboxListing>,
    /// The batch this call's send joins (`Pipeline::call_batch`); taken by the first send.
    pub(crate) batch: Option<Arc<crate::batch::BatchWindow>>,
}

impl CallContext {
    /// The tool's spec; set after phase 2.
    pub fn spec(&self) -> Option<&ToolSpec> {
        self.spec.as_deref()
    }

    /// Whether the tool changes the scene (unknown tools count as mutations: fail closed).
    pub fn mutates(&self) -> bool {
        self.spec().is_none_or(ToolSpec::mutates)
    }

    /// Whether the tool runs agent code (the registry: it requires `code_exec`).
    pub fn runs_code(&self) -> bool {
        self.spec().is_some_and(|spec| {
            spec.requires
                .capabilities
                .contains(vibe_contract::CAP_CODE_EXEC)
        })
    }

    /// Whether the tool reads or writes a `.blend` (the registry: time class `file`), which
    /// makes the kernel busy while it runs.
    pub fn does_file_io(&self) -> bool {
        self.spec()
            .is_some_and(|spec| spec.time_class == vibe_contract::TimeClass::File)
    }

    /// Whether the registry asks the bridge for `check` on this tool's calls (`hints.checks`).
    pub fn has_check(&self, check: vibe_contract::BridgeCheck) -> bool {
        self.spec()
            .is_some_and(|spec| spec.hints.checks.contains(&check))
    }

    /// The tool's part in a transaction (the registry's `hints.transaction`).
    pub fn transaction_role(&self) -> Option<vibe_contract::TransactionRole> {
        self.spec().and_then(ToolSpec::transaction_role)
    }

    /// A string argument.
    pub fn str_param(&self, key: &str) -> Option<&str> {
        self.params.get(key).and_then(Value::as_str)
    }
}

/// One unit of work in a phase. Stages of the same phase run in the order they were added; a
/// stage that returns an error ends the call with that error as the answer.
#[async_trait]
pub trait Stage: Send + Sync {
    /// The phase the stage belongs to.
    fn phase(&self) -> Phase;

    /// A short name, for traces and `details.stage` of its refusals.
    fn name(&self) -> &'static str;

    /// Does the stage's work on the call.
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody>;
}
