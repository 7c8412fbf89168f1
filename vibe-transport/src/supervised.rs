//! Deadlines the bridge enforces: a kernel whose call passes its deadline is killed (its whole
//! process group), a fresh one is started, and the scene is restored to the state before the
//! call.
//!
//! A tracer inside Python cannot stop C-level work (`sum(range(10**12))`, a catastrophic regex,
//! `time.sleep`) and can be switched off by the code it watches, so the guarantee lives here,
//! outside the kernel. [`SupervisedKernel`] wraps the kernels a factory starts:
//!
//! * **Last good state.** A checkpoint (the scene saved as a `.blend`) is taken when the session
//!   is configured; every later successful call that changes the scene deterministically is
//!   appended to a journal; a successful call that is not deterministic (agent code) takes a new
//!   checkpoint instead, and so does every [`JOURNAL_LIMIT`]-th journal entry. Checkpoints are
//!   moved out of the kernel's reach into a folder only the bridge writes, and checked by hash
//!   before they are used.
//! * **Kill and restore.** A call that passes its deadline kills the kernel's process group at
//!   once, starts a fresh kernel, configures it, loads the checkpoint and replays the journal
//!   (an open transaction is reopened by its own journaled `transaction.begin`). The caller gets
//!   `timeout` with `details.cancelled = true`, `details.restored` (what the scene now is) and
//!   `details.kernel = "replaced"`; the session goes on. Calls in flight on the killed kernel
//!   answer that they did not take effect.
//! * **Cancel.** [`Transport::cancel`] asks the kernel to stop the call (it interrupts agent
//!   code and drops queued calls); a call still running [`CANCEL_GRACE`] later (a render, an
//!   import: C code no tracer reaches) has its kernel killed, and answers `timeout` with
//!   `details.cancelled = true`, `details.restored` and `details.kernel = "replaced"`.
//! * **When restoring fails** (the fresh kernel does not start, the checkpoint is corrupt, a
//!   replayed call fails), the call answers the transport's `Deadline` error: the pipeline's
//!   circuit breaker opens and only a human reset continues the session.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::json;
use vibe_contract::{ToolRegistry, TransactionRole};
use vibe_errors::{Determinism, Envelope, ErrorBody, ErrorCode};

use crate::error::{ExitReport, TransportError};
use crate::frame::{Hello, SessionConfig, TransactionCarry};
use crate::stdio::StdioTransport;
use crate::transport::{Call, CodeBoundary, Transport};

mod cancel;
mod store;

pub use cancel::CANCEL_GRACE;
use cancel::Cancels;

pub use store::MAX_SCENE_BYTES;
use store::{Stored, hash_file, take_in};

/// Journal entries after which a fresh checkpoint is taken (bounds the replay on a restore).
pub const JOURNAL_LIMIT: usize = 64;
/// How long a checkpoint, a restore or the start of a replacement kernel may take.
pub const RESTORE_DEADLINE: Duration = Duration::from_secs(120);
/// The least time the kernel that ran agent code gets to save the scene it left.
pub const RETIRE_SAVE_MIN: Duration = Duration::from_secs(2);

/// The first id of calls through the supervisor; each kernel numbers its own control frames and
/// replayed calls from 1, so the two ranges never meet.
const FIRST_CALL_ID: u64 = 1 << 40;

/// Starts a kernel (for the first time or as a replacement).
pub type KernelFactory =
    Arc<dyn Fn() -> BoxFuture<'static, Result<StdioTransport, TransportError>> + Send + Sync>;

/// A factory that spawns a kernel from the options `make` returns each time (a jail makes
/// fresh private folders for every kernel it starts).
pub fn factory(
    make: impl Fn() -> std::io::Result<crate::stdio::StdioOptions> + Send + Sync + 'static,
) -> KernelFactory {
    let make = Arc::new(make);
    Arc::new(move || {
        let make = Arc::clone(&make);
        Box::pin(async move {
            let options = make().map_err(|e| TransportError::Connect(e.to_string()))?;
            StdioTransport::spawn(options).await
        })
    })
}

