//! Replacing a kernel: a fresh one (the warm spare when there is one), swapped in for a kernel
//! that passed its deadline, died, or ran agent code (retired).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::last_good::{Checkpoint, LastGood};
use super::{RESTORE_DEADLINE, SupervisedKernel};
use crate::stdio::StdioTransport;
use crate::transport::Transport;

impl SupervisedKernel {
    /// Starts a spare kernel in the background (boundary mode replaces a kernel after every
    /// agent code call; the spare spares the caller Blender's start, ~0.5-1 s).
    pub(super) async fn prepare_spare(&self) {
        let mut spare = self.spare.lock().await;
        if spare.is_none() {
            *spare = Some(tokio::spawn((self.factory)()));
        }
    }

    /// A fresh, configured kernel: the warm spare when there is one (and a new spare is started
    /// in its place), else a new start.
    pub(super) async fn fresh(&self, last: &LastGood) -> Result<StdioTransport, String> {
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

    pub(super) fn swap(&self, seen: u64, fresh: StdioTransport) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        *current = (seen + 1, Arc::new(fresh));
        self.replacements.fetch_add(1, Ordering::Relaxed);
    }

    /// Kills `old` (generation `seen`), starts a fresh kernel and restores the last good state.
    pub(super) async fn replace(&self, seen: u64, old: &StdioTransport) -> Result<String, String> {
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
    pub(super) async fn retire(
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
}
