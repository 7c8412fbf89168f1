//! Session settings for a kernel that may run agent code in a sandbox: the jail tests', and the
//! root benches' (which include this file by path).
#![allow(dead_code)] // each includer uses a part

use std::path::Path;
use std::time::Duration;

use vibe_transport::SessionConfig;

/// The capabilities of a session that reads and writes the scene and files, with transactions.
pub const FILE_SESSION_CAPABILITIES: [&str; 5] = [
    "scene.read",
    "scene.write",
    "transactions",
    "file.read",
    "file.write",
];

/// Session `id`: scene reads and writes, transactions and agent code, in `sandbox` (by its
/// canonical path), `per_tool` for each call.
pub fn code_session(id: &str, sandbox: &Path, per_tool: Duration) -> SessionConfig {
    SessionConfig::new(id)
        .capabilities(["scene.read", "scene.write", "transactions", "code_exec"])
        .sandbox(sandbox.canonicalize().unwrap().to_string_lossy())
        .time_per_tool_ms(per_tool.as_millis() as u64)
}
