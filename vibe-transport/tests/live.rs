//! Live Blender: the shared conformance scenarios against real Blenders, which must produce
//! exactly the outcomes MockBlender produces (`tests/conformance/*.expected.json`).
//!
//! Opt-in: `VIBE_LIVE=1`, with `VIBE_BPY_PYTHON` (a Python with the bpy module) and
//! `VIBE_BLENDER` (a `blender` binary). Without `VIBE_LIVE=1` each test says it was skipped and
//! is reported as ignored; with it (and `--include-ignored`), a missing Blender is a failure.

use std::path::PathBuf;
use std::time::Duration;

use vibe_transport::conformance::{Outcome, Scenario, load_dir, run};
use vibe_transport::{
    StdioOptions, StdioTransport, TcpOptions, TcpTransport, Transport, write_kernel,
};

const DEADLINE: Duration = Duration::from_secs(60);

/// Live tests are `#[ignore = "needs VIBE_LIVE"]`; run with `--include-ignored` they need it.
fn live(what: &str) {
    assert!(
        std::env::var("VIBE_LIVE").is_ok_and(|v| v == "1"),
        "{what}: live test run without VIBE_LIVE=1"
    );
}

fn required(var: &str) -> PathBuf {
    let value = std::env::var_os(var).unwrap_or_else(|| {
        panic!("VIBE_LIVE=1 but {var} is not set: a missing Blender is a failure")
    });
    let path = PathBuf::from(value);
    assert!(path.exists(), "{var}={} does not exist", path.display());
    path
}

fn scenarios() -> (PathBuf, Vec<Scenario>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance");
    let scenarios = load_dir(&dir).unwrap();
    (dir, scenarios)
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

/// Connects to a kernel that is still starting, trying every 250 ms up to `tries` times.
async fn connect_when_listening(port: u16, token: &str, tries: u32) -> Option<TcpTransport> {
    let mut options =
        TcpOptions::new(format!("127.0.0.1:{port}").parse().unwrap()).with_token(token);
    options.handshake.deadline = Duration::from_secs(10);
    for _ in 0..tries {
        match TcpTransport::connect(options.clone()).await {
            Ok(transport) => return Some(transport),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    None
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_bpy_headless_over_stdio_agrees_with_the_mock() {
    live("bpy 5.0.1 headless over stdio");
    let python = required("VIBE_BPY_PYTHON");
    let (dir, scenarios) = scenarios();
    for scenario in &scenarios {
        let transport = StdioTransport::spawn(StdioOptions::bpy_python(&python).unwrap())
            .await
            .unwrap();
        assert_eq!(transport.hello().blender.version.major, 5);
        let outcome = run(&transport, scenario, DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("bpy: {e}\nconsole: {:?}", transport.console()));
        compare(
            "bpy 5.0.1 (stdio)",
            scenario,
            &outcome,
            &expected(&dir, scenario),
        );
        transport.close().await.unwrap();
    }
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_blender_headless_over_tcp_agrees_with_the_mock() {
    live("blender -b over TCP");
    let blender = required("VIBE_BLENDER");
    let (dir, scenarios) = scenarios();
    let work = std::env::temp_dir().join(format!("vibe-live-tcp-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let script = write_kernel(&work).unwrap();
    let token_file = work.join("token");
    std::fs::write(&token_file, "live-test-token").unwrap();
    for scenario in &scenarios {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = std::process::Command::new(&blender)
            .args([
                "-b",
                "--factory-startup",
                "--python-exit-code",
                "1",
                "--python",
            ])
            .arg(&script)
            .args(["--", "--tcp", &format!("127.0.0.1:{port}"), "--token-file"])
            .arg(&token_file)
            .arg("--once")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let transport = connect_when_listening(port, "live-test-token", 120).await;
        let transport = transport.expect("the Blender kernel did not start listening within 30 s");
        let outcome = run(&transport, scenario, DEADLINE).await.unwrap();
        compare(
            &format!("Blender {} -b (tcp)", transport.hello().blender.version),
            scenario,
            &outcome,
            &expected(&dir, scenario),
        );
        transport.close().await.unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while child.try_wait().ok().flatten().is_none() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Kills a process group (the GUI Blender and its xvfb-run wrapper) without unsafe code.
fn kill_group(pgid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", "--", &format!("-{pgid}")])
        .status();
    std::thread::sleep(Duration::from_millis(300));
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_blender_gui_addon_under_xvfb_agrees_with_the_mock() {
    use std::os::unix::process::CommandExt;
    live("GUI Blender add-on under xvfb-run over TCP");
    let blender = required("VIBE_BLENDER");
    let (dir, scenarios) = scenarios();
    // The add-on path for real: build the installable zip, and let Blender install and enable it
    // (into a scripts folder of the test's own, not the user's).
    let work = std::env::temp_dir().join(format!("vibe-live-gui-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("scripts")).unwrap();
    let kernel_dir = write_kernel(&work.join("kernel"))
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let zip = work.join("vibe_kernel.zip");
    let zipped = std::process::Command::new("python3")
        .args(["-m", "zipfile", "-c"])
        .arg(&zip)
        .arg(kernel_dir.join("vibe_kernel"))
        .status()
        .unwrap();
    assert!(zipped.success(), "building the add-on zip failed");
    let register = format!(
        "import bpy; bpy.ops.preferences.addon_install(filepath={:?}); bpy.ops.preferences.addon_enable(module='vibe_kernel')",
        zip.display().to_string()
    );
    for scenario in &scenarios {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = std::process::Command::new("xvfb-run")
            .args(["-a", "-s", "-screen 0 1280x800x24"])
            .arg(&blender)
            .args(["--factory-startup", "--python-expr", &register])
            .env("VIBE_PORT", port.to_string())
            .env("VIBE_TOKEN", "gui-test-token")
            .env("BLENDER_USER_SCRIPTS", work.join("scripts"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .expect("xvfb-run must be installed for the GUI live test");
        let transport = connect_when_listening(port, "gui-test-token", 240).await;
        let Some(transport) = transport else {
            kill_group(child.id());
            let _ = child.wait();
            panic!("the GUI add-on did not start listening within 60 s");
        };
        assert!(
            !transport.hello().blender.background,
            "the add-on runs in GUI Blender"
        );
        let outcome = run(&transport, scenario, DEADLINE).await;
        transport.close().await.unwrap();
        kill_group(child.id());
        let _ = child.wait();
        let outcome = outcome.unwrap();
        compare(
            "Blender GUI add-on (tcp)",
            scenario,
            &outcome,
            &expected(&dir, scenario),
        );
    }
}
