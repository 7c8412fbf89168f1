//! The jail around headless kernels. Unit checks run everywhere on Linux; the live ones need
//! `VIBE_LIVE=1` with `VIBE_BPY_PYTHON` and `VIBE_BLENDER`, and are reported as ignored
//! otherwise (`cargo test -- --include-ignored` runs them).
#![cfg(all(target_os = "linux", feature = "jail"))]

use std::path::{Path, PathBuf};
use std::time::Duration;

use vibe_transport::jail::Jail;
use vibe_transport::jail::launcher::LaunchPlan;
use vibe_transport::{StdioOptions, StdioTransport, Transport};

mod support;

/// The path in `var`, in a live run (the opt-in and the path checks are the live tests' own).
fn required(var: &str) -> PathBuf {
    support::live("the jail");
    support::required(var)
}

fn jail(sandbox: &Path) -> Jail {
    Jail::new(sandbox).launcher(env!("CARGO_BIN_EXE_vibe-jail"))
}

/// A fresh folder `vibe-jail-test-<name>-...` in the system's temp folder, removed when the
/// test ends, passed or failed.
fn temp(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("vibe-jail-test-{name}-"))
        .tempdir()
        .unwrap()
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
fn a_project_root_is_read_only_with_its_human_only_covered() {
    let sandbox = temp("root-sandbox");
    let root_dir = temp("root-project");
    let root = root_dir.path();
    std::fs::create_dir_all(root.join("HUMAN_ONLY")).unwrap();
    let jail = jail(sandbox.path()).read_root(root);
    let options = StdioOptions::jailed_bpy_python("/usr/bin/python3", &jail).unwrap();
    let args: Vec<String> = options
        .args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let root = root.to_string_lossy().into_owned();
    let human = format!("{root}/HUMAN_ONLY");
    assert!(
        args.windows(3)
            .any(|w| w[0] == "--ro-bind" && w[1] == root && w[2] == root),
        "the root is bound read-only: {args:?}"
    );
    assert!(
        !args.windows(3).any(|w| w[0] == "--bind" && w[2] == root),
        "never writable"
    );
    assert!(
        args.windows(3)
            .any(|w| w[0] == "--ro-bind" && w[1] != human && w[2] == human),
        "its HUMAN_ONLY is covered by an empty folder: {args:?}"
    );
}

