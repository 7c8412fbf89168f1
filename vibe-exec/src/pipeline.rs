//! The pipeline: a session's stages in phase order, over a transport.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;
use vibe_audit::{AuditWriter, RecordKind};
use vibe_contract::Agreement;
use vibe_errors::{Envelope, ErrorBody, ErrorCode, Meta, Reason};
use vibe_transport::{CancellationToken, SessionConfig, Transport, TransportError, deadline_left};

use crate::batch::BatchWindow;
use crate::phase::{CallContext, Phase, Stage};
use crate::sandbox::{ProjectRoot, Sandbox, overlaps};
use crate::session::{KernelLock, Session};
use crate::stages::*;

/// Why a pipeline could not be started or assembled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The kernel could not be configured.
    #[error("configuring the kernel failed: {0}")]
    Configure(#[from] TransportError),
    /// The kernel refused the session settings.
    #[error("the kernel refused the session settings: {0}")]
    ConfigureRefused(ErrorBody),
    /// A registry schema did not compile.
    #[error("the input schema of {tool} does not compile: {message}")]
    Schema {
        /// The tool or macro.
        tool: String,
        /// What the compiler said.
        message: String,
    },
    /// A stage was placed against the phase order, or named a stage that is not there.
    #[error("stage order: {0}")]
    StageOrder(String),
    /// The agreement was changed after negotiation: its contract no longer matches its own
    /// fingerprint, or its tools are not the agreed ones.
    #[error("the agreement was changed after negotiation ({0}); negotiate again")]
    AgreementAltered(String),
    /// The kernel's jail allows more memory than the agreement's `max_memory_mib`.
    #[error(
        "the kernel's memory ceiling of {kernel} MiB is above the agreed max_memory_mib of {agreed} MiB; \
         start its jail with Jail::memory_mib({agreed})"
    )]
    MemoryCeiling {
        /// The agreed ceiling, in MiB.
        agreed: u64,
        /// The ceiling the kernel's hello reports (`confinement.memory_mib`), in MiB.
        kernel: u64,
    },
    /// The sandbox and a project root overlap: agent writes would land in a read-only root.
    #[error("the sandbox {sandbox} and the project root {root} overlap")]
    Overlap {
        /// The sandbox.
        sandbox: String,
        /// The project root.
        root: String,
    },
}

/// The stages every pipeline starts with, in order.
pub fn default_stages() -> Vec<Arc<dyn Stage>> {
    vec![
        Arc::new(SchemaStage),
        Arc::new(BreakerGuard),
        Arc::new(ContractCheck),
        Arc::new(ReadOnlyGuard),
        Arc::new(BusyGuard),
        Arc::new(TransactionGuard),
        Arc::new(SandboxGuard),
        Arc::new(SanityGuard),
        Arc::new(ActuatorLock),
        Arc::new(CodeGateGuard),
        Arc::new(PolygonBudget),
        Arc::new(crate::code::lock::CodeLockBefore),
        Arc::new(TempStorageBefore),
        Arc::new(ExecuteStage),
        Arc::new(TempStorageAfter),
        Arc::new(crate::code::lock::CodeLockAfter),
        Arc::new(SealStage),
        Arc::new(MetaStage),
        Arc::new(ImageStage),
    ]
}

/// Assembles a pipeline: the default stages, plus or instead of the embedder's own.
pub struct PipelineBuilder {
    agreement: Arc<Agreement>,
    transport: Arc<dyn Transport>,
    stages: Vec<Arc<dyn Stage>>,
    sandbox: Option<Sandbox>,
    project_roots: Vec<ProjectRoot>,
    audit: Option<Arc<AuditWriter>>,
    kernel_lock: KernelLock,
}

impl std::fmt::Debug for PipelineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineBuilder")
            .field("stages", &self.stage_names())
            .finish_non_exhaustive()
    }
}

impl PipelineBuilder {
    /// The default pipeline for an agreed contract over a transport.
    pub fn new(agreement: Agreement, transport: Arc<dyn Transport>) -> PipelineBuilder {
        PipelineBuilder {
            agreement: Arc::new(agreement),
            transport,
            stages: default_stages(),
            sandbox: None,
            project_roots: Vec::new(),
            audit: None,
            kernel_lock: KernelLock::default(),
        }
    }

    /// The session's sandbox folder (without one, file-writing tools are refused).
    pub fn sandbox(mut self, sandbox: Sandbox) -> PipelineBuilder {
        self.sandbox = Some(sandbox);
        self
    }

