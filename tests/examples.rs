//! Each example runs on the mock and says what it should.

use std::path::PathBuf;
use std::process::Command;

/// The compiled example next to this test binary (`cargo test` builds examples first).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().and_then(|deps| deps.parent()).unwrap();
    debug
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// Runs example `name` with `env` and a temp folder of its own (`TMPDIR`): the folder (removed
/// when the test ends) and what the example printed.
fn run_example(
    name: &str,
    env: &[(&str, &std::ffi::OsStr)],
) -> (tempfile::TempDir, std::process::Output) {
    let temp = tempfile::tempdir().unwrap();
    let output = Command::new(example(name))
        .env("TMPDIR", temp.path())
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("the {name} example is built by cargo test: {e}"));
    (temp, output)
}

#[test]
fn quickstart_runs_an_agent_session_on_the_mock() {
    // Its audit log goes to the temp folder: one of the test's own.
    let (_temp, output) = run_example("quickstart", &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "quickstart failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "kernel: vibe-kernel",
        "tools, 4 macros agreed",
        "REFUSED invalid_arguments (reason: sanity_limit",
        "identical: true",
        "REFUSED contract_violation (reason: actuator_lock",
        "ok {\"deleted\":\"Barrel\"}",
        "REFUSED contract_violation (reason: read_only",
        "chain intact",
    ] {
        assert!(
            stdout.contains(expected),
            "quickstart output lacks {expected:?}:\n{stdout}"
        );
    }
}

/// A sandbox of the test's own: one audit log per sandbox (beside it, so inside the returned
/// folder, which is removed when the test ends), one writer per log.
fn own_sandbox(name: &str) -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::Builder::new()
        .prefix(&format!("vibe-examples-{name}-"))
        .tempdir()
        .unwrap();
    let dir = root.path().join("sandbox");
    std::fs::create_dir_all(&dir).unwrap();
    (root, dir)
}

/// The live examples are `#[ignore = "needs VIBE_LIVE"]`; run with `--include-ignored`, a
/// missing variable is a failure.
fn live_var(var: &str) -> std::ffi::OsString {
    assert!(
        std::env::var("VIBE_LIVE").is_ok_and(|v| v == "1"),
        "live test run without VIBE_LIVE=1"
    );
    std::env::var_os(var).unwrap_or_else(|| panic!("VIBE_LIVE=1 but {var} is not set"))
}

#[test]
fn mcp_server_speaks_mcp_over_stdio() {
    use std::io::{BufRead, BufReader, Write};
    let (_root, sandbox) = own_sandbox("stdio");
    let mut child = Command::new(example("mcp_server"))
        .arg("--mock")
        .arg("--sandbox")
        .arg(sandbox)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut rpc = |message: serde_json::Value, answer: bool| -> serde_json::Value {
        writeln!(stdin, "{message}").unwrap();
        if !answer {
            return serde_json::Value::Null;
        }
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{e}: {line:?} (stdout must carry JSON-RPC only)"))
    };
    let init = rpc(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}),
        true,
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "vibe-blender");
    rpc(
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        false,
    );
    let tools = rpc(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        true,
    );
    let tools = tools["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().all(|t| t["inputSchema"]["type"] == "object"));
    assert!(tools.iter().any(|t| t["name"] == "object_move"));
    let ok = rpc(
        serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "mesh_create_cube", "arguments": {"name": "Box"}}}),
        true,
    );
    assert_eq!(ok["result"]["isError"], false);
    assert_eq!(ok["result"]["structuredContent"]["result"]["name"], "Box");
    let bad = rpc(
        serde_json::json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "object_move", "arguments": {"name": "Box", "delta": "up"}}}),
        true,
    );
    assert!(
        bad.get("error").is_none(),
        "argument errors are tool errors, not JSON-RPC errors: {bad}"
    );
    assert_eq!(bad["result"]["isError"], true);
    assert_eq!(
        bad["result"]["structuredContent"]["error"]["code"],
        "invalid_arguments"
    );
    let text = bad["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(text).unwrap(),
        bad["result"]["structuredContent"]
    );
    let refused = rpc(
        serde_json::json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "object_delete", "arguments": {"name": "Cube"}}}),
        true,
    );
    assert_eq!(
        refused["result"]["structuredContent"]["error"]["details"]["reason"],
        "actuator_lock"
    );
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "closing stdin shuts the server down cleanly"
    );
}

#[test]
#[ignore = "needs VIBE_LIVE"]
fn mcp_server_passes_the_official_python_client() {
    // A Python with the `mcp` and `jsonschema` packages.
    let python = live_var("VIBE_MCP_PYTHON");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client_check.py");
    let (_root, sandbox) = own_sandbox("python-client");
    let output = Command::new(python)
        .arg(script)
        .arg(example("mcp_server"))
        .arg("--sandbox")
        .arg(sandbox)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

#[test]
#[ignore = "needs VIBE_LIVE"]
fn live_blender_renders_a_still() {
    assert!(
        std::env::var("VIBE_LIVE").is_ok_and(|v| v == "1"),
        "live test run without VIBE_LIVE=1"
    );
    let (_temp, output) = run_example("live_blender", &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("rolled-back scene identical: true"),
        "{stdout}"
    );
    // The example checked the file's PNG signature before it removed its sandbox.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("rendered renders/scene.png (a PNG of "))
        .expect("a rendered line");
    assert!(line.ends_with("saved the scene: true"), "{line}");
}

#[test]
#[ignore = "needs VIBE_LIVE"]
fn agent_code_runs_jailed_and_runaway_code_is_restored() {
    let python = live_var("VIBE_BPY_PYTHON");
    let (_temp, output) = run_example("agent_code", &[("VIBE_BPY_PYTHON", &python)]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "agent_code failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "confinement jailed",
        "agent code builds three crates: ok",
        "Crate2",
        "the gate explains a refusal: REFUSED contract_violation",
        "C-level work the tracer cannot stop: REFUSED timeout",
        "\"kernel\":\"replaced\"",
        "scene restored: true (kernels replaced: 2)",
    ] {
        assert!(
            stdout.contains(expected),
            "agent_code output lacks {expected:?}:\n{stdout}"
        );
    }
}
