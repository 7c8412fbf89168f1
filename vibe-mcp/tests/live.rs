//! `vibe-mcp` on a real, jailed Blender: `VIBE_LIVE=1` and `VIBE_BPY_PYTHON` (bpy 5.0.1), with
//! the `vibe-jail` launcher beside the binary (`cargo build -p vibe-transport --features jail
//! --bin vibe-jail`, which `cargo test --workspace --all-features` builds) or named by
//! `VIBE_JAIL_LAUNCHER`. Ignored otherwise; run with `--include-ignored`, a missing variable is
//! a failure.

mod common;

use base64::Engine;
use common::{Session, own_sandbox};
use serde_json::json;

fn live_var(var: &str) -> String {
    assert!(
        std::env::var("VIBE_LIVE").is_ok_and(|v| v == "1"),
        "live test run without VIBE_LIVE=1"
    );
    std::env::var(var).unwrap_or_else(|_| panic!("VIBE_LIVE=1 but {var} is not set"))
}

#[test]
#[ignore = "needs VIBE_LIVE"]
fn a_jailed_blender_renders_with_progress_and_offers_agent_code() {
    let python = live_var("VIBE_BPY_PYTHON");
    let (_root, sandbox) = own_sandbox();
    let mut s = Session::start(&[
        "--bpy-python",
        &python,
        "--sandbox",
        sandbox.to_str().unwrap(),
        "--allow-code",
    ]);
    s.initialize();
    let tools = s.rpc(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    // A jailed kernel is granted code_exec, so --allow-code lists python_exec.
    assert!(names.contains(&"python_exec"), "{names:?}");
    assert!(names.contains(&"macro_ground_plane"), "{names:?}");

    let (render, notes) = s.rpc_with_notes(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "render_still", "arguments": {"path": "live.png", "width": 64, "height": 48},
                   "_meta": {"progressToken": "render-1"}}}));
    let result = &render["result"];
    assert_eq!(result["isError"], false, "{render}");
    // The first notification goes out before the call starts, so it precedes the answer.
    let first = &notes[0]["params"];
    assert_eq!(notes[0]["method"], "notifications/progress", "{notes:?}");
    assert_eq!(first["progressToken"], "render-1");
    assert_eq!(first["progress"], 0.0);
    assert_eq!(
        first["total"], 600.0,
        "the render deadline (time_render_ms)"
    );
    let image = &result["content"][1];
    assert_eq!(image["type"], "image", "{result}");
    let png = base64::engine::general_purpose::STANDARD
        .decode(image["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(
        (&png[16..20], &png[20..24]),
        (&64u32.to_be_bytes()[..], &48u32.to_be_bytes()[..])
    );
    assert!(sandbox.join("live.png").is_file());

    let read = s.rpc(
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read",
                            "params": {"uri": "vibe://scene/snapshot"}}),
    );
    let text = read["result"]["contents"][0]["text"].as_str().unwrap();
    let snapshot: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(snapshot["ok"], true, "{snapshot}");
    assert!(s.finish().success());
}