/// The scene agent code left, with the transaction open when it ran, and the session held
/// exclusive until the bridge decides: no other call runs between the code and the decision.
struct Checkpoint {
    stored: Arc<Stored>,
    transaction: Option<(String, Arc<Stored>)>,
    _exclusive: tokio::sync::OwnedRwLockWriteGuard<()>,
}

#[derive(Default)]
struct LastGood {
    session: Option<SessionConfig>,
    checkpoint: Option<Arc<Stored>>,
    checkpoint_tx: Option<(String, Arc<Stored>)>,
    journal: Vec<Call>,
    taken: u64,
    /// The open transaction: its id and the scene at its `begin`.
    transaction: Option<(String, Arc<Stored>)>,
    /// The scene agent code left, awaiting the bridge's decision (boundary mode).
    pending: Option<Checkpoint>,
}

/// A [`Transport`] over a child kernel that the bridge kills and replaces when a call passes
/// its deadline, restoring the scene to the state before that call; and, by default, a
/// [`CodeBoundary`] that retires every kernel that ran agent code.
pub struct SupervisedKernel {
    factory: KernelFactory,
    registry: Arc<ToolRegistry>,
    current: StdMutex<(u64, Arc<StdioTransport>)>,
    last_good: tokio::sync::Mutex<LastGood>,
    store: PathBuf,
    hello: Hello,
    next_id: AtomicU64,
    replacements: AtomicU64,
    boundary: bool,
    /// A kernel started ahead of need, so a replacement does not wait for Blender to start.
    spare:
        tokio::sync::Mutex<Option<tokio::task::JoinHandle<Result<StdioTransport, TransportError>>>>,
    /// Typed calls share it; agent code holds it alone from its call to the bridge's decision.
    exclusive: Arc<tokio::sync::RwLock<()>>,
    /// Calls in flight and those cancelled (a call Blender cannot stop has its kernel killed).
    cancels: Cancels,
}

impl std::fmt::Debug for SupervisedKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisedKernel")
            .field("hello", &self.hello)
            .field("replacements", &self.replacements)
            .field("boundary", &self.boundary)
            .finish_non_exhaustive()
    }
}

