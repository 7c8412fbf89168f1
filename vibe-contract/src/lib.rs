//! # vibe-contract: the session contract v1
//!
//! A host (an MCP server, an agent loop) may only call what was negotiated, within the limits
//! agreed, against a Blender whose version fits. This crate holds the contract's types, the tool
//! and macro registries, their fingerprints, and the negotiation that produces a contract.
//!
//! ```
//! use vibe_contract::{BlenderProfile, BridgePolicy, HostProfile, HostProposal, negotiate};
//!
//! let registries = vibe_contract::blender_core_v1().unwrap();
//! let blender = BlenderProfile {
//!     version: "5.0.1".parse().unwrap(),
//!     build_hash: None,
//!     platform: "linux".into(),
//!     background: true,
//!     features: ["scene.read", "scene.write", "transactions"].map(String::from).into(),
//!     confinement: Default::default(),
//! };
//! let host = HostProfile {
//!     name: "my-agent".into(),
//!     version: "0.1".into(),
//!     capabilities: ["scene.read", "scene.write", "transactions"].map(String::from).into(),
//!     ..HostProfile::default()
//! };
//! let agreement = negotiate(&HostProposal::new("s-1", host), &BridgePolicy::default(), &blender, &registries).unwrap();
//! assert!(agreement.tool("object.move").is_ok());
//! // No `file.write` capability: file.save is excluded, and a call would say why.
//! assert_eq!(agreement.tool("file.save").unwrap_err().code.as_str(), "capability_missing");
//! assert!(agreement.contract.fingerprint_is_valid());
//! ```
//!
//! ## Design
//!
//! * **Registries are data.** [`ToolRegistry`] and [`MacroRegistry`] load from YAML (read with
//!   `serde_norway`, the maintained fork of the deprecated `serde_yaml`) and validate on load
//!   with precise [`RegistryError`]s: YAML errors with line and column, duplicate names, more
//!   than [`MAX_TOOLS`] tools, input schemas that are not valid or not strict JSON Schema
//!   (`additionalProperties: false`), macro steps naming unknown tools or arguments, and a macro
//!   declaring a determinism stronger than its steps deliver.
//! * **Fingerprints.** [`Fingerprint`] is blake3 over canonical JSON (sorted keys, floats
//!   rounded to 1e-6, no whitespace), written `blake3:<hex>`. Registries, schemas, macros and the
//!   agreed contract each have one; a registry ref whose fingerprint does not match is refused.
//!   A registry's fingerprint covers a manifest of its entries' own fingerprints, so the agreed
//!   subset of a session is fingerprinted without hashing every schema again.
//! * **Negotiation is a pure function** ([`negotiate()`]): same inputs, same contract. Tools whose
//!   Blender range or capabilities do not fit are *excluded* (recorded in the contract; a call
//!   answers `unsupported_blender_version` or `capability_missing`) rather than failing the whole
//!   session; limits are only ever tightened. See the [`negotiate`](mod@negotiate) module for the
//!   rules and [`RefusalRule`] for each refusal.
//! * **MCP.** [`Agreement::mcp_tools`] renders the agreed tools as MCP `tools/list` entries.
//!
//! ## The default registry: blender-core v1
//!
//! 31 tools (the spec's 15 plus kernel status, telemetry, console errors, identity audit,
//! transactions, object info / transform / rename, modifiers, material list, file save, still
//! render and `python.exec`) and 4 macros. Its fingerprint (a test keeps this line current):
//!
//! `blender-core 1.0.0 = blake3:9be2b71c69fa08669e1dfa55ea4a3039afc1b6a808c93a910b5eaf404e3f4ffb`
//!
//! ## Performance
//!
//! `cargo bench -p vibe-contract` (criterion; each figure beside a baseline of the same run, on
//! a 2-core machine): negotiation with the default registry ~47 us (target <= 50 us), beside
//! ~1.7 us to merely serialize the agreed contract; canonical fingerprinting of the registry
//! ~605 MiB/s, 62% of `serde_json::to_vec` + blake3 over the same value (~970 MiB/s; target
//! >= 50%).

mod confinement;
mod contract;
mod default_registry;
mod effects;
mod fingerprint;
mod macro_registry;
mod mcp;
pub mod negotiate;
mod registry_error;
mod schema_check;
mod tool_registry;
mod version;

pub use confinement::Confinement;
pub use contract::*;
pub use default_registry::{
    BLENDER_CORE_V1_MACROS_YAML, BLENDER_CORE_V1_TOOLS_YAML, blender_core_v1,
};
pub use effects::{DataKind, Effect, EffectAction};
pub use fingerprint::{
    FINGERPRINT_PREFIX, Fingerprint, canonical_float, canonical_json, write_canonical,
};
pub use macro_registry::{Condition, MacroRegistry, MacroSpec, MacroStep, RollbackMode};
pub use negotiate::{
    Agreement, BridgePolicy, FLAG_UI, HostProposal, Refusal, RefusalRule, Registries, negotiate,
};
pub use registry_error::RegistryError;
pub use tool_registry::{
    MAX_TOOLS, TimeClass, ToolHints, ToolRegistry, ToolRequirements, ToolSpec, TransactionRole,
};
pub use version::BlenderVersion;

/// The JSON Schema of [`SessionContract`], as committed in `schema/contract.schema.json`.
pub fn contract_schema_text() -> String {
    let schema = schemars::schema_for!(SessionContract);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}
