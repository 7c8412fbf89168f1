//! The human's own work through the pipeline: one actuator lock for every data-block the agent
//! did not create (objects, their modifiers), declared per tool in the registry, and
//! `file.open` from read-only project roots. Refusals happen in the bridge, before the kernel
//! is reached (the transport's call count proves it).

mod support;

use serde_json::json;
use support::*;
use vibe_exec::{PipelineError, ProjectRoot, Sandbox};
use vibe_transport::MockBlender;
use vibe_transport::mock::{Modifier, Object, ObjectData, ObjectType};

/// The human's character: a mesh `Body` with an `Armature` modifier, and a rig.
fn character() -> MockBlender {
    let mut mock = with_armature(MockBlender::new());
    let scene = mock.scene_mut();
    let uid = scene.next_uid;
    scene.next_uid += 1;
    let mut body = Object::new(
        uid,
        "Body",
        ObjectType::Mesh,
        ObjectData::Mesh(vibe_transport::mock::MeshCounts {
            vertices: 8,
            edges: 12,
            polygons: 6,
        }),
        "Collection",
    );
    body.modifiers
        .push(Modifier::with_defaults("Armature".into(), "ARMATURE"));
    scene.objects.insert("Body".into(), body);
    mock
}

fn refused(answer: &vibe_errors::Envelope) -> &vibe_errors::ErrorBody {
    answer
        .error()
        .unwrap_or_else(|| panic!("expected a refusal: {answer:?}"))
}

#[tokio::test]
async fn every_way_to_remove_rename_or_unlink_the_humans_data_is_refused_before_blender() {
    let rig = rig(character()).await;
    let p = &rig.pipeline;
    let cases = [
        (
            "object.delete",
            json!({"name": "Body"}),
            "remove",
            "object",
            "Body",
            "name",
        ),
        (
            "object.rename",
            json!({"name": "Armature", "new_name": "Rig"}),
            "rename",
            "object",
            "Armature",
            "name",
        ),
        (
            "object.assign_collection",
            json!({"name": "Body", "collection": "Collection"}),
            "unlink",
            "object",
            "Body",
            "name",
        ),
        (
            "object.assign_collection",
            json!({"name": "Body", "collection": "Collection", "mode": "move"}),
            "unlink",
            "object",
            "Body",
            "name",
        ),
        (
            "modifier.remove",
            json!({"name": "Body", "modifier_name": "Armature"}),
            "remove",
            "modifier",
            "Armature",
            "modifier_name",
        ),
    ];
    let before = rig.transport.scene();
    for (tool, params, rule, kind, name, field) in cases {
        let sent = rig.transport.count();
        let answer = p.call(tool, params.clone()).await;
        let error = refused(&answer);
        assert_eq!(error.details["reason"], "actuator_lock", "{tool} {params}");
        assert_eq!(error.details["rule"], rule, "{tool}");
        assert_eq!(error.details["kind"], kind, "{tool}");
        assert_eq!(error.details["name"], name, "{tool}");
        assert_eq!(error.details["field"], field, "{tool}");
        assert!(error.message.contains(name), "{}", error.message);
        assert_eq!(rig.transport.count(), sent, "{tool} never reached Blender");
    }
    assert_eq!(
        rig.transport.scene(),
        before,
        "the human's scene is unchanged"
    );
    // Property edits stay allowed, and so does linking into another collection.
    assert!(
        p.call("object.move", json!({"name": "Body", "delta": [0, 0, 1]}))
            .await
            .is_ok()
    );
    assert!(
        p.call("scene.create_collection", json!({"name": "Extra"}))
            .await
            .is_ok()
    );
    let linked = p
        .call(
            "object.assign_collection",
            json!({"name": "Body", "collection": "Extra", "mode": "link"}),
        )
        .await;
    assert!(linked.is_ok(), "{linked:?}");
}

#[tokio::test]
async fn the_agents_own_data_stays_free_and_follows_its_renames() {
    let rig = rig(character()).await;
    let p = &rig.pipeline;
    // A modifier the agent adds to the human's mesh is the agent's.
    let added = p
        .call(
            "modifier.add",
            json!({"name": "Body", "modifier_type": "BEVEL", "modifier_name": "Edge"}),
        )
        .await;
    assert!(added.is_ok(), "{added:?}");
    let removed = p
        .call(
            "modifier.remove",
            json!({"name": "Body", "modifier_name": "Edge"}),
        )
        .await;
    assert!(removed.is_ok(), "{removed:?}");
    // Its own object, renamed: free under the new name, with its modifiers.
    assert!(
        p.call("mesh.create_cube", json!({"name": "Prop"}))
            .await
            .is_ok()
    );
    assert!(
        p.call(
            "modifier.add",
            json!({"name": "Prop", "modifier_type": "SUBSURF", "levels": 1})
        )
        .await
        .is_ok()
    );
    let renamed = p
        .call(
            "object.rename",
            json!({"name": "Prop", "new_name": "Crate"}),
        )
        .await;
    assert!(renamed.is_ok(), "{renamed:?}");
    let gone = p
        .call(
            "modifier.remove",
            json!({"name": "Crate", "modifier_name": "Subdivision"}),
        )
        .await;
    assert!(gone.is_ok(), "{gone:?}");
    assert!(
        p.call(
            "object.assign_collection",
            json!({"name": "Crate", "collection": "Collection"})
        )
        .await
        .is_ok()
    );
    assert!(
        p.call("object.delete", json!({"name": "Crate"}))
            .await
            .is_ok()
    );
    // The old name is nobody's now: a new object of the human's by that name stays locked.
    let ghost = p.call("object.delete", json!({"name": "Prop"})).await;
    assert_eq!(refused(&ghost).details["reason"], "actuator_lock");
}

