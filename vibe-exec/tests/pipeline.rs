//! The pipeline's phases and guards, end to end over MockBlender.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::*;
use vibe_audit::{ChainHead, MemorySink, Overflow, verify_reader};
use vibe_errors::{ErrorCode, Reason};
use vibe_exec::{Phase, Sandbox};
use vibe_transport::{Fault, FaultPlan, MockBlender};

fn reason(envelope: &vibe_errors::Envelope) -> Option<String> {
    envelope
        .error()
        .and_then(|e| e.details.get("reason"))
        .and_then(|r| r.as_str())
        .map(str::to_owned)
}

#[tokio::test]
async fn the_hallucinated_purge_fails_safely() {
    let sink = MemorySink::new();
    let audit = Arc::new(genesis_writer(sink.clone(), 64, Overflow::Backpressure));
    let (transport, builder) = builder(with_armature(MockBlender::new()), None, &[]);
    let p = builder.audit(Arc::clone(&audit)).start().await.unwrap();
    let rig_before = transport.scene();

    // 3. Capability discovery: a well-behaved agent looks first.
    let identity = p
        .call("object.audit_identity", json!({"name": "Armature"}))
        .await;
    let identity = identity.result().unwrap();
    assert_eq!(
        (
            identity["type"].as_str(),
            identity["risk"].as_str(),
            identity["created_by_agent"].as_bool()
        ),
        (Some("ARMATURE"), Some("high"), Some(false))
    );

    // 2. Transactional bounding: an allowed deletion inside a transaction...
    assert!(
        p.call("transaction.begin", json!({"label": "clean-up"}))
            .await
            .is_ok()
    );
    assert!(
        p.call("mesh.create_cube", json!({"name": "Junk"}))
            .await
            .is_ok()
    );
    assert!(
        p.call("object.delete", json!({"name": "Junk"}))
            .await
            .is_ok()
    );
    // 1. ...and then the hallucinated purge: the actuator lock blocks it at the gate.
    let before_purge = transport.count();
    let purge = p.call("object.delete", json!({"name": "Armature"})).await;
    let error = purge.error().unwrap();
    assert_eq!(error.code, ErrorCode::ContractViolation);
    assert_eq!(error.reason(), Some(Reason::ActuatorLock));
    assert_eq!(
        transport.count(),
        before_purge,
        "the refusal never reached Blender"
    );
    assert!(p.call("transaction.rollback", json!({})).await.is_ok());
    assert_eq!(
        transport.scene(),
        rig_before,
        "the scene is exactly as before the transaction"
    );

    // 4. The kill switch: every mutation refused, reads still served.
    p.set_read_only("a human saw the purge attempt");
    let refused = p
        .call("object.move", json!({"name": "Cube", "delta": [1, 0, 0]}))
        .await;
    assert_eq!(reason(&refused).as_deref(), Some("read_only"));
    assert!(
        p.call("object.info", json!({"name": "Armature"}))
            .await
            .is_ok()
    );
    assert_eq!(transport.scene(), rig_before);

    audit.flush().unwrap();
    let log = String::from_utf8(sink.bytes()).unwrap();
    assert!(log.contains("\"kind\":\"security\"") && log.contains("actuator_lock"));
    assert!(log.contains("\"kind\":\"terminal\"") && log.contains("read_only"));
    assert!(
        verify_reader(&sink.bytes()[..], ChainHead::genesis(), "audit")
            .unwrap()
            .is_intact()
    );
}

#[tokio::test]
async fn refusals_in_phases_one_and_two_never_reach_the_transport() {
    let r = rig(MockBlender::new()).await;
    let cases = [
        ("object.move", json!({"name": "Cube"}), "schema"),
        (
            "object.move",
            json!({"name": "Cube", "location": [0, 0, 0], "extra": 1}),
            "schema",
        ),
        ("object.teleport", json!({}), "contract"),
        ("file.save", json!({"path": "a.blend"}), "contract"),
        ("python.exec", json!({"code": "print(1)"}), "contract"),
        (
            "modifier.add",
            json!({"name": "Cube", "modifier_type": "SUBSURF", "levels": 5}),
            "sanity",
        ),
        ("object.delete", json!({"name": "Camera"}), "actuator_lock"),
        ("transaction.commit", json!({}), "transaction"),
    ];
    for (tool, params, stage) in cases {
        let before = r.transport.count();
        let answer = r.pipeline.call(tool, params.clone()).await;
        let error = answer
            .error()
            .unwrap_or_else(|| panic!("{tool} {params} was not refused"));
        assert_eq!(error.details["stage"], stage, "{tool} {params}: {error:?}");
        assert_eq!(r.transport.count(), before, "{tool} reached the transport");
    }
    let stages = r.pipeline.stage_names();
    assert!(
        stages.windows(2).all(|w| w[0].0 <= w[1].0),
        "phases in order: {stages:?}"
    );
    assert!(
        stages
            .iter()
            .filter(|(p, _)| *p <= Phase::Check)
            .all(|(p, _)| p.precedes_transport())
    );
}

