//! MockBlender semantics: the rules the live kernel follows too.

use serde_json::{Value, json};
use vibe_contract::SanityLimits;
use vibe_errors::{Envelope, ErrorCode, Reason};
use vibe_transport::mock::{MockBlender, Modifier, Object, ObjectData, ObjectType, Scene};

#[path = "support/session.rs"]
mod session;
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
    mock.configure(
        &SessionConfig::new("s")
            .capabilities(["scene.read", "scene.write"])
            .sanity(SanityLimits {
                max_polygons: 10_000,
                ..SanityLimits::default()
            })
            .time_per_tool_ms(1000),
    );
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
fn a_sealed_snapshot_has_indices_and_stable_fingerprints() {
    let mut a = MockBlender::new();
    let mut b = MockBlender::new();
    let snap = snapshot::sealed(ok(&mut a, "scene.snapshot", json!({})));
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
    let old_snap = snapshot::sealed(ok(&mut older, "scene.snapshot", json!({})));
    assert_eq!(old_snap["content_fingerprint"], snap["content_fingerprint"]);
    assert_ne!(old_snap["fingerprint"], snap["fingerprint"]);
}

#[test]
fn a_meshs_size_is_part_of_the_scene_content() {
    // Same name, place and counts: only the size of the mesh tells these scenes apart.
    let scene_with_crate = |size: f64| {
        let mut mock = MockBlender::new();
        let crate_ = ok(
            &mut mock,
            "mesh.create_cube",
            json!({"name": "Crate", "size": size, "location": [1, 2, 0]}),
        );
        (crate_["data"].clone(), fingerprint(&mut mock))
    };
    let (small, small_scene) = scene_with_crate(2.0);
    let (big, big_scene) = scene_with_crate(4.0);
    assert_eq!(small["extent"], json!([2.0, 2.0, 2.0]));
    assert_eq!(big["extent"], json!([4.0, 4.0, 4.0]));
    assert_eq!(small["vertices"], big["vertices"]);
    assert_ne!(small_scene, big_scene);
    assert_eq!(scene_with_crate(4.0).1, big_scene);
    // Blender stores 32-bit vertices and the kernel rounds with Python's round(x, 4).
    assert_eq!(scene_with_crate(3.7).0["extent"], json!([3.7, 3.7, 3.7]));
    assert_eq!(
        scene_with_crate(0.03125).0["extent"],
        json!([0.0312, 0.0312, 0.0312])
    );
    // A plane is flat; the factory Cube is 2 across; the scale is the object's, not the mesh's.
    let mut mock = MockBlender::new();
    let floor = ok(
        &mut mock,
        "mesh.create_plane",
        json!({"name": "Floor", "size": 10, "scale": [3, 3, 3]}),
    );
    assert_eq!(floor["data"]["extent"], json!([10.0, 10.0, 0.0]));
    let cube = ok(&mut mock, "object.info", json!({"name": "Cube"}));
    assert_eq!(cube["data"]["extent"], json!([2.0, 2.0, 2.0]));
    let suzanne = ok(
        &mut mock,
        "object.create",
        json!({"name": "Suzanne", "type": "MESH", "primitive": "monkey"}),
    );
    assert_eq!(suzanne["data"]["extent"], json!([2.7344, 1.7031, 1.9688]));
}

// ---------------------------------------------------------------- the actuator lock, typed tools

/// The error of a refused call, checked to be the actuator lock's and to change nothing.
fn locked(mock: &mut MockBlender, tool: &str, params: Value) -> vibe_errors::ErrorBody {
    let before = fingerprint(mock);
    let e = err(mock, tool, params);
    assert_eq!(e.code, ErrorCode::ContractViolation, "{tool}: {e:?}");
    assert_eq!(e.reason(), Some(Reason::ActuatorLock), "{tool}: {e:?}");
    assert!(e.message.starts_with("security block: cannot "), "{e:?}");
    assert_eq!(
        fingerprint(mock),
        before,
        "a refused {tool} changes nothing"
    );
    e
}

/// `details` without the guidance every error carries (class, retryable, recovery).
fn lock_details(e: &vibe_errors::ErrorBody) -> Value {
    let mut details = e.details.clone();
    for key in ["class", "retryable", "recovery"] {
        details.remove(key);
    }
    Value::Object(details)
}

