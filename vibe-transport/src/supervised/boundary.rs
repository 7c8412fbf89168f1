//! The [`CodeBoundary`] of a [`SupervisedKernel`]: an inventory of the scene, and the bridge's
//! decision on the scene agent code left (kept, or the last good state restored on a brand-new
//! kernel).

use async_trait::async_trait;
use vibe_errors::Envelope;

use super::last_good::accept;
use super::{RESTORE_DEADLINE, SupervisedKernel};
use crate::error::TransportError;
use crate::transport::CodeBoundary;

#[async_trait]
impl CodeBoundary for SupervisedKernel {
    async fn inventory(&self) -> Result<serde_json::Value, TransportError> {
        let answer = self
            .current()
            .connection()
            .inventory(RESTORE_DEADLINE)
            .await?;
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
            .map_err(|why| TransportError::ConnectionLost(why.into()))?;
        old.kill();
        self.restore_last_good(&fresh, &mut last)
            .await
            .map_err(|why| TransportError::ConnectionLost(why.into()))?;
        self.swap(seen, fresh);
        drop(pending);
        Ok(())
    }
}
