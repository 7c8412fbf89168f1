//! What the live tests share: the opt-in check, the Blender paths, and starting kernels that
//! listen on TCP (Blender `-b`, and the GUI add-on under xvfb-run).
#![allow(dead_code)] // each test file uses a part

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use vibe_transport::{Call, TcpOptions, TcpTransport, Transport, write_kernel};

mod blender;
pub mod rng;
pub mod session;
pub use blender::headless_script;

/// Live tests are `#[ignore = "needs VIBE_LIVE"]`; run with `--include-ignored` they need it.
pub fn live(what: &str) {
    assert!(
        std::env::var("VIBE_LIVE").is_ok_and(|v| v == "1"),
        "{what}: live test run without VIBE_LIVE=1"
    );
}

/// The path in `var`, which must exist.
pub fn required(var: &str) -> PathBuf {
    let value = std::env::var_os(var).unwrap_or_else(|| {
        panic!("VIBE_LIVE=1 but {var} is not set: a missing Blender is a failure")
    });
    let path = PathBuf::from(value);
    assert!(path.exists(), "{var}={} does not exist", path.display());
    path
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Options for a TCP kernel on `port` with `token`.
pub fn tcp_options(port: u16, token: &str) -> TcpOptions {
    let mut options =
        TcpOptions::new(format!("127.0.0.1:{port}").parse().unwrap()).with_token(token);
    options.handshake.deadline = Duration::from_secs(10);
    options
}

/// Connects to a kernel that is still starting, trying every 250 ms up to `tries` times.
pub async fn connect_when_listening(port: u16, token: &str, tries: u32) -> Option<TcpTransport> {
    for _ in 0..tries {
        match TcpTransport::connect(tcp_options(port, token)).await {
            Ok(transport) => return Some(transport),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    None
}

/// `tool` with `params` through `t` within `deadline`, as the envelope's JSON; a transport error
/// fails the test.
pub async fn call_json(t: &TcpTransport, tool: &str, params: Value, deadline: Duration) -> Value {
    let envelope = t
        .call(Call::new(tool, params, deadline))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    serde_json::to_value(&envelope).unwrap()
}

/// Kills a process group (the GUI Blender and its xvfb-run wrapper) without unsafe code.
pub fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{pgid}")])
        .status();
    std::thread::sleep(Duration::from_millis(300));
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();
}

/// A Blender listening on TCP, killed (with its process group) when dropped.
pub struct ListeningBlender {
    /// Its port.
    pub port: u16,
    child: Child,
}

impl Drop for ListeningBlender {
    fn drop(&mut self) {
        kill_group(self.child.id());
        let _ = self.child.wait();
    }
}

/// `blender -b` running the kernel on TCP (`once`: it exits after its first session).
pub fn headless_tcp(blender: &Path, work: &Path, token: &str, once: bool) -> ListeningBlender {
    headless_tcp_with(blender, work, token, once, &[])
}

/// [`headless_tcp`] with `env` set.
pub fn headless_tcp_with(
    blender: &Path,
    work: &Path,
    token: &str,
    once: bool,
    env: &[(&str, &str)],
) -> ListeningBlender {
    std::fs::create_dir_all(work).unwrap();
    let script = write_kernel(work).unwrap();
    let token_file = work.join("token");
    std::fs::write(&token_file, token).unwrap();
    let port = free_port();
    let mut command = headless_script(blender, &script);
    command
        .args(["--", "--tcp", &format!("127.0.0.1:{port}"), "--token-file"])
        .arg(&token_file);
    if once {
        command.arg("--once");
    }
    // Blender's temp folder and the kernel's go in `work`, which the test removes: a Blender
    // killed when the test ends leaves nothing in the system's temp folder.
    command.env("TMPDIR", work);
    for (name, value) in env {
        command.env(name, value);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    ListeningBlender { port, child }
}

/// The add-on path for real: builds the installable zip in `work` and returns the Python
/// expression that lets Blender install and enable it.
pub fn addon_installer(work: &Path) -> String {
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work.join("scripts")).unwrap();
    let kernel_dir = write_kernel(&work.join("kernel"))
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let zip = work.join("vibe_kernel.zip");
    let zipped = Command::new("python3")
        .args(["-m", "zipfile", "-c"])
        .arg(&zip)
        .arg(kernel_dir.join("vibe_kernel"))
        .status()
        .unwrap();
    assert!(zipped.success(), "building the add-on zip failed");
    format!(
        "import bpy; bpy.ops.preferences.addon_install(filepath={:?}); bpy.ops.preferences.addon_enable(module='vibe_kernel')",
        zip.display().to_string()
    )
}

/// GUI Blender under xvfb-run with the add-on installed (into a scripts folder in `work`, not
/// the user's) and listening with `token`.
pub fn gui_addon(blender: &Path, work: &Path, register: &str, token: &str) -> ListeningBlender {
    gui_addon_with(blender, work, register, token, None, &[], &[])
}

/// [`gui_addon`] opening `file` (a person's project: on the command line, as a person starts
/// Blender), running each of `scripts` after the add-on is enabled, with `env` set. Blender's
/// output goes to `work/blender-gui.log`.
pub fn gui_addon_with(
    blender: &Path,
    work: &Path,
    register: &str,
    token: &str,
    file: Option<&Path>,
    scripts: &[&Path],
    env: &[(&str, &str)],
) -> ListeningBlender {
    let port = free_port();
    let mut command = Command::new("xvfb-run");
    command
        .args(["-a", "-s", "-screen 0 1280x800x24"])
        .arg(blender)
        .arg("--factory-startup");
    if let Some(file) = file {
        command.arg(file);
    }
    command.args(["--python-expr", register]);
    for script in scripts {
        command.arg("--python").arg(script);
    }
    let log = std::fs::File::create(work.join("blender-gui.log")).unwrap();
    // xvfb-run's, Blender's and the kernel's temp folders go in `work` (see `headless_tcp_with`).
    command.env("TMPDIR", work);
    for (name, value) in env {
        command.env(name, value);
    }
    let child = command
        .env("VIBE_PORT", port.to_string())
        .env("VIBE_TOKEN", token)
        .env("BLENDER_USER_SCRIPTS", work.join("scripts"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("xvfb-run must be installed for the GUI live test");
    ListeningBlender { port, child }
}