#[test]
fn the_humans_objects_cannot_be_renamed_deleted_or_moved_out_of_their_collections() {
    let mut mock = MockBlender::new();
    ok(
        &mut mock,
        "scene.create_collection",
        json!({"name": "Props"}),
    );
    let e = locked(
        &mut mock,
        "object.rename",
        json!({"name": "Cube", "new_name": "Box"}),
    );
    assert_eq!(
        lock_details(&e),
        json!({"reason": "actuator_lock", "rule": "rename", "kind": "object", "name": "Cube", "field": "name"})
    );
    assert_eq!(
        e.message,
        "security block: cannot rename object \"Cube\", which the agent did not create in this session"
    );
    let e = locked(&mut mock, "object.delete", json!({"name": "Camera"}));
    assert_eq!(
        lock_details(&e),
        json!({"reason": "actuator_lock", "rule": "remove", "kind": "object", "name": "Camera", "field": "name"})
    );
    assert_eq!(
        e.message,
        "security block: cannot delete object \"Camera\", which the agent did not create in this session"
    );
    let e = locked(
        &mut mock,
        "object.assign_collection",
        json!({"name": "Light", "collection": "Props", "mode": "move"}),
    );
    assert_eq!(
        lock_details(&e),
        json!({"reason": "actuator_lock", "rule": "unlink", "kind": "object", "name": "Light", "field": "name"})
    );
    // "move" is the default mode.
    let e = locked(
        &mut mock,
        "object.assign_collection",
        json!({"name": "Light", "collection": "Props"}),
    );
    assert_eq!(e.details["rule"], "unlink");
    assert_eq!(mock.scene().objects["Light"].collections, ["Collection"]);
}

#[test]
fn link_and_property_edits_stay_allowed_on_the_humans_objects() {
    let mut mock = MockBlender::new();
    ok(
        &mut mock,
        "scene.create_collection",
        json!({"name": "Props"}),
    );
    let linked = ok(
        &mut mock,
        "object.assign_collection",
        json!({"name": "Cube", "collection": "Props", "mode": "link"}),
    );
    assert_eq!(linked["collections"], json!(["Collection", "Props"]));
    ok(
        &mut mock,
        "object.move",
        json!({"name": "Cube", "delta": [1, 0, 0]}),
    );
    ok(
        &mut mock,
        "object.set_transform",
        json!({"name": "Cube", "scale": [2, 2, 2]}),
    );
    ok(
        &mut mock,
        "object.set_parent",
        json!({"name": "Camera", "parent": "Cube"}),
    );
    ok(
        &mut mock,
        "material.ensure_principled",
        json!({"name": "Red"}),
    );
    ok(
        &mut mock,
        "mesh.assign_material",
        json!({"name": "Cube", "material": "Red", "slot": 1}),
    );
    ok(
        &mut mock,
        "modifier.add",
        json!({"name": "Cube", "modifier_type": "BEVEL"}),
    );
    ok(
        &mut mock,
        "selection.set_active_object",
        json!({"name": "Light"}),
    );
}

#[test]
fn the_agents_own_objects_are_free() {
    let mut mock = MockBlender::new();
    ok(
        &mut mock,
        "scene.create_collection",
        json!({"name": "Props"}),
    );
    ok(&mut mock, "mesh.create_cube", json!({"name": "Box"}));
    ok(&mut mock, "mesh.create_plane", json!({"name": "Floor"}));
    ok(
        &mut mock,
        "object.create",
        json!({"name": "Lamp", "type": "LIGHT"}),
    );
    let renamed = ok(
        &mut mock,
        "object.rename",
        json!({"name": "Box", "new_name": "Crate"}),
    );
    assert_eq!(renamed["name"], "Crate");
    let moved = ok(
        &mut mock,
        "object.assign_collection",
        json!({"name": "Crate", "collection": "Props"}),
    );
    assert_eq!(moved["collections"], json!(["Props"]));
    ok(
        &mut mock,
        "object.assign_collection",
        json!({"name": "Floor", "collection": "Props", "mode": "move"}),
    );
    for name in ["Crate", "Floor", "Lamp"] {
        assert_eq!(
            ok(&mut mock, "object.delete", json!({"name": name})),
            json!({"deleted": name})
        );
    }
}