    /// A read-only project root: `file.open` may open `.blend` files from it (and from the
    /// sandbox); nothing is written into it. A kernel in a jail must be granted reads of it
    /// too (`Jail::read_root`).
    pub fn project_root(mut self, root: ProjectRoot) -> PipelineBuilder {
        self.project_roots.push(root);
        self
    }

    /// Writes every call, answer and incident to an audit log.
    pub fn audit(mut self, writer: Arc<AuditWriter>) -> PipelineBuilder {
        self.audit = Some(writer);
        self
    }

    /// Installs the code gate ([`crate::code::CodeGateStage`]) in place of the default
    /// `code_gate` guard, so that `python.exec` may run (when the contract grants `code_exec`).
    pub fn code_gate(self) -> PipelineBuilder {
        match self.position("code_gate") {
            Ok(at) => {
                let mut builder = self;
                builder.stages[at] = Arc::new(crate::code::CodeGateStage);
                builder
            }
            Err(_) => self.stage(crate::code::CodeGateStage),
        }
    }

    /// Adds the optional read-back of transforms (phase 5).
    pub fn read_back(self) -> PipelineBuilder {
        self.stage(ReadBack)
    }

    /// The stages, in the order they run.
    pub fn stage_names(&self) -> Vec<(Phase, &'static str)> {
        self.stages.iter().map(|s| (s.phase(), s.name())).collect()
    }

    /// Adds a stage at the end of its phase.
    pub fn stage(mut self, stage: impl Stage + 'static) -> PipelineBuilder {
        let phase = stage.phase();
        let at = self
            .stages
            .iter()
            .position(|s| s.phase() > phase)
            .unwrap_or(self.stages.len());
        self.stages.insert(at, Arc::new(stage));
        self
    }

    /// Adds a stage just before the stage named `before`, which must be in the same phase.
    pub fn stage_before(
        mut self,
        before: &str,
        stage: impl Stage + 'static,
    ) -> Result<PipelineBuilder, PipelineError> {
        let at = self.position(before)?;
        if self.stages[at].phase() != stage.phase() {
            return Err(PipelineError::StageOrder(format!(
                "{} ({:?}) cannot go before {before} ({:?})",
                stage.name(),
                stage.phase(),
                self.stages[at].phase()
            )));
        }
        self.stages.insert(at, Arc::new(stage));
        Ok(self)
    }

    /// Replaces the stage named `name` with one of the same phase (for example the code gate).
    pub fn replace(
        mut self,
        name: &str,
        stage: impl Stage + 'static,
    ) -> Result<PipelineBuilder, PipelineError> {
        let at = self.position(name)?;
        if self.stages[at].phase() != stage.phase() {
            return Err(PipelineError::StageOrder(format!(
                "{} must be in phase {:?} to replace {name}",
                stage.name(),
                self.stages[at].phase()
            )));
        }
        self.stages[at] = Arc::new(stage);
        Ok(self)
    }

    fn position(&self, name: &str) -> Result<usize, PipelineError> {
        self.stages
            .iter()
            .position(|s| s.name() == name)
            .ok_or_else(|| PipelineError::StageOrder(format!("no stage named {name}")))
    }

    /// Shares the kernel's transaction lock with another pipeline on the same kernel.
    pub fn kernel_lock(mut self, lock: KernelLock) -> PipelineBuilder {
        self.kernel_lock = lock;
        self
    }