impl SupervisedKernel {
    /// Starts the first kernel. `registry` says which tools change the scene and which are
    /// deterministic (what the journal may replay).
    pub async fn start(
        factory: KernelFactory,
        registry: Arc<ToolRegistry>,
    ) -> Result<SupervisedKernel, TransportError> {
        let first = factory().await?;
        let store = std::env::temp_dir().join(format!(
            "vibe-checkpoints-{}-{}",
            std::process::id(),
            crate::rng::unique_suffix()
        ));
        std::fs::create_dir_all(&store)
            .map_err(|e| TransportError::Connect(format!("checkpoint folder: {e}")))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700));
        }
        Ok(SupervisedKernel {
            hello: first.hello().clone(),
            factory,
            registry,
            current: StdMutex::new((0, Arc::new(first))),
            last_good: tokio::sync::Mutex::new(LastGood::default()),
            store,
            // Far above the ids each kernel's own counter gives its control frames and replays.
            next_id: AtomicU64::new(FIRST_CALL_ID),
            replacements: AtomicU64::new(0),
            boundary: true,
            spare: tokio::sync::Mutex::new(None),
            exclusive: Arc::new(tokio::sync::RwLock::new(())),
            cancels: Cancels::default(),
        })
    }

    /// Starts a spare kernel in the background (boundary mode replaces a kernel after every
    /// agent code call; the spare spares the caller Blender's start, ~0.5-1 s).
    async fn prepare_spare(&self) {
        let mut spare = self.spare.lock().await;
        if spare.is_none() {
            *spare = Some(tokio::spawn((self.factory)()));
        }
    }

    /// Trust the kernel's own in-kernel check for agent code (a filter: code can disarm it)
    /// instead of retiring every kernel that ran agent code. Cheaper; for agents you trust.
    pub fn in_kernel_check_only(mut self) -> SupervisedKernel {
        self.boundary = false;
        self
    }

    /// Keep a warm spare kernel (another Blender process) so that retiring a kernel after agent
    /// code, or replacing one after a deadline, does not wait for Blender to start.
    pub async fn with_warm_spare(self) -> SupervisedKernel {
        self.prepare_spare().await;
        self
    }

    /// How many times a kernel was replaced (deadlines and retirements).
    pub fn replacements(&self) -> u64 {
        self.replacements.load(Ordering::Relaxed)
    }

    /// The kernel serving calls now.
    pub fn current(&self) -> Arc<StdioTransport> {
        Arc::clone(&self.current.lock().unwrap_or_else(|e| e.into_inner()).1)
    }

    fn generation(&self) -> (u64, Arc<StdioTransport>) {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        (current.0, Arc::clone(&current.1))
    }

    /// Where a kernel writes or reads a scene file: its private folder in a jail, else the store.
    fn exchange_path(&self, kernel: &StdioTransport, name: &str) -> PathBuf {
        #[cfg(feature = "jail")]
        if let Some(private) = kernel.private_dir() {
            return private.join(name);
        }
        let _ = kernel;
        self.store.join(name)
    }

    /// Saves the scene on `kernel` and moves the file out of the kernel's reach.
    async fn save(
        &self,
        kernel: &StdioTransport,
        last: &mut LastGood,
        deadline: Duration,
    ) -> Result<Arc<Stored>, String> {
        last.taken += 1;
        let written = self.exchange_path(kernel, &format!("save-{}.blend", last.taken));
        let answer = kernel
            .checkpoint(&written.to_string_lossy(), deadline)
            .await
            .map_err(|e| e.to_string())?;
        if let Envelope::Err(error) = answer {
            return Err(format!(
                "the kernel did not save the scene: {}",
                error.message
            ));
        }
        let kept = self.store.join(format!("kept-{}.blend", last.taken));
        let hash = take_in(written, kept.clone()).await?;
        Ok(Arc::new(Stored { path: kept, hash }))
    }

    /// Takes a new last good state on `kernel`.
    async fn checkpoint(&self, kernel: &StdioTransport, last: &mut LastGood) -> Result<(), String> {
        let stored = self.save(kernel, last, RESTORE_DEADLINE).await?;
        last.checkpoint = Some(stored);
        last.checkpoint_tx = last.transaction.clone();
        last.journal.clear();
        Ok(())
    }

    /// Hands `stored` (and the transaction open with it) to `kernel`, checked by hash.
    async fn load(
        &self,
        kernel: &StdioTransport,
        stored: &Stored,
        transaction: &Option<(String, Arc<Stored>)>,
    ) -> Result<(), String> {
        let copy_in = |from: &Stored, name: &str| -> Result<PathBuf, String> {
            if hash_file(&from.path)? != from.hash {
                return Err("a checkpoint changed on disk; it is not used".into());
            }
            let target = self.exchange_path(kernel, name);
            // A new file (O_EXCL: a link planted at that path is not followed).
            let mut source =
                std::fs::File::open(&from.path).map_err(|e| format!("checkpoint copy: {e}"))?;
            let mut copy = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target)
                .map_err(|e| format!("checkpoint copy: {e}"))?;
            std::io::copy(&mut source, &mut copy).map_err(|e| format!("checkpoint copy: {e}"))?;
            Ok(target)
        };
        let scene = copy_in(stored, "restore.blend")?;
        let carry = match transaction {
            Some((id, begin)) => Some(TransactionCarry {
                id: id.clone(),
                snapshot: copy_in(begin, "restore-tx.blend")?
                    .to_string_lossy()
                    .into_owned(),
            }),
            None => None,
        };
        let answer = kernel
            .restore(&scene.to_string_lossy(), carry.clone(), RESTORE_DEADLINE)
            .await
            .map_err(|e| format!("restore: {e}"));
        let _ = std::fs::remove_file(&scene);
        if let Some(carry) = carry {
            let _ = std::fs::remove_file(carry.snapshot);
        }
        if let Envelope::Err(error) = answer? {
            return Err(format!("restore refused: {}", error.message));
        }
        Ok(())
    }

    /// Restores the last good state (checkpoint, then journal) on `kernel`; says what it is.
    /// The transaction open afterwards is worked out on the way: a replayed `begin` saves its
    /// scene again (the one saved when it first ran may be missing if the kernel died then).
    async fn restore_last_good(
        &self,
        kernel: &StdioTransport,
        last: &mut LastGood,
    ) -> Result<String, String> {
        let mut restored = "the factory scene (no checkpoint yet)".to_owned();
        if let Some(checkpoint) = &last.checkpoint {
            self.load(kernel, checkpoint, &last.checkpoint_tx).await?;
            restored = "the checkpoint".to_owned();
        }
        last.transaction = last.checkpoint_tx.clone();
        let journal = last.journal.clone();
        for call in &journal {
            let mut again = call.clone();
            again.id = kernel.next_id();
            let result = match kernel.call(again).await {
                Ok(Envelope::Ok(result)) => result,
                Ok(Envelope::Err(error)) => {
                    let tools: Vec<&str> = journal.iter().map(|c| c.tool.as_str()).collect();
                    return Err(format!(
                        "replaying {} failed: {} (checkpoint transaction {:?}, journal {tools:?})",
                        call.tool,
                        error.message,
                        last.checkpoint_tx.as_ref().map(|t| &t.0)
                    ));
                }
                Err(e) => return Err(format!("replaying {} failed: {e}", call.tool)),
            };
            match self
                .registry
                .get(&call.tool)
                .and_then(|s| s.transaction_role())
            {
                Some(TransactionRole::Begin) => {
                    let id = transaction_id(&result);
                    let begin = self.save(kernel, last, RESTORE_DEADLINE).await?;
                    last.transaction = Some((id, begin));
                }
                Some(TransactionRole::Commit | TransactionRole::Rollback) => {
                    last.transaction = None
                }
                None => {}
            }
        }
        if !journal.is_empty() {
            restored = format!("{restored} and {} journaled calls", journal.len());
        }
        Ok(restored)
    }

    /// A fresh, configured kernel: the warm spare when there is one (and a new spare is started
    /// in its place), else a new start.
    async fn fresh(&self, last: &LastGood) -> Result<StdioTransport, String> {
        let spare = self.spare.lock().await.take();
        let warm = match spare {
            Some(handle) => {
                self.prepare_spare().await;
                match tokio::time::timeout(RESTORE_DEADLINE, handle).await {
                    Ok(Ok(Ok(kernel))) => Some(kernel),
                    _ => None,
                }
            }
            None => None,
        };
        let fresh = match warm {
            Some(kernel) => kernel,
            None => tokio::time::timeout(RESTORE_DEADLINE, (self.factory)())
                .await
                .map_err(|_| "the replacement kernel did not start in time".to_owned())?
                .map_err(|e| format!("the replacement kernel did not start: {e}"))?,
        };
        if let Some(session) = &last.session {
            fresh
                .configure(session)
                .await
                .map_err(|e| format!("configure: {e}"))?;
        }
        Ok(fresh)
    }

    fn swap(&self, seen: u64, fresh: StdioTransport) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        *current = (seen + 1, Arc::new(fresh));
        self.replacements.fetch_add(1, Ordering::Relaxed);
    }

    /// Kills `old` (generation `seen`), starts a fresh kernel and restores the last good state.
    async fn replace(&self, seen: u64, old: &StdioTransport) -> Result<String, String> {
        old.kill();
        let mut last = self.last_good.lock().await;
        if self.generation().0 != seen {
            return Ok("replaced by a concurrent restore".into());
        }
        // (A pending decision holds the session exclusive, so no call that can pass its
        // deadline runs meanwhile; were there one, the last good state is the state before it.)
        last.pending = None;
        let fresh = self.fresh(&last).await?;
        let restored = self.restore_last_good(&fresh, &mut last).await?;
        self.swap(seen, fresh);
        Ok(restored)
    }

    /// Retires `old`, which ran agent code: the scene it left goes to a fresh kernel (loaded
    /// with Python auto-execution off) and awaits [`CodeBoundary::settle`].
    async fn retire(
        &self,
        seen: u64,
        old: &StdioTransport,
        exclusive: tokio::sync::OwnedRwLockWriteGuard<()>,
        save_deadline: Duration,
    ) -> Result<(), String> {
        let mut last = self.last_good.lock().await;
        // The kernel that ran the code saves within what is left of the call's deadline (at
        // least RETIRE_SAVE_MIN): code that stalls the save (a save handler, a patched kernel)
        // keeps no kernel alive past it; the retirement then fails and the state before the
        // call is restored.
        let left = self.save(old, &mut last, save_deadline).await;
        old.kill();
        let left = left?;
        let fresh = self.fresh(&last).await?;
        self.load(&fresh, &left, &last.transaction).await?;
        last.pending = Some(Checkpoint {
            stored: left,
            transaction: last.transaction.clone(),
            _exclusive: exclusive,
        });
        self.swap(seen, fresh);
        Ok(())
    }

    /// Records a successful typed call in the last good state.
    async fn remember(
        &self,
        kernel: &StdioTransport,
        call: Call,
        result: &Envelope,
    ) -> Result<(), String> {
        let mut last = self.last_good.lock().await;
        let Some(spec) = self.registry.get(&call.tool) else {
            return Ok(());
        };
        if !spec.mutates() {
            return Ok(());
        }
        let opens = spec.transaction_role() == Some(TransactionRole::Begin);
        let closes = matches!(
            spec.transaction_role(),
            Some(TransactionRole::Commit | TransactionRole::Rollback)
        );
        // Journaled first (nothing can fail before it), then the transaction, so a checkpoint
        // taken below carries the transaction open after this call, not the one before it. If
        // the kernel dies before the `begin` scene is saved, the replay saves it again.
        let journaled =
            spec.determinism != Determinism::Nondeterministic && last.journal.len() < JOURNAL_LIMIT;
        if journaled {
            last.journal.push(call);
        }
        if opens || closes {
            last.transaction = None;
        }
        if opens {
            let id = transaction_id(result.result().unwrap_or(&serde_json::Value::Null));
            let begin = self.save(kernel, &mut last, RESTORE_DEADLINE).await?;
            last.transaction = Some((id, begin));
        }
        if !journaled {
            self.checkpoint(kernel, &mut last).await?;
        }
        Ok(())
    }
}

