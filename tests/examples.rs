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

#[test]
fn quickstart_runs_an_agent_session_on_the_mock() {
    let output = Command::new(example("quickstart"))
        .output()
        .expect("the quickstart example is built by cargo test");
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
