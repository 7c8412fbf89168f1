//! What the tests of the `vibe-mcp` binary share: the binary, a sandbox, a stdio session.

#![allow(dead_code)] // each test file uses its part

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};

use serde_json::{Value, json};

/// The binary under test.
pub const BINARY: &str = env!("CARGO_BIN_EXE_vibe-mcp");

/// A folder of the test's own with a `sandbox` inside (the audit log goes beside it, so inside
/// the returned folder, which is removed when the test ends).
pub fn own_sandbox() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::Builder::new()
        .prefix("vibe-mcp-test-")
        .tempdir()
        .unwrap();
    let dir = root.path().join("sandbox");
    std::fs::create_dir(&dir).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    (root, dir)
}

/// Runs the binary with `args` and no stdin (a server sees its end at once and stops).
pub fn run(args: &[&str], env: &[(&str, &Path)]) -> Output {
    Command::new(BINARY)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A running server and its stdio.
pub struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Session {
    /// Starts the binary with `args`.
    pub fn start(args: &[&str]) -> Session {
        let mut child = Command::new(BINARY)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Session {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends a notification.
    pub fn notify(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
    }

    /// Sends a request and reads up to its answer: the answer and the notifications before it.
    pub fn rpc_with_notes(&mut self, message: Value) -> (Value, Vec<Value>) {
        let id = message["id"].clone();
        self.notify(message);
        let mut notes = Vec::new();
        loop {
            let mut line = String::new();
            self.stdout.read_line(&mut line).unwrap();
            let answer: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("{e}: {line:?} (stdout must carry JSON-RPC only)"));
            if answer.get("id") == Some(&id) {
                return (answer, notes);
            }
            notes.push(answer);
        }
    }

    /// Sends a request and returns its answer.
    pub fn rpc(&mut self, message: Value) -> Value {
        self.rpc_with_notes(message).0
    }

    /// Initializes the session as a client does.
    pub fn initialize(&mut self) -> Value {
        let init = self.rpc(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}));
        self.notify(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init
    }

    /// Calls a tool.
    pub fn call(&mut self, id: u64, name: &str, arguments: Value) -> Value {
        self.rpc(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}))
    }

    /// Closes stdin and waits for the server to end.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin);
        self.child.wait().unwrap()
    }
}