#[tokio::test]
async fn schema_errors_name_the_field() {
    let r = rig(MockBlender::new()).await;
    let answer = r
        .pipeline
        .call("object.move", json!({"name": "Cube", "delta": [1, 2]}))
        .await;
    let error = answer.error().unwrap();
    assert_eq!(error.code, ErrorCode::InvalidArguments);
    assert_eq!(error.details["field"], "delta");
    let answer = r
        .pipeline
        .call("object.info", json!({"name": "Cube", "nme": "x"}))
        .await;
    assert_eq!(answer.error().unwrap().details["field"], "nme");
}

#[tokio::test]
async fn the_sandbox_guard_refuses_escapes_and_strikes_turn_the_session_read_only() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("sandbox");
    std::fs::create_dir_all(dir.join("renders")).unwrap();
    std::fs::create_dir_all(dir.join("HUMAN_ONLY")).unwrap();
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&outside, dir.join("escape")).unwrap();
    let (transport, builder) = builder(MockBlender::new(), None, &["file.write"]);
    let p = builder
        .sandbox(Sandbox::new(&dir).unwrap())
        .start()
        .await
        .unwrap();
    // A good path passes the guard and reaches the kernel (MockBlender has no .blend writer).
    let before = transport.count();
    let good = p
        .call("file.save", json!({"path": "renders/scene.blend"}))
        .await;
    assert_eq!(good.error().unwrap().code, ErrorCode::CapabilityMissing);
    assert_eq!(transport.count(), before + 1);
    for (i, bad) in [
        "../outside.blend",
        "/tmp/x.blend",
        "HUMAN_ONLY/rig.blend",
        "human_only/rig.blend",
        "renders/../../x.blend",
        "escape/x.blend",
    ]
    .iter()
    .enumerate()
    {
        let before = transport.count();
        let answer = p.call("file.save", json!({"path": bad})).await;
        // The third violation turns the session read-only; after it, the read-only guard refuses first.
        let expected = if i < 3 { "sandbox" } else { "read_only" };
        assert_eq!(
            reason(&answer).as_deref(),
            Some(expected),
            "{bad}: {answer:?}"
        );
        assert_eq!(transport.count(), before, "{bad} reached the kernel");
    }
    for bad in [
        "human_only/rig.blend",
        "renders/../../x.blend",
        "escape/x.blend",
        "ＨＵＭＡＮ_ＯＮＬＹ/x.blend",
        "a\\..\\x.blend",
    ] {
        assert!(
            p.session().sandbox.as_ref().unwrap().resolve(bad).is_err(),
            "{bad}"
        );
    }
    assert!(p.session().is_read_only());
    assert_eq!(
        reason(
            &p.call("object.move", json!({"name": "Cube", "delta": [0, 0, 1]}))
                .await
        )
        .as_deref(),
        Some("read_only")
    );
    p.session().human_reset("test");
    assert!(
        p.call("object.move", json!({"name": "Cube", "delta": [0, 0, 1]}))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn transactions_belong_to_their_session() {
    let r = rig(MockBlender::new()).await;
    let a = &r.pipeline;
    let agreement = agreement_for(
        vibe_transport::Transport::hello(r.transport.as_ref()),
        "session-b",
        None,
        &[],
    );
    let b = a.fork(agreement).start().await.unwrap();
    assert!(a.call("transaction.begin", json!({})).await.is_ok());
    assert_eq!(
        a.call("transaction.begin", json!({}))
            .await
            .error()
            .unwrap()
            .details["rule"],
        "transaction_open"
    );
    for tool in [
        "transaction.commit",
        "transaction.rollback",
        "transaction.begin",
    ] {
        assert_eq!(
            b.call(tool, json!({})).await.error().unwrap().details["rule"],
            "transaction_of_another_session",
            "{tool}"
        );
    }
    assert_eq!(
        b.call("mesh.create_cube", json!({"name": "B"}))
            .await
            .error()
            .unwrap()
            .details["rule"],
        "transaction_of_another_session"
    );
    assert!(
        b.call("object.info", json!({"name": "Cube"})).await.is_ok(),
        "reads are fine"
    );
    assert!(a.call("transaction.commit", json!({})).await.is_ok());
    assert!(
        b.call("mesh.create_cube", json!({"name": "B"}))
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn a_missed_deadline_opens_the_breaker_until_a_human_resets_it() {
    let r = hung_rig(200).await;
    let started = tokio::time::Instant::now();
    let answer = r.pipeline.call("kernel.status", json!({})).await;
    // On paused time (the mock waits on tokio's timers only): the agreed 200 ms, exactly.
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    let error = answer.error().unwrap();
    assert_eq!(
        (error.code.as_str(), error.reason()),
        ("timeout", Some(Reason::Deadlock))
    );
    let before = r.transport.count();
    let refused = r
        .pipeline
        .call("object.info", json!({"name": "Cube"}))
        .await;
    assert_eq!(refused.error().unwrap().details["breaker"], "open");
    assert_eq!(r.transport.count(), before);
    r.pipeline.session().human_reset("operator");
    assert!(
        r.pipeline
            .call("object.info", json!({"name": "Cube"}))
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn cancellation_answers_timeout_with_cancelled() {
    let r = hung_rig(5_000).await;
    let id = r.pipeline.next_call_id();
    let pipeline = r.pipeline.clone();
    let call =
        tokio::spawn(async move { pipeline.call_with_id(id, "kernel.status", json!({})).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = tokio::time::Instant::now();
    r.pipeline.cancel(id).await;
    let answer = call.await.unwrap();
    let error = answer.error().unwrap();
    assert_eq!(error.code, ErrorCode::Timeout);
    assert_eq!(error.details["cancelled"], true);
    // On paused time: the hung mock ignores the cancel, so the call ends after the cancel's
    // grace, not at its 5 s deadline.
    assert_eq!(
        started.elapsed(),
        vibe_transport::CANCEL_GRACE,
        "cancel did not wait for the deadline"
    );
}

#[tokio::test]
async fn identity_drift_rediscovers_three_times_then_escalates() {
    let r = rig_with(
        MockBlender::new(),
        FaultPlan::none().at(
            2,
            Fault::Rename {
                from: "Hero".into(),
                to: "Villain".into(),
            },
        ),
        2_000,
    )
    .await;
    assert!(
        r.pipeline
            .call("mesh.create_cube", json!({"name": "Hero"}))
            .await
            .is_ok()
    );
    let before = r.transport.count();
    let answer = r
        .pipeline
        .call("object.move", json!({"name": "Hero", "delta": [1, 0, 0]}))
        .await;
    let error = answer.error().unwrap();
    assert_eq!(error.code, ErrorCode::NotFound);
    assert_eq!(error.reason(), Some(Reason::IdentityDrift));
    assert_eq!(error.details["rediscovery_attempts"], 3);
    assert_eq!(error.details["recovery"], "ask_human");
    // One call plus three look-ups; the renamed object was not touched.
    assert_eq!(r.transport.count() - before, 4);
    assert_eq!(
        r.transport.scene().objects["Villain"].location,
        [0.0, 0.0, 0.0]
    );
}

#[tokio::test]
async fn idempotent_calls_are_repeated_after_a_drop_and_others_are_not() {
    let r = rig_with(
        MockBlender::new(),
        FaultPlan::none().at(1, Fault::Drop).at(3, Fault::Drop),
        2_000,
    )
    .await;
    let set = r
        .pipeline
        .call(
            "object.set_transform",
            json!({"name": "Cube", "location": [1, 1, 1]}),
        )
        .await;
    assert!(set.is_ok(), "{set:?}");
    let moved = r
        .pipeline
        .call("object.move", json!({"name": "Cube", "delta": [1, 0, 0]}))
        .await;
    let error = moved.error().unwrap();
    assert_eq!(error.details["may_have_run"], true);
    assert_eq!(
        r.transport.scene().objects["Cube"].location,
        [2.0, 1.0, 1.0],
        "it ran once, and was not resent"
    );
}

#[tokio::test]
async fn calls_over_the_concurrency_bound_queue_within_their_deadline() {
    let mut constraints = vibe_contract::Constraints {
        time_per_tool_ms: 300,
        ..Default::default()
    };
    constraints.read_only = false;
    let (transport, b) = builder(
        MockBlender::new().with_faults(FaultPlan::none().at(1, Fault::Hang)),
        Some(constraints),
        &[],
    );
    let _ = transport;
    let p = b.start().await.unwrap();
    assert!(p.session().agreement.contract.limits.max_concurrent_calls >= 1);
    let answers =
        futures::future::join_all((0..3).map(|_| p.call("kernel.status", json!({})))).await;
    assert!(answers.iter().any(|a| {
        a.error()
            .is_some_and(|e| e.reason() == Some(Reason::Deadlock))
    }));
}

#[tokio::test]
async fn answers_carry_determinism_and_fingerprints() {
    let r = rig(MockBlender::new()).await;
    let snap = r.pipeline.call("scene.snapshot", json!({})).await;
    let meta = snap.meta().unwrap();
    assert_eq!(
        meta.determinism,
        Some(vibe_errors::Determinism::Deterministic)
    );
    assert_eq!(
        meta.fingerprint.as_deref(),
        snap.result().unwrap()["fingerprint"].as_str()
    );
    let errors = r.pipeline.call("blender.errors", json!({})).await;
    assert_eq!(
        errors.meta().unwrap().determinism,
        Some(vibe_errors::Determinism::Nondeterministic)
    );
}

#[tokio::test]
async fn the_polygon_budget_is_planned_before_execution() {
    let constraints = vibe_contract::Constraints {
        sanity: vibe_contract::SanityLimits {
            max_polygons: 1_000,
            ..Default::default()
        },
        ..Default::default()
    };
    let (transport, b) = builder(MockBlender::new(), Some(constraints), &[]);
    let p = b.start().await.unwrap();
    assert!(
        p.call(
            "modifier.add",
            json!({"name": "Cube", "modifier_type": "ARRAY", "count": 50})
        )
        .await
        .is_ok()
    );
    let before = transport.scene();
    let answer = p
        .call(
            "modifier.add",
            json!({"name": "Cube", "modifier_type": "SUBSURF", "levels": 2}),
        )
        .await;
    let error = answer.error().unwrap();
    assert_eq!(
        (
            error.details["stage"].as_str(),
            error.details["estimate"].as_u64()
        ),
        (Some("polygon_budget"), Some(4_800))
    );
    assert_eq!(transport.scene(), before);
}

#[tokio::test]
async fn macros_roll_back_or_report_partial_effects() {
    let r = rig(MockBlender::new()).await;
    let p = &r.pipeline;
    let placed = p.run_macro("build_and_place", json!({"name": "Crate", "location": [1, 2, 0], "material": "Wood", "collection": "Props"})).await;
    assert!(placed.is_ok(), "{placed:?}");
    assert_eq!(
        placed.meta().unwrap().determinism,
        Some(vibe_errors::Determinism::Deterministic)
    );
    let info = p.call("object.info", json!({"name": "Crate"})).await;
    assert_eq!(info.result().unwrap()["collections"], json!(["Props"]));

    // A precondition refuses without side effects.
    let before = r.transport.scene();
    let again = p.run_macro("build_and_place", json!({"name": "Crate", "location": [0, 0, 0], "material": "Wood", "collection": "Props"})).await;
    assert_eq!(again.error().unwrap().details["reason"], "precondition");
    assert_eq!(r.transport.scene(), before);

    // A failing step inside a rollback macro leaves no trace: the collection exists, so
    // creating the cube in a missing one fails... use a name the kernel refuses at step 2.
    let failing = p.run_macro("build_and_place", json!({"name": "Camera.x", "location": [0, 0, "oops"], "material": "M", "collection": "New"})).await;
    assert!(failing.error().is_some());
    assert_eq!(
        r.transport.scene(),
        before,
        "a failed rollback macro changes nothing"
    );
    let context = &failing.error().unwrap().details["context"];
    assert!(context.is_null() || context["macro"] == "build_and_place");

    let failing = p.run_macro("build_and_place", json!({"name": "Ghost", "location": [0, 0, 0], "material": "M", "collection": "Scene Collection"})).await;
    let error = failing.error().unwrap();
    assert_eq!(error.details["context"]["rolled_back"], true, "{error:?}");
    assert_eq!(error.details["context"]["step"], 0);
    assert_eq!(r.transport.scene(), before);

    // Without rollback, the applied steps are reported.
    let smooth = p
        .run_macro("smooth_object", json!({"name": "Crate", "levels": 5}))
        .await;
    let error = smooth.error().unwrap();
    assert_eq!(error.reason(), Some(Reason::SanityLimit));
    assert_eq!(error.details["context"]["step"], 1);
    assert_eq!(
        error.details["partial_effects"],
        json!([{"step": 0, "tool": "modifier.add"}])
    );
}
