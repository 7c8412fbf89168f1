//! Seed 000's scenario on real Blenders (bpy 5.0.1 and Blender 3.4 `-b`): a human's character
//! file (an armature with an action, a mesh with vertex groups, an Armature modifier and a
//! material, a startup script) is saved with plain bpy into a read-only project root; a jailed,
//! supervised headless session opens it through the pipeline. Every way a typed tool can
//! remove, unlink or rename one of its data-blocks (enumerated from the registry's declared
//! effects, not by hand) is refused and the scene's fingerprint is unchanged; the agent's own
//! objects stay free; the file's script never ran; `file.save` writes to the sandbox only and
//! the file in the root is unchanged on disk.
//!
//! Live: `#[ignore = "needs VIBE_LIVE"]`, run with `VIBE_LIVE=1 VIBE_BPY_PYTHON=...
//! VIBE_BLENDER=... cargo test -p vibe-exec --test live_human_work -- --include-ignored`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use vibe_contract::*;
use vibe_exec::{Pipeline, ProjectRoot, Sandbox};
use vibe_transport::jail::Jail;
use vibe_transport::{SupervisedKernel, Transport};

mod support;
use support::{jailed_kernels, negotiated, required};
#[path = "../../vibe-transport/tests/support/blender.rs"]
mod blender;
use blender::headless_script;

/// Builds the character with plain bpy and saves it to `argv[-2]`; its startup script would
/// write `argv[-1]` if Python auto-execution were on when the file is opened.
const BUILD: &str = r#"
import sys
import bpy

out, marker = sys.argv[-2], sys.argv[-1]
bpy.ops.wm.read_factory_settings(use_empty=True)
arm_data = bpy.data.armatures.new("RigData")
rig = bpy.data.objects.new("Rig", arm_data)
bpy.context.scene.collection.objects.link(rig)
bpy.context.view_layer.objects.active = rig
bpy.ops.object.mode_set(mode="EDIT")
bone = arm_data.edit_bones.new("spine")
bone.head, bone.tail = (0, 0, 0), (0, 0, 1)
bpy.ops.object.mode_set(mode="OBJECT")
rig.animation_data_create()
action = bpy.data.actions.new("Walk")
action.use_fake_user = True
rig.animation_data.action = action
rig.location = (0, 0, 0)
rig.keyframe_insert("location", frame=1)
mesh = bpy.data.meshes.new("BodyMesh")
mesh.from_pydata([(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)], [], [(0, 1, 2), (0, 1, 3)])
body = bpy.data.objects.new("Body", mesh)
bpy.context.scene.collection.objects.link(body)
body.vertex_groups.new(name="spine").add([0, 1, 2, 3], 1.0, "REPLACE")
body.vertex_groups.new(name="head")
modifier = body.modifiers.new("Armature", "ARMATURE")
modifier.object = rig
body.parent = rig
skin = bpy.data.materials.new("Skin")
body.data.materials.append(skin)
props = bpy.data.collections.new("Props")
bpy.context.scene.collection.children.link(props)
prop = bpy.data.objects.new("Lamp", bpy.data.lights.new("LampLight", "POINT"))
props.objects.link(prop)
script = bpy.data.texts.new("startup.py")
script.write("open(%r, 'w').write('ran')\n" % marker)
script.use_module = True
bpy.ops.wm.save_as_mainfile(filepath=out)
"#;

