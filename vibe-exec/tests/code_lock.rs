//! The actuator lock for agent code: the bridge's comparison of inventories (hand-written
//! expectations), and the filter path through the pipeline over MockBlender's twin.

mod support;

use serde_json::{Value, json};
use support::*;
use vibe_exec::CreatedRegistry;
use vibe_exec::code::lock::{LockViolation, violations};
use vibe_transport::MockBlender;
use vibe_transport::mock::Scene;

fn inventory(objects: &[(&str, Option<&str>, &[&str], bool)]) -> Value {
    let listed: Vec<Value> = objects
        .iter()
        .map(|(name, data, collections, in_scene)| {
            json!({"name": name, "data": data, "collections": collections, "in_scene": in_scene})
        })
        .collect();
    json!({ "objects": listed })
}

fn factory() -> Value {
    inventory(&[
        ("Camera", Some("Camera"), &["Collection"], true),
        ("Cube", Some("Cube"), &["Collection"], true),
        ("Light", Some("Light"), &["Collection"], true),
    ])
}

fn v(name: &str, what: &str) -> LockViolation {
    LockViolation {
        name: name.into(),
        what: what.into(),
    }
}

#[test]
fn each_way_of_taking_an_object_is_named() {
    let none = CreatedRegistry::default();
    let deleted = inventory(&[
        ("Camera", Some("Camera"), &["Collection"], true),
        ("Light", Some("Light"), &["Collection"], true),
    ]);
    assert_eq!(
        violations(&factory(), &deleted, &none),
        [v("Cube", "deleted")]
    );
    let renamed = inventory(&[
        ("Camera", Some("Camera"), &["Collection"], true),
        ("junk", Some("Cube"), &["Collection"], true),
        ("Light", Some("Light"), &["Collection"], true),
    ]);
    assert_eq!(
        violations(&factory(), &renamed, &none),
        [v("Cube", "renamed to \"junk\"")]
    );
    let unlinked = inventory(&[
        ("Camera", Some("Camera"), &[], false),
        ("Cube", Some("Cube"), &["Collection"], true),
        ("Light", Some("Light"), &["Collection"], true),
    ]);
    assert_eq!(
        violations(&factory(), &unlinked, &none),
        [v("Camera", "unlinked from the scene")]
    );
    let moved = inventory(&[
        ("Camera", Some("Camera"), &["Collection"], true),
        ("Cube", Some("Cube"), &["Props"], true),
        ("Light", Some("Light"), &["Collection"], true),
    ]);
    assert_eq!(
        violations(&factory(), &moved, &none),
        [v("Cube", "unlinked from Collection")]
    );
    let data = inventory(&[
        ("Camera", Some("Camera"), &["Collection"], true),
        ("Cube", None, &["Collection"], true),
        ("Light", Some("Other"), &["Collection"], true),
    ]);
    assert_eq!(
        violations(&factory(), &data, &none),
        [
            v("Cube", "object data removed"),
            v("Light", "object data replaced by \"Other\"")
        ]
    );
    let everything = inventory(&[]);
    assert_eq!(violations(&factory(), &everything, &none).len(), 3);
}

#[test]
fn additions_edits_and_the_agents_own_objects_are_free() {
    let none = CreatedRegistry::default();
    let grown = inventory(&[
        ("Box", Some("Box"), &["Collection"], true),
        ("Camera", Some("Camera"), &["Collection", "Rig"], true),
        ("Cube", Some("Cube"), &["Collection"], true),
        ("Light", Some("Light"), &["Collection"], true),
    ]);
    assert!(violations(&factory(), &grown, &none).is_empty());
    let mine = CreatedRegistry::from_names(["Cube"]);
    let gone = inventory(&[
        ("Camera", Some("Camera"), &["Collection"], true),
        ("Light", Some("Light"), &["Collection"], true),
    ]);
    assert!(violations(&factory(), &gone, &mine).is_empty());
}

/// A code handler that removes the Cube from MockBlender's scene.
fn deleting_mock() -> MockBlender {
    MockBlender::new().with_code_handler(Box::new(|code, scene: &mut Scene| {
        if code.contains("remove") {
            scene.objects.remove("Cube");
        }
        if code.contains("make") {
            let mut made = scene.objects["Light"].clone();
            made.uid = 1_000;
            made.name = "Lamp".into();
            scene.objects.insert("Lamp".into(), made);
        }
        Ok(String::new())
    }))
}

