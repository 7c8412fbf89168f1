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
//! * **Cancel.** A call's cancel token asks the kernel to stop the call (it interrupts agent
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
use vibe_contract::ToolRegistry;
use vibe_errors::{Determinism, Envelope, ErrorBody, ErrorCode};

use crate::error::{ExitReport, TransportError};
use crate::frame::{Hello, SessionConfig};
use crate::stdio::StdioTransport;
use crate::transport::{CANCEL_GRACE, Call, CodeBoundary, Transport};

mod boundary;
mod last_good;
mod replace;
mod store;

use last_good::LastGood;

pub use store::MAX_SCENE_BYTES;

/// Journal entries after which a fresh checkpoint is taken (bounds the replay on a restore).
pub const JOURNAL_LIMIT: usize = 64;
/// How long a checkpoint, a restore or the start of a replacement kernel may take.
pub const RESTORE_DEADLINE: Duration = Duration::from_secs(120);
/// The least time the kernel that ran agent code gets to save the scene it left.
pub const RETIRE_SAVE_MIN: Duration = Duration::from_secs(2);

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
            let options = make().map_err(|e| TransportError::Connect(e.into()))?;
            StdioTransport::spawn(options).await
        })
    })
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
    replacements: AtomicU64,
    boundary: bool,
    /// A kernel started ahead of need, so a replacement does not wait for Blender to start.
    spare:
        tokio::sync::Mutex<Option<tokio::task::JoinHandle<Result<StdioTransport, TransportError>>>>,
    /// Typed calls share it; agent code holds it alone from its call to the bridge's decision.
    exclusive: Arc<tokio::sync::RwLock<()>>,
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
            .map_err(|e| TransportError::Connect(format!("checkpoint folder: {e}").into()))?;
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
            replacements: AtomicU64::new(0),
            boundary: true,
            spare: tokio::sync::Mutex::new(None),
            exclusive: Arc::new(tokio::sync::RwLock::new(())),
        })
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
}

#[async_trait]
impl Transport for SupervisedKernel {
    fn hello(&self) -> &Hello {
        &self.hello
    }

    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        let kernel = self.current();
        let answer = kernel.configure(session).await?;
        let mut last = self.last_good.lock().await;
        last.session = Some(session.clone());
        self.checkpoint(&kernel, &mut last).await.map_err(|e| {
            TransportError::Connect(format!("the first checkpoint failed: {e}").into())
        })?;
        Ok(answer)
    }

    async fn call(&self, mut call: Call) -> Result<Envelope, TransportError> {
        let arrived = tokio::time::Instant::now();
        let kept = call.clone();
        let runs_code = self.boundary
            && self.registry.get(&call.tool).is_some_and(|spec| {
                spec.mutates() && spec.determinism == Determinism::Nondeterministic
            });
        // Agent code runs alone and keeps the session until the bridge's decision (settle);
        // typed calls share it. Waiting counts against the call's deadline.
        let exclusive = Arc::clone(&self.exclusive);
        let queued = async {
            if runs_code {
                (None, Some(exclusive.write_owned().await))
            } else {
                (Some(exclusive.read_owned().await), None)
            }
        };
        let (shared, alone) = tokio::select! {
            biased;
            // Cancelled while it waited its turn: it never reached a kernel.
            () = call.cancel.cancelled() => return Err(TransportError::CancelledUnsent),
            turn = tokio::time::timeout(call.deadline, queued) => match turn {
                Ok(turn) => turn,
                Err(_) => return Err(TransportError::QueueTimeout(call.deadline)),
            },
        };
        let _shared = shared;
        // The wait for its turn counted against the deadline: the kernel gets what is left.
        call.deadline = crate::transport::deadline_left(call.deadline, arrived);
        let started = tokio::time::Instant::now();
        let deadline = call.deadline;
        // A kernel that died between calls (killed, out of memory) is replaced, with the last
        // good state restored, before this call; a call it refused as never sent runs once on
        // the fresh kernel.
        let mut attempts = 0;
        let (seen, kernel, answer) = loop {
            let (seen, kernel) = self.generation();
            let answer = match kernel.exit_report() {
                Some(report) => Err(TransportError::KernelExited(ExitReport {
                    sent: false,
                    ..report
                })),
                // Cancelled while the dead kernel was replaced: not sent again.
                None if attempts > 0 && call.cancel.is_cancelled() => {
                    Err(TransportError::CancelledUnsent)
                }
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
                        TransportError::Connect(format!("{report}; restoring failed: {why}").into())
                    })?;
                }
                answer => break (seen, kernel, answer),
            }
        };
        let cancelled = call.cancel.is_cancelled();
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
                            .map_err(|_| TransportError::ConnectionLost(why.clone().into()))?;
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
            // Cancelled, and it did not stop within the grace (or its kernel died meanwhile):
            // the kernel is killed and the state before the call restored.
            Err(error)
                if cancelled
                    && (error.lost_in_flight() || matches!(error, TransportError::Cancelled)) =>
            {
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

impl Drop for SupervisedKernel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.store);
    }
}
