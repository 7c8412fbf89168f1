//! The stdio backend: a child process (`blender -b --python kernel.py`, or a Python with the
//! bpy module) running the kernel, with frames over its stdin / stdout.
//!
//! Blender prints a banner and C-level noise on stdout. Lines before the hello that are not
//! frames are kept as console output; after the hello the kernel keeps stdout for frames only.
//! Stderr is captured into a bounded ring. The child's death fails every call in flight at once.
//! Closing sends `bye`, closes stdin, waits up to the grace period, then kills.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{oneshot, watch};
use vibe_errors::Envelope;

use crate::connection::{Connection, HandshakeOptions};
use crate::error::{EXIT_CONSOLE_LINES, ExitReport, TransportError};
use crate::frame::{Hello, SessionConfig};
use crate::transport::{Call, Transport};

/// How many stderr lines the ring keeps.
pub const STDERR_LINES: usize = 1_000;

/// How to start the child.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StdioOptions {
    /// The program (a `blender` binary, or a Python with bpy).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment variables.
    pub env: Vec<(OsString, OsString)>,
    /// Handshake settings; `skip_noise` is forced on.
    pub handshake: HandshakeOptions,
    /// How long `close` waits for the child to exit before killing it.
    pub shutdown_grace: Duration,
    /// The jail's folders when the child runs confined (kept while the transport lives).
    #[cfg(feature = "jail")]
    pub jail_dirs: Option<Arc<crate::jail::JailDirs>>,
}

/// Variables of the bridge's environment an unconfined kernel inherits; every other variable
/// (an MCP host's API keys, say) stays out. Add more with [`StdioOptions::env`].
pub const INHERITED_ENV: [&str; 8] = [
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "DISPLAY",
    "XAUTHORITY",
];

impl StdioOptions {
    /// Defaults: a 60 s handshake (Blender can take a while to start), a 5 s shutdown grace.
    pub fn new(program: impl Into<PathBuf>) -> StdioOptions {
        StdioOptions {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            handshake: HandshakeOptions {
                deadline: Duration::from_secs(60),
                skip_noise: true,
                ..HandshakeOptions::default()
            },
            shutdown_grace: Duration::from_secs(5),
            #[cfg(feature = "jail")]
            jail_dirs: None,
        }
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> StdioOptions {
        self.args.push(arg.into());
        self
    }

    /// Whether the child runs in a jail.
    pub fn is_jailed(&self) -> bool {
        #[cfg(feature = "jail")]
        return self.jail_dirs.is_some();
        #[cfg(not(feature = "jail"))]
        false
    }

    /// How long a caller polls for an answer before sleeping
    /// ([`HandshakeOptions::busy_poll`]; zero turns it off).
    pub fn busy_poll(mut self, window: Duration) -> StdioOptions {
        self.handshake.busy_poll = window;
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> StdioOptions {
        self.env.push((key.into(), value.into()));
        self
    }
}

/// A [`Transport`] to a kernel in a child process.
pub struct StdioTransport {
    connection: Arc<Connection>,
    hello: Hello,
    stderr: Arc<Mutex<VecDeque<String>>>,
    kill: Mutex<Option<oneshot::Sender<()>>>,
    /// How the child ended, once it has.
    exited: watch::Receiver<Option<ExitReport>>,
    /// Set by `close`: calls failing afterwards are the bridge's doing, not a death.
    closing: AtomicBool,
    grace: Duration,
    pid: Option<u32>,
    #[cfg(feature = "jail")]
    jail_dirs: Option<Arc<crate::jail::JailDirs>>,
}

impl std::fmt::Debug for StdioTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioTransport")
            .field("hello", &self.hello)
            .finish_non_exhaustive()
    }
}