#[test]
fn a_missing_name_stays_not_found_and_the_lock_comes_before_the_other_checks() {
    let mut mock = MockBlender::new();
    for (tool, params, field) in [
        (
            "object.rename",
            json!({"name": "Nope", "new_name": "X"}),
            "name",
        ),
        ("object.delete", json!({"name": "Nope"}), "name"),
        (
            "object.assign_collection",
            json!({"name": "Nope", "collection": "Collection"}),
            "name",
        ),
        (
            "object.assign_collection",
            json!({"name": "Cube", "collection": "Nope"}),
            "collection",
        ),
        (
            "modifier.remove",
            json!({"name": "Nope", "modifier_name": "Bevel"}),
            "name",
        ),
        (
            "modifier.remove",
            json!({"name": "Cube", "modifier_name": "Nothing"}),
            "modifier_name",
        ),
    ] {
        let e = err(&mut mock, tool, params.clone());
        assert_eq!(e.code, ErrorCode::NotFound, "{tool} {params}");
        assert_eq!(e.details["field"], field, "{tool} {params}");
        assert_eq!(e.reason(), None, "{tool} {params}");
    }
    // name_taken would refuse this rename, children this delete: the lock speaks first.
    let e = locked(
        &mut mock,
        "object.rename",
        json!({"name": "Cube", "new_name": "Camera"}),
    );
    assert_eq!(e.details["rule"], "rename");
    ok(
        &mut mock,
        "object.set_parent",
        json!({"name": "Camera", "parent": "Cube"}),
    );
    let e = locked(&mut mock, "object.delete", json!({"name": "Cube"}));
    assert_eq!(e.details["rule"], "remove");
    // A bad mode is still a bad argument (the rule depends on it).
    let e = err(
        &mut mock,
        "object.assign_collection",
        json!({"name": "Cube", "collection": "Collection", "mode": "steal"}),
    );
    assert_eq!(e.code, ErrorCode::InvalidArguments);
}

#[test]
fn a_modifier_the_agent_did_not_add_cannot_be_removed() {
    let mut mock = MockBlender::new();
    // As a person would: an Armature modifier on the human's Cube.
    mock.scene_mut()
        .objects
        .get_mut("Cube")
        .unwrap()
        .modifiers
        .push(Modifier::with_defaults("Armature".into(), "ARMATURE"));
    let e = locked(
        &mut mock,
        "modifier.remove",
        json!({"name": "Cube", "modifier_name": "Armature"}),
    );
    assert_eq!(
        lock_details(&e),
        json!({"reason": "actuator_lock", "rule": "remove", "kind": "modifier", "name": "Armature",
               "object": "Cube", "field": "modifier_name"})
    );
    assert_eq!(
        e.message,
        "security block: cannot remove modifier \"Armature\" of \"Cube\", which the agent did not add in this session"
    );
    // The agent's modifiers are free on any object, under the name Blender gave them.
    ok(
        &mut mock,
        "modifier.add",
        json!({"name": "Cube", "modifier_type": "BEVEL"}),
    );
    ok(
        &mut mock,
        "modifier.add",
        json!({"name": "Cube", "modifier_type": "BEVEL"}),
    );
    ok(
        &mut mock,
        "modifier.remove",
        json!({"name": "Cube", "modifier_name": "Bevel.001"}),
    );
    let left = ok(
        &mut mock,
        "modifier.remove",
        json!({"name": "Cube", "modifier_name": "Bevel"}),
    );
    assert_eq!(
        left["modifiers"],
        json!([{"name": "Armature", "type": "ARMATURE"}])
    );
    // Every modifier of an object the agent made is the agent's, whoever added it.
    ok(&mut mock, "mesh.create_cube", json!({"name": "Box"}));
    mock.scene_mut()
        .objects
        .get_mut("Box")
        .unwrap()
        .modifiers
        .push(Modifier::with_defaults("Mirror".into(), "MIRROR"));
    let bare = ok(
        &mut mock,
        "modifier.remove",
        json!({"name": "Box", "modifier_name": "Mirror"}),
    );
    assert_eq!(bare["modifiers"], json!([]));
}

fn configure(
    mock: &mut MockBlender,
    session_id: &str,
    sandbox: Option<&str>,
    roots: &[&str],
) -> Envelope {
    let mut session = SessionConfig::new(session_id)
        .capabilities(session::FILE_SESSION_CAPABILITIES)
        .project_roots(roots.iter().copied())
        .time_per_tool_ms(1000);
    session.sandbox = sandbox.map(String::from);
    mock.configure(&session)
}

