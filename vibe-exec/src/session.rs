//! Per-session state the stages share: the contract, the transport, the guards' state.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use vibe_audit::{AuditWriter, Event, RecordKind};
use vibe_contract::{Agreement, DataKind};
use vibe_transport::Transport;

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
    pub(crate) cancelled: Mutex<HashSet<u64>>,
    /// Each call in flight: its stable call id -> the transport id of its latest send (a
    /// repeat after a dropped connection, or after re-discovery, gets a new one).
    pub(crate) sent_as: Mutex<std::collections::HashMap<u64, u64>>,
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
            cancelled: Mutex::new(HashSet::new()),
            sent_as: Mutex::new(std::collections::HashMap::new()),
            audit,
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

    pub(crate) fn open_breaker(&self, reason: String) {
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

    /// Counts a security refusal; the third turns the session read-only.
    pub(crate) fn strike(&self, what: &str) {
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

    pub(crate) fn audit(&self, event: Event) {
        if let Some(audit) = &self.audit
            && let Err(error) = audit.record(event)
        {
            tracing::warn!(%error, "audit record not written");
        }
    }

    /// An incident record. Security records are durable (on disk, synced) before this returns,
    /// so before the answer that reports them, whatever the writer's overflow and durability
    /// modes; the others are queued like every record.
    pub(crate) fn audit_incident(&self, kind: RecordKind, detail: serde_json::Value) {
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
