//! A call's deadline is its whole budget: the time it waits for a call slot counts against it,
//! so a call answers within its deadline whatever it waited for.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use support::*;
use vibe_contract::{BridgePolicy, Constraints, HostProfile, HostProposal, Limits};
use vibe_errors::ErrorCode;
use vibe_exec::Pipeline;
use vibe_transport::{MockBlender, MockTransport, Transport};

#[tokio::test(start_paused = true)]
async fn the_wait_for_a_slot_counts_against_the_deadline() {
    // The first call holds the one slot for 600 ms; the second is never answered.
    let transport = Arc::new(
        Hooked::with_state(MockTransport::new(MockBlender::new()), AtomicU32::new(0)).on_call(
            |t, call| {
                Box::pin(async move {
                    if t.state.fetch_add(1, Ordering::SeqCst) == 0 {
                        tokio::time::sleep(Duration::from_millis(600)).await;
                        return t.inner.call(call).await;
                    }
                    // A kernel that never answers: the transport waits out the deadline it is
                    // given, as every transport does.
                    tokio::time::sleep(call.deadline).await;
                    Err(vibe_transport::TransportError::Deadline(call.deadline))
                })
            },
        ),
    );
    let host = HostProfile {
        name: "test".into(),
        version: "1".into(),
        capabilities: caps(&["scene.read"]),
        ..HostProfile::default()
    };
    let mut proposal = HostProposal::new("budget", host);
    proposal.limits = Some(Limits {
        max_concurrent_calls: 1,
        ..Limits::default()
    });
    proposal.constraints = Some(Constraints {
        time_per_tool_ms: 1_000,
        ..Constraints::default()
    });
    let agreement = vibe_contract::negotiate(
        &proposal,
        &BridgePolicy::default(),
        &transport.hello().blender,
        &vibe_contract::default_registries().unwrap(),
    )
    .unwrap();
    let dyn_transport: Arc<dyn Transport> = transport.clone();
    let pipeline = Pipeline::builder(agreement, dyn_transport)
        .start()
        .await
        .unwrap();

    let started = tokio::time::Instant::now();
    let first = pipeline.call("object.info", json!({"name": "Cube"}));
    let second = async {
        tokio::task::yield_now().await;
        pipeline.call("object.info", json!({"name": "Cube"})).await
    };
    let (first, second) = tokio::join!(first, second);
    assert!(first.is_ok(), "{}", first.to_json_string());
    let error = second.error().unwrap();
    assert_eq!(
        error.code,
        ErrorCode::Timeout,
        "{}",
        second.to_json_string()
    );
    // 600 ms for the slot, then the 400 ms left: not a full second more.
    assert_eq!(started.elapsed(), Duration::from_millis(1_000));
}