#[tokio::test]
async fn a_material_or_collection_the_agent_only_ensured_is_not_its_own() {
    let rig = rig(character()).await;
    let p = &rig.pipeline;
    // `Material` exists in the factory scene: ensuring it does not make it the agent's.
    let ensured = p
        .call("material.ensure_principled", json!({"name": "Material"}))
        .await;
    assert_eq!(ensured.result().unwrap()["created"], false);
    let made = p
        .call("material.ensure_principled", json!({"name": "Paint"}))
        .await;
    assert_eq!(made.result().unwrap()["created"], true);
    let created = p.session().created();
    assert!(created.owns(vibe_contract::DataKind::Material, None, "Paint"));
    assert!(!created.owns(vibe_contract::DataKind::Material, None, "Material"));
    let collection = p
        .call("scene.create_collection", json!({"name": "Collection"}))
        .await;
    assert!(collection.error().is_some() || collection.result().unwrap()["created"] == false);
    assert!(
        !p.session()
            .created()
            .owns(vibe_contract::DataKind::Collection, None, "Collection")
    );
}

#[tokio::test]
async fn files_open_only_from_project_roots_or_the_sandbox() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("project");
    let sandbox = temp.path().join("sandbox");
    let elsewhere = temp.path().join("elsewhere");
    for dir in [&root, &sandbox, &elsewhere, &root.join("HUMAN_ONLY")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::os::unix::fs::symlink(&elsewhere, root.join("escape")).unwrap();
    // A fresh session per case: three sandbox refusals switch a session to read-only.
    let session = || async {
        let (transport, builder) = builder(character(), None, &["file.read", "file.write"]);
        let p = builder
            .sandbox(Sandbox::new(&sandbox).unwrap())
            .project_root(ProjectRoot::new(&root).unwrap())
            .start()
            .await
            .unwrap();
        (transport, p)
    };
    let root = std::fs::canonicalize(&root).unwrap();
    let elsewhere = std::fs::canonicalize(&elsewhere).unwrap();
    for (file, why) in [
        (elsewhere.join("a.blend"), "not inside a project root"),
        (root.join("escape/a.blend"), "not inside a project root"),
        (root.join("HUMAN_ONLY/a.blend"), "HUMAN_ONLY"),
        (root.join("human_only/a.blend"), "HUMAN_ONLY"),
        (root.join("../elsewhere/a.blend"), "\"..\""),
    ] {
        let (transport, p) = session().await;
        let answer = p.call("file.open", json!({"file": file})).await;
        let error = answer.error().unwrap_or_else(|| panic!("{file:?} opened"));
        assert_eq!(error.details["reason"], "sandbox", "{file:?}: {error:?}");
        assert_eq!(error.details["field"], "file");
        assert!(error.message.contains(why), "{file:?}: {}", error.message);
        assert_eq!(transport.count(), 0, "{file:?} never reached Blender");
    }
    let (_transport, p) = session().await;
    let relative = p
        .call("file.open", json!({"file": "project/a.blend"}))
        .await;
    assert_eq!(relative.error().unwrap().details["reason"], "schema");
    let not_blend = p
        .call("file.open", json!({"file": root.join("a.txt")}))
        .await;
    assert_eq!(not_blend.error().unwrap().details["reason"], "schema");
}

#[tokio::test]
async fn a_sandbox_overlapping_a_project_root_is_refused_at_start() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("project");
    let sandbox = root.join("renders");
    std::fs::create_dir_all(&sandbox).unwrap();
    let (_transport, builder) = builder(MockBlender::new(), None, &["file.read", "file.write"]);
    let started = builder
        .sandbox(Sandbox::new(&sandbox).unwrap())
        .project_root(ProjectRoot::new(&root).unwrap())
        .start()
        .await;
    assert!(
        matches!(started, Err(PipelineError::Overlap { .. })),
        "{started:?}"
    );
    assert!(
        ProjectRoot::new("/").is_err(),
        "the filesystem root is no project root"
    );
}
