//! The stdio backend against a child process: the `vibe-mock-kernel` binary, and ordinary
//! programs that are not kernels.

use std::time::{Duration, Instant};

use serde_json::json;
use vibe_transport::{Call, StdioOptions, StdioTransport, Transport, TransportError};

const KERNEL: &str = env!("CARGO_BIN_EXE_vibe-mock-kernel");
const SLACK: Duration = Duration::from_millis(1_500);

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
            t.next_id(),
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
    let error = t
        .call(Call::new(
            t.next_id(),
            "kernel.status",
            json!({}),
            Duration::from_secs(10),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::ConnectionLost(_)),
        "{error:?}"
    );
    assert!(started.elapsed() < SLACK * 4, "{:?}", started.elapsed());
    let after = t
        .call(Call::new(
            t.next_id(),
            "kernel.status",
            json!({}),
            Duration::from_secs(1),
        ))
        .await
        .unwrap_err();
    // Never sent: it cannot have run, and the answer says so.
    assert!(matches!(after, TransportError::Closed(_)), "{after:?}");
    assert!(!after.may_have_run());
    assert!(after.to_string().contains("never sent"), "{after:?}");
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