impl StdioTransport {
    /// Starts the child and runs the handshake.
    pub async fn spawn(options: StdioOptions) -> Result<StdioTransport, TransportError> {
        let mut command = Command::new(&options.program);
        // A minimal environment: a jail names every variable itself, an unconfined kernel
        // inherits only INHERITED_ENV.
        command.env_clear();
        if !options.is_jailed() {
            for key in INHERITED_ENV {
                if let Some(value) = std::env::var_os(key) {
                    command.env(key, value);
                }
            }
        }
        command
            .args(&options.args)
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            // Its own process group, so a kill reaches every process it started.
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command.spawn().map_err(|e| {
            TransportError::Connect(
                format!("could not start {}: {e}", options.program.display()).into(),
            )
        })?;
        let mut child = child;
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(TransportError::Connect(
                "the child's pipes were not available".into(),
            ));
        };
        let stderr_ring = Arc::new(Mutex::new(VecDeque::new()));
        tokio::spawn(collect_stderr(stderr, Arc::clone(&stderr_ring)));
        let mut handshake = options.handshake.clone();
        handshake.skip_noise = true;
        let establish = Connection::establish(stdout, stdin, handshake);
        let connection = match establish.await {
            Ok(connection) => Arc::new(connection),
            Err(error) => {
                kill_group(pid);
                let _ = child.start_kill();
                let tail = tail(&stderr_ring, 5);
                return Err(match error {
                    TransportError::NotAVibeKernel(m) if !tail.is_empty() => {
                        TransportError::NotAVibeKernel(format!("{m}; stderr: {tail}"))
                    }
                    other => other,
                });
            }
        };
        let (kill, kill_rx) = oneshot::channel();
        let (exit_tx, exited) = watch::channel(None);
        tokio::spawn(watch_child(
            child,
            Arc::clone(&connection),
            kill_rx,
            exit_tx,
            Arc::clone(&stderr_ring),
        ));
        Ok(StdioTransport {
            hello: connection.hello().clone(),
            connection,
            stderr: stderr_ring,
            kill: Mutex::new(Some(kill)),
            exited,
            closing: AtomicBool::new(false),
            grace: options.shutdown_grace,
            pid,
            #[cfg(feature = "jail")]
            jail_dirs: options.jail_dirs.clone(),
        })
    }

    /// The child's process id (its process group has the same id).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The kernel's private, writable folder when it runs in a jail.
    #[cfg(feature = "jail")]
    pub fn private_dir(&self) -> Option<&std::path::Path> {
        self.jail_dirs.as_deref().map(|dirs| dirs.private.as_path())
    }

    /// Kills the child's whole process group at once (SIGKILL) and fails every call in flight.
    /// In a jail, the pid namespace ends with it.
    pub fn kill(&self) {
        kill_group(self.pid);
        if let Some(kill) = self.kill.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = kill.send(());
        }
    }

    /// The stream connection to the child: its control frames (`checkpoint`, `inventory`,
    /// `restore`) are the supervisor's, and a bench's.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// How the child ended, once it has exited (`None` while it runs).
    pub fn exit_report(&self) -> Option<ExitReport> {
        self.exited.borrow().clone()
    }

    /// The last `n` stderr lines, joined.
    pub fn stderr_tail(&self, n: usize) -> String {
        tail(&self.stderr, n)
    }
}

/// SIGKILL to the process group `pid` leads (the child was started as its own group).
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok())
        && let Some(pid) = rustix::process::Pid::from_raw(pid)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

fn tail(ring: &Mutex<VecDeque<String>>, n: usize) -> String {
    let ring = ring.lock().unwrap_or_else(|e| e.into_inner());
    let skip = ring.len().saturating_sub(n);
    ring.iter()
        .skip(skip)
        .cloned()
        .collect::<Vec<_>>()
        .join(" | ")
}

async fn collect_stderr(stderr: tokio::process::ChildStderr, ring: Arc<Mutex<VecDeque<String>>>) {
    // Bytes, decoded lossily: one line that is not UTF-8 must not end the reading (the kernel
    // would then write into a closed pipe).
    let mut reader = BufReader::new(stderr);
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        match reader.read_until(b'\n', &mut bytes).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&bytes)
            .trim_end_matches(['\n', '\r'])
            .to_owned();
        let mut ring = ring.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == STDERR_LINES {
            ring.pop_front();
        }
        ring.push_back(line);
    }
}