#[test]
fn the_jail_covers_human_only_and_clears_the_environment() {
    let sandbox = temp("layout");
    // SAFETY of the test: a variable the bridge has must never reach the kernel.
    let options =
        StdioOptions::jailed_bpy_python("/usr/bin/python3", &jail(sandbox.path())).unwrap();
    let args: Vec<String> = options
        .args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let human = sandbox.path().canonicalize().unwrap().join("HUMAN_ONLY");
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
        jailed_hello(StdioOptions::jailed_bpy_python(python, &jail(sandbox.path())).unwrap()).await;
    let layers = &transport.hello().blender.confinement.layers;
    for layer in ["namespaces", "rlimits", "seccomp"] {
        assert!(layers.iter().any(|l| l == layer), "{layer} in {layers:?}");
    }
    assert!(
        layers.iter().any(|l| l.starts_with("landlock")),
        "{layers:?}"
    );
    transport.close().await.unwrap();
    let _ = Duration::ZERO;
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_jailed_blender_reports_every_layer() {
    let sandbox = temp("blender-hello");
    let blender = required("VIBE_BLENDER");
    let transport =
        jailed_hello(StdioOptions::jailed_blender(blender, &jail(sandbox.path())).unwrap()).await;
    transport.close().await.unwrap();
}

mod restore {
    use super::*;
    use serde_json::{Value, json};
    use std::time::Instant;
    use vibe_transport::{Call, SupervisedKernel, kernel_factory};

    /// Deadline of the runaway calls below.
    const DEADLINE: Duration = Duration::from_secs(3);

    async fn supervised(which: &str, sandbox: &Path) -> SupervisedKernel {
        let jail = jail(sandbox);
        let factory = match which {
            "bpy" => {
                let python = required("VIBE_BPY_PYTHON");
                kernel_factory(move || StdioOptions::jailed_bpy_python(&python, &jail))
            }
            _ => {
                let blender = required("VIBE_BLENDER");
                kernel_factory(move || StdioOptions::jailed_blender(&blender, &jail))
            }
        };
        let registry = vibe_contract::default_registries().unwrap().tools;
        let kernel = SupervisedKernel::start(factory, registry).await.unwrap();
        let session =
            support::session::code_session("restore", sandbox, Duration::from_millis(15_000));
        assert!(kernel.configure(&session).await.unwrap().is_ok());
        kernel
    }

    /// Agent code on the supervisor directly: the session waits for a decision on the scene it
    /// left, which the pipeline makes from inventories; here the test keeps it.
    async fn code(kernel: &SupervisedKernel, code: &str) -> vibe_errors::Envelope {
        let answer = call(kernel, "python.exec", json!({ "code": code }), DEADLINE).await;
        let boundary = vibe_transport::Transport::code_boundary(kernel).unwrap();
        boundary.settle(answer.is_ok()).await.unwrap();
        answer
    }

    async fn call(
        kernel: &SupervisedKernel,
        tool: &str,
        params: Value,
        deadline: Duration,
    ) -> vibe_errors::Envelope {
        kernel
            .call(Call::new(tool, params, deadline))
            .await
            .unwrap()
    }

    async fn fingerprint(kernel: &SupervisedKernel) -> Value {
        let snapshot = call(kernel, "scene.snapshot", json!({}), Duration::from_secs(30)).await;
        serde_json::json!(
            vibe_transport::snapshot::content_fingerprint(snapshot.result().unwrap()).unwrap()
        )
    }

    /// Runaway code the tracer cannot stop is killed within deadline + 2 s, and the next call
    /// sees the scene exactly as it was before the call.
    async fn kill_and_restore(which: &str) {
        let sandbox = temp(&format!("restore-{which}"));
        let kernel = supervised(which, sandbox.path()).await;
        // State worth restoring: a journaled typed call, then agent code (a new checkpoint).
        let made = call(
            &kernel,
            "object.create",
            json!({"name": "Crate", "type": "MESH", "primitive": "cube"}),
            DEADLINE,
        )
        .await;
        assert!(made.is_ok(), "{made:?}");
        let moved = call(
            &kernel,
            "object.move",
            json!({"name": "Crate", "delta": [1.0, 2.0, 3.0]}),
            DEADLINE,
        )
        .await;
        assert!(moved.is_ok(), "{moved:?}");
        let code = code(
            &kernel,
            "import bpy\nbpy.data.objects['Cube'].location.z = 4.5",
        )
        .await;
        assert!(code.is_ok(), "{code:?}");
        let moved = call(
            &kernel,
            "object.move",
            json!({"name": "Crate", "delta": [0.5, 0.0, 0.0]}),
            DEADLINE,
        )
        .await;
        assert!(moved.is_ok(), "{moved:?}");
        let before = fingerprint(&kernel).await;
        for runaway in [
            "import time\ntime.sleep(1e6)",
            "import itertools\nmax(itertools.count())",
            "import bpy\nbpy.data.objects['Cube'].location.x = 9\nsum(range(10**15))",
        ] {
            let pid = kernel.current().pid().unwrap();
            let started = Instant::now();
            let watch = tokio::spawn(async move {
                // Independent of the supervisor: when did the old kernel's process end?
                while alive(pid) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                started.elapsed()
            });
            let answer = call(&kernel, "python.exec", json!({ "code": runaway }), DEADLINE).await;
            let killed_after = watch.await.unwrap();
            assert!(
                killed_after < DEADLINE + Duration::from_secs(2),
                "{runaway}: alive for {killed_after:?}"
            );
            let error = answer
                .error()
                .unwrap_or_else(|| panic!("{runaway} must not succeed"));
            assert_eq!(error.code.as_str(), "timeout", "{error:?}");
            assert_eq!(error.details["cancelled"], true);
            assert_eq!(error.details["kernel"], "replaced");
            assert_eq!(
                fingerprint(&kernel).await,
                before,
                "{runaway}: the scene came back"
            );
        }
        assert_eq!(
            kernel.replacements(),
            4,
            "one retirement after the agent code, three kills"
        );
        kernel.close().await.unwrap();
    }

    /// Whether process `pid` still runs (a zombie waiting to be reaped does not).
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
    }

    /// A kill inside a transaction: the fresh kernel takes the transaction over (its `begin`
    /// state kept by the bridge), so a rollback afterwards still returns to before `begin`.
    async fn kill_inside_a_transaction(which: &str) {
        let sandbox = temp(&format!("restore-tx-{which}"));
        let kernel = supervised(which, sandbox.path()).await;
        let unused = call(
            &kernel,
            "material.ensure_principled",
            json!({"name": "Spare"}),
            DEADLINE,
        )
        .await;
        assert!(unused.is_ok(), "{unused:?}");
        let before_begin = fingerprint(&kernel).await;
        assert!(
            call(&kernel, "transaction.begin", json!({}), DEADLINE)
                .await
                .is_ok()
        );
        let made = call(
            &kernel,
            "object.create",
            json!({"name": "Crate", "type": "EMPTY"}),
            DEADLINE,
        )
        .await;
        assert!(made.is_ok(), "{made:?}");
        let code = code(
            &kernel,
            "import bpy\nbpy.data.objects['Cube'].location.z = 3",
        )
        .await;
        assert!(code.is_ok(), "{code:?}");
        let inside = fingerprint(&kernel).await;
        let killed = call(
            &kernel,
            "python.exec",
            json!({"code": "import time\ntime.sleep(1e6)"}),
            DEADLINE,
        )
        .await;
        assert_eq!(
            killed.error().unwrap().details["kernel"],
            "replaced",
            "{killed:?}"
        );
        assert_eq!(
            fingerprint(&kernel).await,
            inside,
            "restored to the state before the killed call"
        );
        let rolled = call(&kernel, "transaction.rollback", json!({}), DEADLINE).await;
        assert!(
            rolled.is_ok(),
            "the transaction survived the kill: {rolled:?}"
        );
        assert_eq!(
            fingerprint(&kernel).await,
            before_begin,
            "and rolls back to before begin, unused material included"
        );
        kernel.close().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs VIBE_LIVE"]
    async fn live_bpy_a_kill_inside_a_transaction_keeps_the_transaction() {
        kill_inside_a_transaction("bpy").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs VIBE_LIVE"]
    async fn live_blender_a_kill_inside_a_transaction_keeps_the_transaction() {
        kill_inside_a_transaction("blender").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs VIBE_LIVE"]
    async fn live_bpy_runaway_code_is_killed_and_the_scene_restored() {
        kill_and_restore("bpy").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs VIBE_LIVE"]
    async fn live_blender_runaway_code_is_killed_and_the_scene_restored() {
        kill_and_restore("blender").await;
    }
}

#[test]
fn runtime_roots_never_include_the_home_folder() {
    use vibe_transport::jail::runtime_roots;
    let home_dir = temp("home");
    let home = home_dir.path();
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let install = home.join("blender-4.5");
    std::fs::create_dir_all(&install).unwrap();
    std::fs::write(install.join("blender"), b"").unwrap();
    let link = bin.join("blender");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(install.join("blender"), &link).unwrap();
    let roots = runtime_roots(&link, Some(home));
    assert_eq!(
        roots,
        [install.canonicalize().unwrap()],
        "the installation, not ~ nor ~/bin"
    );
}

/// Runs `program` under the launcher alone (no namespaces needed; the confinement does not
/// let it fork, so one program, no shell).
fn under_launcher(dir: &Path, program: &str) -> std::process::Output {
    let launcher = env!("CARGO_BIN_EXE_vibe-jail");
    // fd 9 is open without close-on-exec in the launcher's parent, as a shell would leave it.
    let wrapper = format!(
        "exec 9</etc/hostname; exec {launcher} --best-effort --memory-mib 4096 --read /usr --read /etc --read /proc --read /dev --write {dir} -- {program}",
        dir = dir.display()
    );
    std::process::Command::new("/bin/bash")
        .arg("-c")
        .arg(wrapper)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn no_descriptor_of_the_parent_reaches_the_kernel() {
    let dir_guard = temp("fds");
    let dir = dir_guard.path();
    let output = under_launcher(dir, "/usr/bin/ls /proc/self/fd");
    let listed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(listed.split_whitespace().any(|fd| fd == "2"), "{listed}");
    assert!(
        !listed.split_whitespace().any(|fd| fd == "9"),
        "fd 9 leaked: {listed}"
    );
}

#[test]
fn no_setuid_or_setgid_file_can_be_made() {
    use std::os::unix::fs::PermissionsExt;
    let dir_guard = temp("suid");
    let dir = dir_guard.path();
    let file = dir.join("f");
    std::fs::write(&file, b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    for mode in ["4755", "2755", "6777"] {
        let output = under_launcher(dir, &format!("/usr/bin/chmod {mode} {}", file.display()));
        assert!(!output.status.success(), "chmod {mode} passed: {output:?}");
        let now = std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;
        assert_eq!(now, 0o755, "chmod {mode} changed the mode to {now:o}");
    }
    let output = under_launcher(
        dir,
        &format!("/usr/bin/mkdir -m 2777 {}", dir.join("d").display()),
    );
    assert!(
        !dir.join("d").exists(),
        "a setgid folder was made: {output:?}"
    );
    // Ordinary modes still work.
    let output = under_launcher(dir, &format!("/usr/bin/chmod 700 {}", file.display()));
    assert!(output.status.success(), "{output:?}");
}
