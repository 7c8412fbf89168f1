//! MockBlender semantics: the rules the live kernel follows too.

use serde_json::{Value, json};
use vibe_contract::SanityLimits;
use vibe_errors::{Envelope, ErrorCode, Reason};
use vibe_transport::mock::{MockBlender, Object, ObjectData, ObjectType};
use vibe_transport::{FaultPlan, SessionConfig, snapshot};

fn ok(mock: &mut MockBlender, tool: &str, params: Value) -> Value {
    match mock.execute(tool, &params) {
        Envelope::Ok(result) => result,
        Envelope::Err(e) => panic!("{tool} {params}: {e} {:?}", e.details),
    }
}

fn err(mock: &mut MockBlender, tool: &str, params: Value) -> vibe_errors::ErrorBody {
    match mock.execute(tool, &params) {
        Envelope::Err(e) => e,
        Envelope::Ok(result) => panic!("{tool} {params} succeeded: {result}"),
    }
}

fn fingerprint(mock: &mut MockBlender) -> String {
    let snap = ok(mock, "scene.snapshot", json!({}));
    snapshot::content_fingerprint(&snap).unwrap().to_owned()
}

#[test]
fn starts_from_the_factory_scene() {
    let mut mock = MockBlender::new();
    let list = ok(&mut mock, "object.list", json!({}));
    assert_eq!(
        list["objects"],
        json!([{"name": "Camera", "type": "CAMERA"}, {"name": "Cube", "type": "MESH"}, {"name": "Light", "type": "LIGHT"}])
    );
    let cube = ok(&mut mock, "object.info", json!({"name": "Cube"}));
    assert_eq!(cube["materials"], json!(["Material"]));
    assert_eq!(cube["collections"], json!(["Collection"]));
    assert_eq!(cube["data"]["polygons"], 6);
    let telemetry = ok(&mut mock, "scene.telemetry", json!({}));
    assert_eq!(telemetry["object_count"], 3);
    assert_eq!(telemetry["active_object"], "Cube");
}

#[test]
fn names_are_never_taken_from_another_object() {
    let mut mock = MockBlender::new();
    let e = err(&mut mock, "mesh.create_cube", json!({"name": "Cube"}));
    assert_eq!(e.code, ErrorCode::InvalidArguments);
    assert_eq!(e.details["reason"], "name_taken");
    ok(&mut mock, "mesh.create_cube", json!({"name": "Box"}));
    let before = fingerprint(&mut mock);
    // Blender 3.4 would rename the human's Cube to Cube.001 here; the rule is to refuse.
    let e = err(
        &mut mock,
        "object.rename",
        json!({"name": "Box", "new_name": "Cube"}),
    );
    assert_eq!(e.code, ErrorCode::InvalidArguments);
    assert_eq!(e.details["reason"], "name_taken");
    assert_eq!(e.details["field"], "new_name");
    assert_eq!(
        fingerprint(&mut mock),
        before,
        "a refused rename changes nothing"
    );
    let renamed = ok(
        &mut mock,
        "object.rename",
        json!({"name": "Box", "new_name": "Crate"}),
    );
    assert_eq!(renamed, json!({"old_name": "Box", "name": "Crate"}));
}

#[test]
fn transforms_are_32_bit_like_blender() {
    let mut mock = MockBlender::new();
    let moved = ok(
        &mut mock,
        "object.move",
        json!({"name": "Cube", "location": [0.1, 0.2, 0.3]}),
    );
    assert_eq!(moved["location"][0], json!(f64::from(0.1f32)));
    let moved = ok(
        &mut mock,
        "object.move",
        json!({"name": "Cube", "delta": [1.0, 0.0, 0.0]}),
    );
    assert_eq!(
        moved["location"][0],
        json!(f64::from((f64::from(0.1f32) + 1.0) as f32))
    );
    let e = err(
        &mut mock,
        "object.move",
        json!({"name": "Cube", "location": [0, 0, 0], "delta": [1, 1, 1]}),
    );
    assert_eq!(e.code, ErrorCode::InvalidArguments);
}

#[test]
fn transactions_roll_back_exactly_and_do_not_nest() {
    let mut mock = MockBlender::new();
    let before = fingerprint(&mut mock);
    let tx = ok(&mut mock, "transaction.begin", json!({"label": "try"}));
    assert_eq!(tx["transaction"], "tx-1");
    assert_eq!(
        err(&mut mock, "transaction.begin", json!({})).details["rule"],
        "transaction_open"
    );
    ok(&mut mock, "mesh.create_cube", json!({"name": "Temp"}));
    ok(&mut mock, "object.delete", json!({"name": "Temp"}));
    ok(
        &mut mock,
        "object.move",
        json!({"name": "Cube", "delta": [1, 1, 1]}),
    );
    assert_ne!(fingerprint(&mut mock), before);
    ok(&mut mock, "transaction.rollback", json!({}));
    assert_eq!(fingerprint(&mut mock), before);
    assert_eq!(
        err(&mut mock, "transaction.commit", json!({})).details["rule"],
        "no_transaction"
    );
}

