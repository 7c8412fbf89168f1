//! The actuator lock holds for agent code (seed 000's case study) on bpy 5.0.1 and Blender 3.4
//! `-b`, through the public pipeline, with the boundary (a jailed `SupervisedKernel` retiring
//! every kernel that ran agent code, the bridge deciding on a fresh kernel's inventory).
//!
//! The disarming runs use a test build of the session: the bridge's gate in log-only mode and
//! the kernel's gate off (`VIBE_KERNEL_GATE=off`, honoured only in a jail), so the tests do not
//! depend on finding a gate bypass. Live tests: `#[ignore = "needs VIBE_LIVE"]`, run with
//! `VIBE_LIVE=1 VIBE_BPY_PYTHON=... VIBE_BLENDER=... cargo test --test live_code_lock -- --include-ignored`.

use std::sync::Arc;

use serde_json::{Value, json};
use vibe_contract::*;
use vibe_exec::Pipeline;
use vibe_transport::jail::Jail;
use vibe_transport::{SupervisedKernel, Transport};

mod support;
use support::{jailed_kernels, negotiated, required};

/// Ways agent code takes the factory Cube (which the agent did not create) away.
const DELETIONS: [(&str, &str); 11] = [
    (
        "objects.remove",
        "bpy.data.objects.remove(bpy.data.objects['Cube'])",
    ),
    (
        "ops.delete",
        "for o in bpy.context.scene.objects:\n    o.select_set(o.name == 'Cube')\nbpy.context.view_layer.objects.active = bpy.data.objects['Cube']\nbpy.ops.object.delete()",
    ),
    (
        "batch_remove",
        "bpy.data.batch_remove(list(bpy.data.objects))",
    ),
    (
        "mesh removal",
        "bpy.data.meshes.remove(bpy.data.meshes['Cube'])",
    ),
    (
        "unlink everywhere",
        "ob = bpy.data.objects['Cube']\nfor c in list(ob.users_collection):\n    c.objects.unlink(ob)",
    ),
    (
        "collection removal",
        "bpy.data.collections.remove(bpy.data.collections['Collection'])",
    ),
    (
        "unlink then purge",
        "ob = bpy.data.objects['Cube']\nfor c in list(ob.users_collection):\n    c.objects.unlink(ob)\nbpy.data.orphans_purge(do_recursive=True)",
    ),
    ("rename", "bpy.data.objects['Cube'].name = 'junk'"),
    (
        "material removal",
        "bpy.data.materials.remove(bpy.data.materials['Material'])",
    ),
    (
        "material rename (its own vertex group made and removed on the way)",
        "ob = bpy.data.objects['Cube']\nob.vertex_groups.new(name='g')\nob.vertex_groups.remove(ob.vertex_groups['g'])\nbpy.data.materials['Material'].name = 'Other'",
    ),
    (
        "data swap",
        "bpy.data.objects['Cube'].data = bpy.data.meshes.new('Other')",
    ),
];

/// Agent code that disarms every check it can reach in its own process first: the kernel's
/// in-kernel lock, its code gate, its check of handlers and classes, the rollback of failed
/// calls.
const DISARM: &str = "import sys\nlock = sys.modules['vibe_kernel.lock']\nlock.violations = lambda *a, **k: []\n\
lock.part_violations = lambda *a, **k: []\nlock.block_violations = lambda *a, **k: []\n\
codeexec = sys.modules['vibe_kernel.codeexec']\ncodeexec.check = lambda tree: None\n\
kernel_state = sys.modules['vibe_kernel.kernel_state']\nkernel_state.Watch.changes = lambda *a, **k: []\n";

struct Live {
    pipeline: Pipeline,
    kernel: Arc<SupervisedKernel>,
    /// Removed when the test ends, passed or failed.
    sandbox: tempfile::TempDir,
}

