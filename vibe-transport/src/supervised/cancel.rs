//! Cancelling a call Blender cannot stop: the kernel is asked first (it interrupts agent code
//! and drops queued calls); a call still running [`CANCEL_GRACE`] later (a render, an import, a
//! save: C code no tracer reaches) has its kernel killed, and the call's own path restores a
//! fresh kernel to the state before it and answers `timeout` with `cancelled: true` and what
//! was restored.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::stdio::StdioTransport;

/// How long a cancelled call may take to stop by itself before its kernel is killed.
pub const CANCEL_GRACE: Duration = Duration::from_millis(1_000);

/// The calls in flight on a kernel (id -> the kernel's generation) and those cancelled.
#[derive(Default)]
pub(super) struct Cancels {
    in_flight: Arc<Mutex<HashMap<u64, u64>>>,
    cancelled: Mutex<HashSet<u64>>,
}

/// Removes its call from the in-flight table when the call ends, however it ends.
pub(super) struct Running {
    in_flight: Arc<Mutex<HashMap<u64, u64>>>,
    id: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl Cancels {
    /// Call `id` runs on the kernel of generation `generation`.
    pub(super) fn running(&self, id: u64, generation: u64) -> Running {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, generation);
        Running {
            in_flight: Arc::clone(&self.in_flight),
            id,
        }
    }

    /// Whether call `id` was cancelled (and forgets it).
    pub(super) fn take(&self, id: u64) -> bool {
        self.cancelled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
    }

    /// Marks `id` cancelled; if it is still running on `kernel` (generation `generation`) after
    /// the grace, kills that kernel.
    pub(super) fn cancel(&self, id: u64, generation: u64, kernel: Arc<StdioTransport>) {
        self.cancelled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id);
        let in_flight = Arc::clone(&self.in_flight);
        tokio::spawn(async move {
            tokio::time::sleep(CANCEL_GRACE).await;
            let still =
                in_flight.lock().unwrap_or_else(|e| e.into_inner()).get(&id) == Some(&generation);
            if still {
                tracing::warn!(
                    "call {id} did not stop within {CANCEL_GRACE:?} of its cancel: killing its kernel"
                );
                kernel.kill();
            }
        });
    }
}