#[test]
fn busy_refuses_mutations_and_serves_reads() {
    let mut mock = MockBlender::new();
    mock.set_busy(true);
    let e = err(
        &mut mock,
        "object.move",
        json!({"name": "Cube", "delta": [1, 0, 0]}),
    );
    assert_eq!(e.reason(), Some(Reason::Busy));
    assert_eq!(ok(&mut mock, "kernel.status", json!({}))["state"], "busy");
    mock.set_busy(false);
    ok(
        &mut mock,
        "object.move",
        json!({"name": "Cube", "delta": [1, 0, 0]}),
    );
}

#[test]
fn sanity_limits_are_enforced_before_any_change() {
    let mut mock = MockBlender::new();
    mock.configure(&SessionConfig {
        session_id: "s".into(),
        capabilities: ["scene.read", "scene.write"].map(String::from).into(),
        sanity: SanityLimits {
            max_polygons: 10_000,
            ..SanityLimits::default()
        },
        sandbox: None,
        project_roots: Vec::new(),
        time_per_tool_ms: 1000,
    });
    let before = fingerprint(&mut mock);
    let e = err(
        &mut mock,
        "modifier.add",
        json!({"name": "Cube", "modifier_type": "SUBSURF", "levels": 6}),
    );
    assert_eq!(e.reason(), Some(Reason::SanityLimit));
    assert_eq!(e.details["limit"], 3);
    ok(
        &mut mock,
        "modifier.add",
        json!({"name": "Cube", "modifier_type": "ARRAY", "count": 50}),
    );
    // 6 faces x 50 = 300; a subdivision of 3 levels makes 19 200 > 10 000.
    let e = err(
        &mut mock,
        "modifier.add",
        json!({"name": "Cube", "modifier_type": "SUBSURF", "levels": 3}),
    );
    assert_eq!(e.details["estimate"], 19_200);
    assert_eq!(
        err(
            &mut mock,
            "modifier.add",
            json!({"name": "Cube", "modifier_type": "MIRROR", "levels": 1})
        )
        .details["field"],
        "levels"
    );
    let info = ok(
        &mut mock,
        "modifier.add",
        json!({"name": "Cube", "modifier_type": "BEVEL"}),
    );
    assert_eq!(
        info["modifiers"][1],
        json!({"name": "Bevel", "type": "BEVEL", "width": f64::from(0.1f32), "segments": 1})
    );
    ok(
        &mut mock,
        "modifier.remove",
        json!({"name": "Cube", "modifier_name": "Bevel"}),
    );
    ok(
        &mut mock,
        "modifier.remove",
        json!({"name": "Cube", "modifier_name": "Array"}),
    );
    assert_eq!(fingerprint(&mut mock), before);
}

#[test]
fn identity_drift_is_told_from_a_typo() {
    let mut mock = MockBlender::new().with_faults(FaultPlan::none().at(
        1,
        vibe_transport::Fault::Rename {
            from: "Cube".into(),
            to: "Hero".into(),
        },
    ));
    ok(&mut mock, "object.info", json!({"name": "Cube"}));
    let outcome = mock.handle("object.info", &json!({"name": "Cube"}));
    let e = outcome.envelope.unwrap().error().cloned().unwrap();
    assert_eq!(e.reason(), Some(Reason::IdentityDrift));
    assert_eq!(e.details["current_name"], "Hero");
    let typo = err(&mut mock, "object.info", json!({"name": "Cuube"}));
    assert_eq!(typo.code, ErrorCode::NotFound);
    assert_eq!(typo.reason(), None);
}

#[test]
fn an_object_made_after_a_rollback_never_passes_for_one_rolled_back() {
    // Blender's session UIDs only grow: the object made after the rollback is a new one, so
    // the name of the rolled-back object is simply not found, not "renamed".
    let mut mock = MockBlender::new();
    ok(&mut mock, "transaction.begin", json!({}));
    ok(
        &mut mock,
        "object.create",
        json!({"type": "EMPTY", "name": "C"}),
    );
    ok(&mut mock, "transaction.rollback", json!({}));
    ok(
        &mut mock,
        "object.create",
        json!({"type": "EMPTY", "name": "A"}),
    );
    let gone = err(&mut mock, "object.delete", json!({"name": "C"}));
    assert_eq!(gone.code, ErrorCode::NotFound);
    assert_eq!(gone.reason(), None, "{:?}", gone.details);
}

#[test]
fn injected_exceptions_leave_no_trace_and_reach_the_console() {
    let mut mock =
        MockBlender::new().with_faults(FaultPlan::none().at(1, vibe_transport::Fault::Raise));
    let before = fingerprint(&mut mock);
    let outcome = mock.handle("mesh.create_cube", &json!({"name": "Box"}));
    let e = outcome.envelope.unwrap().error().cloned().unwrap();
    assert_eq!(e.code, ErrorCode::ExecutionFailed);
    assert_eq!(e.reason(), Some(Reason::MutationFailed));
    assert!(!e.message.contains("Traceback"));
    assert_eq!(fingerprint(&mut mock), before);
    let errors = ok(&mut mock, "blender.errors", json!({"limit": 5}));
    assert_eq!(errors["errors"][0]["source"], "mesh.create_cube");
}