    /// Compiles the input validators, configures the kernel, and starts the session.
    pub async fn start(self) -> Result<Pipeline, PipelineError> {
        let validators = compile_validators(&self.agreement)?;
        if let Some(sandbox) = &self.sandbox
            && let Some(root) = self
                .project_roots
                .iter()
                .find(|r| overlaps(r.root(), sandbox.root()))
        {
            return Err(PipelineError::Overlap {
                sandbox: sandbox.root().display().to_string(),
                root: root.root().display().to_string(),
            });
        }
        let contract = &self.agreement.contract;
        // Only what negotiation produced runs: a contract edited afterwards (a constraint
        // loosened, a capability added) or a tool registry swapped is refused.
        if !contract.fingerprint_is_valid() {
            return Err(PipelineError::AgreementAltered(
                "the contract does not match its fingerprint".into(),
            ));
        }
        if self.agreement.tools.fingerprint() != &contract.fingerprints.tools {
            return Err(PipelineError::AgreementAltered(
                "the tools are not the agreed tool set".into(),
            ));
        }
        // The OS holds the memory ceiling of a jailed kernel: it must be the agreed one or lower.
        let agreed = contract.constraints.max_memory_mib;
        if let Some(kernel) = self.transport.hello().blender.confinement.memory_mib
            && kernel > agreed
        {
            return Err(PipelineError::MemoryCeiling { agreed, kernel });
        }
        let config = SessionConfig::new(contract.session_id.clone())
            .capabilities(contract.capabilities.granted.iter().cloned())
            .sanity(contract.constraints.sanity.clone())
            .project_roots(
                self.project_roots
                    .iter()
                    .map(|r| r.root().display().to_string()),
            )
            .time_per_tool_ms(contract.constraints.time_per_tool_ms)
            .max_concurrent_calls(contract.limits.max_concurrent_calls);
        let config = match &self.sandbox {
            Some(sandbox) => config.sandbox(sandbox.root().display().to_string()),
            None => config,
        };
        if let Envelope::Err(error) = self.transport.configure(&config).await? {
            return Err(PipelineError::ConfigureRefused(error));
        }
        let concurrency = Arc::new(Semaphore::new(
            contract.limits.max_concurrent_calls.max(1) as usize
        ));
        let session = Session::new(
            self.agreement,
            self.transport,
            self.sandbox,
            self.project_roots,
            validators,
            self.kernel_lock,
            self.audit,
        );
        session.audit_incident(
            RecordKind::Note,
            serde_json::json!({
                "event": "session_start",
                "contract_fingerprint": session.agreement.contract.fingerprints.contract,
                "blender": session.agreement.contract.blender_profile.version,
            }),
        );
        Ok(Pipeline {
            session: Arc::new(session),
            stages: self.stages.into(),
            concurrency,
        })
    }
}

fn compile_validators(
    agreement: &Agreement,
) -> Result<HashMap<String, Arc<jsonschema::Validator>>, PipelineError> {
    let mut validators = HashMap::new();
    let tools = agreement
        .tools
        .tools()
        .iter()
        .map(|t| (t.name.clone(), &t.inputs));
    let macros = agreement
        .macros
        .iter()
        .flat_map(|m| m.macros())
        .map(|m| (format!("macro:{}", m.macro_name), &m.inputs));
    for (name, schema) in tools.chain(macros) {
        let validator = jsonschema::validator_for(schema).map_err(|e| PipelineError::Schema {
            tool: name.clone(),
            message: e.to_string(),
        })?;
        validators.insert(name, Arc::new(validator));
    }
    Ok(validators)
}

/// One session's pipeline. Cheap to clone; clones share the session.
#[derive(Clone)]
pub struct Pipeline {
    session: Arc<Session>,
    stages: Arc<[Arc<dyn Stage>]>,
    concurrency: Arc<Semaphore>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// The default pipeline's builder.
    pub fn builder(agreement: Agreement, transport: Arc<dyn Transport>) -> PipelineBuilder {
        PipelineBuilder::new(agreement, transport)
    }

    /// The session: guards' state, contract, transport.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// A builder for another session on the same kernel, sharing its transaction lock.
    pub fn fork(&self, agreement: Agreement) -> PipelineBuilder {
        PipelineBuilder::new(agreement, Arc::clone(&self.session.transport))
            .kernel_lock(self.session.kernel_lock.clone())
    }

    /// The stages, in the order they run.
    pub fn stage_names(&self) -> Vec<(Phase, &'static str)> {
        self.stages.iter().map(|s| (s.phase(), s.name())).collect()
    }

