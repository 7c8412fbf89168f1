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
//! * **When restoring fails** (the fresh kernel does not start, the checkpoint is corrupt, a
//!   replayed call fails), the call answers the transport's `Deadline` error: the pipeline's
//!   circuit breaker opens and only a human reset continues the session.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::json;
use vibe_contract::ToolRegistry;
use vibe_errors::{Determinism, Envelope, ErrorBody, ErrorCode};

use crate::error::TransportError;
use crate::frame::{Hello, SessionConfig};
use crate::stdio::StdioTransport;
use crate::transport::{Call, Transport};

/// Journal entries after which a fresh checkpoint is taken (bounds the replay on a restore).
pub const JOURNAL_LIMIT: usize = 64;
/// How long a checkpoint, a restore or the start of a replacement kernel may take.
pub const RESTORE_DEADLINE: Duration = Duration::from_secs(120);

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

struct Checkpoint {
    path: PathBuf,
    hash: blake3::Hash,
}

#[derive(Default)]
struct LastGood {
    session: Option<SessionConfig>,
    checkpoint: Option<Checkpoint>,
    journal: Vec<Call>,
    taken: u64,
}

/// A [`Transport`] over a child kernel that the bridge kills and replaces when a call passes
/// its deadline, restoring the scene to the state before that call.
pub struct SupervisedKernel {
    factory: KernelFactory,
    registry: Arc<ToolRegistry>,
    current: StdMutex<(u64, Arc<StdioTransport>)>,
    last_good: tokio::sync::Mutex<LastGood>,
    store: PathBuf,
    hello: Hello,
    next_id: AtomicU64,
    replacements: AtomicU64,
}