/// Saves the character into `root` with the target's own Blender.
fn build_character(target: &str, root: &Path, marker: &Path) -> PathBuf {
    let script = root.parent().unwrap().join("build_character.py");
    std::fs::write(&script, BUILD).unwrap();
    let file = root.join("character.blend");
    let status = if target == "bpy" {
        std::process::Command::new(required("VIBE_BPY_PYTHON"))
            .arg(&script)
            .arg(&file)
            .arg(marker)
            .output()
            .unwrap()
    } else {
        headless_script(&required("VIBE_BLENDER"), &script)
            .arg("--")
            .arg(&file)
            .arg(marker)
            .output()
            .unwrap()
    };
    assert!(
        status.status.success() && file.exists(),
        "{target}: building the character failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    file
}

struct Live {
    pipeline: Pipeline,
    _kernel: Arc<SupervisedKernel>,
}

async fn session(target: &str, sandbox: &Path, root: &Path) -> Live {
    let jail = Jail::new(sandbox).read_root(root);
    let factory = jailed_kernels(target, jail);
    let kernel = Arc::new(
        SupervisedKernel::start(factory, default_registries().unwrap().tools)
            .await
            .unwrap(),
    );
    let agreement = negotiated(
        "live-human-work",
        &[
            "scene.read",
            "scene.write",
            "transactions",
            CAP_FILE_READ,
            CAP_FILE_WRITE,
        ],
        None,
        &BridgePolicy::default(),
        &kernel.hello().blender,
    );
    let transport: Arc<dyn Transport> = kernel.clone();
    let pipeline = Pipeline::builder(agreement, transport)
        .sandbox(Sandbox::new(sandbox).unwrap())
        .project_root(ProjectRoot::new(root).unwrap())
        .start()
        .await
        .unwrap();
    Live {
        pipeline,
        _kernel: kernel,
    }
}

async fn fingerprint(p: &Pipeline) -> String {
    let snapshot = p.call("scene.snapshot", json!({})).await;
    let result = snapshot.result().expect("a snapshot");
    vibe_transport::snapshot::content_fingerprint(result)
        .expect("a fingerprint")
        .to_owned()
}

/// Every call a typed tool could make to remove, rename or unlink one of `objects` (with its
/// `modifiers`), built from the registry's declared effects: one call per protected effect and
/// data-block of its kind, with the other required arguments filled in.
fn every_protected_call(objects: &[&str], modifiers: &[(&str, &str)]) -> Vec<(String, Value)> {
    let registry = default_registries().unwrap().tools;
    let mut calls = Vec::new();
    for spec in registry.tools() {
        for effect in spec.effects.iter().filter(|e| e.action.is_protected()) {
            let (Some(kind), Some(param)) = (effect.kind, effect.param.as_deref()) else {
                continue;
            };
            let targets: Vec<(Option<&str>, &str)> = match kind {
                DataKind::Object => objects.iter().map(|o| (None, *o)).collect(),
                DataKind::Modifier => modifiers.iter().map(|(o, m)| (Some(*o), *m)).collect(),
                other => panic!("no human data-block of kind {other:?} in this test"),
            };
            for (owner, name) in targets {
                let mut params = serde_json::Map::new();
                params.insert(param.into(), json!(name));
                if let (Some(owner_param), Some(owner)) = (effect.owner.as_deref(), owner) {
                    params.insert(owner_param.into(), json!(owner));
                }
                for required in spec.inputs["required"].as_array().into_iter().flatten() {
                    let key = required.as_str().unwrap();
                    params.entry(key).or_insert_with(|| match key {
                        "new_name" => json!("AgentName"),
                        "collection" => json!("Props"),
                        other => panic!("{}: no filler for {other}", spec.name),
                    });
                }
                // The effect must apply: an `unless` value is avoided by leaving the argument
                // at its default, which the registry says applies.
                let params = Value::Object(params);
                assert!(
                    effect.applies(&params, &spec.inputs),
                    "{} {params}",
                    spec.name
                );
                calls.push((spec.name.clone(), params));
            }
        }
    }
    calls
}

async fn the_humans_file(target: &str) {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("project");
    let sandbox = temp.path().join("sandbox");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&sandbox).unwrap();
    let marker = sandbox.join("script-ran");
    let file = build_character(target, &root, &marker);
    let on_disk = std::fs::read(&file).unwrap();
    let live = session(target, &sandbox, &root).await;
    let p = &live.pipeline;

    let opened = p.call("file.open", json!({"file": file})).await;
    assert!(opened.is_ok(), "{target}: {opened:?}");
    assert!(
        !marker.exists(),
        "{target}: the file's script ran: auto-execution was on"
    );
    let before = fingerprint(p).await;

    let calls = every_protected_call(&["Rig", "Body", "Lamp"], &[("Body", "Armature")]);
    assert!(calls.len() >= 9, "{calls:?}");
    for (tool, params) in &calls {
        let answer = p.call(tool, params.clone()).await;
        let error = answer
            .error()
            .unwrap_or_else(|| panic!("{target}: {tool} {params} was allowed"));
        assert_eq!(
            error.details["reason"], "actuator_lock",
            "{target}: {tool} {params}: {error:?}"
        );
    }
    assert_eq!(
        fingerprint(p).await,
        before,
        "{target}: the human's scene changed"
    );
    let info = p.call("object.info", json!({"name": "Body"})).await;
    let body = info.result().unwrap();
    assert_eq!(body["modifiers"][0]["name"], "Armature", "{target}");
    assert_eq!(body["materials"], json!(["Skin"]), "{target}");

    // Property edits stay allowed; the agent's own objects are free.
    assert!(
        p.call("object.move", json!({"name": "Lamp", "delta": [0, 0, 1]}))
            .await
            .is_ok()
    );
    for (tool, params) in [
        ("mesh.create_cube", json!({"name": "Crate"})),
        (
            "modifier.add",
            json!({"name": "Crate", "modifier_type": "BEVEL"}),
        ),
        (
            "modifier.add",
            json!({"name": "Body", "modifier_type": "SUBSURF", "levels": 1, "modifier_name": "Smooth"}),
        ),
        (
            "modifier.remove",
            json!({"name": "Body", "modifier_name": "Smooth"}),
        ),
        ("object.rename", json!({"name": "Crate", "new_name": "Box"})),
        (
            "object.assign_collection",
            json!({"name": "Box", "collection": "Props"}),
        ),
        ("object.delete", json!({"name": "Box"})),
    ] {
        let answer = p.call(tool, params.clone()).await;
        assert!(answer.is_ok(), "{target}: {tool} {params}: {answer:?}");
    }

    // Writes go to the sandbox only; the file in the root is unchanged.
    let escape = p
        .call("file.save", json!({"path": "../project/character.blend"}))
        .await;
    assert_eq!(
        escape.error().unwrap().details["reason"],
        "sandbox",
        "{target}"
    );
    let saved = p.call("file.save", json!({"path": "copy.blend"})).await;
    assert!(saved.is_ok(), "{target}: {saved:?}");
    assert!(sandbox.join("copy.blend").exists());
    assert_eq!(
        std::fs::read(&file).unwrap(),
        on_disk,
        "{target}: the project file changed"
    );
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_bpy_the_humans_character_file_survives_the_agent() {
    the_humans_file("bpy").await;
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_blender_the_humans_character_file_survives_the_agent() {
    the_humans_file("blender").await;
}
