//! Properties over random call sequences on MockBlender with random injected faults.

mod support;

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::{Value, json};
use support::*;
use vibe_errors::Envelope;
use vibe_transport::{Fault, FaultPlan, MockBlender};

const NAMES: [&str; 6] = ["Cube", "Camera", "Light", "Armature", "A", "B"];

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(NAMES.to_vec()).prop_map(str::to_owned)
}

fn vec3() -> impl Strategy<Value = Value> {
    prop::array::uniform3(-5i32..5).prop_map(|v| json!(v))
}

/// A random call of the registry, well-formed or not.
fn call() -> impl Strategy<Value = (String, Value)> {
    prop_oneof![
        name().prop_map(|n| ("object.delete".into(), json!({"name": n}))),
        name().prop_map(|n| ("mesh.create_cube".into(), json!({"name": n}))),
        (name(), prop::sample::select(vec!["EMPTY", "LIGHT", "MESH"]))
            .prop_map(|(n, t)| ("object.create".into(), json!({"name": n, "type": t}))),
        (name(), vec3()).prop_map(|(n, d)| ("object.move".into(), json!({"name": n, "delta": d}))),
        (name(), vec3()).prop_map(|(n, l)| (
            "object.set_transform".into(),
            json!({"name": n, "location": l})
        )),
        (name(), name())
            .prop_map(|(n, m)| ("object.rename".into(), json!({"name": n, "new_name": m}))),
        (name(), name())
            .prop_map(|(n, p)| ("object.set_parent".into(), json!({"name": n, "parent": p}))),
        (name(), 0u32..7).prop_map(|(n, l)| (
            "modifier.add".into(),
            json!({"name": n, "modifier_type": "SUBSURF", "levels": l})
        )),
        name().prop_map(|n| ("material.ensure_principled".into(), json!({"name": n}))),
        (name(), name()).prop_map(|(n, m)| (
            "mesh.assign_material".into(),
            json!({"name": n, "material": m})
        )),
        Just(("transaction.begin".into(), json!({}))),
        Just(("transaction.rollback".into(), json!({}))),
        Just(("transaction.commit".into(), json!({}))),
        name().prop_map(|n| ("object.info".into(), json!({"name": n}))),
        Just(("scene.snapshot".into(), json!({}))),
        Just(("object.teleport".into(), json!({}))),
        name().prop_map(|n| ("object.move".into(), json!({"name": n}))),
    ]
}

/// Faults the kernel survives (an exception, a dropped connection) at up to 15% of calls; in one
/// case of eight, also one malformed frame, which halts the session for good, late in the run
/// (calls 20-40), so that most cases spend most of their calls on the kernel, not on a halted
/// transport or an open breaker.
fn faults() -> impl Strategy<Value = FaultPlan> {
    (
        any::<u64>(),
        0.0f64..0.15,
        prop::option::weighted(0.125, 20u64..40),
    )
        .prop_map(|(seed, rate, halt_at)| {
            let plan = FaultPlan::seeded(seed, 200, rate, &[Fault::Raise, Fault::Drop]);
            match halt_at {
                Some(n) => plan.at(n, Fault::Malformed),
                None => plan,
            }
        })
}

