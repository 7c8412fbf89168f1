//! Arguments at and past the payload limit: refused before any validation, echoed in a short
//! prefix only, and a large argument never stalls a concurrent small call.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::json;
use support::*;
use vibe_contract::Limits;
use vibe_exec::stages::MAX_ECHO_CHARS;
use vibe_transport::{MockBlender, Transport};

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

async fn slow_pipeline(
    slow_tool: &'static str,
    delay_ms: u64,
) -> (vibe_exec::Pipeline, tempfile::TempDir) {
    use std::sync::Arc;
    let sandbox = tempfile::tempdir().unwrap();
    let delay = std::time::Duration::from_millis(delay_ms);
    // A transport that answers `slow_tool` only after `delay` (a render or save that takes long).
    let transport = Arc::new(
        Hooked::wrap(vibe_transport::MockTransport::new(
            vibe_transport::MockBlender::new().with_files(),
        ))
        .on_call(move |t, call| {
            Box::pin(async move {
                if call.tool == slow_tool {
                    match tokio::time::timeout(call.deadline, tokio::time::sleep(delay)).await {
                        Ok(()) => {}
                        Err(_) => {
                            return Err(vibe_transport::TransportError::Deadline(call.deadline));
                        }
                    }
                }
                t.inner.call(call).await
            })
        }),
    );
    // Reads and edits get 300 ms, file tools 3 s.
    let constraints = vibe_contract::Constraints {
        time_per_tool_ms: 300,
        time_file_ms: 3_000,
        ..Default::default()
    };
    let pipeline = file_pipeline(transport, "deadlines", constraints, sandbox.path()).await;
    (pipeline, sandbox)
}

/// On paused time: the slow transport and the pipeline's deadlines wait on tokio's timers only,
/// so a 1 s save is 1 s against a 300 ms or a 3 s deadline, with no scheduling in between (and
/// the test does not wait those seconds).
#[tokio::test(start_paused = true)]
async fn each_tool_gets_the_deadline_of_its_time_class() {
    // A save that takes 1 s completes under the file class's 3 s...
    let (p, _sandbox) = slow_pipeline("file.save", 1_000).await;
    assert_eq!(
        p.deadline_for("file.save"),
        std::time::Duration::from_millis(3_000)
    );
    assert_eq!(
        p.deadline_for("object.info"),
        std::time::Duration::from_millis(300)
    );
    let saved = p.call("file.save", json!({"path": "scene.blend"})).await;
    assert!(saved.is_ok(), "{saved:?}");
    // ...while a read that takes as long is past the quick class's 300 ms.
    let (p, _sandbox) = slow_pipeline("object.info", 1_000).await;
    let late = p.call("object.info", json!({"name": "Cube"})).await;
    let error = late.error().expect("the read passed its deadline");
    assert_eq!(error.code, vibe_errors::ErrorCode::Timeout, "{error:?}");
    assert_eq!(error.details["deadline_ms"], 300, "{error:?}");
    // And a save slower than the file class's 3 s is past its own deadline.
    let (p, _sandbox) = slow_pipeline("file.save", 4_000).await;
    let late = p.call("file.save", json!({"path": "scene.blend"})).await;
    let error = late.error().expect("the save passed its deadline");
    assert_eq!(error.code, vibe_errors::ErrorCode::Timeout, "{error:?}");
    assert_eq!(error.details["deadline_ms"], 3_000, "{error:?}");
}

/// The calls in flight at once, and the most there ever were.
#[derive(Default)]
struct InFlight {
    now: AtomicU32,
    most: AtomicU32,
}