/// The id a `transaction.begin` answered with.
fn transaction_id(result: &serde_json::Value) -> String {
    result
        .get("transaction")
        .and_then(|t| t.as_str())
        .unwrap_or("tx-carried")
        .to_owned()
}

/// The scene agent code left becomes the last good state.
fn accept(last: &mut LastGood, pending: Checkpoint) {
    last.checkpoint = Some(pending.stored);
    last.checkpoint_tx = pending.transaction;
    last.journal.clear();
}

#[async_trait]
impl Transport for SupervisedKernel {
    fn hello(&self) -> &Hello {
        &self.hello
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        let kernel = self.current();
        let answer = kernel.configure(session).await?;
        let mut last = self.last_good.lock().await;
        last.session = Some(session.clone());
        self.checkpoint(&kernel, &mut last)
            .await
            .map_err(|e| TransportError::Connect(format!("the first checkpoint failed: {e}")))?;
        Ok(answer)
    }

    async fn call(&self, call: Call) -> Result<Envelope, TransportError> {
        let kept = call.clone();
        let runs_code = self.boundary
            && self.registry.get(&call.tool).is_some_and(|spec| {
                spec.mutates() && spec.determinism == Determinism::Nondeterministic
            });
        // Agent code runs alone and keeps the session until the bridge's decision (settle);
        // typed calls share it. Waiting counts against the call's deadline.
        let exclusive = Arc::clone(&self.exclusive);
        let (shared, alone) = if runs_code {
            match tokio::time::timeout(call.deadline, exclusive.write_owned()).await {
                Ok(guard) => (None, Some(guard)),
                Err(_) => return Err(TransportError::QueueTimeout(call.deadline)),
            }
        } else {
            match tokio::time::timeout(call.deadline, exclusive.read_owned()).await {
                Ok(guard) => (Some(guard), None),
                Err(_) => return Err(TransportError::QueueTimeout(call.deadline)),
            }
        };
        let _shared = shared;
        let started = tokio::time::Instant::now();
        let deadline = call.deadline;
        // A kernel that died between calls (killed, out of memory) is replaced, with the last
        // good state restored, before this call; a call it refused as never sent runs once on
        // the fresh kernel.
        let mut attempts = 0;
        let (seen, kernel, answer) = loop {
            let (seen, kernel) = self.generation();
            let _running = self.cancels.running(kept.id, seen);
            let answer = match kernel.exit_report() {
                Some(report) => Err(TransportError::KernelExited(ExitReport {
                    sent: false,
                    ..report
                })),
                None => kernel.call(call.clone()).await,
            };
            match answer {
                Err(TransportError::KernelExited(report)) if !report.sent && attempts == 0 => {
                    attempts += 1;
                    tracing::warn!(
                        "the kernel had exited ({report}); restoring before {}",
                        call.tool
                    );
                    self.replace(seen, &kernel).await.map_err(|why| {
                        TransportError::Connect(format!("{report}; restoring failed: {why}"))
                    })?;
                }
                answer => break (seen, kernel, answer),
            }
        };
        let cancelled = self.cancels.take(kept.id);
        match answer {
            Ok(envelope) if let Some(alone) = alone => {
                let save_deadline = deadline
                    .saturating_sub(started.elapsed())
                    .max(RETIRE_SAVE_MIN);
                match self.retire(seen, &kernel, alone, save_deadline).await {
                    Ok(()) => Ok(envelope),
                    Err(why) => {
                        tracing::error!("retiring the kernel after {} failed: {why}", kept.tool);
                        let restored = self
                            .replace(self.generation().0, &self.current())
                            .await
                            .map_err(|_| TransportError::ConnectionLost(why.clone()))?;
                        Ok(Envelope::Err(
                        ErrorBody::new(
                            ErrorCode::ExecutionFailed,
                            format!(
                                "{} left a kernel that could not be retired ({why}); the scene was \
                                 restored to the state before the call",
                                kept.tool
                            ),
                        )
                        .with_detail("kernel", "replaced")
                        .with_detail("restored", restored)
                        .with_detail("may_have_run", false),
                    ))
                    }
                }
            }
            Ok(envelope) => {
                if envelope.is_ok()
                    && let Err(e) = self.remember(&kernel, kept.clone(), &envelope).await
                {
                    tracing::warn!("no checkpoint after {}: {e}", kept.tool);
                }
                Ok(envelope)
            }
            Err(TransportError::Deadline(after)) => match self.replace(seen, &kernel).await {
                Ok(restored) => Ok(Envelope::Err(
                    ErrorBody::new(
                        ErrorCode::Timeout,
                        format!(
                            "{} passed its deadline of {} ms; the kernel was killed and a fresh \
                             one restored to the state before the call",
                            kept.tool,
                            after.as_millis()
                        ),
                    )
                    .with_detail("cancelled", true)
                    .with_detail("restored", restored)
                    .with_detail("kernel", "replaced")
                    .with_detail("may_have_run", false)
                    .with_detail("deadline_ms", after.as_millis() as u64),
                )),
                Err(why) => {
                    tracing::error!("restore after a deadline failed: {why}");
                    Err(TransportError::Deadline(after))
                }
            },
            // Cancelled, and killed because it did not stop (cancel.rs): the state before it.
            Err(error) if error.lost_in_flight() && cancelled => {
                match self.replace(seen, &kernel).await {
                    Ok(restored) => Ok(Envelope::Err(
                        ErrorBody::new(
                            ErrorCode::Timeout,
                            format!(
                                "{} was cancelled and did not stop within {} ms; the kernel was \
                                 killed and a fresh one restored to the state before the call",
                                kept.tool,
                                CANCEL_GRACE.as_millis()
                            ),
                        )
                        .with_detail("cancelled", true)
                        .with_detail("restored", restored)
                        .with_detail("kernel", "replaced")
                        .with_detail("partial_effects", "none: restored")
                        .with_detail("may_have_run", false),
                    )),
                    Err(why) => {
                        tracing::error!("restore after a cancel failed: {why}");
                        Err(error)
                    }
                }
            }
            Err(error) if error.lost_in_flight() && self.generation().0 != seen => {
                // Killed because another call passed its deadline or ran agent code: the scene
                // went back to a state this call is not part of.
                Ok(Envelope::Err(
                    ErrorBody::new(
                        ErrorCode::InternalError,
                        format!(
                            "{} did not take effect: the kernel was replaced while it waited",
                            kept.tool
                        ),
                    )
                    .with_detail("kernel", "replaced")
                    .with_detail("may_have_run", false)
                    .with_detail("recovery", json!("retry")),
                ))
            }
            // The kernel died or broke the protocol during this call (agent code can crash
            // Blender, or forge a frame): kill what is left, restore on a fresh kernel, answer.
            Err(error)
                if error.lost_in_flight() || matches!(error, TransportError::Protocol(_)) =>
            {
                match self.replace(seen, &kernel).await {
                    Ok(restored) => Ok(Envelope::Err(
                        ErrorBody::new(
                            ErrorCode::ExecutionFailed,
                            format!(
                                "the kernel did not survive {} ({error}); a fresh one was restored \
                                 to the state before the call",
                                kept.tool
                            ),
                        )
                        .with_detail("kernel", "replaced")
                        .with_detail("restored", restored)
                        .with_detail("may_have_run", false),
                    )),
                    Err(why) => {
                        tracing::error!("restore after a lost kernel failed: {why}");
                        Err(error)
                    }
                }
            }
            Err(other) => Err(other),
        }
    }

