//! The session contract v1 and its parts.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use vibe_errors::ErrorCode;

use crate::fingerprint::Fingerprint;
use crate::tool_registry::TimeClass;
use crate::version::BlenderVersion;

/// The contract version this crate speaks.
pub const CONTRACT_VERSION: semver::Version = semver::Version::new(1, 0, 0);

/// Capability: read the scene.
pub const CAP_SCENE_READ: &str = "scene.read";
/// Capability: change the scene.
pub const CAP_SCENE_WRITE: &str = "scene.write";
/// Capability: transactions (begin / commit / rollback).
pub const CAP_TRANSACTIONS: &str = "transactions";
/// Capability: write files into the session's sandbox folder.
pub const CAP_FILE_WRITE: &str = "file.write";
/// Capability: open `.blend` files from the session's read-only project roots or its sandbox.
pub const CAP_FILE_READ: &str = "file.read";
/// Capability: render stills.
pub const CAP_RENDER: &str = "render";
/// Capability: run agent-written Python through the code gate.
pub const CAP_CODE_EXEC: &str = "code_exec";

/// Who the host is and what it asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostProfile {
    /// Client name, e.g. `claude-desktop` or `my-agent`.
    pub name: String,
    /// Client version.
    pub version: String,
    /// Capabilities the host wants granted.
    #[serde(default)]
    pub capabilities: BTreeSet<String>,
    /// Feature flags the session cannot work without; refused by name when unavailable.
    #[serde(default)]
    pub required_flags: BTreeSet<String>,
    /// Feature flags the host would use when available.
    #[serde(default)]
    pub optional_flags: BTreeSet<String>,
}

/// The Blender on the other end, as the kernel's hello describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BlenderProfile {
    /// Blender's version.
    pub version: BlenderVersion,
    /// Blender's build hash, when the build reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_hash: Option<String>,
    /// `linux`, `darwin`, `windows`, ...
    pub platform: String,
    /// Whether Blender runs without a UI (`blender -b`, the bpy module).
    pub background: bool,
    /// Capabilities and features the kernel supports (e.g. `scene.write`, `code_exec`).
    #[serde(default)]
    pub features: BTreeSet<String>,
    /// The confinement the kernel runs under; `code_exec` depends on it.
    #[serde(default)]
    pub confinement: crate::Confinement,
}

/// A pointer to a registry: name, version and the fingerprint of its content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryRef {
    /// The registry's name.
    pub name: String,
    /// Its version.
    pub version: semver::Version,
    /// The fingerprint of its content.
    pub fingerprint: Fingerprint,
}

/// What the session may do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// Granted capabilities: host request, bridge policy and kernel support intersected.
    pub granted: BTreeSet<String>,
    /// Agreed feature flags.
    pub feature_flags: BTreeSet<String>,
    /// The tools the session may call, in registry order.
    pub tools: Vec<String>,
    /// The macros the session may run.
    pub macros: Vec<String>,
    /// Whether the version negotiation of this contract took place (always true when negotiated).
    pub version_negotiation: bool,
    /// Whether calls are written to the audit log.
    pub audit: bool,
}

/// How agent-written code is gated.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CodeGateMode {
    /// Log the patterns the gate finds, block nothing (seed 004's "full trust"). Chosen only
    /// when both host and bridge policy ask for it.
    LogOnly,
    /// A violation is a security block and turns the bridge read-only.
    #[default]
    Enforcing,
}

/// Sanity limits: refused before execution with `invalid_arguments`, reason `sanity_limit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SanityLimits {
    /// Subdivision surface levels (viewport and render).
    pub max_subdivision_levels: u32,
    /// Array modifier count.
    pub max_array_count: u32,
    /// Bevel segments.
    pub max_bevel_segments: u32,
    /// Estimated polygons of one object after its modifiers.
    pub max_polygons: u64,
}

impl Default for SanityLimits {
    fn default() -> Self {
        SanityLimits {
            max_subdivision_levels: 3,
            max_array_count: 64,
            max_bevel_segments: 16,
            max_polygons: 2_000_000,
        }
    }
}