async fn live(target: &str, disarmed: bool) -> Live {
    let sandbox = tempfile::Builder::new()
        .prefix(&format!("vibe-live-lock-{target}-{disarmed}-"))
        .tempdir()
        .unwrap();
    let mut jail = Jail::new(sandbox.path());
    if disarmed {
        jail = jail.env("VIBE_KERNEL_GATE", "off");
    }
    let factory = jailed_kernels(target, jail);
    let mut kernel = SupervisedKernel::start(factory, default_registries().unwrap().tools)
        .await
        .unwrap();
    if disarmed {
        // The disarmed runs go through the warm spare; the armed ones start each kernel.
        kernel = kernel.with_warm_spare().await;
    }
    let kernel = Arc::new(kernel);
    let mut constraints = None;
    let mut policy = BridgePolicy::default();
    policy.capabilities.insert(CAP_CODE_EXEC.into());
    if disarmed {
        let log_only = Constraints {
            code_gate: CodeGateMode::LogOnly,
            ..Constraints::default()
        };
        constraints = Some(log_only.clone());
        policy.constraints = log_only;
    }
    let agreement = negotiated(
        "live-lock",
        &["scene.read", "scene.write", "transactions", CAP_CODE_EXEC],
        constraints,
        &policy,
        &kernel.hello().blender,
    );
    let transport: Arc<dyn vibe_transport::Transport> = kernel.clone();
    let pipeline = Pipeline::builder(agreement, transport)
        .code_gate()
        .start()
        .await
        .unwrap();
    Live {
        pipeline,
        kernel,
        sandbox,
    }
}

async fn fingerprint(p: &Pipeline) -> Value {
    p.call("scene.snapshot", json!({})).await.result().unwrap()["content_fingerprint"].clone()
}

async fn every_deletion_is_refused(target: &str, disarmed: bool) {
    let live = live(target, disarmed).await;
    let p = &live.pipeline;
    for (label, body) in DELETIONS {
        let before = fingerprint(p).await;
        let prefix = if disarmed { DISARM } else { "" };
        let code = format!("{prefix}import bpy\n{body}");
        let answer = p.call("python.exec", json!({ "code": code })).await;
        let error = answer.error().unwrap_or_else(|| {
            panic!("{target} {label} (disarmed: {disarmed}) was not refused: {answer:?}")
        });
        assert_eq!(
            error.details.get("reason").and_then(Value::as_str),
            Some("actuator_lock"),
            "{target} {label}: {error:?}"
        );
        assert!(
            ["Cube", "Camera", "Material", "Collection"]
                .iter()
                .any(|name| error.message.contains(name)),
            "{error:?}"
        );
        assert_eq!(
            fingerprint(p).await,
            before,
            "{target} {label}: the scene is as it was"
        );
        assert!(p.call("object.info", json!({"name": "Cube"})).await.is_ok());
    }
    a_forged_tag_does_not_make_it_the_agents(p, target).await;
    live.kernel.close().await.unwrap();
}

