//! Live Blender: the shared conformance scenarios against real Blenders, which must produce
//! exactly the outcomes MockBlender produces (`tests/conformance/*.expected.json`). Each
//! scenario gets a fresh Blender; one that `needs: [code]` is started with agent code allowed
//! (the operator's opt-in: these kernels are not jailed), and the harness configures the session
//! (capabilities, sandbox) for what it needs.
//!
//! Opt-in: `VIBE_LIVE=1`, with `VIBE_BPY_PYTHON`, `VIBE_BPY45_PYTHON` and `VIBE_BPY52_PYTHON`
//! (Pythons with the bpy module 5.0, 4.5 and 5.2) and `VIBE_BLENDER` (a `blender` binary). Without `VIBE_LIVE=1` each test says it was skipped and
//! is reported as ignored; with it (and `--include-ignored`), a missing Blender is a failure.

use std::path::PathBuf;
use std::time::Duration;

use vibe_transport::conformance::{Need, Outcome, Scenario, load_dir, missing_formats, run};
use vibe_transport::{StdioOptions, StdioTransport, Transport};

mod support;
use support::{
    addon_installer, connect_when_listening, gui_addon_with, headless_tcp_with, live, required,
};

const DEADLINE: Duration = Duration::from_secs(60);

fn scenarios() -> (PathBuf, Vec<Scenario>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance");
    let scenarios = load_dir(&dir).unwrap();
    (dir, scenarios)
}

/// The environment of a Blender for `scenario`: an unjailed kernel offers `python.exec` only
/// when the operator opts in to unconfined code.
fn kernel_env(scenario: &Scenario) -> Vec<(&'static str, &'static str)> {
    if scenario.needs(Need::Code) {
        vec![("VIBE_ALLOW_UNCONFINED_CODE", "1")]
    } else {
        Vec::new()
    }
}

fn expected(dir: &std::path::Path, scenario: &Scenario) -> Outcome {
    serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{}.expected.json", scenario.name))).unwrap(),
    )
    .unwrap()
}

fn compare(target: &str, scenario: &Scenario, got: &Outcome, want: &Outcome) {
    for (i, (g, w)) in got.steps.iter().zip(&want.steps).enumerate() {
        assert_eq!(
            g, w,
            "{target}: {} step {i} ({}) differs from MockBlender",
            scenario.name, scenario.steps[i].call
        );
    }
    assert_eq!(got.steps.len(), want.steps.len());
    assert_eq!(
        got.scene, want.scene,
        "{target}: {} final scene fingerprint differs from MockBlender",
        scenario.name
    );
}

/// Whether `scenario` needs model formats the Blender of `hello` lacks; then says it skips it.
fn skips(target: &str, scenario: &Scenario, hello: &vibe_transport::Hello) -> bool {
    let missing = missing_formats(scenario, hello);
    if !missing.is_empty() {
        eprintln!(
            "{target}: skipping {}: Blender {} lacks the formats {missing:?} (it has {:?})",
            scenario.name,
            hello.blender.version,
            hello.formats.as_deref().unwrap_or_default()
        );
    }
    !missing.is_empty()
}

/// The scenarios on the bpy module in the Python named by `python_var`, which must be Blender
/// `major.minor`.
async fn bpy_agrees_with_the_mock(python_var: &str, major: u32, minor: u32) {
    let label = format!("bpy {major}.{minor} headless over stdio");
    live(&label);
    let python = required(python_var);
    let (dir, scenarios) = scenarios();
    for scenario in &scenarios {
        let mut options = StdioOptions::bpy_python(&python).unwrap();
        for (name, value) in kernel_env(scenario) {
            options = options.env(name, value);
        }
        let transport = StdioTransport::spawn(options).await.unwrap();
        let version = &transport.hello().blender.version;
        assert_eq!(
            (version.major, version.minor),
            (major, minor),
            "{python_var} runs another Blender"
        );
        if skips(&label, scenario, transport.hello()) {
            transport.close().await.unwrap();
            continue;
        }
        let outcome = run(&transport, scenario, DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}\nconsole: {:?}", transport.console()));
        compare(&label, scenario, &outcome, &expected(&dir, scenario));
        transport.close().await.unwrap();
    }
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_bpy_headless_over_stdio_agrees_with_the_mock() {
    bpy_agrees_with_the_mock("VIBE_BPY_PYTHON", 5, 0).await;
}

/// bpy 4.5 LTS (Python 3.11).
#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_bpy_4_5_headless_over_stdio_agrees_with_the_mock() {
    bpy_agrees_with_the_mock("VIBE_BPY45_PYTHON", 4, 5).await;
}