/// The negotiated `max_concurrent_calls` bounds the calls the pipeline has in flight: 1,000
/// calls at once through a session that agreed on 3 never have more than 3 at the transport,
/// reach 3, and all answer (a slot is waited for within the call's deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_calls_bounds_a_thousand_calls_in_flight() {
    // A transport that counts the calls in flight at once (each takes a moment, so they overlap).
    let transport = std::sync::Arc::new(
        Hooked::with_state(
            vibe_transport::MockTransport::new(MockBlender::new()),
            InFlight::default(),
        )
        .on_call(|t, call| {
            Box::pin(async move {
                let now = t.now.fetch_add(1, Ordering::SeqCst) + 1;
                t.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_micros(200)).await;
                let answer = t.inner.call(call).await;
                t.now.fetch_sub(1, Ordering::SeqCst);
                answer
            })
        }),
    );
    let host = vibe_contract::HostProfile {
        name: "test".into(),
        version: "1".into(),
        capabilities: caps(&["scene.read"]),
        ..Default::default()
    };
    let mut proposal = vibe_contract::HostProposal::new("bounded", host);
    proposal.limits = Some(Limits {
        max_concurrent_calls: 3,
        ..Limits::default()
    });
    let agreement = vibe_contract::negotiate(
        &proposal,
        &vibe_contract::BridgePolicy::default(),
        &transport.hello().blender,
        &vibe_contract::default_registries().unwrap(),
    )
    .unwrap();
    assert_eq!(agreement.contract.limits.max_concurrent_calls, 3);
    let dyn_transport: std::sync::Arc<dyn Transport> = transport.clone();
    let pipeline = vibe_exec::Pipeline::builder(agreement, dyn_transport)
        .start()
        .await
        .unwrap();
    let answers = futures::future::join_all(
        (0..1_000).map(|_| pipeline.call("object.info", json!({"name": "Cube"}))),
    )
    .await;
    let failed: Vec<_> = answers.iter().filter(|a| !a.is_ok()).collect();
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        failed.first()
    );
    assert_eq!(transport.most.load(Ordering::SeqCst), 3);
}

/// `max_memory_mib` is held by the jail's RLIMIT_AS (crossed by the escape corpus's memory
/// payloads); a pipeline refuses to start over a kernel whose jail allows more than agreed.
#[tokio::test]
async fn a_kernel_jailed_above_the_agreed_memory_is_refused_at_start() {
    for (jail_mib, agreed_mib, starts) in [
        (8_192, 4_096, false),
        (2_048, 4_096, true),
        (4_096, 4_096, true),
    ] {
        let inner = vibe_transport::MockTransport::new(MockBlender::new());
        let mut hello = inner.hello().clone();
        hello.blender.confinement.memory_mib = Some(jail_mib);
        // A MockTransport whose hello reports a jail with a memory ceiling.
        let transport = std::sync::Arc::new(Hooked::wrap(inner).with_hello(hello));
        let constraints = vibe_contract::Constraints {
            max_memory_mib: agreed_mib,
            ..Default::default()
        };
        let agreement = agreement_for(transport.hello(), "memory", Some(constraints), &[]);
        let started = vibe_exec::Pipeline::builder(agreement, transport)
            .start()
            .await;
        match started {
            Ok(_) => assert!(
                starts,
                "a {jail_mib} MiB jail under an agreed {agreed_mib} MiB started"
            ),
            Err(e) => {
                assert!(!starts, "{e}");
                assert!(
                    matches!(e, vibe_exec::PipelineError::MemoryCeiling { agreed, kernel } if agreed == agreed_mib && kernel == jail_mib),
                    "{e}"
                );
                assert!(e.to_string().contains("max_memory_mib"), "{e}");
            }
        }
    }
}

/// Only what negotiation produced runs: an agreement whose limits were loosened afterwards, or
/// whose tool set was swapped, is refused at start.
#[tokio::test]
async fn an_agreement_edited_after_negotiation_is_refused_at_start() {
    let transport = std::sync::Arc::new(vibe_transport::MockTransport::new(MockBlender::new()));
    let agreement = agreement_for(transport.hello(), "edited", None, &[]);
    let mut loosened = agreement.clone();
    loosened.contract.constraints.temp_storage_mib *= 100;
    let mut swapped = agreement.clone();
    swapped.tools = vibe_contract::default_registries().unwrap().tools;
    for edited in [loosened, swapped] {
        let dyn_transport: std::sync::Arc<dyn Transport> = transport.clone();
        let started = vibe_exec::Pipeline::builder(edited, dyn_transport)
            .start()
            .await;
        assert!(
            matches!(started, Err(vibe_exec::PipelineError::AgreementAltered(_))),
            "{:?}",
            started.err()
        );
    }
    let dyn_transport: std::sync::Arc<dyn Transport> = transport;
    assert!(
        vibe_exec::Pipeline::builder(agreement, dyn_transport)
            .start()
            .await
            .is_ok()
    );
}