/// Agent code copies the tag the kernel puts on the agent's objects onto the person's Cube (a
/// property edit, allowed): the kernel that loads the scene next believes the tag, the bridge's
/// record does not, and the Cube stays protected from code and from typed tools.
async fn a_forged_tag_does_not_make_it_the_agents(p: &Pipeline, target: &str) {
    let made = p
        .call("python.exec", json!({"code": "import bpy\nbpy.data.objects.new('Probe', None)\nbpy.context.scene.collection.objects.link(bpy.data.objects['Probe'])"}))
        .await;
    assert!(made.is_ok(), "{target}: {made:?}");
    let forged = p
        .call("python.exec", json!({"code": "import bpy\ntag = bpy.data.objects['Probe']['vibe_created_by']\nbpy.data.objects['Cube']['vibe_created_by'] = tag\nprint(tag)"}))
        .await;
    assert!(forged.is_ok(), "{target}: {forged:?}");
    let before = fingerprint(p).await;
    let taken = p
        .call(
            "python.exec",
            json!({"code": "import bpy\nbpy.data.objects.remove(bpy.data.objects['Cube'])"}),
        )
        .await;
    let error = taken
        .error()
        .unwrap_or_else(|| panic!("{target}: {taken:?}"));
    assert_eq!(
        error.details.get("reason").and_then(Value::as_str),
        Some("actuator_lock"),
        "{target}: {error:?}"
    );
    let typed = p.call("object.delete", json!({"name": "Cube"})).await;
    let error = typed
        .error()
        .unwrap_or_else(|| panic!("{target}: {typed:?}"));
    assert_eq!(
        error.details.get("reason").and_then(Value::as_str),
        Some("actuator_lock"),
        "{target}: {error:?}"
    );
    assert_eq!(
        fingerprint(p).await,
        before,
        "{target}: the Cube is as it was"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn live_bpy_agent_code_cannot_take_the_humans_objects() {
    every_deletion_is_refused("bpy", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn live_blender_agent_code_cannot_take_the_humans_objects() {
    every_deletion_is_refused("blender", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn live_bpy_disarmed_code_cannot_take_the_humans_objects() {
    every_deletion_is_refused("bpy", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn live_blender_disarmed_code_cannot_take_the_humans_objects() {
    every_deletion_is_refused("blender", true).await;
}

/// Deferred purges (a timer, a handler), files overwritten before a failure, and the agent's
/// own objects, with every check in the kernel disarmed.
async fn nothing_outlives_the_call(target: &str) {
    let live = live(target, true).await;
    let p = &live.pipeline;
    let deferred = format!(
        "{DISARM}import bpy\n\
         def purge(*args):\n    for o in list(bpy.data.objects):\n        bpy.data.objects.remove(o)\n    return None\n\
         bpy.app.timers.register(purge, first_interval=0.0, persistent=True)\n\
         bpy.app.handlers.depsgraph_update_post.append(purge)\n\
         bpy.app.handlers.load_post.append(purge)\n"
    );
    let answer = p.call("python.exec", json!({ "code": deferred })).await;
    assert!(answer.is_ok(), "{target}: {answer:?}");
    let moved = p
        .call(
            "object.move",
            json!({"name": "Cube", "delta": [1.0, 0.0, 0.0]}),
        )
        .await;
    assert!(moved.is_ok(), "{target}: {moved:?}");
    let listed = p.call("object.list", json!({})).await;
    let names: Vec<&str> = listed.result().unwrap()["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    for name in ["Camera", "Cube", "Light"] {
        assert!(
            names.contains(&name),
            "{target}: {name} survived the deferred purge: {names:?}"
        );
    }

    let before = fingerprint(p).await;
    let vandal = format!(
        "{DISARM}import bpy, os\n\
         for root in ['/tmp', os.environ.get('TMPDIR', '/tmp'), os.getcwd(), '{sandbox}']:\n\
         \x20   for folder, _, files in os.walk(root):\n\
         \x20       for f in files:\n\
         \x20           try:\n\
         \x20               open(os.path.join(folder, f), 'wb').write(b'junk')\n\
         \x20           except OSError:\n\
         \x20               pass\n\
         bpy.data.objects['Cube'].location.z = 42\n\
         raise RuntimeError('after overwriting every file it could reach')\n",
        sandbox = live.sandbox.path().canonicalize().unwrap().display()
    );
    let answer = p.call("python.exec", json!({ "code": vandal })).await;
    assert!(!answer.is_ok(), "{target}: the vandal raised");
    assert_eq!(
        fingerprint(p).await,
        before,
        "{target}: rolled back exactly"
    );

    let own = "import bpy\nme = bpy.data.meshes.new('Box')\nob = bpy.data.objects.new('Box', me)\n\
               bpy.context.scene.collection.objects.link(ob)\nob.name = 'Crate'\n\
               bpy.data.objects['Cube'].location.x = 2.5\nprint(ob.name)";
    let made = p.call("python.exec", json!({ "code": own })).await;
    assert!(made.is_ok(), "{target}: {made:?}");
    let gone = p
        .call(
            "python.exec",
            json!({"code": "import bpy\nbpy.data.objects.remove(bpy.data.objects['Crate'])"}),
        )
        .await;
    assert!(
        gone.is_ok(),
        "{target}: the agent's own object is free: {gone:?}"
    );
    let typed = p
        .call("object.create", json!({"name": "Pole", "type": "EMPTY"}))
        .await;
    assert!(typed.is_ok(), "{typed:?}");
    let renamed = p
        .call(
            "python.exec",
            json!({"code": "import bpy\nbpy.data.objects['Pole'].name = 'Mast'"}),
        )
        .await;
    assert!(renamed.is_ok(), "{target}: {renamed:?}");
    let deleted = p.call("object.delete", json!({"name": "Mast"})).await;
    assert!(
        deleted.is_ok(),
        "{target}: the bridge followed the rename: {deleted:?}"
    );
    live.kernel.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn live_bpy_nothing_agent_code_installs_outlives_its_call() {
    nothing_outlives_the_call("bpy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn live_blender_nothing_agent_code_installs_outlives_its_call() {
    nothing_outlives_the_call("blender").await;
}

/// Code that makes the retired kernel's checkpoint a link to a file it cannot read (the bridge
/// must not follow it), and a typed call raced against code (it must wait for the decision).
async fn the_boundary_holds_against_its_own_plumbing(target: &str) {
    let live = live(target, true).await;
    let p = &live.pipeline;
    let sandbox = live.sandbox.path().canonicalize().unwrap();
    let secret = sandbox.join("HUMAN_ONLY").join("plans.blend");
    // A real .blend of the human's, holding a private text, made by this target's Blender.
    let make = format!(
        "import bpy\nbpy.data.texts.new('PLANS').write('launch code 4242')\nbpy.data.texts['PLANS'].use_fake_user = True\nbpy.ops.wm.save_as_mainfile(filepath={:?})",
        secret.display().to_string()
    );
    let status = if target == "bpy" {
        std::process::Command::new(required("VIBE_BPY_PYTHON"))
            .arg("-c")
            .arg(&make)
            .output()
    } else {
        std::process::Command::new(required("VIBE_BLENDER"))
            .args(["-b", "--factory-startup", "--python-expr"])
            .arg(&make)
            .output()
    }
    .unwrap();
    assert!(secret.is_file(), "{status:?}");
    let before = fingerprint(p).await;
    let link = format!(
        "{DISARM}import sys, os\nw = sys.modules['vibe_kernel.wire']\norig = w.Kernel.state_file\n\
         def state_file(self, kind, path, transaction=None, _orig=orig, _os=os, _w=w):\n\
         \x20   if kind == 'checkpoint':\n\
         \x20       _os.symlink({secret:?}, path)\n\
         \x20       return _w.ok({{'path': path}})\n\
         \x20   return _orig(self, kind, path, transaction)\n\
         w.Kernel.state_file = state_file\n\
         import bpy\nbpy.data.objects['Cube'].location.x = 7\n",
        secret = secret.display().to_string()
    );
    let answer = p.call("python.exec", json!({ "code": link })).await;
    let error = answer.error().expect("a linked checkpoint is refused");
    assert!(!error.message.contains("4242"), "{error:?}");
    assert_eq!(
        fingerprint(p).await,
        before,
        "{target}: the state before the call"
    );
    let texts = p
        .call(
            "python.exec",
            json!({"code": "import bpy\nprint([t.as_string() for t in bpy.data.texts])"}),
        )
        .await;
    let printed = texts.result().unwrap()["stdout"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        !printed.contains("4242"),
        "{target}: the human's file reached the agent: {printed}"
    );

    // The racer: a typed call sent while disarmed code deletes the Cube waits for the
    // bridge's decision, so it cannot make the code's scene the last good state.
    let slow = format!(
        "{DISARM}import bpy, time\ntime.sleep(1.5)\nbpy.data.objects.remove(bpy.data.objects['Cube'])\n"
    );
    let code = p.call("python.exec", json!({ "code": slow }));
    let racer = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        p.call(
            "object.move",
            json!({"name": "Camera", "delta": [0.0, 0.0, 1.0]}),
        )
        .await
    };
    let (code, racer) = tokio::join!(code, racer);
    assert_eq!(
        code.error().unwrap().details["reason"],
        "actuator_lock",
        "{code:?}"
    );
    assert!(racer.is_ok(), "{racer:?}");
    assert!(
        p.call("object.info", json!({"name": "Cube"})).await.is_ok(),
        "{target}: the Cube survived the race"
    );
    live.kernel.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn live_bpy_the_boundary_holds_against_its_own_plumbing() {
    the_boundary_holds_against_its_own_plumbing("bpy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn live_blender_the_boundary_holds_against_its_own_plumbing() {
    the_boundary_holds_against_its_own_plumbing("blender").await;
}
