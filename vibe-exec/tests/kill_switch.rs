//! The `KILL_VIBE` environment variable. Setting the environment in-process is `unsafe` in
//! edition 2024 (and unsafe code is forbidden here), so the test runs itself again as a child
//! process started with `KILL_VIBE=1`, and checks the kill switch there.

mod support;

use serde_json::json;
use support::*;
use vibe_exec::KILL_SWITCH_ENV;
use vibe_transport::MockBlender;

const TEST: &str = "kill_vibe_in_the_environment_refuses_every_mutation";

#[tokio::test]
async fn kill_vibe_in_the_environment_refuses_every_mutation() {
    if std::env::var_os(KILL_SWITCH_ENV).is_none() {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST, "--test-threads=1"])
            .env(KILL_SWITCH_ENV, "1")
            .status()
            .unwrap();
        assert!(status.success(), "the run under {KILL_SWITCH_ENV}=1 failed");
        return;
    }
    let r = rig(MockBlender::new()).await;
    let before = r.transport.scene();
    let refused = r
        .pipeline
        .call("object.move", json!({"name": "Cube", "delta": [1, 0, 0]}))
        .await;
    let error = refused.error().unwrap();
    assert_eq!(error.details["reason"], "read_only");
    assert!(error.message.contains(KILL_SWITCH_ENV), "{}", error.message);
    assert_eq!(error.details["http_status"], 403);
    let macro_refused = r
        .pipeline
        .run_macro("ground_plane", json!({"name": "Floor"}))
        .await;
    assert_eq!(
        macro_refused.error().unwrap().details["reason"],
        "read_only"
    );
    assert!(
        r.pipeline.call("scene.telemetry", json!({})).await.is_ok(),
        "reads are served"
    );
    assert_eq!(r.transport.scene(), before);
    assert_eq!(r.transport.count(), 1, "only the read reached Blender");
    // A human reset cannot lift the kill switch: it lives outside the session.
    r.pipeline.session().human_reset("operator");
    assert!(r.pipeline.session().is_read_only());
}