#[test]
fn the_modifier_record_is_the_sessions_follows_the_object_and_rolls_back() {
    let mut mock = MockBlender::new();
    configure(&mut mock, "agent", None, &[]);
    ok(
        &mut mock,
        "modifier.add",
        json!({"name": "Cube", "modifier_type": "ARRAY"}),
    );
    // A person renames the object: the record follows it.
    mock.scene_mut().rename_object("Cube", "Hero");
    configure(&mut mock, "other", None, &[]);
    let e = locked(
        &mut mock,
        "modifier.remove",
        json!({"name": "Hero", "modifier_name": "Array"}),
    );
    assert_eq!(e.details["object"], "Hero");
    configure(&mut mock, "agent", None, &[]);
    locked(
        &mut mock,
        "modifier.remove",
        json!({"name": "Hero", "modifier_name": "Array"}),
    );
    // Rollback: the record as it was at begin.
    ok(
        &mut mock,
        "modifier.add",
        json!({"name": "Hero", "modifier_type": "BEVEL"}),
    );
    ok(&mut mock, "transaction.begin", json!({}));
    ok(
        &mut mock,
        "modifier.remove",
        json!({"name": "Hero", "modifier_name": "Bevel"}),
    );
    ok(&mut mock, "transaction.rollback", json!({}));
    ok(
        &mut mock,
        "modifier.remove",
        json!({"name": "Hero", "modifier_name": "Bevel"}),
    );
    // Removed is forgotten: a person's modifier of that name later is the person's.
    mock.scene_mut()
        .objects
        .get_mut("Hero")
        .unwrap()
        .modifiers
        .push(Modifier::with_defaults("Bevel".into(), "BEVEL"));
    locked(
        &mut mock,
        "modifier.remove",
        json!({"name": "Hero", "modifier_name": "Bevel"}),
    );
}

// ---------------------------------------------------------------- files and project roots

const SANDBOX: &str = "/work/sandbox";
const PROJECT: &str = "/work/project";

/// A `.blend` a person made: the factory scene and a Statue with a Bevel.
fn human_scene() -> Scene {
    let mut scene = Scene::default_startup();
    let mut statue = Object::new(
        scene.next_uid,
        "Statue",
        ObjectType::Mesh,
        ObjectData::Mesh(vibe_transport::mock::primitive_counts("cube").unwrap()),
        "Collection",
    );
    statue.mesh_extent = vibe_transport::mock::primitive_extent("cube", 2.0).unwrap();
    statue
        .modifiers
        .push(Modifier::with_defaults("Bevel".into(), "BEVEL"));
    scene.next_uid += 1;
    scene.objects.insert("Statue".into(), statue);
    scene
}

fn with_files() -> MockBlender {
    let mut mock = MockBlender::new().with_files();
    assert!(configure(&mut mock, "agent", Some(SANDBOX), &[PROJECT]).is_ok());
    mock.add_file(&format!("{PROJECT}/scene.blend"), human_scene());
    mock.add_file(&format!("{PROJECT}/HUMAN_ONLY/h.blend"), human_scene());
    mock.add_file("/work/outside/x.blend", human_scene());
    mock.add_file("/work/project-evil/x.blend", human_scene());
    mock
}

fn refused_file(mock: &mut MockBlender, file: &str) -> vibe_errors::ErrorBody {
    let before = fingerprint(mock);
    let e = err(mock, "file.open", json!({"file": file}));
    assert_eq!(e.code, ErrorCode::ContractViolation, "{file}: {e:?}");
    assert_eq!(e.reason(), Some(Reason::Sandbox), "{file}: {e:?}");
    assert_eq!(e.details["field"], "file", "{file}");
    assert_eq!(fingerprint(mock), before, "{file}");
    e
}