#[test]
fn audit_identity_and_parenting() {
    let mut mock = MockBlender::new();
    let uid = mock.scene().next_uid;
    mock.scene_mut().next_uid += 1;
    mock.scene_mut().objects.insert(
        "Armature".into(),
        Object::new(
            uid,
            "Armature",
            ObjectType::Armature,
            ObjectData::Armature(12),
            "Collection",
        ),
    );
    let rig = ok(
        &mut mock,
        "object.audit_identity",
        json!({"name": "Armature"}),
    );
    assert_eq!(rig["risk"], "high");
    assert_eq!(rig["created_by_agent"], false);
    ok(
        &mut mock,
        "object.create",
        json!({"name": "Pivot", "type": "EMPTY"}),
    );
    ok(&mut mock, "mesh.create_cube", json!({"name": "Child"}));
    ok(
        &mut mock,
        "object.set_parent",
        json!({"name": "Child", "parent": "Pivot"}),
    );
    assert_eq!(
        err(
            &mut mock,
            "object.set_parent",
            json!({"name": "Pivot", "parent": "Child"})
        )
        .details["reason"],
        "cycle"
    );
    let pivot = ok(&mut mock, "object.audit_identity", json!({"name": "Pivot"}));
    assert_eq!(
        (pivot["risk"].as_str(), pivot["created_by_agent"].as_bool()),
        (Some("high"), Some(true))
    );
    assert_eq!(
        err(&mut mock, "object.delete", json!({"name": "Pivot"})).details["children"],
        json!(["Child"])
    );
    // The created record follows the agent's own renames.
    ok(
        &mut mock,
        "object.rename",
        json!({"name": "Child", "new_name": "Kid"}),
    );
    assert_eq!(
        ok(&mut mock, "object.audit_identity", json!({"name": "Kid"}))["risk"],
        "low"
    );
    let found = ok(&mut mock, "scenegraph.find", json!({"has_parent": true}));
    assert_eq!(found["matches"], json!(["Kid"]));
}

#[test]
fn materials_collections_and_capabilities() {
    let mut mock = MockBlender::new();
    let m = ok(
        &mut mock,
        "material.ensure_principled",
        json!({"name": "Red", "base_color": [1, 0, 0, 1]}),
    );
    assert_eq!(m["created"], true);
    assert_eq!(
        ok(
            &mut mock,
            "material.ensure_principled",
            json!({"name": "Red"})
        )["created"],
        false
    );
    ok(
        &mut mock,
        "mesh.assign_material",
        json!({"name": "Cube", "material": "Red", "slot": 1}),
    );
    assert_eq!(
        err(
            &mut mock,
            "mesh.assign_material",
            json!({"name": "Cube", "material": "Red", "slot": 5})
        )
        .code,
        ErrorCode::InvalidArguments
    );
    assert_eq!(
        err(
            &mut mock,
            "mesh.assign_material",
            json!({"name": "Camera", "material": "Red"})
        )
        .code,
        ErrorCode::InvalidArguments
    );
    let c = ok(
        &mut mock,
        "scene.create_collection",
        json!({"name": "Props"}),
    );
    assert_eq!(c["created"], true);
    assert_eq!(
        ok(
            &mut mock,
            "scene.create_collection",
            json!({"name": "Props"})
        )["created"],
        false
    );
    ok(
        &mut mock,
        "object.assign_collection",
        json!({"name": "Cube", "collection": "Props", "mode": "link"}),
    );
    let cube = ok(&mut mock, "object.info", json!({"name": "Cube"}));
    assert_eq!(cube["collections"], json!(["Collection", "Props"]));
    assert_eq!(
        err(&mut mock, "file.save", json!({"path": "x.blend"})).code,
        ErrorCode::CapabilityMissing
    );
    assert_eq!(
        err(&mut mock, "python.exec", json!({"code": "print(1)"})).code,
        ErrorCode::CapabilityMissing
    );
    assert_eq!(
        err(&mut mock, "object.teleport", json!({})).code,
        ErrorCode::ContractViolation
    );
    assert!(!mock.hello().blender.features.contains("code_exec"));
}

#[test]
fn snapshot_is_sealed_with_indices_and_stable_fingerprints() {
    let mut a = MockBlender::new();
    let mut b = MockBlender::new();
    let snap = ok(&mut a, "scene.snapshot", json!({}));
    assert_eq!(snap["indices"]["by_material"]["Material"], json!(["Cube"]));
    assert_eq!(snap["indices"]["by_name"]["Light"], 2);
    assert!(
        snap["objects"][0]["data_fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("blake3:")
    );
    assert_eq!(fingerprint(&mut a), fingerprint(&mut b));
    let mut older = MockBlender::new().with_version("3.4.1".parse().unwrap());
    let old_snap = ok(&mut older, "scene.snapshot", json!({}));
    assert_eq!(old_snap["content_fingerprint"], snap["content_fingerprint"]);
    assert_ne!(old_snap["fingerprint"], snap["fingerprint"]);
}
