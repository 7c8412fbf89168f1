//! Tool packs: the registry set grows as packs a host selects at negotiation, each a registry
//! of its own (name, version, fingerprint), so the contract's tool surface cap applies to what a
//! session selects rather than to everything Vibe offers.

use std::sync::Arc;

use crate::registry_error::RegistryError;
use crate::tool_registry::{ToolRegistry, ToolSpec};

/// The pack every session has: the bridge's own stages (lookups, snapshots, transactions) use
/// its tools.
pub const CORE_PACK: &str = "core";

/// One pack of tools.
#[derive(Clone, Debug)]
pub struct Pack {
    /// Its short name, as a host selects it (`core`, `look`, `animate`, `io`, `code`).
    pub name: String,
    /// Whether a host that names no packs gets it.
    pub default: bool,
    /// Its tools, as a registry with its own version and fingerprint.
    pub tools: Arc<ToolRegistry>,
}

impl Pack {
    /// A pack from its registry.
    pub fn new(name: impl Into<String>, default: bool, tools: ToolRegistry) -> Pack {
        Pack {
            name: name.into(),
            default,
            tools: Arc::new(tools),
        }
    }
}

/// Every pack's tools in one registry (the catalog a session's agreed subset is cut from, and
/// what a kernel implements), named `name` at `version`. Each pack was checked against the
/// tool cap when it loaded; the catalog may hold more, since no session selects it whole
/// unless the sum fits. A tool in two packs is refused.
pub fn catalog(
    name: &str,
    version: semver::Version,
    summary: &str,
    packs: &[Pack],
) -> Result<ToolRegistry, RegistryError> {
    // The registry's own checks refuse a name in two packs (`DuplicateName`).
    let tools = packs
        .iter()
        .flat_map(|pack| pack.tools.tools().iter().map(|tool| ToolSpec::clone(tool)))
        .collect();
    ToolRegistry::uncapped(name, version, summary, tools)
}
