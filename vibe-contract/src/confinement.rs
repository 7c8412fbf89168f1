//! What confines a kernel, as its hello reports it, and whether agent code may run there.
//!
//! Agent code (`python.exec`) is granted only by a kernel whose operating-system jail holds on
//! every axis (filesystem, network, program execution, memory), or by a kernel whose human
//! operator opted in to unconfined code on the Blender side. The code gate in front of it is a
//! filter that explains refusals early; the jail is the boundary.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The confinement a kernel runs under. A kernel that says nothing is unconfined.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Confinement {
    /// Reads limited to Blender, the Python runtime and the kernel; writes limited to the
    /// session's sandbox (without `HUMAN_ONLY/`) and a private temp folder.
    #[serde(default)]
    pub filesystem: bool,
    /// No network: an empty network namespace and no TCP bind or connect.
    #[serde(default)]
    pub network: bool,
    /// No other program can be started (no fork, no exec).
    #[serde(default)]
    pub exec: bool,
    /// The memory ceiling in force, in MiB, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// The mechanisms in force, e.g. `namespaces`, `landlock-abi-6`, `seccomp`, `rlimits`.
    #[serde(default)]
    pub layers: Vec<String>,
    /// The kernel's operator allowed agent code without a jail (an add-on preference or an
    /// environment variable on the Blender side).
    #[serde(default)]
    pub unconfined_code_opt_in: bool,
}

impl Confinement {
    /// Whether every axis of the jail holds.
    pub fn is_jailed(&self) -> bool {
        self.filesystem && self.network && self.exec && self.memory_mib.is_some()
    }

    /// `None` when agent code may run on this kernel, else why not (for refusals).
    pub fn code_exec_refusal(&self) -> Option<String> {
        if self.is_jailed() || self.unconfined_code_opt_in {
            return None;
        }
        let missing: Vec<&str> = [
            ("filesystem", self.filesystem),
            ("network", self.network),
            ("exec", self.exec),
            ("memory", self.memory_mib.is_some()),
        ]
        .into_iter()
        .filter(|(_, held)| !held)
        .map(|(axis, _)| axis)
        .collect();
        Some(format!(
            "agent code needs a confined kernel: this kernel is not confined on {} and its \
             operator did not opt in to unconfined code (start it through a jail, or set \
             VIBE_ALLOW_UNCONFINED_CODE=1 on the Blender side)",
            missing.join(", ")
        ))
    }

    /// A one-word summary: `jailed`, `partial` or `none`.
    pub fn summary(&self) -> &'static str {
        if self.is_jailed() {
            "jailed"
        } else if self.filesystem || self.network || self.exec || self.memory_mib.is_some() {
            "partial"
        } else {
            "none"
        }
    }
}