/// How many polygons a modifier turns `polygons` into: the sanity estimate shared by the bridge,
/// MockBlender and the kernel. Subdivision multiplies by 4 per level (the higher of viewport and
/// render levels), array by its count, mirror and solidify by 2, bevel by segments + 1.
pub fn polygon_estimate(
    polygons: u64,
    modifier_type: &str,
    levels: u32,
    count: u32,
    segments: u32,
) -> u64 {
    match modifier_type {
        "SUBSURF" => polygons.saturating_mul(4u64.saturating_pow(levels)),
        "ARRAY" => polygons.saturating_mul(u64::from(count)),
        "MIRROR" | "SOLIDIFY" => polygons.saturating_mul(2),
        "BEVEL" => polygons.saturating_mul(u64::from(segments) + 1),
        _ => polygons,
    }
}

/// Blender's defaults for the modifier parameters the registry exposes:
/// (subdivision levels, render levels, array count, bevel segments).
pub const MODIFIER_DEFAULTS: (u32, u32, u32, u32) = (1, 2, 2, 1);

impl SanityLimits {
    fn tightened(&self, other: &SanityLimits) -> SanityLimits {
        SanityLimits {
            max_subdivision_levels: self
                .max_subdivision_levels
                .min(other.max_subdivision_levels),
            max_array_count: self.max_array_count.min(other.max_array_count),
            max_bevel_segments: self.max_bevel_segments.min(other.max_bevel_segments),
            max_polygons: self.max_polygons.min(other.max_polygons),
        }
    }
}

/// Resource ceilings and safety rails.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Constraints {
    /// Deadline of one tool call of the `quick` time class (reads, edits, transactions, agent
    /// code), in milliseconds: past it the call is cancelled, or its kernel killed and
    /// replaced.
    pub time_per_tool_ms: u64,
    /// Deadline of one call of the `file` time class (`file.save`, `file.open`), in ms.
    #[serde(default = "default_time_file_ms")]
    pub time_file_ms: u64,
    /// Deadline of one call of the `render` time class (`render.still`), in ms.
    #[serde(default = "default_time_render_ms")]
    pub time_render_ms: u64,
    /// Memory ceiling of the Blender process, in MiB.
    pub max_memory_mib: u64,
    /// Temporary storage (transaction snapshots, renders), in MiB.
    pub temp_storage_mib: u64,
    /// Sanity limits.
    pub sanity: SanityLimits,
    /// How agent-written code is gated.
    pub code_gate: CodeGateMode,
    /// Whether the session starts read-only (every mutation refused).
    pub read_only: bool,
}

impl Default for Constraints {
    fn default() -> Self {
        Constraints {
            time_per_tool_ms: 15_000,
            time_file_ms: default_time_file_ms(),
            time_render_ms: default_time_render_ms(),
            max_memory_mib: 8_192,
            temp_storage_mib: 2_048,
            sanity: SanityLimits::default(),
            code_gate: CodeGateMode::Enforcing,
            read_only: false,
        }
    }
}

fn default_time_file_ms() -> u64 {
    120_000
}

fn default_time_render_ms() -> u64 {
    600_000
}

impl Constraints {
    /// The deadline of one call of a tool of `class`, in milliseconds.
    pub fn deadline_ms(&self, class: TimeClass) -> u64 {
        match class {
            TimeClass::Quick => self.time_per_tool_ms,
            TimeClass::File => self.time_file_ms,
            TimeClass::Render => self.time_render_ms,
        }
    }

    /// The stricter of two constraint sets, field by field.
    pub fn tightened(&self, other: &Constraints) -> Constraints {
        Constraints {
            time_per_tool_ms: self.time_per_tool_ms.min(other.time_per_tool_ms),
            time_file_ms: self.time_file_ms.min(other.time_file_ms),
            time_render_ms: self.time_render_ms.min(other.time_render_ms),
            max_memory_mib: self.max_memory_mib.min(other.max_memory_mib),
            temp_storage_mib: self.temp_storage_mib.min(other.temp_storage_mib),
            sanity: self.sanity.tightened(&other.sanity),
            code_gate: self.code_gate.max(other.code_gate),
            read_only: self.read_only || other.read_only,
        }
    }
}

