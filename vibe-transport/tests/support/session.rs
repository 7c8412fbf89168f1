//! Session settings for a kernel that may run agent code in a sandbox: the jail tests', and the
//! root benches' (which include this file by path).

use std::path::Path;
use std::time::Duration;

use vibe_transport::SessionConfig;

/// Session `id`: scene reads and writes, transactions and agent code, in `sandbox` (by its
/// canonical path), `per_tool` for each call.
pub fn code_session(id: &str, sandbox: &Path, per_tool: Duration) -> SessionConfig {
    SessionConfig {
        session_id: id.into(),
        capabilities: ["scene.read", "scene.write", "transactions", "code_exec"]
            .map(String::from)
            .into(),
        sanity: Default::default(),
        sandbox: Some(
            sandbox
                .canonicalize()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        ),
        project_roots: Vec::new(),
        time_per_tool_ms: per_tool.as_millis() as u64,
    }
}
