//! The one-screen facade: `vibe::connect` to a target, start, call, close.

use serde_json::json;
use vibe::{ConnectError, Target, connect};

#[tokio::test]
async fn the_mock_answers_through_the_full_pipeline() {
    let sandbox = tempfile::tempdir().unwrap();
    let blender = connect(Target::mock())
        .sandbox(sandbox.path())
        .start()
        .await
        .unwrap();
    let moved = blender
        .call("object.move", json!({"name": "Cube", "delta": [1, 0, 0]}))
        .await;
    assert_eq!(moved.result().unwrap()["location"], json!([1.0, 0.0, 0.0]));
    // No file.write asked for: file.save is excluded, and says why.
    let saved = blender.call("file.save", json!({"path": "a.blend"})).await;
    assert_eq!(saved.error().unwrap().code.as_str(), "capability_missing");
    blender.close().await.unwrap();
}

#[tokio::test]
async fn a_kernel_that_is_not_there_is_a_clear_error() {
    // A loopback port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let error = connect(Target::tcp(port, "token"))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::Transport(_)), "{error}");
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn a_real_blender_in_three_names() {
    assert!(
        std::env::var("VIBE_LIVE").is_ok_and(|v| v == "1"),
        "live test without VIBE_LIVE=1"
    );
    let python = std::env::var_os("VIBE_BPY_PYTHON").expect("VIBE_BPY_PYTHON is not set");
    let sandbox = tempfile::tempdir().unwrap();
    let blender = connect(Target::bpy_python(python))
        .capabilities(["scene.read", "scene.write", "file.write"])
        .sandbox(sandbox.path())
        .start()
        .await
        .unwrap();
    let hello = &blender.session().agreement.contract.blender_profile;
    assert!(
        hello.confinement.filesystem,
        "a headless kernel is jailed: {hello:?}"
    );
    let info = blender.call("object.info", json!({"name": "Cube"})).await;
    assert_eq!(info.result().unwrap()["type"], "MESH");
    let saved = blender
        .call("file.save", json!({"path": "scene.blend"}))
        .await;
    assert!(saved.is_ok(), "{saved:?}");
    assert!(sandbox.path().join("scene.blend").exists());
    blender.close().await.unwrap();
}
