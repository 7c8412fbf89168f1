//! Per-session state the stages share: the contract, the transport, the guards' state.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use vibe_audit::{AuditWriter, Event, RecordKind};
use vibe_contract::{Agreement, DataKind};
use vibe_transport::{CancellationToken, Transport};

use crate::sandbox::{ProjectRoot, Sandbox};

/// The environment variable whose presence switches every session read-only (seed 000's kill
/// switch). Its value does not matter.
pub const KILL_SWITCH_ENV: &str = "KILL_VIBE";

/// How many sandbox or security refusals turn the session read-only.
pub const SECURITY_STRIKES: u32 = 3;

/// How many times a call re-discovers a known target that the kernel reports missing.
pub const MAX_REDISCOVERY: u32 = 3;

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A call in flight: its cancel token stays registered under its call id (for
/// [`crate::Pipeline::cancel`]) until this is dropped, however the call ends.
pub(crate) struct InFlightCall {
    in_flight: Arc<Mutex<HashMap<u64, (CancellationToken, usize)>>>,
    id: u64,
    pub(crate) token: CancellationToken,
}

impl Drop for InFlightCall {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.in_flight);
        if let Some((_, count)) = in_flight.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.id);
            }
        }
    }
}

/// Why [`Session::read`] gave no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The tool may change the scene: a stage reads only.
    #[error("{0} is not a read-only tool; a stage may only read")]
    NotReadOnly(String),
    /// The tool is not in the session's agreement.
    #[error("{0} is not an agreed tool")]
    NotAgreed(String),
    /// The transport gave no answer.
    #[error(transparent)]
    Transport(#[from] vibe_transport::TransportError),
}

impl ReadError {
    /// The error as an envelope's body: the transport's own mapping, or `contract_violation` for a
    /// tool a stage may not read with.
    pub fn to_error_body(&self) -> vibe_errors::ErrorBody {
        match self {
            ReadError::Transport(error) => error.to_error_body(),
            other => vibe_errors::ErrorBody::new(
                vibe_errors::ErrorCode::ContractViolation,
                other.to_string(),
            ),
        }
    }
}

/// Which session holds the kernel's one transaction. Shared by every session on one kernel
/// ([`crate::Pipeline::fork`]), so one session cannot commit, roll back or write through
/// another's transaction.
#[derive(Clone, Debug, Default)]
pub struct KernelLock(Arc<Mutex<Option<String>>>);

impl KernelLock {
    /// The session holding the transaction, if any.
    pub fn holder(&self) -> Option<String> {
        lock(&self.0).clone()
    }

    pub(crate) fn set(&self, holder: Option<String>) {
        *lock(&self.0) = holder;
    }
}

/// The data-blocks this session's agent created (objects, the modifiers it added, materials
/// and collections it made), under their current names: the actuator lock lets it remove,
/// rename or unlink only these. Every modifier of an object the agent created is its own too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreatedRegistry {
    blocks: BTreeSet<Block>,
    /// The registry as it was when the open transaction began.
    saved: Option<BTreeSet<Block>>,
}

/// One data-block: its kind, its owning object (modifiers) and its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Block {
    kind: DataKind,
    owner: Option<String>,
    name: String,
}

impl Block {
    fn new(kind: DataKind, owner: Option<&str>, name: &str) -> Block {
        Block {
            kind,
            owner: owner.map(str::to_owned),
            name: name.to_owned(),
        }
    }
}

impl CreatedRegistry {
    /// A registry holding the objects `names` (a session's own registry is kept by its
    /// pipeline).
    pub fn from_names<S: Into<String>>(names: impl IntoIterator<Item = S>) -> CreatedRegistry {
        CreatedRegistry {
            blocks: names
                .into_iter()
                .map(|n| Block::new(DataKind::Object, None, &n.into()))
                .collect(),
            saved: None,
        }
    }

    /// Whether the agent created the object `name` (under that name, following its renames).
    pub fn contains(&self, name: &str) -> bool {
        self.blocks
            .contains(&Block::new(DataKind::Object, None, name))
    }