/// Limits on the session's surface and traffic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// How many tools the session may expose (at most 35).
    pub tool_surface_cap: u32,
    /// How many calls may be in flight at once.
    pub max_concurrent_calls: u32,
    /// The largest request or response frame, in bytes.
    pub max_payload_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            tool_surface_cap: crate::tool_registry::MAX_TOOLS as u32,
            max_concurrent_calls: 8,
            max_payload_bytes: 16 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// The stricter of two limit sets, field by field.
    pub fn tightened(&self, other: &Limits) -> Limits {
        Limits {
            tool_surface_cap: self.tool_surface_cap.min(other.tool_surface_cap),
            max_concurrent_calls: self.max_concurrent_calls.min(other.max_concurrent_calls),
            max_payload_bytes: self.max_payload_bytes.min(other.max_payload_bytes),
        }
    }
}

/// How much the audit log records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditVerbosity {
    /// Security and terminal events only.
    Minimal,
    /// Every call and answer.
    #[default]
    Standard,
    /// Every call and answer, with the full result bodies.
    Full,
}

/// What the audit log records and how it redacts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditPolicy {
    /// Verbosity.
    pub verbosity: AuditVerbosity,
    /// Store agent-written code verbatim (otherwise only its hash).
    pub keep_code: bool,
    /// Store paths as given (otherwise relative to the sandbox).
    pub keep_paths: bool,
    /// Sink identifiers, e.g. `file:vibe_audit.jsonl`.
    #[serde(default)]
    pub sinks: Vec<String>,
}

impl Default for AuditPolicy {
    fn default() -> Self {
        AuditPolicy {
            verbosity: AuditVerbosity::Standard,
            keep_code: false,
            keep_paths: false,
            sinks: vec!["file:vibe_audit.jsonl".to_owned()],
        }
    }
}

/// Fingerprints of the contract's artifacts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fingerprints {
    /// The agreed tool set (the registry subset the session may call).
    pub tools: Fingerprint,
    /// The agreed macro set, if macros were negotiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub macros: Option<Fingerprint>,
    /// The input and output schemas of the agreed tools.
    pub schemas: Fingerprint,
    /// The contract itself (every field but this one).
    pub contract: Fingerprint,
}

/// A registry tool the session may not call, and the code a call to it gets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExcludedTool {
    /// The tool.
    pub name: String,
    /// `unsupported_blender_version` or `capability_missing`.
    pub code: ErrorCode,
    /// Why, in one line.
    pub why: String,
}

/// The agreed session contract v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionContract {
    /// Always `1.0.0` for contract v1 (or a version the bridge declared compatible).
    #[schemars(with = "String")]
    pub contract_version: semver::Version,
    /// The host-generated session identifier.
    pub session_id: String,
    /// The host.
    pub host_profile: HostProfile,
    /// The Blender.
    pub blender_profile: BlenderProfile,
    /// What the session may do.
    pub capabilities: Capabilities,
    /// The tool registry the session uses (the catalog of every pack).
    pub tool_registry_ref: RegistryRef,
    /// The packs the session selected, by short name, each with its own registry reference.
    #[serde(default)]
    pub packs: std::collections::BTreeMap<String, RegistryRef>,
    /// The macro registry, when macros were negotiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub macro_registry_ref: Option<RegistryRef>,
    /// Resource ceilings and safety rails.
    pub constraints: Constraints,
    /// Surface and traffic limits.
    pub limits: Limits,
    /// Audit policy.
    pub audit: AuditPolicy,
    /// Fingerprints of the artifacts and of the contract.
    pub fingerprints: Fingerprints,
    /// UI is optional: true unless the host required the `ui` flag.
    pub ui_optional: bool,
    /// Registry tools left out of the session because of the Blender version or a missing
    /// capability; a call to one answers with its code.
    #[serde(default)]
    pub excluded_tools: Vec<ExcludedTool>,
}

impl SessionContract {
    /// The fingerprint of the contract without its own `fingerprints.contract` field.
    pub fn compute_fingerprint(&self) -> Fingerprint {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(fps) = value
            .get_mut("fingerprints")
            .and_then(|f| f.as_object_mut())
        {
            fps.remove("contract");
        }
        Fingerprint::of_value(&value)
    }

    /// Whether the stored contract fingerprint matches the content.
    pub fn fingerprint_is_valid(&self) -> bool {
        self.fingerprints.contract == self.compute_fingerprint()
    }
}
