//! Arguments at and past the payload limit: refused before any validation, echoed in a short
//! prefix only, and a large argument never stalls a concurrent small call.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::json;
use support::*;
use vibe_contract::Limits;
use vibe_exec::stages::MAX_ECHO_CHARS;
use vibe_transport::MockBlender;

#[tokio::test]
async fn a_payload_past_the_limit_is_refused_before_validation() {
    let (_t, builder) = builder(MockBlender::new(), None, &[]);
    let pipeline = builder.start().await.unwrap();
    let pipeline_agreement_limit = pipeline
        .session()
        .agreement
        .contract
        .limits
        .max_payload_bytes;
    assert_eq!(
        pipeline_agreement_limit,
        Limits::default().max_payload_bytes
    );
    // An unknown property: the schema would refuse it too, but the size decides first.
    let big = "x".repeat(pipeline_agreement_limit as usize + 1);
    let answer = pipeline
        .call("object.info", json!({"name": "Cube", "padding": big}))
        .await;
    let error = answer.error().expect("refused");
    assert_eq!(error.code.as_str(), "contract_violation");
    assert_eq!(error.details["rule"], "max_payload_bytes");
    assert_eq!(error.details["limit"], pipeline_agreement_limit);
}

#[tokio::test]
async fn schema_errors_echo_a_short_prefix_of_the_value() {
    let (_t, builder) = builder(MockBlender::new(), None, &[]);
    let pipeline = builder.start().await.unwrap();
    let key = "k".repeat(4 * 1024 * 1024);
    let value = "v".repeat(4 * 1024 * 1024);
    for params in [
        json!({"name": "Cube", key.clone(): 1}),
        json!({"name": value}),
    ] {
        let answer = pipeline.call("object.info", params).await;
        let text = serde_json::to_string(&answer).unwrap();
        let error = answer.error().expect("refused by the schema");
        assert_eq!(error.details["reason"], "schema");
        // The whole answer stays small: the message and each listed error are clipped.
        assert!(text.len() < 8 * MAX_ECHO_CHARS, "{} bytes", text.len());
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_large_argument_does_not_stall_a_small_call() {
    let (_t, builder) = builder(MockBlender::new(), None, &[]);
    let pipeline = builder.start().await.unwrap();
    let order = AtomicU32::new(0);
    let big_name = "n".repeat(10 * 1024 * 1024);
    let big = async {
        let answer = pipeline
            .call("object.info", json!({ "name": big_name }))
            .await;
        (order.fetch_add(1, Ordering::SeqCst), answer)
    };
    let small = async {
        let answer = pipeline.call("object.info", json!({"name": "Cube"})).await;
        (order.fetch_add(1, Ordering::SeqCst), answer)
    };
    // On one thread: had the 10 MB argument been validated on the runtime's thread, the small
    // call, started after it, could only finish after it.
    let ((big_done, big_answer), (small_done, small_answer)) = tokio::join!(big, small);
    assert!(small_answer.is_ok(), "{small_answer:?}");
    assert!(!big_answer.is_ok());
    assert!(
        small_done < big_done,
        "the small call waited for the large one"
    );
}