    /// Whether the data-block is the agent's: it created it, or (a modifier) its object.
    pub fn owns(&self, kind: DataKind, owner: Option<&str>, name: &str) -> bool {
        self.blocks.contains(&Block::new(kind, owner, name))
            || (kind == DataKind::Modifier && owner.is_some_and(|o| self.contains(o)))
    }

    /// The names of the objects, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.blocks
            .iter()
            .filter(|b| b.kind == DataKind::Object)
            .map(|b| b.name.as_str())
    }

    pub(crate) fn clear(&mut self) {
        self.blocks.clear();
        self.saved = None;
    }

    pub(crate) fn created(&mut self, name: &str) {
        self.created_block(DataKind::Object, None, name);
    }

    pub(crate) fn created_block(&mut self, kind: DataKind, owner: Option<&str>, name: &str) {
        self.blocks.insert(Block::new(kind, owner, name));
    }

    /// A rename of one of its data-blocks (renames of others are refused by the lock); an
    /// object's modifiers follow it.
    pub(crate) fn renamed_block(
        &mut self,
        kind: DataKind,
        owner: Option<&str>,
        old: &str,
        new: &str,
    ) {
        if !self.blocks.remove(&Block::new(kind, owner, old)) {
            return;
        }
        self.blocks.insert(Block::new(kind, owner, new));
        if kind == DataKind::Object {
            let moved: Vec<Block> = self
                .blocks
                .iter()
                .filter(|b| b.owner.as_deref() == Some(old))
                .cloned()
                .collect();
            for block in moved {
                self.blocks.remove(&block);
                self.blocks
                    .insert(Block::new(block.kind, Some(new), &block.name));
            }
        }
    }

    /// A removal; an object's modifiers go with it.
    pub(crate) fn removed_block(&mut self, kind: DataKind, owner: Option<&str>, name: &str) {
        self.blocks.remove(&Block::new(kind, owner, name));
        if kind == DataKind::Object {
            self.blocks.retain(|b| b.owner.as_deref() != Some(name));
        }
    }

    pub(crate) fn deleted(&mut self, name: &str) {
        self.removed_block(DataKind::Object, None, name);
    }

    pub(crate) fn begin(&mut self) {
        self.saved = Some(self.blocks.clone());
    }

    pub(crate) fn commit(&mut self) {
        self.saved = None;
    }

    pub(crate) fn rollback(&mut self) {
        if let Some(saved) = self.saved.take() {
            self.blocks = saved;
        }
    }
}

/// The state of one session: what was agreed, where Blender is, what the guards know.
pub struct Session {
    /// The negotiated contract and its registries.
    pub agreement: Arc<Agreement>,
    /// The way to Blender: crate-private, so that no path from a `Pipeline` or a `Session`
    /// reaches Blender around the guards.
    pub(crate) transport: Arc<dyn Transport>,
    /// The session's sandbox folder for file writes, if it has one.
    pub sandbox: Option<Sandbox>,
    /// The read-only project roots `file.open` may open files from.
    pub project_roots: Vec<ProjectRoot>,
    /// Compiled input validators, one per agreed tool.
    pub(crate) validators: HashMap<String, Arc<jsonschema::Validator>>,
    read_only: AtomicBool,
    read_only_reason: Mutex<Option<String>>,
    breaker: Mutex<Option<String>>,
    strikes: AtomicU32,
    /// Calls in flight that make the kernel busy (file saves).
    pub(crate) busy: AtomicU32,
    pub(crate) created: Mutex<CreatedRegistry>,
    pub(crate) kernel_lock: KernelLock,
    /// The cancel token of each call in flight, by call id (with how many calls share the id).
    pub(crate) in_flight: Arc<Mutex<HashMap<u64, (CancellationToken, usize)>>>,
    /// The next call id the pipeline hands out.
    pub(crate) next_call: AtomicU64,
    pub(crate) audit: Option<Arc<AuditWriter>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("session_id", &self.session_id())
            .field("read_only", &self.is_read_only())
            .field("breaker_open", &self.breaker().is_some())
            .finish_non_exhaustive()
    }
}

