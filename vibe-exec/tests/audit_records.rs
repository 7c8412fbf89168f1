//! What the audit chain must hold, and when: a security record is on the sink's durable side
//! before the answer that reports it (even in drop mode behind a full queue), and a kernel the
//! bridge replaced itself is recorded as a recovery, told apart from a restart.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use support::*;
use vibe_audit::{AuditLog, AuditSink, AuditWriter, ChainHead, Overflow, Redactor};
use vibe_errors::{Envelope, ErrorBody, ErrorCode};
use vibe_transport::{
    Call, Hello, MockBlender, MockTransport, SessionConfig, Transport, TransportError,
};

/// Lines become durable only on `sync`; every line takes a moment (the queue overflows).
struct Staged {
    pending: Vec<u8>,
    durable: Arc<Mutex<Vec<u8>>>,
}

impl AuditSink for Staged {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        std::thread::sleep(Duration::from_millis(1));
        self.pending.extend_from_slice(line);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.durable.lock().unwrap().append(&mut self.pending);
        Ok(())
    }
}

fn durable_records(durable: &Mutex<Vec<u8>>) -> Vec<Value> {
    String::from_utf8(durable.lock().unwrap().clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn staged_writer() -> (Arc<AuditWriter>, Arc<Mutex<Vec<u8>>>) {
    let durable = Arc::new(Mutex::new(Vec::new()));
    let sink = Staged {
        pending: Vec::new(),
        durable: Arc::clone(&durable),
    };
    let writer = AuditWriter::spawn(
        AuditLog::new(Box::new(sink), ChainHead::genesis(), Redactor::default()),
        1,
        Overflow::Drop,
    );
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
struct Replacing(MockTransport);

#[async_trait]
impl Transport for Replacing {
    fn hello(&self) -> &Hello {
        self.0.hello()
    }
    fn next_id(&self) -> u64 {
        self.0.next_id()
    }
    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        self.0.configure(session).await
    }
    async fn call(&self, call: Call) -> Result<Envelope, TransportError> {
        if call.tool == "object.move" {
            return Ok(Envelope::Err(
                ErrorBody::new(
                    ErrorCode::Timeout,
                    "object.move passed its deadline; the kernel was replaced",
                )
                .with_detail("kernel", "replaced")
                .with_detail("restored", "the checkpoint and 2 journaled calls"),
            ));
        }
        self.0.call(call).await
    }
    async fn cancel(&self, id: u64) -> Result<(), TransportError> {
        self.0.cancel(id).await
    }
    async fn close(&self) -> Result<(), TransportError> {
        self.0.close().await
    }
}

#[tokio::test]
async fn a_kernel_the_bridge_replaced_is_a_recovery_in_the_chain() {
    let (audit, written) = memory_audit();
    let transport = Arc::new(Replacing(MockTransport::new(MockBlender::new())));
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
