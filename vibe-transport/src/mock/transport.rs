//! MockTransport: the Transport trait straight onto a MockBlender, with the wire faults
//! simulated at the boundary (no I/O; tokio timers only for hangs and slow drips).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;
use vibe_errors::Envelope;

use super::{Fault, MockBlender};
use crate::error::TransportError;
use crate::frame::{Frame, Hello, SessionConfig};
use crate::snapshot::{SNAPSHOT_TOOL, seal};
use crate::transport::{Call, Transport};

/// A [`Transport`] backed by an in-memory [`MockBlender`].
pub struct MockTransport {
    mock: Arc<Mutex<MockBlender>>,
    hello: Hello,
    next_id: AtomicU64,
    halted: Mutex<Option<TransportError>>,
    /// Calls hanging in an injected fault, by id, so that `cancel` can end them.
    hanging: Mutex<HashMap<u64, oneshot::Sender<()>>>,
}

impl std::fmt::Debug for MockTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockTransport")
            .field("hello", &self.hello)
            .finish_non_exhaustive()
    }
}

impl MockTransport {
    /// A transport over `mock`.
    pub fn new(mock: MockBlender) -> MockTransport {
        MockTransport::shared(Arc::new(Mutex::new(mock)))
    }

    /// A transport over a mock the caller keeps a handle to.
    pub fn shared(mock: Arc<Mutex<MockBlender>>) -> MockTransport {
        let hello = lock(&mock).hello();
        MockTransport {
            mock,
            hello,
            next_id: AtomicU64::new(1),
            halted: Mutex::new(None),
            hanging: Mutex::new(HashMap::new()),
        }
    }

    /// The mock behind the transport (to inspect its scene, or act as a person outside the
    /// session would).
    pub fn mock(&self) -> Arc<Mutex<MockBlender>> {
        Arc::clone(&self.mock)
    }

    fn halt(&self, error: TransportError) -> TransportError {
        let mut halted = self.halted.lock().unwrap_or_else(|e| e.into_inner());
        halted.get_or_insert(error).clone()
    }
}

fn lock(mock: &Mutex<MockBlender>) -> MutexGuard<'_, MockBlender> {
    mock.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Transport for MockTransport {
    fn hello(&self) -> &Hello {
        &self.hello
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        if let Some(error) = self
            .halted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(error);
        }
        Ok(lock(&self.mock).configure(session))
    }

    async fn call(&self, call: Call) -> Result<Envelope, TransportError> {
        if let Some(error) = self
            .halted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(error);
        }
        let outcome = lock(&self.mock).handle(&call.tool, &call.params);
        let envelope = match (outcome.envelope, outcome.wire_fault) {
            (Some(envelope), None) => envelope,
            (_, Some(Fault::Hang)) | (None, _) => {
                let (cancel, cancelled) = oneshot::channel();
                self.hanging
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(call.id, cancel);
                let waited = tokio::select! {
                    _ = tokio::time::sleep(call.deadline) => call.deadline,
                    _ = cancelled => Duration::ZERO,
                };
                self.hanging
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&call.id);
                return Err(TransportError::Deadline(waited));
            }
            (Some(_), Some(Fault::Drop)) => {
                return Err(TransportError::ConnectionLost(
                    "injected drop after the call ran".into(),
                ));
            }
            (Some(envelope), Some(Fault::Malformed)) => {
                let line = Frame::Result {
                    id: call.id,
                    envelope,
                }
                .to_line();
                let torn = &line[..line.len() / 2];
                let error = match Frame::parse(torn) {
                    Err(e) => {
                        TransportError::Protocol(format!("malformed frame from the kernel: {e}"))
                    }
                    Ok(_) => TransportError::Protocol("malformed frame from the kernel".into()),
                };
                return Err(self.halt(error));
            }
            (Some(envelope), Some(Fault::SlowDrip { bytes, every_ms })) => {
                let len = Frame::Result {
                    id: call.id,
                    envelope: envelope.clone(),
                }
                .to_line()
                .len();
                let chunks = len.div_ceil(bytes.max(1)) as u64;
                let total = Duration::from_millis(chunks.saturating_mul(every_ms));
                if total > call.deadline {
                    tokio::time::sleep(call.deadline).await;
                    return Err(TransportError::Deadline(call.deadline));
                }
                tokio::time::sleep(total).await;
                envelope
            }
            (Some(envelope), Some(_)) => envelope,
        };
        // The mock seals its own snapshots; sealing is idempotent.
        Ok(match envelope {
            Envelope::Ok(mut result)
                if call.tool == SNAPSHOT_TOOL && result.get("fingerprint").is_none() =>
            {
                seal(&mut result);
                Envelope::Ok(result)
            }
            other => other,
        })
    }

    async fn cancel(&self, id: u64) -> Result<(), TransportError> {
        // Mock calls complete at once; only a call hanging in an injected fault can be cancelled.
        if let Some(cancel) = self
            .hanging
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
        {
            let _ = cancel.send(());
        }
        Ok(())
    }

    async fn close(&self) -> Result<(), TransportError> {
        self.halt(TransportError::Closed("closed by the bridge".into()));
        Ok(())
    }
}