/// How long a call that lost its kernel waits for the child's exit status (the pipe usually
/// closes a moment before the process is reaped).
pub const EXIT_REPORT_WAIT: Duration = Duration::from_millis(500);

/// Waits for the child to exit (failing every call in flight when it does) or for a kill.
async fn watch_child(
    mut child: Child,
    connection: Arc<Connection>,
    kill: oneshot::Receiver<()>,
    exited: watch::Sender<Option<ExitReport>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        _ = kill => {
            let _ = child.start_kill();
            child.wait().await
        }
    };
    let (status, code, signal) = match status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            (status.to_string(), status.code(), status.signal())
        }
        Err(e) => (format!("could not be waited for: {e}"), None, None),
    };
    let console = {
        let ring = stderr.lock().unwrap_or_else(|e| e.into_inner());
        let skip = ring.len().saturating_sub(EXIT_CONSOLE_LINES);
        ring.iter().skip(skip).cloned().collect()
    };
    let report = ExitReport {
        status,
        code,
        signal,
        console,
        sent: true,
    };
    connection.fail(TransportError::KernelExited(report.clone()));
    let _ = exited.send(Some(report));
}

impl StdioTransport {
    /// `error` told with the child's exit, when the child is what ended: its status, its last
    /// console lines and whether this call had been sent.
    async fn explain(&self, error: TransportError) -> TransportError {
        if self.closing.load(Ordering::Relaxed) {
            return error;
        }
        let sent = match &error {
            TransportError::ConnectionLost(_) => true,
            TransportError::Closed(_) => false,
            TransportError::KernelExited(report) => report.sent,
            _ => return error,
        };
        let mut exited = self.exited.clone();
        let waited = tokio::time::timeout(EXIT_REPORT_WAIT, exited.wait_for(Option::is_some)).await;
        let report = match waited {
            Ok(Ok(report)) => report.clone(),
            _ => None,
        };
        match report {
            Some(mut report) => {
                report.sent = sent;
                TransportError::KernelExited(report)
            }
            None => error,
        }
    }
}

#[async_trait]
impl Transport for StdioTransport {
    fn hello(&self) -> &Hello {
        &self.hello
    }

    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        let deadline = session.call_deadline();
        self.connection.configure_within(session, deadline).await
    }

    async fn call(&self, call: Call) -> Result<Envelope, TransportError> {
        match self.connection.call(call).await {
            Err(error) => Err(self.explain(error).await),
            answer => answer,
        }
    }

    async fn call_batch(&self, calls: Vec<Call>) -> Vec<Result<Envelope, TransportError>> {
        // The failures are explained together: each may wait for the exit report, once.
        let answers = self.connection.call_batch(calls).await;
        futures::future::join_all(answers.into_iter().map(|answer| async move {
            match answer {
                Err(error) => Err(self.explain(error).await),
                answer => answer,
            }
        }))
        .await
    }

    fn storage_folders(&self) -> Vec<std::path::PathBuf> {
        #[cfg(feature = "jail")]
        if let Some(private) = self.private_dir() {
            return vec![private.to_path_buf()];
        }
        Vec::new()
    }

    async fn close(&self) -> Result<(), TransportError> {
        self.closing.store(true, Ordering::Relaxed);
        let _ = self.connection.close().await;
        let mut exited = self.exited.clone();
        let gone = tokio::time::timeout(self.grace, exited.wait_for(Option::is_some)).await;
        if gone.is_err()
            && let Some(kill) = self.kill.lock().unwrap_or_else(|e| e.into_inner()).take()
        {
            let _ = kill.send(());
        }
        Ok(())
    }

    fn console(&self) -> Vec<String> {
        let mut lines = self.connection.console();
        lines.extend(
            self.stderr
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        lines
    }
}
