//! `file.import` through the pipeline: the registry declares its new objects created
//! (`objects.*`), so the bridge's actuator lock treats them as the agent's, while the human's
//! objects stay protected.

mod support;

use std::sync::Arc;

use serde_json::json;
use support::*;
use vibe_transport::{MockBlender, MockTransport, Transport};

#[tokio::test]
async fn imported_objects_are_the_agents_and_the_humans_stay_protected() {
    let sandbox = tempfile::tempdir().unwrap();
    let sandbox_path = std::fs::canonicalize(sandbox.path()).unwrap();
    let transport: Arc<dyn Transport> =
        Arc::new(MockTransport::new(MockBlender::new().with_files()));
    let agreement = agreement_for(
        transport.hello(),
        "exchange",
        None,
        &["file.read", "file.write"],
    );
    let pipeline = vibe_exec::Pipeline::builder(agreement, transport)
        .sandbox(vibe_exec::Sandbox::new(&sandbox_path).unwrap())
        .start()
        .await
        .unwrap();
    let exported = pipeline
        .call(
            "file.export",
            json!({"path": "models/cube.obj", "objects": ["Cube"]}),
        )
        .await;
    let exported = exported.result().expect("exported");
    assert_eq!(exported["format"], "obj");
    let on_disk = std::fs::metadata(sandbox_path.join("models/cube.obj")).unwrap();
    assert_eq!(exported["bytes"], on_disk.len());
    let imported = pipeline
        .call("file.import", json!({"path": "models/cube.obj"}))
        .await;
    // The factory Cube keeps its name; the import gets Blender's counter name.
    assert_eq!(
        imported.result().expect("imported")["objects"],
        json!(["Cube.001"])
    );
    let renamed = pipeline
        .call(
            "object.rename",
            json!({"name": "Cube.001", "new_name": "Imported"}),
        )
        .await;
    assert!(renamed.is_ok(), "{renamed:?}");
    let deleted = pipeline
        .call("object.delete", json!({"name": "Imported"}))
        .await;
    assert!(deleted.is_ok(), "{deleted:?}");
    let human = pipeline
        .call("object.delete", json!({"name": "Cube"}))
        .await;
    let error = human.error().expect("the human's Cube is protected");
    assert_eq!(error.details["reason"], "actuator_lock");
}

#[test]
fn the_registry_records_imported_materials_as_the_agents() {
    // The kernel answers the materials an import made (MockBlender's importers make none): the
    // effects record them as created, so the bridge's lock for agent code lets it delete them.
    let registries = vibe_contract::default_registries().unwrap();
    let spec = registries.tools.get("file.import").unwrap();
    let result = json!({"format": "obj", "objects": ["Tri"], "materials": ["Skin", "Skin.001"]});
    let mut recorded: Vec<(vibe_contract::DataKind, Vec<&str>)> = spec
        .effects
        .iter()
        .filter_map(|e| Some((e.kind?, e.in_results(&result))))
        .collect();
    recorded.sort_by_key(|(kind, _)| kind.as_str());
    assert_eq!(
        recorded,
        vec![
            (vibe_contract::DataKind::Material, vec!["Skin", "Skin.001"]),
            (vibe_contract::DataKind::Object, vec!["Tri"]),
        ]
    );
}
