//! The jail around headless kernels. Unit checks run everywhere on Linux; the live ones need
//! `VIBE_LIVE=1` with `VIBE_BPY_PYTHON` and `VIBE_BLENDER`, and are reported as ignored
//! otherwise (`cargo test -- --include-ignored` runs them).
#![cfg(all(target_os = "linux", feature = "jail"))]

use std::path::{Path, PathBuf};
use std::time::Duration;

use vibe_transport::jail::Jail;
use vibe_transport::jail::launcher::LaunchPlan;
use vibe_transport::{StdioOptions, StdioTransport, Transport};

fn required(var: &str) -> PathBuf {
    assert!(
        std::env::var("VIBE_LIVE").is_ok_and(|v| v == "1"),
        "live test run without VIBE_LIVE=1"
    );
    let path = PathBuf::from(std::env::var_os(var).unwrap_or_else(|| panic!("{var} is not set")));
    assert!(path.exists(), "{var}={} does not exist", path.display());
    path
}

fn jail(sandbox: &Path) -> Jail {
    Jail::new(sandbox).launcher(env!("CARGO_BIN_EXE_vibe-jail"))
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vibe-jail-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn launcher_arguments_are_checked() {
    let parse = |args: &[&str]| LaunchPlan::parse(args.iter().map(Into::into));
    assert!(parse(&["--read", "/usr", "--memory-mib", "64", "--", "/bin/true"]).is_ok());
    assert!(
        parse(&["--memory-mib", "64"])
            .unwrap_err()
            .contains("no program")
    );
    assert!(
        parse(&["--", "/bin/true"])
            .unwrap_err()
            .contains("--memory-mib")
    );
    assert!(
        parse(&["--memory-mib", "0", "--", "x"])
            .unwrap_err()
            .contains("positive")
    );
    assert!(
        parse(&["--frobnicate", "--", "x"])
            .unwrap_err()
            .contains("unknown")
    );
    assert!(parse(&["--read"]).unwrap_err().contains("needs a value"));
}

#[test]
fn seccomp_programs_compile() {
    use vibe_transport::jail::seccomp;
    for program in [
        seccomp::confinement_filter(),
        seccomp::clone3_filter(),
        seccomp::exec_filter(),
    ] {
        let program = program.unwrap();
        assert_eq!(seccomp::to_bytes(&program).len(), program.len() * 8);
    }
}

#[test]
fn the_jail_covers_human_only_and_clears_the_environment() {
    let sandbox = temp("layout");
    // SAFETY of the test: a variable the bridge has must never reach the kernel.
    let options = StdioOptions::jailed_bpy_python("/usr/bin/python3", &jail(&sandbox)).unwrap();
    let args: Vec<String> = options
        .args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let human = sandbox.canonicalize().unwrap().join("HUMAN_ONLY");
    assert!(
        human.is_dir(),
        "the jail makes HUMAN_ONLY so the cover has a place"
    );
    let cover = args
        .windows(3)
        .any(|w| w[0] == "--ro-bind" && w[2] == human.to_string_lossy());
    assert!(cover, "HUMAN_ONLY is covered read-only: {args:?}");
    for flag in [
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        "--disable-userns",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} missing");
    }
    assert!(!args.iter().any(|a| a == "--share-net"));
    let keys: Vec<String> = options
        .env
        .iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    assert!(keys.contains(&"BLENDER_USER_CONFIG".to_owned()));
    assert!(
        !keys
            .iter()
            .any(|k| k.contains("KEY") || k.contains("TOKEN"))
    );
    assert!(options.is_jailed());
    let _ = std::fs::remove_dir_all(&sandbox);
}

async fn jailed_hello(options: StdioOptions) -> StdioTransport {
    let transport = StdioTransport::spawn(options).await.unwrap();
    let confinement = &transport.hello().blender.confinement;
    assert!(
        confinement.is_jailed(),
        "hello: {confinement:?}; stderr: {}",
        transport.stderr_tail(20)
    );
    assert!(transport.hello().blender.features.contains("code_exec"));
    transport
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_jailed_bpy_reports_every_layer() {
    let sandbox = temp("bpy-hello");
    let python = required("VIBE_BPY_PYTHON");
    let transport =
        jailed_hello(StdioOptions::jailed_bpy_python(python, &jail(&sandbox)).unwrap()).await;
    let layers = &transport.hello().blender.confinement.layers;
    for layer in ["namespaces", "rlimits", "seccomp"] {
        assert!(layers.iter().any(|l| l == layer), "{layer} in {layers:?}");
    }
    assert!(
        layers.iter().any(|l| l.starts_with("landlock")),
        "{layers:?}"
    );
    transport.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&sandbox);
    let _ = Duration::ZERO;
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_jailed_blender_reports_every_layer() {
    let sandbox = temp("blender-hello");
    let blender = required("VIBE_BLENDER");
    let transport =
        jailed_hello(StdioOptions::jailed_blender(blender, &jail(&sandbox)).unwrap()).await;
    transport.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&sandbox);
}