impl Session {
    pub(crate) fn new(
        agreement: Arc<Agreement>,
        transport: Arc<dyn Transport>,
        sandbox: Option<Sandbox>,
        project_roots: Vec<ProjectRoot>,
        validators: HashMap<String, Arc<jsonschema::Validator>>,
        kernel_lock: KernelLock,
        audit: Option<Arc<AuditWriter>>,
    ) -> Session {
        let read_only = agreement.contract.constraints.read_only;
        Session {
            agreement,
            transport,
            sandbox,
            project_roots,
            validators,
            read_only: AtomicBool::new(read_only),
            read_only_reason: Mutex::new(
                read_only.then(|| "the contract starts the session read-only".to_owned()),
            ),
            breaker: Mutex::new(None),
            strikes: AtomicU32::new(0),
            busy: AtomicU32::new(0),
            created: Mutex::new(CreatedRegistry::default()),
            kernel_lock,
            in_flight: Arc::new(Mutex::new(HashMap::new())),
            next_call: AtomicU64::new(1),
            audit,
        }
    }

    /// A fresh call id: unique for the session's lifetime.
    pub(crate) fn next_call_id(&self) -> u64 {
        self.next_call.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers call `id` as in flight; calls sharing an id share one token.
    pub(crate) fn begin_call(&self, id: u64) -> InFlightCall {
        let mut in_flight = lock(&self.in_flight);
        let entry = in_flight
            .entry(id)
            .or_insert_with(|| (CancellationToken::new(), 0));
        entry.1 += 1;
        InFlightCall {
            in_flight: Arc::clone(&self.in_flight),
            id,
            token: entry.0.clone(),
        }
    }

    /// Fires the cancel token of call `id`, if it is in flight.
    pub(crate) fn cancel_call(&self, id: u64) -> bool {
        match lock(&self.in_flight).get(&id) {
            Some((token, _)) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// The contract's session id.
    pub fn session_id(&self) -> &str {
        &self.agreement.contract.session_id
    }

    /// Whether mutations are refused: the `KILL_VIBE` kill switch is set, or read-only mode
    /// was switched on (by the API, the contract, or security strikes).
    pub fn is_read_only(&self) -> bool {
        std::env::var_os(KILL_SWITCH_ENV).is_some() || self.read_only.load(Ordering::SeqCst)
    }

    /// Why the session is read-only.
    pub fn read_only_reason(&self) -> Option<String> {
        if std::env::var_os(KILL_SWITCH_ENV).is_some() {
            return Some(format!("the {KILL_SWITCH_ENV} kill switch is set"));
        }
        if !self.read_only.load(Ordering::SeqCst) {
            return None;
        }
        lock(&self.read_only_reason).clone()
    }

    /// Switches read-only mode on, with a reason for the audit log and the refusals.
    pub fn set_read_only(&self, reason: impl Into<String>) {
        let reason = reason.into();
        if !self.read_only.swap(true, Ordering::SeqCst) {
            self.audit_incident(
                RecordKind::Terminal,
                serde_json::json!({"event": "read_only", "reason": reason}),
            );
        }
        *lock(&self.read_only_reason) = Some(reason);
    }

    /// Why the circuit breaker is open, if it is.
    pub fn breaker(&self) -> Option<String> {
        lock(&self.breaker).clone()
    }

    /// Opens the circuit breaker (a stage that finds the session unsafe to go on): every later
    /// mutation is refused until [`Session::human_reset`]. Recorded in the audit log.
    pub fn open_breaker(&self, reason: String) {
        let mut breaker = lock(&self.breaker);
        if breaker.is_none() {
            self.audit_incident(
                RecordKind::Terminal,
                serde_json::json!({"event": "circuit_breaker_open", "reason": reason}),
            );
            *breaker = Some(reason);
        }
    }

    /// A human's reset: closes the breaker, leaves read-only mode (unless the kill switch is
    /// set), clears the security strikes. Recorded in the audit log.
    pub fn human_reset(&self, who: &str) {
        *lock(&self.breaker) = None;
        self.read_only.store(
            self.agreement.contract.constraints.read_only,
            Ordering::SeqCst,
        );
        self.strikes.store(0, Ordering::SeqCst);
        self.audit_incident(
            RecordKind::Note,
            serde_json::json!({"event": "human_reset", "by": who}),
        );
    }

    /// Counts a security refusal; the [`SECURITY_STRIKES`]-th turns the session read-only.
    pub fn strike(&self, what: &str) {
        let strikes = self.strikes.fetch_add(1, Ordering::SeqCst) + 1;
        if strikes >= SECURITY_STRIKES {
            self.set_read_only(format!("{strikes} security refusals (last: {what})"));
        }
    }

    /// A snapshot of the objects the agent created.
    pub fn created(&self) -> CreatedRegistry {
        lock(&self.created).clone()
    }

    /// Which session holds the kernel's transaction.
    pub fn transaction_holder(&self) -> Option<String> {
        self.kernel_lock.holder()
    }

    /// Whether a call that makes the kernel busy (a file save) is in flight.
    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst) > 0
    }

    /// Reads from Blender for a stage: a call of an agreed tool the registry marks
    /// `hints.read_only`, straight to the transport (a read changes nothing the guards keep),
    /// cancelled with `cancel`, its answer sealed as the return phase seals one. Any other tool
    /// is refused without a call. The built-in stages' read-backs, plans and re-discovery use
    /// this too: it is the one way a stage reaches Blender.
    pub async fn read(
        &self,
        tool: &str,
        params: serde_json::Value,
        deadline: std::time::Duration,
        cancel: &CancellationToken,
    ) -> Result<vibe_errors::Envelope, ReadError> {
        let snapshot = match self.agreement.tools.get(tool) {
            Some(spec) if spec.hints.read_only => spec.hints.snapshot,
            Some(_) => return Err(ReadError::NotReadOnly(tool.to_owned())),
            None => return Err(ReadError::NotAgreed(tool.to_owned())),
        };
        let call = vibe_transport::Call::new(tool, params, deadline).cancelled_by(cancel.clone());
        let answer = self.transport.call(call).await?;
        Ok(vibe_transport::snapshot::returned(snapshot, answer))
    }

    pub(crate) fn audit(&self, event: Event) {
        self.audit_with(|audit, _| audit.record(event));
    }

    /// The record of call `id` as it starts (its arguments are rendered, not copied).
    pub(crate) fn audit_call(&self, id: u64, tool: &str, params: &serde_json::Value) {
        self.audit_with(|audit, session| audit.record_call(session, id, tool, params));
    }

    /// The record of call `id`'s answer (its envelope is rendered, not copied).
    pub(crate) fn audit_answer(&self, id: u64, tool: &str, envelope: &vibe_errors::Envelope) {
        self.audit_with(|audit, session| audit.record_answer(session, id, tool, envelope));
    }

    /// Queues a record on the session's writer, if it has one; a record not written is logged.
    fn audit_with(
        &self,
        record: impl FnOnce(&AuditWriter, &str) -> Result<(), vibe_audit::AuditError>,
    ) {
        if let Some(audit) = &self.audit
            && let Err(error) = record(audit, self.session_id())
        {
            tracing::warn!(%error, "audit record not written");
        }
    }

    /// An incident record. Security records are durable (on disk, synced) before this returns,
    /// so before the answer that reports them, whatever the writer's overflow and durability
    /// modes; the others are queued like every record.
    pub fn audit_incident(&self, kind: RecordKind, detail: serde_json::Value) {
        let event = Event::incident(self.session_id(), kind, detail);
        match &self.audit {
            Some(audit) if kind == RecordKind::Security => {
                if let Err(error) = audit.record_durable(event) {
                    tracing::warn!(%error, "security record not written");
                }
            }
            _ => self.audit(event),
        }
    }
}
