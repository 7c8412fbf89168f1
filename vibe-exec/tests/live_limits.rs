//! The contract's limits against a live Blender (bpy 5.0.1 over stdio, jailed and supervised),
//! opt-in with `VIBE_LIVE=1` and `VIBE_BPY_PYTHON`: a render that takes longer than the quick
//! class's deadline completes under the render class's, while runaway code of the quick class
//! is still stopped; a render that leaves the sandbox past `temp_storage_mib` fails and leaves
//! no file behind.

mod support;

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use vibe_contract::*;
use vibe_exec::Pipeline;
use vibe_transport::{SupervisedKernel, Transport};

async fn live_pipeline(
    what: &str,
    constraints: Constraints,
) -> (Pipeline, Arc<SupervisedKernel>, tempfile::TempDir) {
    let sandbox = tempfile::tempdir().unwrap();
    let caps = [
        "scene.read",
        "scene.write",
        "render",
        "file.write",
        "code_exec",
    ];
    let (pipeline, transport) =
        support::live_jailed_pipeline(what, sandbox.path(), &caps, constraints, true).await;
    (pipeline, transport, sandbox)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn a_render_gets_its_own_deadline_and_runaway_code_does_not() {
    let quick = Constraints {
        time_per_tool_ms: 1_000,
        ..Constraints::default()
    };
    let (p, transport, sandbox) = live_pipeline("deadlines per class", quick).await;
    let started = Instant::now();
    let rendered = p
        .call(
            "render.still",
            json!({"path": "slow.png", "width": 640, "height": 480, "samples": 64}),
        )
        .await;
    let took = started.elapsed();
    assert!(rendered.is_ok(), "{rendered:?}");
    println!("a 640x480 render at 64 samples took {took:?} (the quick class's deadline is 1 s)");
    assert!(
        took.as_millis() > 1_000,
        "the render must outlast the quick class's deadline for this test to mean anything ({took:?})"
    );
    assert!(sandbox.path().join("slow.png").exists());
    let runaway = p
        .call("python.exec", json!({"code": "while True:\n    pass"}))
        .await;
    let error = runaway.error().expect("runaway code is stopped");
    assert_eq!(error.code.as_str(), "timeout", "{error:?}");
    assert!(p.call("object.info", json!({"name": "Cube"})).await.is_ok());
    transport.close().await.unwrap();
    // The same render under a render class of 2 s is stopped (the kernel is replaced, the
    // state before the call restored) and leaves no file.
    let short = Constraints {
        time_render_ms: 2_000,
        ..Constraints::default()
    };
    let (p, transport, sandbox) = live_pipeline("render deadline", short).await;
    let late = p
        .call(
            "render.still",
            json!({"path": "late.png", "width": 640, "height": 480, "samples": 64}),
        )
        .await;
    let error = late.error().expect("past the render class's deadline");
    assert_eq!(error.code.as_str(), "timeout", "{error:?}");
    assert_eq!(error.details["deadline_ms"], 2_000, "{error:?}");
    assert!(!sandbox.path().join("late.png").exists());
    assert!(p.call("object.info", json!({"name": "Cube"})).await.is_ok());
    transport.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn a_render_past_temporary_storage_fails_and_leaves_no_file() {
    let ceiling_mib = 16;
    let small = Constraints {
        temp_storage_mib: ceiling_mib,
        ..Constraints::default()
    };
    let (p, transport, sandbox) = live_pipeline("temp storage", small).await;
    // The kernel's own folders count too (its private folder, the supervisor's checkpoints).
    let kernel_bytes: u64 = transport
        .storage_folders()
        .iter()
        .map(|folder| {
            vibe_exec::stages::SandboxListing::of(folder)
                .unwrap()
                .bytes()
        })
        .sum();
    println!("the kernel's folders hold {kernel_bytes} bytes");
    assert!(
        kernel_bytes > 0,
        "a jailed, supervised kernel keeps a checkpoint"
    );
    // The sandbox fills what is left but 200 KiB: a small render fits under the ceiling once...
    let filler = (ceiling_mib * 1024 * 1024).saturating_sub(kernel_bytes + 200 * 1024);
    std::fs::write(
        sandbox.path().join("earlier.bin"),
        vec![1u8; filler as usize],
    )
    .unwrap();
    let first = p
        .call(
            "render.still",
            json!({"path": "a.png", "width": 64, "height": 48, "samples": 1}),
        )
        .await;
    assert!(first.is_ok(), "{first:?}");
    // ...and a larger one does not: it fails, and its file is gone.
    let second = p
        .call(
            "render.still",
            json!({"path": "b.png", "width": 1024, "height": 1024, "samples": 4}),
        )
        .await;
    let error = second.error().expect("past the ceiling");
    assert_eq!(error.details["rule"], "temp_storage_mib", "{error:?}");
    assert_eq!(error.details["removed"], json!(["b.png"]), "{error:?}");
    assert!(!sandbox.path().join("b.png").exists());
    assert!(sandbox.path().join("a.png").exists() && sandbox.path().join("earlier.bin").exists());
    // Full now (the kernel's folders included): the next call that writes is refused up front.
    std::fs::write(sandbox.path().join("more.bin"), vec![1u8; 300 * 1024]).unwrap();
    let third = p
        .call(
            "render.still",
            json!({"path": "c.png", "width": 64, "height": 48, "samples": 1}),
        )
        .await;
    assert_eq!(
        third.error().expect("full").details["rule"],
        "temp_storage_mib"
    );
    assert!(!sandbox.path().join("c.png").exists());
    transport.close().await.unwrap();
}

/// `Pipeline::cancel` ends a render Blender cannot stop: its kernel is killed after the grace,
/// a fresh one restored to the state before the call, and the answer says so. Cancelled agent
/// code is interrupted by the kernel and rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn a_cancelled_render_ends_by_kill_and_restore() {
    let (p, transport, sandbox) = live_pipeline("cancel a render", Constraints::default()).await;
    let p = Arc::new(p);
    let moved = p
        .call("object.move", json!({"name": "Cube", "delta": [0, 0, 1]}))
        .await;
    assert!(moved.is_ok(), "{moved:?}");
    let before =
        p.call("scene.snapshot", json!({})).await.result().unwrap()["content_fingerprint"].clone();
    let id = p.next_call_id();
    let render = {
        let p = Arc::clone(&p);
        tokio::spawn(async move {
            p.call_with_id(
                id,
                "render.still",
                json!({"path": "long.png", "width": 1024, "height": 1024, "samples": 64}),
            )
            .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let cancelled_at = Instant::now();
    p.cancel(id).await;
    let answer = render.await.unwrap();
    let took = cancelled_at.elapsed();
    println!("the render answered {took:?} after its cancel");
    let error = answer.error().expect("cancelled");
    assert_eq!(error.code.as_str(), "timeout", "{error:?}");
    assert_eq!(error.details["cancelled"], true, "{error:?}");
    assert_eq!(error.details["kernel"], "replaced", "{error:?}");
    assert!(error.details.contains_key("restored"), "{error:?}");
    assert!(!sandbox.path().join("long.png").exists());
    let after =
        p.call("scene.snapshot", json!({})).await.result().unwrap()["content_fingerprint"].clone();
    assert_eq!(
        after, before,
        "the state before the render, with the move kept"
    );
    // Runaway agent code is stopped by the kernel itself, which rolls it back.
    let id = p.next_call_id();
    let code = {
        let p = Arc::clone(&p);
        tokio::spawn(async move {
            p.call_with_id(id, "python.exec", json!({"code": "import bpy\nbpy.data.objects['Cube'].location.x = 9\nwhile True:\n    pass"}))
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let cancelled_at = Instant::now();
    p.cancel(id).await;
    let answer = code.await.unwrap();
    println!(
        "the code answered {:?} after its cancel",
        cancelled_at.elapsed()
    );
    let error = answer.error().expect("cancelled");
    assert_eq!(error.code.as_str(), "timeout", "{error:?}");
    assert!(
        error.message.contains("cancelled and interrupted"),
        "{error:?}"
    );
    assert_eq!(error.details["rolled_back"], true, "{error:?}");
    let after =
        p.call("scene.snapshot", json!({})).await.result().unwrap()["content_fingerprint"].clone();
    assert_eq!(after, before);
    transport.close().await.unwrap();
}

/// The agent sees its render: `render.still` on real Blender answers with the PNG it wrote,
/// read back from the sandbox (`_meta.image`), byte for byte the file, of the asked size. With
/// `VIBE_KEEP_RENDER=<file>` the image is also written there, to look at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn a_render_comes_back_with_its_answer() {
    let (p, _transport, sandbox) = live_pipeline("a render seen", Constraints::default()).await;
    let rendered = p
        .call(
            "render.still",
            json!({"path": "seen.png", "width": 320, "height": 240, "samples": 8}),
        )
        .await;
    let meta = rendered.meta().expect("a successful render has _meta");
    let image = meta.image.expect("the render comes back with its answer");
    assert_eq!(
        (image.mime_type.as_str(), image.width, image.height),
        ("image/png", 320, 240)
    );
    let file = std::fs::read(sandbox.path().join("seen.png")).unwrap();
    assert_eq!(image.data, file, "the image is the file the kernel wrote");
    // A render is not a flat picture: the factory cube and its light give more than one colour
    // (a PNG of one colour compresses to almost nothing).
    assert!(file.len() > 2_000, "{} bytes", file.len());
    if let Some(keep) = std::env::var_os("VIBE_KEEP_RENDER") {
        std::fs::write(keep, &image.data).unwrap();
    }
}
