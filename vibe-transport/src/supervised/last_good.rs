//! The last good state: a checkpoint (the scene saved as a `.blend`, taken into the bridge's
//! store and checked by hash before use), the journal of deterministic calls since, and the
//! transaction open with them; taken, recorded, and restored on a fresh kernel.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use vibe_contract::TransactionRole;
use vibe_errors::{Determinism, Envelope};

use super::store::{Stored, hash_file, take_in};
use super::{JOURNAL_LIMIT, RESTORE_DEADLINE, SupervisedKernel};
use crate::frame::{SessionConfig, TransactionCarry};
use crate::stdio::StdioTransport;
use crate::transport::{Call, Transport};

/// The scene agent code left, with the transaction open when it ran, and the session held
/// exclusive until the bridge decides: no other call runs between the code and the decision.
pub(super) struct Checkpoint {
    pub(super) stored: Arc<Stored>,
    pub(super) transaction: Option<(String, Arc<Stored>)>,
    pub(super) _exclusive: tokio::sync::OwnedRwLockWriteGuard<()>,
}

#[derive(Default)]
pub(super) struct LastGood {
    pub(super) session: Option<SessionConfig>,
    pub(super) checkpoint: Option<Arc<Stored>>,
    pub(super) checkpoint_tx: Option<(String, Arc<Stored>)>,
    pub(super) journal: Vec<Call>,
    pub(super) taken: u64,
    /// The open transaction: its id and the scene at its `begin`.
    pub(super) transaction: Option<(String, Arc<Stored>)>,
    /// The scene agent code left, awaiting the bridge's decision (boundary mode).
    pub(super) pending: Option<Checkpoint>,
}

impl SupervisedKernel {
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
    pub(super) async fn save(
        &self,
        kernel: &StdioTransport,
        last: &mut LastGood,
        deadline: Duration,
    ) -> Result<Arc<Stored>, String> {
        last.taken += 1;
        let written = self.exchange_path(kernel, &format!("save-{}.blend", last.taken));
        let answer = kernel
            .connection()
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
    pub(super) async fn checkpoint(
        &self,
        kernel: &StdioTransport,
        last: &mut LastGood,
    ) -> Result<(), String> {
        let stored = self.save(kernel, last, RESTORE_DEADLINE).await?;
        last.checkpoint = Some(stored);
        last.checkpoint_tx = last.transaction.clone();
        last.journal.clear();
        Ok(())
    }

    /// Hands `stored` (and the transaction open with it) to `kernel`, checked by hash.
    pub(super) async fn load(
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
            .connection()
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
    pub(super) async fn restore_last_good(
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
            // A fresh call: the original's cancel token is not the replay's.
            let again = Call::new(call.tool.clone(), call.params.clone(), call.deadline);
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

    /// Records a successful typed call in the last good state.
    pub(super) async fn remember(
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
pub(super) fn accept(last: &mut LastGood, pending: Checkpoint) {
    last.checkpoint = Some(pending.stored);
    last.checkpoint_tx = pending.transaction;
    last.journal.clear();
}
