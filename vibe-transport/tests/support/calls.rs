//! One call through any transport, its deadline in milliseconds: what the backend tests share
//! (they include this file alone, by path).

use std::time::Duration;

use serde_json::Value;
use vibe_errors::Envelope;
use vibe_transport::{Call, Transport, TransportError};

/// `tool` with `params` through `t`, answered within `deadline_ms`.
pub async fn call(
    t: &(impl Transport + ?Sized),
    tool: &str,
    params: Value,
    deadline_ms: u64,
) -> Result<Envelope, TransportError> {
    t.call(Call::new(tool, params, Duration::from_millis(deadline_ms)))
        .await
}