/// bpy 5.2, the newest LTS (Python 3.13).
#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_bpy_5_2_headless_over_stdio_agrees_with_the_mock() {
    bpy_agrees_with_the_mock("VIBE_BPY52_PYTHON", 5, 2).await;
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_blender_headless_over_tcp_agrees_with_the_mock() {
    live("blender -b over TCP");
    let blender = required("VIBE_BLENDER");
    let (dir, scenarios) = scenarios();
    let work = std::env::temp_dir().join(format!("vibe-live-tcp-{}", std::process::id()));
    for scenario in &scenarios {
        let env = kernel_env(scenario);
        let kernel = headless_tcp_with(&blender, &work, "live-test-token", true, &env);
        let transport = connect_when_listening(kernel.port, "live-test-token", 120).await;
        let transport = transport.expect("the Blender kernel did not start listening within 30 s");
        if skips("blender -b over TCP", scenario, transport.hello()) {
            transport.close().await.unwrap();
            continue;
        }
        let outcome = run(&transport, scenario, DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("blender -b over TCP: {e}"));
        compare(
            &format!("Blender {} -b (tcp)", transport.hello().blender.version),
            scenario,
            &outcome,
            &expected(&dir, scenario),
        );
        transport.close().await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_blender_gui_addon_under_xvfb_agrees_with_the_mock() {
    live("GUI Blender add-on under xvfb-run over TCP");
    let blender = required("VIBE_BLENDER");
    let (dir, scenarios) = scenarios();
    let work = std::env::temp_dir().join(format!("vibe-live-gui-{}", std::process::id()));
    let register = addon_installer(&work);
    for scenario in &scenarios {
        let env = kernel_env(scenario);
        let kernel = gui_addon_with(
            &blender,
            &work,
            &register,
            "gui-test-token",
            None,
            &[],
            &env,
        );
        let transport = connect_when_listening(kernel.port, "gui-test-token", 240)
            .await
            .expect("the GUI add-on did not start listening within 60 s");
        assert!(
            !transport.hello().blender.background,
            "the add-on runs in GUI Blender"
        );
        if skips("Blender GUI add-on (tcp)", scenario, transport.hello()) {
            transport.close().await.unwrap();
            continue;
        }
        let outcome = run(&transport, scenario, DEADLINE).await;
        transport.close().await.unwrap();
        drop(kernel);
        compare(
            "Blender GUI add-on (tcp)",
            scenario,
            &outcome.unwrap(),
            &expected(&dir, scenario),
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// A batch on real Blender (bpy 5.0.1 over stdio): more calls than one frame carries, moves and
/// reads interleaved, each read seeing exactly the moves before it, a refused call in the middle
/// answered on its own; the same calls through the mock give the same answers.
#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_bpy_batch_runs_in_order_and_agrees_with_the_mock() {
    live("a batch on bpy 5.0.1 over stdio");
    let python = required("VIBE_BPY_PYTHON");
    let blender = StdioTransport::spawn(StdioOptions::bpy_python(&python).unwrap())
        .await
        .unwrap();
    assert_eq!(
        blender.hello().max_batch_calls,
        Some(vibe_transport::MAX_BATCH_CALLS as u32)
    );
    let mock = vibe_transport::MockTransport::new(vibe_transport::MockBlender::new());
    let calls = || -> Vec<vibe_transport::Call> {
        (0..vibe_transport::MAX_BATCH_CALLS + 20)
            .map(|i| {
                let (tool, params) = match i % 4 {
                    0 => (
                        "object.move",
                        serde_json::json!({"name": "Cube", "delta": [0.5, 0, 0]}),
                    ),
                    1 if i == 121 => ("object.info", serde_json::json!({"name": "Nope"})),
                    _ => ("object.info", serde_json::json!({"name": "Cube"})),
                };
                vibe_transport::Call::new(tool, params, DEADLINE)
            })
            .collect()
    };
    let live_answers = blender.call_batch(calls()).await;
    let mock_answers = mock.call_batch(calls()).await;
    for (i, (got, want)) in live_answers.iter().zip(&mock_answers).enumerate() {
        let got = got.as_ref().unwrap();
        let want = want.as_ref().unwrap();
        if i == 121 {
            assert_eq!(got.error().unwrap().code.as_str(), "not_found");
            assert_eq!(want.error().unwrap().code.as_str(), "not_found");
            continue;
        }
        let x = got.result().unwrap()["location"][0].as_f64().unwrap();
        assert_eq!(x, 0.5 * (i / 4 + 1) as f64, "call {i}");
        assert_eq!(
            got.result().unwrap()["location"],
            want.result().unwrap()["location"],
            "call {i}"
        );
    }
    blender.close().await.unwrap();
}