#[test]
fn file_open_loads_a_blend_from_a_project_root_and_everything_in_it_is_the_humans() {
    let mut mock = with_files();
    assert!(
        ["file.read", "file.write"]
            .iter()
            .all(|f| mock.hello().blender.features.contains(*f))
    );
    ok(&mut mock, "mesh.create_cube", json!({"name": "Box"}));
    ok(
        &mut mock,
        "modifier.add",
        json!({"name": "Cube", "modifier_type": "BEVEL"}),
    );
    ok(&mut mock, "object.info", json!({"name": "Cube"}));
    let file = format!("{PROJECT}/scene.blend");
    let opened = ok(&mut mock, "file.open", json!({"file": file}));
    assert_eq!(
        opened,
        json!({"file": file, "scene": "Scene", "objects": 4,
               "_meta": {"events": [{"event": "file_loaded", "file": "scene.blend", "transaction_dropped": null}]}})
    );
    assert!(
        !mock.scene().objects.contains_key("Box"),
        "the old scene is gone"
    );
    assert!(mock.scene().objects.contains_key("Statue"));
    let status = ok(&mut mock, "kernel.status", json!({}));
    assert_eq!(status["file"], "scene.blend");
    for name in ["Statue", "Cube"] {
        let audit = ok(&mut mock, "object.audit_identity", json!({"name": name}));
        assert_eq!(audit["created_by_agent"], false);
    }
    locked(&mut mock, "object.delete", json!({"name": "Statue"}));
    locked(
        &mut mock,
        "modifier.remove",
        json!({"name": "Statue", "modifier_name": "Bevel"}),
    );
    // The old scene's Cube (uid 1, seen above) is not this Cube: a load makes new data-blocks.
    assert!(mock.scene().objects.values().all(|o| o.uid > 4));
    assert_eq!(
        mock.file(&file).unwrap().objects["Statue"].uid,
        4,
        "the file itself is unchanged"
    );
}

#[test]
fn file_open_is_refused_outside_the_roots_and_the_sandbox() {
    let mut mock = with_files();
    for file in [
        "/work/outside/x.blend",
        "/work/project-evil/x.blend",
        "/work/project/../outside/x.blend",
        "scene.blend",
        "project/scene.blend",
        "/work/project/notes.txt",
        "/work/project",
        "/work/x.blend",
        "/x.blend",
    ] {
        refused_file(&mut mock, file);
    }
    for file in [
        "/work/project/HUMAN_ONLY/h.blend",
        "/work/project/human_only/h.blend",
        "/work/project/sub/Human_Only./h.blend",
        "/work/project/HUMAN_ONLY/../scene.blend",
    ] {
        let e = refused_file(&mut mock, file);
        assert!(e.message.contains("HUMAN_ONLY"), "{file}: {}", e.message);
    }
    let e = err(
        &mut mock,
        "file.open",
        json!({"file": "/work/project/missing.blend"}),
    );
    assert_eq!(e.code, ErrorCode::NotFound);
    assert_eq!(e.details["field"], "file");
    // A path that stays inside after `..` is inside.
    ok(
        &mut mock,
        "file.open",
        json!({"file": "/work/project/sub/../scene.blend"}),
    );
    // No roots and no sandbox: nothing opens.
    assert!(configure(&mut mock, "agent", None, &[]).is_ok());
    refused_file(&mut mock, "/work/project/scene.blend");
    // Without files offered, file.open is not there at all.
    let mut plain = MockBlender::new();
    assert_eq!(
        err(
            &mut plain,
            "file.open",
            json!({"file": "/work/project/scene.blend"})
        )
        .code,
        ErrorCode::CapabilityMissing
    );
}

#[test]
fn file_open_is_refused_while_a_transaction_is_open() {
    let mut mock = with_files();
    ok(&mut mock, "transaction.begin", json!({}));
    let e = err(
        &mut mock,
        "file.open",
        json!({"file": "/work/project/scene.blend"}),
    );
    assert_eq!(e.code, ErrorCode::ContractViolation);
    assert_eq!(
        (
            e.details["rule"].as_str(),
            e.details["transaction"].as_str()
        ),
        (Some("transaction_open"), Some("tx-1"))
    );
    ok(&mut mock, "transaction.commit", json!({}));
    ok(
        &mut mock,
        "file.open",
        json!({"file": "/work/project/scene.blend"}),
    );
}

