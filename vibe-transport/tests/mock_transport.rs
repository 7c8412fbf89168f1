//! MockTransport: the same documented errors for each injected fault, with no I/O.

use std::time::Duration;

use serde_json::json;
use vibe_errors::Reason;
use vibe_transport::{Fault, FaultPlan, MockBlender, MockTransport, TransportError};

#[path = "support/calls.rs"]
mod calls;
use calls::call;

/// On paused time: MockTransport waits on tokio's timers only, so a deadline is met exactly.
#[tokio::test(start_paused = true)]
async fn every_fault_gives_its_documented_error_within_the_deadline() {
    let plan = FaultPlan::none()
        .at(1, Fault::Raise)
        .at(2, Fault::Hang)
        .at(3, Fault::Drop)
        .at(
            4,
            Fault::SlowDrip {
                bytes: 1,
                every_ms: 10,
            },
        )
        .at(
            5,
            Fault::Rename {
                from: "Cube".into(),
                to: "Renamed".into(),
            },
        )
        .at(7, Fault::Malformed);
    let t = MockTransport::new(MockBlender::new().with_faults(plan));

    let raised = call(&t, "mesh.create_cube", json!({"name": "Box"}), 500)
        .await
        .unwrap();
    assert_eq!(
        raised.error().unwrap().reason(),
        Some(Reason::MutationFailed)
    );

    let started = tokio::time::Instant::now();
    assert!(matches!(
        call(&t, "kernel.status", json!({}), 200).await,
        Err(TransportError::Deadline(_))
    ));
    assert_eq!(started.elapsed(), Duration::from_millis(200));

    assert!(matches!(
        call(&t, "kernel.status", json!({}), 200).await,
        Err(TransportError::ConnectionLost(_))
    ));

    let started = tokio::time::Instant::now();
    assert!(matches!(
        call(&t, "object.info", json!({"name": "Cube"}), 200).await,
        Err(TransportError::Deadline(_))
    ));
    assert_eq!(started.elapsed(), Duration::from_millis(200));

    // Call 5: the outside rename happened just before it; "Cube" was never seen, so not drift.
    let renamed = call(&t, "object.info", json!({"name": "Renamed"}), 200)
        .await
        .unwrap();
    assert!(renamed.is_ok());
    let _ = call(&t, "kernel.status", json!({}), 200).await.unwrap();

    let malformed = call(&t, "kernel.status", json!({}), 200).await.unwrap_err();
    assert!(malformed.halts_session());
    assert!(matches!(
        call(&t, "kernel.status", json!({}), 200).await,
        Err(TransportError::Protocol(_))
    ));
}

#[tokio::test]
async fn seeded_faults_are_reproducible_end_to_end() {
    async fn run(seed: u64) -> Vec<String> {
        let plan = FaultPlan::seeded(seed, 60, 0.3, &[Fault::Raise, Fault::Drop]);
        let t = MockTransport::new(MockBlender::new().with_faults(plan));
        let mut log = Vec::new();
        for i in 0..60 {
            let answer = call(
                &t,
                "object.create",
                json!({"name": format!("E{i}"), "type": "EMPTY"}),
                200,
            )
            .await;
            log.push(match answer {
                Ok(envelope) => envelope.to_json_string(),
                Err(e) => e.to_string(),
            });
        }
        log
    }
    assert_eq!(run(42).await, run(42).await);
    assert_ne!(run(42).await, run(43).await);
}
