//! The stdio backend against a child process: the `vibe-mock-kernel` binary, and ordinary
//! programs that are not kernels.

use std::time::{Duration, Instant};

use serde_json::json;
use vibe_transport::{Call, StdioOptions, StdioTransport, Transport, TransportError};

const KERNEL: &str = env!("CARGO_BIN_EXE_vibe-mock-kernel");
const SLACK: Duration = Duration::from_millis(1_500);

/// A `kernel.status` call with `deadline`.
async fn status(
    t: &StdioTransport,
    deadline: Duration,
) -> Result<vibe_errors::Envelope, TransportError> {
    t.call(Call::new("kernel.status", json!({}), deadline))
        .await
}

fn kernel(args: &[&str]) -> StdioOptions {
    let mut options = StdioOptions::new(KERNEL).arg("--stdio");
    for arg in args {
        options = options.arg(*arg);
    }
    options.handshake.deadline = Duration::from_secs(10);
    options.shutdown_grace = Duration::from_secs(5);
    options
}

#[tokio::test]
async fn banner_lines_are_console_output_and_calls_work() {
    let t = StdioTransport::spawn(kernel(&["--banner"])).await.unwrap();
    assert!(
        t.console().iter().any(|l| l.starts_with("Blender 5.0.1")),
        "{:?}",
        t.console()
    );
    let answer = t
        .call(Call::new(
            "object.info",
            json!({"name": "Light"}),
            Duration::from_secs(5),
        ))
        .await
        .unwrap();
    assert_eq!(answer.result().unwrap()["type"], "LIGHT");
    let started = Instant::now();
    t.close().await.unwrap();
    // The kernel exits on `bye`; no kill was needed.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the kernel exited within the grace period"
    );
}

#[tokio::test]
async fn child_death_fails_the_call_in_flight_at_once() {
    let t = StdioTransport::spawn(kernel(&["--fault", "1:drop"]))
        .await
        .unwrap();
    let started = Instant::now();
    let error = status(&t, Duration::from_secs(10)).await.unwrap_err();
    // The child's exit reaches the caller: it is dead, and the call had been sent.
    let TransportError::KernelExited(report) = &error else {
        panic!("{error:?}")
    };
    assert!(report.sent && error.may_have_run(), "{report:?}");
    assert_eq!(report.code, Some(0), "{report:?}");
    assert_eq!(error.to_error_body().details["kernel"], "dead");
    assert!(started.elapsed() < SLACK * 4, "{:?}", started.elapsed());
    let after = status(&t, Duration::from_secs(1)).await.unwrap_err();
    // Never sent: it cannot have run, and the answer says so.
    let TransportError::KernelExited(report) = &after else {
        panic!("{after:?}")
    };
    assert!(!report.sent && !after.may_have_run(), "{report:?}");
    assert!(after.to_string().contains("never sent"), "{after:?}");
}

/// A kernel that crashes: the first line the mock kernel prints (its hello), then a crash
/// with a console line once a call arrives.
fn crashing_kernel() -> StdioOptions {
    let hello = std::process::Command::new(KERNEL)
        .arg("--stdio")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the mock kernel runs");
    let hello = String::from_utf8(hello.stdout).unwrap();
    let hello = hello.lines().next().expect("a hello line").to_string();
    let mut options = StdioOptions::new("/bin/sh").arg("-c").arg(
        "printf '%s\\n' \"$HELLO\"; read -r call; \
         echo 'Error: EXCEPTION_ACCESS_VIOLATION in bmesh' >&2; kill -SEGV $$",
    );
    options = options.env("HELLO", hello);
    options.handshake.deadline = Duration::from_secs(10);
    options
}

#[tokio::test]
async fn a_crashed_kernel_is_told_apart_from_a_hung_one() {
    let t = StdioTransport::spawn(crashing_kernel()).await.unwrap();
    let dead = status(&t, Duration::from_secs(10)).await.unwrap_err();
    let TransportError::KernelExited(report) = &dead else {
        panic!("{dead:?}")
    };
    assert_eq!(report.signal, Some(11), "{report:?}");
    assert_eq!(report.code, None);
    assert!(
        report
            .console
            .iter()
            .any(|l| l.contains("EXCEPTION_ACCESS_VIOLATION")),
        "{report:?}"
    );
    let body = dead.to_error_body();
    assert_eq!(body.details["kernel"], "dead");
    assert_eq!(body.details["signal"], 11);
    assert_eq!(body.details["may_have_run"], true);
    assert!(
        body.details["exit_status"].as_str().unwrap().contains("11"),
        "{body:?}"
    );

    // A kernel that is alive but does not answer is hung, not dead.
    let hung = StdioTransport::spawn(kernel(&["--fault", "1:hang"]))
        .await
        .unwrap();
    let late = status(&hung, Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(late, TransportError::Deadline(_)), "{late:?}");
    assert_eq!(late.to_error_body().details["kernel"], "hung");
    hung.close().await.unwrap();
}

#[tokio::test]
async fn a_program_that_only_prints_is_not_a_kernel() {
    let mut options = StdioOptions::new("sh")
        .arg("-c")
        .arg("echo 'Blender 3.4.1'; echo 'some noise'; sleep 5");
    options.handshake.deadline = Duration::from_millis(400);
    let started = Instant::now();
    match StdioTransport::spawn(options).await {
        Err(TransportError::NotAVibeKernel(m)) => assert!(m.contains("no hello"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_millis(400) + SLACK);
}

#[tokio::test]
async fn a_program_that_exits_without_a_hello_is_not_a_kernel() {
    let options = StdioOptions::new("sh")
        .arg("-c")
        .arg("echo 'Error: bpy not found' >&2; exit 3");
    match StdioTransport::spawn(options).await {
        Err(TransportError::NotAVibeKernel(m)) => assert!(m.contains("without a hello"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_missing_program_is_a_connect_error() {
    let options = StdioOptions::new("/nonexistent/blender");
    assert!(matches!(
        StdioTransport::spawn(options).await,
        Err(TransportError::Connect(_))
    ));
}

#[test]
fn the_kernel_folder_is_one_per_kernel_version_and_private() {
    let first = vibe_transport::kernel::kernel_dir().unwrap();
    let second = vibe_transport::kernel::kernel_dir().unwrap();
    assert_eq!(first, second, "no new folder per start");
    assert!(first.join("run_kernel.py").is_file());
    for (relative, text) in vibe_transport::KERNEL_FILES {
        assert_eq!(std::fs::read_to_string(first.join(relative)).unwrap(), text);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let base = first.parent().unwrap();
        let meta = std::fs::metadata(base).unwrap();
        assert_eq!(
            meta.mode() & 0o077,
            0,
            "only this user may write where the kernel lives"
        );
    }
}
