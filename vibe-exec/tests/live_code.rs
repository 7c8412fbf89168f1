//! Agent code against a live Blender (bpy 5.0.1 over stdio, jailed and supervised), opt-in with
//! `VIBE_LIVE=1` and `VIBE_BPY_PYTHON` (the `vibe-jail` launcher is found beside the test binary
//! or through `VIBE_JAIL_LAUNCHER`): runaway code is interrupted and the kernel keeps serving;
//! the fast retry loop repairs real Blender errors; without a jail, code is not granted.

mod support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;
use vibe_contract::*;
use vibe_exec::Pipeline;
use vibe_exec::code::{CodeFixer, FastRetry, FixRequest};
use vibe_transport::{StdioOptions, StdioTransport, SupervisedKernel, Transport};

/// The pipeline, its kernel, and its sandbox (removed when the test ends, passed or failed).
async fn live_pipeline(
    what: &str,
    time_per_tool_ms: u64,
) -> (Pipeline, Arc<SupervisedKernel>, tempfile::TempDir) {
    let sandbox = tempfile::Builder::new()
        .prefix("vibe-live-code-")
        .tempdir()
        .unwrap();
    let constraints = Constraints {
        time_per_tool_ms,
        ..Constraints::default()
    };
    let caps = ["scene.read", "scene.write", "transactions", "code_exec"];
    let (pipeline, kernel) =
        support::live_jailed_pipeline(what, sandbox.path(), &caps, constraints, false).await;
    (pipeline, kernel, sandbox)
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn runaway_code_times_out_and_the_next_call_succeeds() {
    let (p, transport, _sandbox) = live_pipeline("python.exec deadline", 2_000).await;
    let before =
        p.call("scene.snapshot", json!({})).await.result().unwrap()["content_fingerprint"].clone();
    let runaway = p.call("python.exec", json!({"code": "import bpy\nbpy.data.objects['Cube'].location.x = 9\nwhile True: pass"})).await;
    let error = runaway.error().expect("runaway code must not succeed");
    assert_eq!(error.code.as_str(), "timeout", "{error:?}");
    assert_eq!(error.details["cancelled"], true);
    // The kernel's tracer (the fast path, at 80% of the deadline) interrupted it, not the
    // bridge's kill: the answer is the kernel's own.
    assert!(
        error.message.contains("interrupted") && error.details.get("kernel").is_none(),
        "{error:?}"
    );
    assert!(
        p.session().breaker().is_none(),
        "an interrupted call is an answer, not a deadlock"
    );
    let after = p.call("scene.snapshot", json!({})).await;
    assert_eq!(
        after.result().unwrap()["content_fingerprint"],
        before,
        "the interrupted run was rolled back"
    );
    let next = p
        .call(
            "python.exec",
            json!({"code": "import bpy\nprint(len(bpy.data.objects))"}),
        )
        .await;
    assert_eq!(next.result().unwrap()["stdout"], "3\n");
    transport.close().await.unwrap();
}

struct Scripted(Mutex<Vec<&'static str>>, Mutex<Vec<String>>);

#[async_trait]
impl CodeFixer for Scripted {
    async fn fix(&self, request: &FixRequest) -> Result<String, String> {
        self.1.lock().unwrap().push(request.error.clone());
        self.0
            .lock()
            .unwrap()
            .pop()
            .map(str::to_owned)
            .ok_or_else(|| "no more answers".into())
    }
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn the_fast_retry_loop_repairs_real_blender_errors() {
    let (p, transport, _sandbox) = live_pipeline("fast retry against Blender", 10_000).await;
    // Attempt 1: a syntax error. Attempt 2: a real Blender KeyError. Attempt 3: correct.
    let fixer = Scripted(
        Mutex::new(vec![
            "```python\nimport bpy\nme = bpy.data.meshes.new('Pillar')\nob = bpy.data.objects.new('Pillar', me)\nbpy.data.collections['Collection'].objects.link(ob)\nprint(ob.name)\n```",
            "```python\nimport bpy\nbpy.data.objects['Pillar'].location.z = 2\n```",
        ]),
        Mutex::new(Vec::new()),
    );
    let it = FastRetry::default()
        .run(
            &p,
            "add a pillar",
            "```python\nimport bpy\nbpy.data.objects['Pillar'.location.z = 2\n```",
            &fixer,
            None,
        )
        .await;
    assert!(it.envelope.is_ok(), "{:?}", it.envelope);
    assert_eq!(it.retry_count, 2);
    let errors = fixer.1.lock().unwrap().clone();
    assert!(
        errors[0].contains("SyntaxError") || errors[0].contains("was never closed"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("KeyError") && errors[1].contains("Pillar"),
        "{errors:?}"
    );
    assert!(
        p.call("object.info", json!({"name": "Pillar"}))
            .await
            .is_ok()
    );
    transport.close().await.unwrap();
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn an_unconfined_kernel_is_not_granted_code() {
    let python = support::required("VIBE_BPY_PYTHON");
    let transport = StdioTransport::spawn(StdioOptions::bpy_python(python).unwrap())
        .await
        .unwrap();
    let hello = &transport.hello().blender;
    assert_eq!(hello.confinement.summary(), "none");
    assert!(
        !hello.features.contains("code_exec"),
        "{:?}",
        hello.features
    );
    let mut policy = BridgePolicy::default();
    policy.capabilities.insert(CAP_CODE_EXEC.into());
    let host = HostProfile {
        name: "live".into(),
        version: "1".into(),
        capabilities: ["scene.read", "code_exec"].map(String::from).into(),
        ..HostProfile::default()
    };
    let agreement = negotiate(
        &HostProposal::new("unconfined", host),
        &policy,
        hello,
        &default_registries().unwrap(),
    )
    .unwrap();
    let refusal = agreement.tool("python.exec").unwrap_err();
    assert_eq!(refusal.code.as_str(), "capability_missing");
    transport.close().await.unwrap();
}

/// Seed 001: every call is atomic, inside a transaction too. A `python.exec` that fails halfway
/// (after moving the Cube and making an object) leaves the scene exactly as before that call;
/// the transaction goes on, keeps the call before it, and its rollback returns to its begin.
#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn a_failed_call_inside_a_transaction_leaves_the_state_before_it() {
    let (p, transport, _sandbox) = live_pipeline("atomic inside a transaction", 15_000).await;
    let fingerprint =
        |answer: vibe_errors::Envelope| answer.result().unwrap()["content_fingerprint"].clone();
    let at_begin = fingerprint(p.call("scene.snapshot", json!({})).await);
    assert!(p.call("transaction.begin", json!({})).await.is_ok());
    let moved = p
        .call("object.move", json!({"name": "Cube", "delta": [1, 0, 0]}))
        .await;
    assert!(moved.is_ok(), "{moved:?}");
    let before = fingerprint(p.call("scene.snapshot", json!({})).await);
    let failed = p
        .call("python.exec", json!({"code": "import bpy\nbpy.data.objects['Cube'].location.z = 5\nbpy.data.objects.new('Half', None)\nraise RuntimeError('halfway')"}))
        .await;
    let error = failed.error().expect("the code raises");
    assert_eq!(error.details["rolled_back"], true, "{error:?}");
    assert_eq!(
        fingerprint(p.call("scene.snapshot", json!({})).await),
        before
    );
    // The transaction is still open and still holds the move.
    let rolled = p.call("transaction.rollback", json!({})).await;
    assert!(rolled.is_ok(), "{rolled:?}");
    assert_eq!(
        fingerprint(p.call("scene.snapshot", json!({})).await),
        at_begin
    );
    transport.close().await.unwrap();
}