#[tokio::test]
async fn the_filter_refuses_code_that_deletes_the_humans_cube_and_learns_what_code_made() {
    let (_transport, builder) = builder(deleting_mock(), None, &["code_exec"]);
    let pipeline = builder.code_gate().start().await.unwrap();
    let before = pipeline.call("scene.snapshot", json!({})).await;
    let refused = pipeline
        .call(
            "python.exec",
            json!({"code": "import bpy\nbpy.data.objects.remove(bpy.data.objects['Cube'])"}),
        )
        .await;
    let error = refused.error().expect("refused");
    assert_eq!(error.details["reason"], "actuator_lock", "{error:?}");
    assert_eq!(
        error.details["violations"],
        json!([{"name": "Cube", "what": "deleted"}])
    );
    let after = pipeline.call("scene.snapshot", json!({})).await;
    assert_eq!(
        before.result().unwrap()["content_fingerprint"],
        after.result().unwrap()["content_fingerprint"]
    );
    let made = pipeline
        .call("python.exec", json!({"code": "make = 1"}))
        .await;
    assert_eq!(made.result().unwrap()["created"], json!(["Lamp"]));
    // The bridge learned it: the typed delete of the agent's own object passes the lock.
    let deleted = pipeline
        .call("object.delete", json!({"name": "Lamp"}))
        .await;
    assert!(deleted.is_ok(), "{deleted:?}");
}

#[test]
fn the_humans_other_data_blocks_modifiers_and_vertex_groups_are_named() {
    let body = |modifiers: &[&str], groups: &[&str], blocks: &[(&str, &str)]| {
        let blocks: Vec<Value> = blocks
            .iter()
            .map(|(kind, name)| json!({"kind": kind, "name": name}))
            .collect();
        json!({
            "objects": [{"name": "Body", "data": "BodyMesh", "collections": ["Collection"], "in_scene": true,
                         "modifiers": modifiers, "vertex_groups": groups}],
            "blocks": blocks,
        })
    };
    let before = body(
        &["Armature"],
        &["spine"],
        &[
            ("material", "Skin"),
            ("action", "Walk"),
            ("material", "Paint"),
        ],
    );
    let after = body(&[], &[], &[("material", "Skin")]);
    // The agent made `Paint` (a typed material.ensure_principled): it may remove it.
    let created = created_with_material("Paint");
    assert!(created.owns(vibe_contract::DataKind::Material, None, "Paint"));
    assert!(!created.owns(vibe_contract::DataKind::Material, None, "Skin"));
    assert_eq!(
        violations(&before, &after, &created),
        [
            v("Body", "lost its modifier \"Armature\""),
            v("Body", "lost its vertex group \"spine\""),
            v("Walk", "(action) deleted or renamed"),
        ]
    );
    // Nothing lost: nothing named.
    assert!(violations(&before, &before, &created).is_empty());
}

/// A registry where the agent made the material `name` (through the pipeline, as the agent
/// would: material.ensure_principled over MockBlender).
fn created_with_material(name: &str) -> CreatedRegistry {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let rig = rig(MockBlender::new()).await;
        let made = rig
            .pipeline
            .call("material.ensure_principled", json!({"name": name}))
            .await;
        assert!(made.is_ok(), "{made:?}");
        rig.pipeline.session().created()
    })
}

#[test]
fn the_humans_constraints_are_named() {
    let body = |constraints: &[&str]| {
        json!({"objects": [{"name": "Head", "data": "HeadMesh", "collections": ["Collection"],
                            "in_scene": true, "constraints": constraints}]})
    };
    let none = CreatedRegistry::default();
    assert_eq!(
        violations(&body(&["Aim", "Limit"]), &body(&["Limit"]), &none),
        [v("Head", "lost its constraint \"Aim\"")]
    );
}

#[test]
fn an_object_is_the_agents_only_when_the_kernel_agrees() {
    // The person renamed the agent's `Prop` and made a new `Prop`: the bridge's record (by name)
    // says `Prop` is the agent's, the kernel (by identity) says it is not.
    let scene = |prop: bool, kernel_says: bool| {
        let mut objects = vec![
            json!({"name": "Crate", "data": "CrateMesh", "collections": ["Collection"],
                                      "in_scene": true, "created": true}),
        ];
        if prop {
            objects.push(
                json!({"name": "Prop", "data": "PropMesh", "collections": ["Collection"],
                                "in_scene": true, "created": kernel_says}),
            );
        }
        json!({ "objects": objects })
    };
    let created = CreatedRegistry::from_names(["Prop", "Crate"]);
    assert_eq!(
        violations(&scene(true, false), &scene(false, false), &created),
        [v("Prop", "deleted")]
    );
    // Both agree: the agent's own object is free; a kernel without a verdict leaves the record.
    assert!(violations(&scene(true, true), &scene(false, true), &created).is_empty());
    let no_verdict = json!({"objects": [{"name": "Prop", "data": "PropMesh", "collections": ["Collection"], "in_scene": true}]});
    assert!(violations(&no_verdict, &json!({"objects": []}), &created).is_empty());
}
