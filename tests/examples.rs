//! Each example runs on the mock (or, live, on a real Blender) and says what it should. The MCP
//! server is the `vibe-mcp` crate, with its own tests.

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