impl std::fmt::Debug for SupervisedKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisedKernel")
            .field("hello", &self.hello)
            .field("replacements", &self.replacements)
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
        })
    }

    /// How many times a kernel was replaced.
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

    /// Where the kernel writes a checkpoint: its private folder in a jail, else the store.
    fn checkpoint_target(&self, kernel: &StdioTransport, n: u64) -> PathBuf {
        #[cfg(feature = "jail")]
        if let Some(private) = kernel.private_dir() {
            return private.join(format!("checkpoint-{n}.blend"));
        }
        let _ = kernel;
        self.store.join(format!("checkpoint-{n}.blend"))
    }

    /// Takes a checkpoint on `kernel` and moves it out of the kernel's reach.
    async fn checkpoint(&self, kernel: &StdioTransport, last: &mut LastGood) -> Result<(), String> {
        last.taken += 1;
        let written = self.checkpoint_target(kernel, last.taken);
        let answer = kernel
            .checkpoint(&written.to_string_lossy(), RESTORE_DEADLINE)
            .await
            .map_err(|e| e.to_string())?;
        if let Envelope::Err(error) = answer {
            return Err(format!("checkpoint refused: {}", error.message));
        }
        let kept = self.store.join(format!("kept-{}.blend", last.taken));
        move_file(&written, &kept)?;
        let hash = hash_file(&kept)?;
        if let Some(old) = last.checkpoint.replace(Checkpoint { path: kept, hash }) {
            let _ = std::fs::remove_file(old.path);
        }
        last.journal.clear();
        Ok(())
    }

    /// Kills `old` (generation `seen`), starts a fresh kernel and restores the last good state.
    async fn replace(&self, seen: u64, old: &StdioTransport) -> Result<String, String> {
        old.kill();
        let last = self.last_good.lock().await;
        if self.generation().0 != seen {
            return Ok("replaced by a concurrent restore".into());
        }
        let fresh = tokio::time::timeout(RESTORE_DEADLINE, (self.factory)())
            .await
            .map_err(|_| "the replacement kernel did not start in time".to_owned())?
            .map_err(|e| format!("the replacement kernel did not start: {e}"))?;
        let mut restored = "the factory scene (no checkpoint yet)".to_owned();
        if let Some(session) = &last.session {
            fresh
                .configure(session)
                .await
                .map_err(|e| format!("configure: {e}"))?;
        }
        if let Some(checkpoint) = &last.checkpoint {
            if hash_file(&checkpoint.path)? != checkpoint.hash {
                return Err("the checkpoint changed on disk; it is not used".into());
            }
            let target = self.checkpoint_target(&fresh, 0);
            std::fs::copy(&checkpoint.path, &target)
                .map_err(|e| format!("checkpoint copy: {e}"))?;
            let answer = fresh
                .restore(&target.to_string_lossy(), RESTORE_DEADLINE)
                .await
                .map_err(|e| format!("restore: {e}"))?;
            let _ = std::fs::remove_file(&target);
            if let Envelope::Err(error) = answer {
                return Err(format!("restore refused: {}", error.message));
            }
            restored = "the checkpoint".to_owned();
        }
        for call in &last.journal {
            let mut again = call.clone();
            again.id = fresh.next_id();
            match fresh.call(again).await {
                Ok(Envelope::Ok(_)) => {}
                Ok(Envelope::Err(error)) => {
                    return Err(format!("replaying {} failed: {}", call.tool, error.message));
                }
                Err(e) => return Err(format!("replaying {} failed: {e}", call.tool)),
            }
        }
        if !last.journal.is_empty() {
            restored = format!("{restored} and {} journaled calls", last.journal.len());
        }
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        *current = (seen + 1, Arc::new(fresh));
        self.replacements.fetch_add(1, Ordering::Relaxed);
        Ok(restored)
    }

    /// Records a successful call in the last good state.
    async fn remember(&self, kernel: &StdioTransport, call: Call) -> Result<(), String> {
        let Some(spec) = self.registry.get(&call.tool) else {
            return Ok(());
        };
        if !spec.mutates() {
            return Ok(());
        }
        let mut last = self.last_good.lock().await;
        if spec.determinism == Determinism::Nondeterministic || last.journal.len() >= JOURNAL_LIMIT
        {
            self.checkpoint(kernel, &mut last).await
        } else {
            last.journal.push(call);
            Ok(())
        }
    }
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
        let (seen, kernel) = self.generation();
        let kept = call.clone();
        match kernel.call(call).await {
            Ok(envelope) => {
                if envelope.is_ok()
                    && let Err(e) = self.remember(&kernel, kept.clone()).await
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
            Err(error @ TransportError::ConnectionLost(_)) if self.generation().0 != seen => {
                // Killed because another call passed its deadline: the restore took the scene
                // back to before that call, so this one did not take effect.
                let _ = error;
                Ok(Envelope::Err(
                    ErrorBody::new(
                        ErrorCode::InternalError,
                        format!(
                            "{} did not take effect: the kernel was replaced after another call \
                             passed its deadline",
                            kept.tool
                        ),
                    )
                    .with_detail("kernel", "replaced")
                    .with_detail("may_have_run", false)
                    .with_detail("recovery", json!("retry")),
                ))
            }
            Err(other) => Err(other),
        }
    }

    async fn cancel(&self, id: u64) -> Result<(), TransportError> {
        self.current().cancel(id).await
    }

    async fn close(&self) -> Result<(), TransportError> {
        let result = self.current().close().await;
        let _ = std::fs::remove_dir_all(&self.store);
        result
    }

    fn console(&self) -> Vec<String> {
        self.current().console()
    }
}

impl Drop for SupervisedKernel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

fn move_file(from: &Path, to: &Path) -> Result<(), String> {
    if std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to).map_err(|e| format!("checkpoint move: {e}"))?;
    std::fs::remove_file(from).map_err(|e| format!("checkpoint move: {e}"))
}

fn hash_file(path: &Path) -> Result<blake3::Hash, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("checkpoint read: {e}"))?;
    Ok(blake3::hash(&bytes))
}