    /// The deadline of one call of the `quick` time class, from the contract.
    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.session.agreement.contract.constraints.time_per_tool_ms)
    }

    /// The deadline of one call of `tool`: the contract's deadline for the tool's time class
    /// (`quick` for a tool the contract does not know, which is refused anyway).
    pub fn deadline_for(&self, tool: &str) -> Duration {
        let class = self
            .session
            .agreement
            .tools
            .get(tool)
            .map(|spec| spec.time_class)
            .unwrap_or_default();
        let constraints = &self.session.agreement.contract.constraints;
        Duration::from_millis(constraints.deadline_ms(class))
    }

    /// A fresh call id, for [`Pipeline::call_with_id`] and [`Pipeline::cancel`]: the
    /// pipeline's own, unique for the session, whatever the transport numbers underneath.
    pub fn next_call_id(&self) -> u64 {
        self.session.next_call_id()
    }

    /// Runs one tool call through every phase and answers with one envelope.
    pub async fn call(&self, tool: &str, params: Value) -> Envelope {
        self.call_with_id(self.next_call_id(), tool, params).await
    }

    /// [`Pipeline::call`] with an id chosen beforehand (from [`Pipeline::next_call_id`]), so
    /// that another task can cancel it: from the moment this returns its future until the
    /// call answers, [`Pipeline::cancel`] with `id` reaches it.
    pub fn call_with_id<'a>(
        &'a self,
        id: u64,
        tool: &'a str,
        params: Value,
    ) -> impl Future<Output = Envelope> + Send + 'a {
        let flight = self.session.begin_call(id);
        async move {
            let deadline = self.deadline_for(tool);
            let arrived = tokio::time::Instant::now();
            let slot = tokio::select! {
                biased;
                () = flight.token.cancelled() => Err(ErrorBody::new(
                    ErrorCode::Timeout,
                    format!("{tool} was cancelled while it waited for a call slot"),
                )),
                slot = tokio::time::timeout(deadline, self.concurrency.acquire()) => match slot {
                    Ok(Ok(permit)) => Ok(permit),
                    _ => Err(ErrorBody::new(
                        ErrorCode::Timeout,
                        format!(
                            "{tool} waited {deadline:?} for one of the session's {} call slots",
                            self.session.agreement.contract.limits.max_concurrent_calls
                        ),
                    )),
                },
            };
            match slot {
                Ok(_permit) => {
                    // The wait for a slot counted against the deadline.
                    let left = deadline_left(deadline, arrived);
                    self.run_call(id, tool, params, None, flight.token.clone(), left)
                        .await
                }
                Err(error) => {
                    let session = &self.session;
                    session.audit_call(id, tool, &params);
                    let envelope = Envelope::Err(
                        error
                            .with_detail("cancelled", true)
                            .with_detail("partial_effects", "none: the call never started"),
                    );
                    session.audit_answer(id, tool, &envelope);
                    envelope
                }
            }
        }
    }

    /// Runs `calls` (tool, params) in their order and answers each, in the same order, as
    /// [`Pipeline::call`] would one by one: every call goes through every stage and has its
    /// own envelope and audit records. A run of consecutive read-only calls (the registry's
    /// `hints.read_only`) takes one of the session's call slots and is sent as one
    /// [`Transport::call_batch`](vibe_transport::Transport::call_batch) (one frame, one hop of
    /// Blender's main thread on a stream transport); a call that may change the scene runs
    /// alone, after the calls before it answered.
    pub async fn call_batch(&self, calls: Vec<(String, Value)>) -> Vec<Envelope> {
        let mut answers = Vec::with_capacity(calls.len());
        let mut calls = calls.into_iter().peekable();
        while let Some((tool, params)) = calls.next() {
            if !self.reads_only(&tool) {
                answers.push(self.call(&tool, params).await);
                continue;
            }
            let mut run = vec![(tool, params)];
            while let Some((next, _)) = calls.peek() {
                if !self.reads_only(next) {
                    break;
                }
                run.extend(calls.next());
            }
            answers.extend(self.read_run(run).await);
        }
        answers
    }

    fn reads_only(&self, tool: &str) -> bool {
        self.session
            .agreement
            .tools
            .get(tool)
            .is_some_and(|spec| spec.hints.read_only)
    }

    async fn read_run(&self, run: Vec<(String, Value)>) -> Vec<Envelope> {
        if run.len() == 1 {
            let (tool, params) = run.into_iter().next().unwrap_or_default();
            return vec![self.call(&tool, params).await];
        }
        let deadline = run
            .iter()
            .map(|(tool, _)| self.deadline_for(tool))
            .max()
            .unwrap_or_default();
        let arrived = tokio::time::Instant::now();
        let _permit = match tokio::time::timeout(deadline, self.concurrency.acquire()).await {
            Ok(Ok(permit)) => permit,
            // No slot in time: each call waits for one of its own and answers as it would alone.
            _ => {
                let mut answers = Vec::with_capacity(run.len());
                for (tool, params) in run {
                    answers.push(self.call(&tool, params).await);
                }
                return answers;
            }
        };
        let window = Arc::new(BatchWindow::new(run.len()));
        let calls = run.into_iter().map(|(tool, params)| {
            let id = self.next_call_id();
            let flight = self.session.begin_call(id);
            let window = Arc::clone(&window);
            async move {
                let token = flight.token.clone();
                let left = deadline_left(self.deadline_for(&tool), arrived);
                self.run_call(id, &tool, params, Some(window), token, left)
                    .await
            }
        });
        futures::future::join_all(calls).await
    }

    /// One call through every stage, its slot held by the caller; audited as it starts and ends.
    async fn run_call(
        &self,
        id: u64,
        tool: &str,
        params: Value,
        batch: Option<Arc<BatchWindow>>,
        cancel: CancellationToken,
        deadline: Duration,
    ) -> Envelope {
        let session = &self.session;
        session.audit_call(id, tool, &params);
        let mut call = CallContext {
            id,
            cancel,
            tool: tool.to_owned(),
            spec: None,
            params,
            deadline,
            answer: None,
            meta: Meta::default(),
            transport_calls: 0,
            scene_before: None,
            sandbox_before: None,
            batch,
        };
        let envelope = self.run_stages(&mut call).await;
        if let Some(window) = call.batch.take() {
            // Refused before its send: the rest of the batch need not wait for it.
            window.leave(session).await;
        }
        self.after(&call, &envelope);
        session.audit_answer(call.id, tool, &envelope);
        envelope
    }

    async fn run_stages(&self, call: &mut CallContext) -> Envelope {
        let mut failed = false;
        for stage in self.stages.iter() {
            if failed && stage.phase() < Phase::Return {
                continue;
            }
            if let Err(error) = stage.run(call, &self.session).await {
                call.answer = Some(Envelope::Err(error.with_detail("stage", stage.name())));
                failed = true;
            }
        }
        let envelope = call.answer.take().unwrap_or_else(|| {
            Envelope::Err(ErrorBody::new(
                ErrorCode::InternalError,
                "no stage answered the call",
            ))
        });
        if envelope.is_ok() && call.meta != Meta::default() {
            envelope.with_meta(call.meta.clone())
        } else {
            envelope
        }
    }

    /// What the session learns from an answer: security refusals count, a security block turns
    /// the session read-only.
    fn after(&self, call: &CallContext, envelope: &Envelope) {
        let Some(error) = envelope.error() else {
            return;
        };
        // A kernel the bridge replaced itself (kill-and-restore after a deadline, a cancel or a
        // crash): the session goes on, and the swap is in the audit chain, told apart from a
        // restart nobody asked for (`kernel_restarted`, a security record).
        if error.details.get("kernel").and_then(Value::as_str) == Some("replaced") {
            self.session.audit_incident(
                RecordKind::Recovered,
                serde_json::json!({"event": "kernel_replaced", "tool": call.tool, "message": error.message,
                                   "restored": error.details.get("restored")}),
            );
        }
        match error.reason() {
            Some(Reason::SecurityBlock) => {
                self.session.audit_incident(RecordKind::Security, serde_json::json!({"event": "security_block", "tool": call.tool, "message": error.message}));
                self.session.set_read_only(format!(
                    "security block on {}: {}",
                    call.tool, error.message
                ));
            }
            Some(Reason::Sandbox) => {
                self.session.audit_incident(RecordKind::Security, serde_json::json!({"event": "sandbox", "tool": call.tool, "message": error.message}));
            }
            _ => {}
        }
    }

    /// Cancels call `id` (a call in flight, named by its pipeline call id): a call not yet sent
    /// is not sent; a call the kernel runs is asked to stop (a kernel that does not stop within
    /// [`CANCEL_GRACE`](vibe_transport::CANCEL_GRACE) is replaced, where the transport
    /// supervises it). Its answer is `timeout` with `details.cancelled = true`. Whether the call
    /// was in flight is returned; a finished or unknown id is left alone.
    pub async fn cancel(&self, id: u64) -> bool {
        self.session.cancel_call(id)
    }

    /// Ends the session: the kernel is closed (a kernel the bridge started is stopped) and the
    /// audit log flushed. Calls after it fail.
    pub async fn close(&self) -> Result<(), TransportError> {
        let closed = self.session.transport.close().await;
        if let Some(audit) = &self.session.audit {
            let _ = audit.flush();
        }
        closed
    }

    /// Switches the session read-only (the API side of the kill switch).
    pub fn set_read_only(&self, reason: &str) {
        self.session.set_read_only(reason);
    }
}