#[test]
fn file_save_keeps_the_scene_in_the_sandbox_and_file_open_loads_it_back() {
    let mut mock = with_files();
    ok(&mut mock, "mesh.create_cube", json!({"name": "Box"}));
    let saved = ok(&mut mock, "file.save", json!({"path": "out/a.blend"}));
    assert_eq!(saved["path"], "out/a.blend");
    assert!(saved["bytes"].as_u64().unwrap() > 0);
    assert!(mock.file("/work/sandbox/out/a.blend").is_some());
    ok(&mut mock, "object.delete", json!({"name": "Box"}));
    for bad in [
        "../x.blend",
        "/tmp/x.blend",
        "HUMAN_ONLY/x.blend",
        "human_only/x.blend",
        "a/../../x.blend",
        "a//x.blend",
    ] {
        let e = err(&mut mock, "file.save", json!({"path": bad}));
        assert_eq!(e.reason(), Some(Reason::Sandbox), "{bad}");
        assert_eq!(e.details["field"], "path", "{bad}");
    }
    let opened = ok(
        &mut mock,
        "file.open",
        json!({"file": "/work/sandbox/out/a.blend"}),
    );
    assert_eq!(opened["objects"], 4);
    assert_eq!(
        ok(&mut mock, "object.audit_identity", json!({"name": "Box"}))["created_by_agent"],
        false,
        "loaded: the human's"
    );
    assert_eq!(ok(&mut mock, "kernel.status", json!({}))["file"], "a.blend");
    // A save is a copy: the open file's name stays.
    ok(&mut mock, "file.save", json!({"path": "b.blend"}));
    assert_eq!(ok(&mut mock, "kernel.status", json!({}))["file"], "a.blend");
}

#[test]
fn configure_refuses_bad_folders_and_a_sandbox_that_overlaps_a_project_root() {
    let mut mock = with_files();
    for (sandbox, roots) in [
        (Some("relative/sandbox"), vec![]),
        (Some("/"), vec![]),
        (None, vec!["relative/root"]),
        (None, vec!["/"]),
        (Some("/work/project/sub"), vec![PROJECT]),
        (Some(SANDBOX), vec!["/work"]),
        (Some(PROJECT), vec![PROJECT]),
    ] {
        let answer = configure(&mut mock, "agent", sandbox, &roots);
        let e = answer
            .error()
            .unwrap_or_else(|| panic!("{sandbox:?} {roots:?} accepted"));
        assert_eq!(e.code, ErrorCode::InvalidArguments);
        assert_eq!(e.details["field"], "session");
    }
    // The earlier settings are kept.
    ok(&mut mock, "file.save", json!({"path": "kept.blend"}));
    assert!(mock.file("/work/sandbox/kept.blend").is_some());
    ok(
        &mut mock,
        "file.open",
        json!({"file": "/work/project/scene.blend"}),
    );
    assert!(
        configure(
            &mut mock,
            "agent",
            Some(SANDBOX),
            &[PROJECT, "/work/outside"]
        )
        .is_ok()
    );
    ok(
        &mut mock,
        "file.open",
        json!({"file": "/work/outside/x.blend"}),
    );
}

#[test]
fn a_file_a_tool_writes_must_be_new_or_a_plain_file_of_its_own() {
    let sandbox = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let mut mock = MockBlender::new().with_files();
    let session = SessionConfig::new("agent")
        .capabilities(["scene.read", "scene.write", "file.write", "render"])
        .sandbox(sandbox.path().to_str().unwrap())
        .time_per_tool_ms(1000);
    assert!(mock.configure(&session).is_ok());
    let render = |name: &str| json!({"path": name, "width": 16, "height": 16});
    // A hard link to a file outside: writing through it would change that file.
    std::fs::write(outside.path().join("precious.png"), b"keep").unwrap();
    std::fs::hard_link(
        outside.path().join("precious.png"),
        sandbox.path().join("linked.png"),
    )
    .unwrap();
    let e = err(&mut mock, "render.still", render("linked.png"));
    assert_eq!(e.reason(), Some(Reason::Sandbox));
    assert!(e.message.contains("hard links"), "{}", e.message);
    assert_eq!(
        std::fs::read(outside.path().join("precious.png")).unwrap(),
        b"keep"
    );
    // A FIFO would block the writer.
    let fifo = sandbox.path().join("pipe.png");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let e = err(&mut mock, "render.still", render("pipe.png"));
    assert_eq!(e.reason(), Some(Reason::Sandbox));
    assert!(e.message.contains("not a regular file"), "{}", e.message);
    // A plain file of its own is overwritten; a new one is made.
    std::fs::write(sandbox.path().join("old.png"), b"old").unwrap();
    ok(&mut mock, "render.still", render("old.png"));
    ok(&mut mock, "render.still", render("new.png"));
    assert!(
        std::fs::read(sandbox.path().join("old.png"))
            .unwrap()
            .starts_with(b"\x89PNG")
    );
}
