//! MockTransport: the Transport trait straight onto a MockBlender, with the wire faults
//! simulated at the boundary (no I/O; tokio timers only for hangs and slow drips).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use vibe_errors::Envelope;

use super::{Fault, MockBlender};
use crate::error::TransportError;
use crate::frame::{Frame, Hello, SessionConfig};
use crate::transport::{Call, Transport};

/// A [`Transport`] backed by an in-memory [`MockBlender`].
pub struct MockTransport {
    mock: Arc<Mutex<MockBlender>>,
    hello: Hello,
    halted: Mutex<Option<TransportError>>,
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
            halted: Mutex::new(None),
        }
    }

    /// The mock behind the transport (to inspect its scene, or act as a person outside the
    /// session would).
    pub fn mock(&self) -> Arc<Mutex<MockBlender>> {
        Arc::clone(&self.mock)
    }

    /// The error that halted the transport, if one did.
    fn still_open(&self) -> Result<(), TransportError> {
        match self
            .halted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            Some(error) => Err(error),
            None => Ok(()),
        }
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

    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        self.still_open()?;
        Ok(lock(&self.mock).configure(session))
    }

    async fn call(&self, call: Call) -> Result<Envelope, TransportError> {
        self.still_open()?;
        if call.cancel.is_cancelled() {
            return Err(TransportError::CancelledUnsent);
        }
        let outcome = lock(&self.mock).handle(&call.tool, &call.params);
        let envelope = match (outcome.envelope, outcome.wire_fault) {
            (Some(envelope), None) => envelope,
            // A hung kernel never answers, not even a cancel: the wait ends at the deadline,
            // or after the cancel's grace.
            (_, Some(Fault::Hang)) | (None, _) => {
                return Err(tokio::select! {
                    () = tokio::time::sleep(call.deadline) => TransportError::Deadline(call.deadline),
                    () = async {
                        call.cancel.cancelled().await;
                        tokio::time::sleep(crate::transport::CANCEL_GRACE).await;
                    } => TransportError::Cancelled,
                });
            }
            (Some(_), Some(Fault::Drop)) => {
                return Err(TransportError::ConnectionLost(
                    "injected drop after the call ran".into(),
                ));
            }
            (Some(envelope), Some(Fault::Malformed)) => {
                let line = Frame::Result { id: 1, envelope }.to_line();
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
                    id: 1,
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
        Ok(envelope)
    }

    async fn close(&self) -> Result<(), TransportError> {
        self.halt(TransportError::Closed("closed by the bridge".into()));
        Ok(())
    }
}