/// Where the calls of the properties' cases end, sampled once with proptest's deterministic
/// runner: most must reach the kernel. Printed once, so a change to the strategies that starves
/// the kernel shows.
#[test]
fn the_cases_mostly_reach_the_kernel() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = (prop::collection::vec(call(), 1..40), faults());
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut halted_cases = 0;
    let cases = 48;
    runtime().block_on(async {
        for _ in 0..cases {
            let (calls, plan) = strategy.new_tree(&mut runner).unwrap().current();
            let rig = rig_with(with_armature(MockBlender::new()), plan, 1_000).await;
            let mut halted = false;
            for (tool, params) in &calls {
                let before = rig.transport.count();
                let answer = rig.pipeline.call(tool, params.clone()).await;
                let stage = answer
                    .error()
                    .and_then(|e| e.details.get("stage"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let kind = match (&answer, stage.as_deref()) {
                    (_, Some("breaker")) => "open breaker",
                    (_, Some(s)) if BRIDGE_STAGES.contains(&s) => "refused by the bridge",
                    _ if rig.transport.count() == before => "answered without a call",
                    (Envelope::Ok(_), _) => "kernel: ok",
                    (Envelope::Err(_), _) => "kernel: error",
                };
                halted |= kind == "open breaker";
                *counts.entry(kind).or_default() += 1;
            }
            halted_cases += usize::from(halted);
        }
    });
    let total: usize = counts.values().sum();
    let reached =
        counts.get("kernel: ok").unwrap_or(&0) + counts.get("kernel: error").unwrap_or(&0);
    eprintln!("{cases} cases, {total} calls: {counts:?}; {halted_cases} cases met an open breaker");
    assert!(
        reached * 20 >= total * 11,
        "only {reached} of {total} calls reached the kernel"
    );
    assert!(
        halted_cases * 4 <= cases,
        "{halted_cases} of {cases} cases halted"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// The uids of the objects a person made (factory scene and the rig).
fn human_uids(rig: &Rig) -> BTreeSet<u64> {
    rig.transport
        .scene()
        .objects
        .values()
        .map(|o| o.uid)
        .collect()
}

const BRIDGE_STAGES: [&str; 10] = [
    "schema",
    "breaker",
    "contract",
    "read_only",
    "busy",
    "transaction",
    "sandbox",
    "sanity",
    "actuator_lock",
    "code_gate",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_agent_never_deletes_what_it_did_not_create(calls in prop::collection::vec(call(), 1..40), plan in faults()) {
        runtime().block_on(async {
            let rig = rig_with(with_armature(MockBlender::new()), plan, 1_000).await;
            let humans = human_uids(&rig);
            for (tool, params) in &calls {
                rig.pipeline.call(tool, params.clone()).await;
                let now: BTreeSet<u64> = rig.transport.scene().objects.values().map(|o| o.uid).collect();
                prop_assert!(humans.is_subset(&now), "{tool} {params} deleted a human's object");
            }
            Ok(())
        })?;
    }

    #[test]
    fn read_only_mode_never_changes_the_scene(calls in prop::collection::vec(call(), 1..40), plan in faults()) {
        runtime().block_on(async {
            let rig = rig_with(MockBlender::new(), plan, 1_000).await;
            rig.pipeline.set_read_only("property test");
            let before = rig.transport.scene();
            for (tool, params) in &calls {
                rig.pipeline.call(tool, params.clone()).await;
                prop_assert_eq!(&rig.transport.scene(), &before, "{} {}", tool, params);
            }
            let r = rig.pipeline.run_macro("ground_plane", json!({"name": "Floor"})).await;
            prop_assert!(r.error().is_some());
            prop_assert_eq!(rig.transport.scene(), before);
            Ok(())
        })?;
    }

    #[test]
    fn failed_calls_and_failed_rollback_macros_change_nothing(calls in prop::collection::vec(call(), 1..40), plan in faults()) {
        runtime().block_on(async {
            let rig = rig_with(MockBlender::new(), plan, 1_000).await;
            for (tool, params) in &calls {
                let before = rig.transport.scene();
                let answer = rig.pipeline.call(tool, params.clone()).await;
                if let Some(error) = answer.error() {
                    // A call whose connection dropped may have run: it says so, and is exempt.
                    if error.details.get("may_have_run").is_none() {
                        prop_assert_eq!(&rig.transport.scene(), &before, "{} {} failed but changed the scene", tool, params);
                    }
                }
            }
            let before = rig.transport.scene();
            let placed = rig.pipeline.run_macro("build_and_place", json!({"name": "M", "location": [0, 0, 0], "material": "Mat", "collection": "Coll"})).await;
            if let Some(error) = placed.error() {
                let may_have_run = error.details.get("may_have_run").is_some();
                let rolled_back = error.details.get("context").and_then(|c| c.get("rolled_back")) == Some(&json!(true));
                if rolled_back && !may_have_run {
                    prop_assert_eq!(rig.transport.scene(), before);
                }
            }
            Ok(())
        })?;
    }

    #[test]
    fn refusals_never_reach_the_transport_and_every_answer_is_v1(calls in prop::collection::vec(call(), 1..40), plan in faults()) {
        runtime().block_on(async {
            let rig = rig_with(with_armature(MockBlender::new()), plan, 1_000).await;
            for (tool, params) in &calls {
                let before = rig.transport.count();
                let answer = rig.pipeline.call(tool, params.clone()).await;
                let text = answer.to_json_string();
                let parsed = Envelope::from_slice(text.as_bytes());
                prop_assert!(parsed.is_ok(), "not a v1 envelope: {}", text);
                let wire: Value = serde_json::from_str(&text).unwrap();
                prop_assert_eq!(wire.as_object().unwrap().len(), 2);
                if let Some(stage) = answer.error().and_then(|e| e.details.get("stage")).and_then(Value::as_str)
                    && BRIDGE_STAGES.contains(&stage)
                {
                    prop_assert_eq!(rig.transport.count(), before, "{} refused by {} but reached the transport", tool, stage);
                }
            }
            Ok(())
        })?;
    }

    #[test]
    fn idempotent_tools_converge(setup in prop::collection::vec(call(), 0..10), target in name(), location in vec3()) {
        runtime().block_on(async {
            let rig = rig(MockBlender::new()).await;
            for (tool, params) in &setup {
                rig.pipeline.call(tool, params.clone()).await;
            }
            let idempotent = [
                ("object.set_transform", json!({"name": target, "location": location})),
                ("material.ensure_principled", json!({"name": target, "roughness": 0.25})),
                ("scene.create_collection", json!({"name": target})),
                ("object.assign_collection", json!({"name": target, "collection": "Collection"})),
                ("selection.set_active_object", json!({"name": target})),
            ];
            for (tool, params) in idempotent {
                prop_assert!(rig.pipeline.session().agreement.tools.get(tool).unwrap().idempotent);
                let first = rig.pipeline.call(tool, params.clone()).await;
                let once = rig.transport.scene();
                let second = rig.pipeline.call(tool, params.clone()).await;
                prop_assert_eq!(&rig.transport.scene(), &once, "{} did not converge", tool);
                prop_assert_eq!(first.is_ok(), second.is_ok());
            }
            Ok(())
        })?;
    }
}
