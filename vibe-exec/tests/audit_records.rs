//! What the audit chain must hold, and when: a security record is on the sink's durable side
//! before the answer that reports it (even in drop mode behind a full queue), and a kernel the
//! bridge replaced itself is recorded as a recovery, told apart from a restart.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use vibe_audit::{AuditWriter, Overflow};
use vibe_errors::{Envelope, ErrorBody, ErrorCode};
use vibe_transport::{MockBlender, MockTransport, Transport};

fn durable_records(durable: &Mutex<Vec<u8>>) -> Vec<Value> {
    String::from_utf8(durable.lock().unwrap().clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn staged_writer() -> (Arc<AuditWriter>, Arc<Mutex<Vec<u8>>>) {
    // Lines become durable only on `sync`; every line takes a moment (the queue overflows).
    let (sink, durable) = Staged::new(Duration::from_millis(1));
    let writer = genesis_writer(sink, 1, Overflow::Drop);
    (Arc::new(writer), durable)
}

#[tokio::test]
async fn a_security_record_is_durable_before_the_answer_that_reports_it() {
    let (audit, durable) = staged_writer();
    let (_t, builder) = builder(MockBlender::new(), None, &[]);
    let p = builder.audit(audit).start().await.unwrap();
    // Many calls: the queue of one behind a slow sink drops ordinary records.
    futures::future::join_all((0..20).map(|_| p.call("object.info", json!({"name": "Cube"}))))
        .await;
    // The actuator lock refuses a delete of the person's Cube: a security incident.
    let refused = p.call("object.delete", json!({"name": "Cube"})).await;
    assert_eq!(refused.error().unwrap().details["reason"], "actuator_lock");
    let records = durable_records(&durable);
    let security: Vec<&Value> = records.iter().filter(|r| r["kind"] == "security").collect();
    assert_eq!(security.len(), 1, "{records:?}");
    assert_eq!(security[0]["detail"]["tool"], "object.delete");
}

/// Answers every `object.move` as a kernel the supervisor replaced would.
fn replacing(inner: MockTransport) -> Hooked {
    Hooked::wrap(inner).on_call(|t, call| {
        if call.tool == "object.move" {
            return Box::pin(async {
                Ok(Envelope::Err(
                    ErrorBody::new(
                        ErrorCode::Timeout,
                        "object.move passed its deadline; the kernel was replaced",
                    )
                    .with_detail("kernel", "replaced")
                    .with_detail("restored", "the checkpoint and 2 journaled calls"),
                ))
            });
        }
        t.inner.call(call)
    })
}

#[tokio::test]
async fn a_kernel_the_bridge_replaced_is_a_recovery_in_the_chain() {
    let (audit, written) = memory_audit();
    let transport = Arc::new(replacing(MockTransport::new(MockBlender::new())));
    let agreement = agreement_for(transport.hello(), "replaced", None, &[]);
    let p = vibe_exec::Pipeline::builder(agreement, transport)
        .audit(Arc::clone(&audit))
        .start()
        .await
        .unwrap();
    let answer = p
        .call("object.move", json!({"name": "Cube", "delta": [1, 0, 0]}))
        .await;
    assert_eq!(answer.error().unwrap().details["kernel"], "replaced");
    // The session goes on.
    assert!(p.call("object.info", json!({"name": "Cube"})).await.is_ok());
    audit.flush().unwrap();
    let records = written();
    let recovered: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "recovered")
        .collect();
    assert_eq!(recovered.len(), 1, "{records:?}");
    assert_eq!(recovered[0]["detail"]["event"], "kernel_replaced");
    assert_eq!(
        recovered[0]["detail"]["restored"],
        "the checkpoint and 2 journaled calls"
    );
    assert!(!records.iter().any(|r| r["kind"] == "security"));
}

/// One call, one id: an idempotent call repeated after a dropped connection (a new transport
/// id underneath) is still recorded, answered and cancellable by the id it was called with.
#[tokio::test]
async fn the_audit_pairs_call_and_answer_after_a_repeat() {
    let (audit, written) = memory_audit();
    let constraints = vibe_contract::Constraints {
        time_per_tool_ms: 2_000,
        ..Default::default()
    };
    let mock = MockBlender::new()
        .with_faults(vibe_transport::FaultPlan::none().at(1, vibe_transport::Fault::Drop));
    let (transport, builder) = builder(mock, Some(constraints), &[]);
    let p = builder.audit(Arc::clone(&audit)).start().await.unwrap();
    let id = p.next_call_id();
    let set = p
        .call_with_id(
            id,
            "object.set_transform",
            json!({"name": "Cube", "location": [1, 1, 1]}),
        )
        .await;
    assert!(set.is_ok(), "{set:?}");
    assert_eq!(transport.count(), 2, "sent twice: dropped, then repeated");
    audit.flush().unwrap();
    let records = written();
    let of = |kind: &str| -> Vec<u64> {
        records
            .iter()
            .filter(|r| r["kind"] == kind && r["tool"] == "object.set_transform")
            .map(|r| r["call_id"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(of("call"), [id]);
    assert_eq!(of("answer"), [id], "{records:?}");
}