    async fn cancel(&self, id: u64) -> Result<(), TransportError> {
        let (generation, kernel) = self.generation();
        self.cancels.cancel(id, generation, Arc::clone(&kernel));
        kernel.ask_to_cancel(id);
        Ok(())
    }

    async fn close(&self) -> Result<(), TransportError> {
        if let Some(spare) = self.spare.lock().await.take() {
            spare.abort();
            if let Ok(Ok(kernel)) = spare.await {
                let _ = kernel.close().await;
            }
        }
        let result = self.current().close().await;
        let _ = std::fs::remove_dir_all(&self.store);
        result
    }

    fn console(&self) -> Vec<String> {
        self.current().console()
    }

    fn code_boundary(&self) -> Option<&dyn CodeBoundary> {
        self.boundary.then_some(self as &dyn CodeBoundary)
    }

    fn storage_folders(&self) -> Vec<PathBuf> {
        let mut folders = self.current().storage_folders();
        folders.push(self.store.clone());
        folders
    }
}

#[async_trait]
impl CodeBoundary for SupervisedKernel {
    async fn inventory(&self) -> Result<serde_json::Value, TransportError> {
        let answer = self.current().inventory(RESTORE_DEADLINE).await?;
        match answer {
            Envelope::Ok(result) => Ok(result),
            Envelope::Err(error) => Err(TransportError::Protocol(format!(
                "the kernel refused an inventory: {}",
                error.message
            ))),
        }
    }

    async fn settle(&self, keep: bool) -> Result<(), TransportError> {
        let mut last = self.last_good.lock().await;
        let Some(pending) = last.pending.take() else {
            return Ok(());
        };
        if keep {
            accept(&mut last, pending);
            return Ok(());
        }
        // A brand-new kernel, not the one that loaded what the code left: nothing of that file
        // (however it was crafted) takes part in restoring the state before the code.
        let old = self.current();
        let seen = self.generation().0;
        let fresh = self
            .fresh(&last)
            .await
            .map_err(TransportError::ConnectionLost)?;
        old.kill();
        self.restore_last_good(&fresh, &mut last)
            .await
            .map_err(TransportError::ConnectionLost)?;
        self.swap(seen, fresh);
        drop(pending);
        Ok(())
    }
}

impl Drop for SupervisedKernel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.store);
    }
}
