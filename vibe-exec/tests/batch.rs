//! `Pipeline::call_batch` over MockBlender: the answers are those of the same calls made one by
//! one (an independent pipeline on an identical mock gives the expected values), every call has
//! its own call and answer records in the audit chain, runs of reads reach the transport as one
//! batch, mutating calls go alone and in order, and a read refused by a stage does not hold up
//! the rest of its batch.

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::*;
use vibe_errors::Envelope;
use vibe_transport::MockBlender;

fn calls() -> Vec<(String, Value)> {
    [
        ("object.info", json!({"name": "Cube"})),
        ("object.info", json!({"name": "Nope"})),
        ("object.list", json!({"type": 7})), // refused by the schema stage: never sent
        ("scene.telemetry", json!({})),
        (
            "mesh.create_cube",
            json!({"name": "Crate", "location": [1, 2, 3]}),
        ),
        ("object.info", json!({"name": "Crate"})), // sees the cube made just before
        ("object.move", json!({"name": "Crate", "delta": [1, 0, 0]})),
        ("object.info", json!({"name": "Crate"})),
        ("object.list", json!({})),
    ]
    .into_iter()
    .map(|(tool, params)| (tool.to_owned(), params))
    .collect()
}

/// An envelope without `_meta` (timings and ids differ between two runs).
fn comparable(envelope: &Envelope) -> Value {
    let mut value = serde_json::to_value(envelope).unwrap();
    if let Some(result) = value.get_mut("result").and_then(Value::as_object_mut) {
        result.remove("_meta");
    }
    value
}

#[tokio::test]
async fn a_batch_answers_as_the_same_calls_one_by_one_and_sends_reads_together() {
    let (audit, written) = memory_audit();
    let (transport, builder) = builder(MockBlender::new(), None, &[]);
    let batched = builder.audit(Arc::clone(&audit)).start().await.unwrap();
    let answers = batched.call_batch(calls()).await;

    let one_by_one = rig(MockBlender::new()).await;
    let mut expected = Vec::new();
    for (tool, params) in calls() {
        expected.push(one_by_one.pipeline.call(&tool, params).await);
    }
    assert_eq!(answers.len(), expected.len());
    for (i, (got, want)) in answers.iter().zip(&expected).enumerate() {
        assert_eq!(comparable(got), comparable(want), "call {i}");
    }
    // The calls' own outcomes, from the spec: a missing object, a schema refusal, the new cube
    // seen by the read after it and moved by the move after that.
    assert_eq!(answers[1].error().unwrap().code.as_str(), "not_found");
    assert_eq!(
        answers[2].error().unwrap().code.as_str(),
        "invalid_arguments"
    );
    assert_eq!(
        answers[5].result().unwrap()["location"],
        json!([1.0, 2.0, 3.0])
    );
    assert_eq!(
        answers[7].result().unwrap()["location"],
        json!([2.0, 2.0, 3.0])
    );

    // Reads went together (the refused one never reached the kernel); writes went alone.
    let seen = transport.sent.lock().unwrap().clone();
    let sends: Vec<Vec<String>> = seen
        .into_iter()
        .filter(|tools| !tools.iter().any(|t| t.ends_with("kernel.status")))
        .collect();
    let strings = |tools: &[&str]| tools.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    assert_eq!(
        sends,
        vec![
            strings(&[
                "batch:object.info",
                "batch:object.info",
                "batch:scene.telemetry"
            ]),
            strings(&["mesh.create_cube"]),
            strings(&["object.info"]),
            strings(&["object.move"]),
            strings(&["batch:object.info", "batch:object.list"]),
        ]
    );

    // Every call has its own call and answer record, paired by one id.
    audit.flush().unwrap();
    let records = written();
    let of = |kind: &str| -> Vec<(u64, String)> {
        records
            .iter()
            .filter(|r| r["kind"] == kind)
            .map(|r| {
                (
                    r["call_id"].as_u64().unwrap(),
                    r["tool"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let (mut called, mut answered) = (of("call"), of("answer"));
    called.sort();
    answered.sort();
    assert_eq!(called.len(), calls().len(), "{records:?}");
    assert_eq!(called, answered);
}
