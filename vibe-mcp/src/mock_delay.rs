//! `--mock-delay TOOL=MS`: the MockBlender with some tools made slow, so that progress
//! notifications and cancellation can be tried (and tested) without a Blender.
//!
//! The wait comes before the call reaches the mock: a call cancelled while it waits never runs
//! (`TransportError::CancelledUnsent`, which the pipeline answers as `timeout` with
//! `details.cancelled`), just as a real kernel never runs a call cancelled before it was sent.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use vibe::errors::Envelope;
use vibe::transport::{
    Call, Hello, MockBlender, MockTransport, SessionConfig, Transport, TransportError,
};

/// A [`MockTransport`] whose named tools take longer.
pub struct DelayedMock {
    inner: MockTransport,
    delays: BTreeMap<String, Duration>,
}

impl DelayedMock {
    /// The mock the server's `--mock` uses (with its file tools), with `delays` per tool.
    pub fn new(delays: impl IntoIterator<Item = (String, Duration)>) -> DelayedMock {
        DelayedMock {
            inner: MockTransport::new(MockBlender::new().with_files()),
            delays: delays.into_iter().collect(),
        }
    }
}

#[async_trait]
impl Transport for DelayedMock {
    fn hello(&self) -> &Hello {
        self.inner.hello()
    }

    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        self.inner.configure(session).await
    }

    async fn call(&self, call: Call) -> Result<Envelope, TransportError> {
        if let Some(delay) = self.delays.get(&call.tool).copied() {
            tokio::select! {
                () = call.cancel.cancelled() => return Err(TransportError::CancelledUnsent),
                () = tokio::time::sleep(delay.min(call.deadline)) => {}
            }
            if delay >= call.deadline {
                return Err(TransportError::Deadline(call.deadline));
            }
        }
        self.inner.call(call).await
    }

    async fn close(&self) -> Result<(), TransportError> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use vibe::transport::CancellationToken;

    #[tokio::test(start_paused = true)]
    async fn a_delayed_call_waits_then_runs_and_a_cancel_stops_it_unsent() {
        let mock = DelayedMock::new([("object.info".to_owned(), Duration::from_secs(2))]);
        let info = || {
            Call::new(
                "object.info",
                json!({"name": "Cube"}),
                Duration::from_secs(15),
            )
        };
        let started = tokio::time::Instant::now();
        assert!(mock.call(info()).await.unwrap().is_ok());
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // Another tool is not delayed.
        let started = tokio::time::Instant::now();
        let list = Call::new("object.list", json!({}), Duration::from_secs(15));
        assert!(mock.call(list).await.unwrap().is_ok());
        assert_eq!(started.elapsed(), Duration::ZERO);
        // Cancelled while it waits: never sent.
        let token = CancellationToken::new();
        let cancel = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            cancel.cancel();
        });
        let answer = mock.call(info().cancelled_by(token)).await;
        assert!(matches!(answer, Err(TransportError::CancelledUnsent)));
        // A delay past the deadline is a deadline.
        let short = Call::new(
            "object.info",
            json!({"name": "Cube"}),
            Duration::from_secs(1),
        );
        assert!(matches!(
            mock.call(short).await,
            Err(TransportError::Deadline(_))
        ));
    }
}
