//! Negotiation: a pure function from what the host proposes, what the bridge allows, what the
//! Blender is, and the registries, to an agreed contract or a refusal.
//!
//! Rules, in the order they are checked:
//!
//! 1. `contract_version` must equal the bridge's version, or be in its declared compatibility
//!    list (semver, exact match otherwise).
//! 2. `session_id` must be 1-128 characters of `[A-Za-z0-9._:-]`.
//! 3. A registry ref the host names must match the bridge's registry in name, version and
//!    fingerprint; a mismatched fingerprint means the content differs and is refused.
//! 4. Every limit the host proposes must be positive. Limits and constraints are then tightened
//!    field by field to the stricter of host and bridge; the bridge never loosens one.
//! 5. Feature flags: the agreed set is (host required + optional) ∩ bridge flags (`ui` also needs
//!    a Blender with a UI). A required flag outside it is refused by name.
//! 6. Capabilities: host request ∩ bridge policy ∩ kernel features.
//! 7. Tools: a registry tool whose Blender range excludes this Blender, or that needs a
//!    capability not granted, is *excluded*, not refused: it is left out of the agreed registry
//!    and recorded in `excluded_tools`, and a later call to it answers
//!    `unsupported_blender_version` or `capability_missing`. A tool the host asks for by name
//!    that is unknown or excluded is refused; so is a session left with no tools at all, or with
//!    more tools than the agreed tool surface cap.
//! 8. Macros: those whose steps all use agreed tools are agreed.
//!
//! A refusal is an error model v1 envelope with code `contract_violation` and details naming
//! the rule, the field, what was proposed and what is allowed.

use std::collections::BTreeSet;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use vibe_errors::{ErrorBody, ErrorCode};

use crate::contract::*;
use crate::fingerprint::Fingerprint;
use crate::macro_registry::MacroRegistry;
use crate::pack::{CORE_PACK, Pack};
use crate::tool_registry::{MAX_TOOLS, ToolRegistry, ToolSpec};

/// Feature flag: the host needs Blender's UI.
pub const FLAG_UI: &str = "ui";

/// What the host proposes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostProposal {
    /// The contract version the host speaks.
    #[schemars(with = "String")]
    pub contract_version: semver::Version,
    /// The host-generated session id.
    pub session_id: String,
    /// The host.
    pub host_profile: HostProfile,
    /// The tool registry the host expects, if it pins one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_registry_ref: Option<RegistryRef>,
    /// The macro registry the host expects, if it pins one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub macro_registry_ref: Option<RegistryRef>,
    /// The packs the host selects by name (`core` is always included); none means the
    /// registries' default packs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packs: Option<BTreeSet<String>>,
    /// The tools the host wants, by name, among those of the selected packs; none means every
    /// available tool of the selected packs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<BTreeSet<String>>,
    /// Limits the host proposes; none takes the bridge's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Constraints the host proposes; none takes the bridge's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraints: Option<Constraints>,
    /// The audit policy the host asks for.
    #[serde(default)]
    pub audit: AuditPolicy,
}

impl HostProposal {
    /// A proposal that takes every default: all tools, the bridge's limits and constraints.
    pub fn new(session_id: impl Into<String>, host_profile: HostProfile) -> HostProposal {
        HostProposal {
            contract_version: CONTRACT_VERSION,
            session_id: session_id.into(),
            host_profile,
            tool_registry_ref: None,
            macro_registry_ref: None,
            packs: None,
            tools: None,
            limits: None,
            constraints: None,
            audit: AuditPolicy::default(),
        }
    }

    /// The proposal that asks for exactly what `contract` agreed; negotiating it again under the
    /// same policy and Blender gives the same contract.
    pub fn from_contract(contract: &SessionContract) -> HostProposal {
        HostProposal {
            contract_version: contract.contract_version.clone(),
            session_id: contract.session_id.clone(),
            host_profile: contract.host_profile.clone(),
            tool_registry_ref: Some(contract.tool_registry_ref.clone()),
            macro_registry_ref: contract.macro_registry_ref.clone(),
            packs: Some(contract.packs.keys().cloned().collect()),
            tools: Some(contract.capabilities.tools.iter().cloned().collect()),
            limits: Some(contract.limits.clone()),
            constraints: Some(contract.constraints.clone()),
            audit: contract.audit.clone(),
        }
    }
}

/// What the bridge allows: its ceilings, flags and capabilities.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BridgePolicy {
    /// The bridge's contract version.
    #[schemars(with = "String")]
    pub contract_version: semver::Version,
    /// Other contract versions the bridge declares compatible (the compatibility matrix).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub compatible_versions: Vec<semver::Version>,
    /// Feature flags the bridge supports.
    pub feature_flags: BTreeSet<String>,
    /// Capabilities the bridge is willing to grant.
    pub capabilities: BTreeSet<String>,
    /// The loosest limits the bridge accepts.
    pub limits: Limits,
    /// The loosest constraints the bridge accepts.
    pub constraints: Constraints,
    /// Whether calls are audited.
    pub audit: bool,
}

impl Default for BridgePolicy {
    fn default() -> Self {
        BridgePolicy {
            contract_version: CONTRACT_VERSION,
            compatible_versions: Vec::new(),
            feature_flags: [
                "audit",
                "cancellation",
                "macros",
                "pipelining",
                "transactions",
                FLAG_UI,
            ]
            .into_iter()
            .map(str::to_owned)
            .collect(),
            // Code execution is granted only by a policy that says so.
            capabilities: [
                CAP_SCENE_READ,
                CAP_SCENE_WRITE,
                CAP_TRANSACTIONS,
                CAP_FILE_WRITE,
                CAP_FILE_READ,
                CAP_RENDER,
            ]
            .into_iter()
            .map(str::to_owned)
            .collect(),
            limits: Limits::default(),
            constraints: Constraints::default(),
            audit: true,
        }
    }
}

/// The registries the bridge offers.
#[derive(Clone, Debug)]
pub struct Registries {
    /// Every tool of every pack (the catalog).
    pub tools: Arc<ToolRegistry>,
    /// Macros, if any.
    pub macros: Option<Arc<MacroRegistry>>,
    /// The packs the tools come in, `core` first.
    pub packs: Vec<Pack>,
}

impl Registries {
    /// Registries of one pack, `core`, holding every tool.
    pub fn new(tools: ToolRegistry, macros: Option<MacroRegistry>) -> Registries {
        let tools = Arc::new(tools);
        Registries {
            packs: vec![Pack {
                name: CORE_PACK.to_owned(),
                default: true,
                tools: Arc::clone(&tools),
            }],
            tools,
            macros: macros.map(Arc::new),
        }
    }

    /// Registries of several packs: `tools` is their catalog (see [`crate::catalog`]) and
    /// `packs` names `core` first.
    pub fn with_packs(
        tools: ToolRegistry,
        macros: Option<MacroRegistry>,
        packs: Vec<Pack>,
    ) -> Registries {
        Registries {
            tools: Arc::new(tools),
            macros: macros.map(Arc::new),
            packs,
        }
    }

    /// A pack by its short name.
    pub fn pack(&self, name: &str) -> Option<&Pack> {
        self.packs.iter().find(|p| p.name == name)
    }

    /// The pack a tool belongs to.
    pub fn pack_of(&self, tool: &str) -> Option<&Pack> {
        self.packs.iter().find(|p| p.tools.get(tool).is_some())
    }
}

/// An agreed contract with the registry subsets it allows.
#[derive(Clone, Debug)]
pub struct Agreement {
    /// The contract.
    pub contract: SessionContract,
    /// The tools the session may call.
    pub tools: Arc<ToolRegistry>,
    /// The macros the session may run.
    pub macros: Option<Arc<MacroRegistry>>,
}

impl Agreement {
    /// The agreed tool, or the refusal a call to it gets: `unsupported_blender_version` or
    /// `capability_missing` for an excluded tool, `contract_violation` for one outside the
    /// agreed registry.
    pub fn tool(&self, name: &str) -> Result<&ToolSpec, ErrorBody> {
        if let Some(tool) = self.tools.get(name) {
            return Ok(tool);
        }
        if let Some(excluded) = self.contract.excluded_tools.iter().find(|t| t.name == name) {
            return Err(
                ErrorBody::new(excluded.code.clone(), &excluded.why).with_detail("tool", name)
            );
        }
        Err(ErrorBody::new(
            ErrorCode::ContractViolation,
            format!("tool {name:?} is not in the agreed registry"),
        )
        .with_detail("tool", name)
        .with_rule(vibe_errors::Rule::ToolNotAgreed))
    }

    /// The name of the first agreed tool that `is` (the registry's order): how the bridge finds
    /// a tool by what the registry says of it rather than by its name.
    pub fn tool_where(&self, is: impl Fn(&ToolSpec) -> bool) -> Option<&str> {
        self.tools
            .tools()
            .iter()
            .find(|t| is(t))
            .map(|t| t.name.as_str())
    }

    /// The agreed tool that reads one object by name (`hints.lookup`), for the bridge's own
    /// lookups.
    pub fn lookup_tool(&self) -> Option<&str> {
        self.tool_where(|t| t.hints.lookup)
    }

    /// The agreed tool that lists objects (`hints.listing`).
    pub fn listing_tool(&self) -> Option<&str> {
        self.tool_where(|t| t.hints.listing)
    }

    /// Whether a capability was granted.
    pub fn grants(&self, capability: &str) -> bool {
        self.contract.capabilities.granted.contains(capability)
    }
}

/// The negotiation rule a refusal comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalRule {
    /// Rule 1: contract versions do not match.
    ContractVersion,
    /// Rule 2: the session id is empty or malformed.
    SessionId,
    /// Rule 3: the pinned tool registry differs.
    ToolRegistryMismatch,
    /// Rule 3: the pinned macro registry differs or does not exist.
    MacroRegistryMismatch,
    /// Rule 4: a proposed limit is zero.
    InvalidLimit,
    /// Rule 5: a required feature flag is unavailable.
    RequiredFlagUnavailable,
    /// Rule 7: the host asked for a tool the registry does not have.
    UnknownTool,
    /// Rule 7: the host asked for a tool excluded by the Blender version or a capability.
    ToolUnavailable,
    /// Rule 7: no tool is left for this Blender and these capabilities.
    NoTools,
    /// Rule 7: more tools than the agreed tool surface cap.
    ToolSurfaceExceeded,
    /// Rule 7: the host selected a pack the registries do not have.
    UnknownPack,
}

impl RefusalRule {
    /// Every rule.
    pub const ALL: [RefusalRule; 11] = [
        RefusalRule::ContractVersion,
        RefusalRule::SessionId,
        RefusalRule::ToolRegistryMismatch,
        RefusalRule::MacroRegistryMismatch,
        RefusalRule::InvalidLimit,
        RefusalRule::RequiredFlagUnavailable,
        RefusalRule::UnknownTool,
        RefusalRule::ToolUnavailable,
        RefusalRule::NoTools,
        RefusalRule::ToolSurfaceExceeded,
        RefusalRule::UnknownPack,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalRule::ContractVersion => "contract_version",
            RefusalRule::SessionId => "session_id",
            RefusalRule::ToolRegistryMismatch => "tool_registry_mismatch",
            RefusalRule::MacroRegistryMismatch => "macro_registry_mismatch",
            RefusalRule::InvalidLimit => "invalid_limit",
            RefusalRule::RequiredFlagUnavailable => "required_flag_unavailable",
            RefusalRule::UnknownTool => "unknown_tool",
            RefusalRule::ToolUnavailable => "tool_unavailable",
            RefusalRule::NoTools => "no_tools",
            RefusalRule::ToolSurfaceExceeded => "tool_surface_exceeded",
            RefusalRule::UnknownPack => "unknown_pack",
        }
    }
}

/// A refused negotiation: the rule and the error model v1 body to answer with.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("negotiation refused ({}): {}", rule.as_str(), error.message)]
pub struct Refusal {
    /// The rule that refused.
    pub rule: RefusalRule,
    /// `contract_violation` with `details.rule`, `field`, `proposed`, `allowed`.
    pub error: ErrorBody,
}

impl Refusal {
    fn new(
        rule: RefusalRule,
        field: &str,
        proposed: Value,
        allowed: Value,
        message: String,
    ) -> Refusal {
        let error = ErrorBody::new(ErrorCode::ContractViolation, message)
            .with_detail("rule", rule.as_str())
            .with_detail("field", field)
            .with_detail("proposed", proposed)
            .with_detail("allowed", allowed);
        Refusal { rule, error }
    }

    /// The refusal as an envelope.
    pub fn envelope(&self) -> vibe_errors::Envelope {
        vibe_errors::Envelope::Err(self.error.clone())
    }
}

fn set_json(set: &BTreeSet<String>) -> Value {
    Value::Array(set.iter().cloned().map(Value::String).collect())
}

fn check_registry_ref(
    pinned: &RegistryRef,
    name: &str,
    version: &semver::Version,
    fingerprint: &Fingerprint,
    rule: RefusalRule,
    field: &str,
) -> Result<(), Refusal> {
    let offered = json!({"name": name, "version": version.to_string(), "fingerprint": fingerprint});
    let proposed = serde_json::to_value(pinned).unwrap_or_default();
    if pinned.name != name || pinned.version != *version {
        return Err(Refusal::new(
            rule,
            field,
            proposed,
            offered,
            format!(
                "{field} names {} {}, the bridge offers {name} {version}",
                pinned.name, pinned.version
            ),
        ));
    }
    if pinned.fingerprint != *fingerprint {
        return Err(Refusal::new(
            rule,
            field,
            proposed,
            offered,
            format!(
                "{field} fingerprint {} does not match the content of {name} {version} ({fingerprint})",
                pinned.fingerprint
            ),
        ));
    }
    Ok(())
}

fn valid_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// The packs a proposal selects: those it names (unknown names refused) or the default ones,
/// and `core` always.
fn select_packs(
    proposal: &HostProposal,
    registries: &Registries,
) -> Result<BTreeSet<String>, Refusal> {
    let mut selected: BTreeSet<String> = match &proposal.packs {
        Some(named) => {
            if let Some(unknown) = named.iter().find(|n| registries.pack(n).is_none()) {
                return Err(Refusal::new(
                    RefusalRule::UnknownPack,
                    "packs",
                    json!(unknown),
                    json!(registries.packs.iter().map(|p| &p.name).collect::<Vec<_>>()),
                    format!("there is no tool pack {unknown:?}"),
                ));
            }
            named.clone()
        }
        None => registries
            .packs
            .iter()
            .filter(|p| p.default)
            .map(|p| p.name.clone())
            .collect(),
    };
    if let Some(core) = registries.packs.first() {
        selected.insert(core.name.clone());
    }
    Ok(selected)
}

/// Negotiates a session contract. Pure and deterministic: the same inputs give the same output.
pub fn negotiate(
    proposal: &HostProposal,
    policy: &BridgePolicy,
    blender: &BlenderProfile,
    registries: &Registries,
) -> Result<Agreement, Refusal> {
    // Rule 1.
    let version_ok = proposal.contract_version == policy.contract_version
        || policy
            .compatible_versions
            .contains(&proposal.contract_version);
    if !version_ok {
        let mut allowed = vec![policy.contract_version.to_string()];
        allowed.extend(policy.compatible_versions.iter().map(ToString::to_string));
        return Err(Refusal::new(
            RefusalRule::ContractVersion,
            "contract_version",
            json!(proposal.contract_version.to_string()),
            json!(allowed),
            format!(
                "contract version {} is not supported (the bridge speaks {})",
                proposal.contract_version, policy.contract_version
            ),
        ));
    }
    // Rule 2.
    if !valid_session_id(&proposal.session_id) {
        return Err(Refusal::new(
            RefusalRule::SessionId,
            "session_id",
            json!(proposal.session_id),
            json!("1-128 characters of [A-Za-z0-9._:-]"),
            "session_id must be 1-128 characters of [A-Za-z0-9._:-]".to_owned(),
        ));
    }
    // Rule 3.
    let tools = &registries.tools;
    if let Some(pinned) = &proposal.tool_registry_ref {
        check_registry_ref(
            pinned,
            &tools.registry,
            &tools.version,
            tools.fingerprint(),
            RefusalRule::ToolRegistryMismatch,
            "tool_registry_ref",
        )?;
    }
    if let Some(pinned) = &proposal.macro_registry_ref {
        match &registries.macros {
            Some(macros) => check_registry_ref(
                pinned,
                &macros.registry,
                &macros.version,
                &macros.fingerprint(),
                RefusalRule::MacroRegistryMismatch,
                "macro_registry_ref",
            )?,
            None => {
                return Err(Refusal::new(
                    RefusalRule::MacroRegistryMismatch,
                    "macro_registry_ref",
                    serde_json::to_value(pinned).unwrap_or_default(),
                    Value::Null,
                    "the host pins a macro registry, the bridge offers none".to_owned(),
                ));
            }
        }
    }
    // Rule 4.
    let host_limits = proposal
        .limits
        .clone()
        .unwrap_or_else(|| policy.limits.clone());
    let host_constraints = proposal
        .constraints
        .clone()
        .unwrap_or_else(|| policy.constraints.clone());
    for (field, value) in [
        (
            "limits.tool_surface_cap",
            u64::from(host_limits.tool_surface_cap),
        ),
        (
            "limits.max_concurrent_calls",
            u64::from(host_limits.max_concurrent_calls),
        ),
        ("limits.max_payload_bytes", host_limits.max_payload_bytes),
        (
            "constraints.time_per_tool_ms",
            host_constraints.time_per_tool_ms,
        ),
        ("constraints.time_file_ms", host_constraints.time_file_ms),
        (
            "constraints.time_render_ms",
            host_constraints.time_render_ms,
        ),
    ] {
        if value == 0 {
            return Err(Refusal::new(
                RefusalRule::InvalidLimit,
                field,
                json!(0),
                json!("at least 1"),
                format!("{field} must be at least 1"),
            ));
        }
    }
    let mut limits = host_limits.tightened(&policy.limits);
    limits.tool_surface_cap = limits.tool_surface_cap.min(MAX_TOOLS as u32);
    let constraints = host_constraints.tightened(&policy.constraints);
    // Rule 5.
    let mut available_flags = policy.feature_flags.clone();
    if blender.background {
        available_flags.remove(FLAG_UI);
    }
    if let Some(missing) = proposal
        .host_profile
        .required_flags
        .difference(&available_flags)
        .next()
    {
        return Err(Refusal::new(
            RefusalRule::RequiredFlagUnavailable,
            "host_profile.required_flags",
            json!(missing),
            set_json(&available_flags),
            format!("required feature flag {missing:?} is not available"),
        ));
    }
    let wanted_flags: BTreeSet<String> = proposal
        .host_profile
        .required_flags
        .union(&proposal.host_profile.optional_flags)
        .cloned()
        .collect();
    let feature_flags: BTreeSet<String> = wanted_flags
        .intersection(&available_flags)
        .cloned()
        .collect();
    // Rule 6.
    let granted: BTreeSet<String> = proposal
        .host_profile
        .capabilities
        .iter()
        .filter(|cap| policy.capabilities.contains(*cap) && blender.features.contains(*cap))
        .filter(|cap| {
            cap.as_str() != CAP_CODE_EXEC || blender.confinement.code_exec_refusal().is_none()
        })
        .cloned()
        .collect();
    // Rule 7.
    let selected = select_packs(proposal, registries)?;
    let mut excluded = Vec::new();
    for tool in tools.tools() {
        let req = &tool.requires;
        if let Some(pack) = registries.pack_of(&tool.name)
            && !selected.contains(&pack.name)
        {
            excluded.push(ExcludedTool {
                name: tool.name.clone(),
                code: ErrorCode::CapabilityMissing,
                why: format!(
                    "{} is in the {:?} pack, which this session did not select (select it at negotiation: packs)",
                    tool.name, pack.name
                ),
            });
        } else if !blender.version.within(req.blender_min, req.blender_max) {
            let range = match req.blender_max {
                Some(max) => format!("{} to {max}", req.blender_min),
                None => format!("{} or newer", req.blender_min),
            };
            excluded.push(ExcludedTool {
                name: tool.name.clone(),
                code: ErrorCode::UnsupportedBlenderVersion,
                why: format!(
                    "{} needs Blender {range}; this is Blender {}",
                    tool.name, blender.version
                ),
            });
        } else if req.ui && !feature_flags.contains(FLAG_UI) {
            let why = if blender.background {
                "this Blender is headless"
            } else {
                "the session did not negotiate the \"ui\" feature flag"
            };
            excluded.push(ExcludedTool {
                name: tool.name.clone(),
                code: ErrorCode::CapabilityMissing,
                why: format!("{} uses Blender's UI, and {why}", tool.name),
            });
        } else if let Some(cap) = req.capabilities.iter().find(|cap| !granted.contains(*cap)) {
            let why = match blender.confinement.code_exec_refusal() {
                Some(reason)
                    if cap == CAP_CODE_EXEC
                        && proposal.host_profile.capabilities.contains(cap)
                        && policy.capabilities.contains(cap) =>
                {
                    format!("{}: {reason}", tool.name)
                }
                _ => format!(
                    "{} needs capability {cap:?}, which this session was not granted",
                    tool.name
                ),
            };
            excluded.push(ExcludedTool {
                name: tool.name.clone(),
                code: ErrorCode::CapabilityMissing,
                why,
            });
        }
    }
    let is_excluded = |name: &str| excluded.iter().any(|e| e.name == name);
    if let Some(requested) = &proposal.tools {
        for name in requested {
            if tools.get(name).is_none() {
                return Err(Refusal::new(
                    RefusalRule::UnknownTool,
                    "tools",
                    json!(name),
                    json!(tools.names().collect::<Vec<_>>()),
                    format!(
                        "tool {name:?} is not in registry {} {}",
                        tools.registry, tools.version
                    ),
                ));
            }
            if let Some(why) = excluded.iter().find(|e| &e.name == name) {
                return Err(Refusal::new(
                    RefusalRule::ToolUnavailable,
                    "tools",
                    json!(name),
                    json!({"code": why.code, "why": why.why}),
                    why.why.clone(),
                ));
            }
        }
    }
    let agreed = tools.subset(|tool| {
        !is_excluded(&tool.name)
            && proposal
                .tools
                .as_ref()
                .is_none_or(|wanted| wanted.contains(&tool.name))
    });
    if agreed.tools().is_empty() {
        return Err(Refusal::new(
            RefusalRule::NoTools,
            "blender_profile.version",
            json!(blender.version.to_string()),
            json!(excluded.iter().map(|e| &e.why).collect::<Vec<_>>()),
            format!(
                "no tool of {} {} is available for this Blender and these capabilities",
                tools.registry, tools.version
            ),
        ));
    }
    if agreed.tools().len() > limits.tool_surface_cap as usize {
        let per_pack: Vec<String> = registries
            .packs
            .iter()
            .filter(|p| selected.contains(&p.name))
            .map(|p| {
                let count = p.tools.names().filter(|n| agreed.get(n).is_some()).count();
                format!("{} {count}", p.name)
            })
            .collect();
        return Err(Refusal::new(
            RefusalRule::ToolSurfaceExceeded,
            "limits.tool_surface_cap",
            json!(agreed.tools().len()),
            json!(limits.tool_surface_cap),
            format!(
                "{} tools ({}) exceed the tool surface cap of {}; select fewer packs or ask for fewer tools by name",
                agreed.tools().len(),
                per_pack.join(", "),
                limits.tool_surface_cap
            ),
        ));
    }
    // Rule 8.
    let agreed_macros = registries.macros.as_ref().map(|macros| {
        Arc::new(macros.subset(|m| m.steps.iter().all(|step| agreed.get(&step.tool).is_some())))
    });

    let mut contract = SessionContract {
        contract_version: proposal.contract_version.clone(),
        session_id: proposal.session_id.clone(),
        host_profile: proposal.host_profile.clone(),
        blender_profile: blender.clone(),
        capabilities: Capabilities {
            granted,
            feature_flags: feature_flags.clone(),
            tools: agreed.names().map(str::to_owned).collect(),
            macros: agreed_macros
                .as_ref()
                .map(|m| m.macros().iter().map(|m| m.macro_name.clone()).collect())
                .unwrap_or_default(),
            version_negotiation: true,
            audit: policy.audit,
        },
        tool_registry_ref: RegistryRef {
            name: tools.registry.clone(),
            version: tools.version.clone(),
            fingerprint: tools.fingerprint().clone(),
        },
        packs: registries
            .packs
            .iter()
            .filter(|p| selected.contains(&p.name))
            .map(|p| {
                let tools = &p.tools;
                (
                    p.name.clone(),
                    RegistryRef {
                        name: tools.registry.clone(),
                        version: tools.version.clone(),
                        fingerprint: tools.fingerprint().clone(),
                    },
                )
            })
            .collect(),
        macro_registry_ref: registries.macros.as_ref().map(|macros| RegistryRef {
            name: macros.registry.clone(),
            version: macros.version.clone(),
            fingerprint: macros.fingerprint(),
        }),
        constraints,
        limits,
        audit: proposal.audit.clone(),
        fingerprints: Fingerprints {
            tools: agreed.fingerprint().clone(),
            macros: agreed_macros.as_ref().map(|m| m.fingerprint()),
            schemas: agreed.schemas_fingerprint(),
            contract: Fingerprint::of_value(&Value::Null),
        },
        ui_optional: !proposal.host_profile.required_flags.contains(FLAG_UI),
        excluded_tools: excluded,
    };
    contract.fingerprints.contract = contract.compute_fingerprint();
    Ok(Agreement {
        contract,
        tools: Arc::new(agreed),
        macros: agreed_macros,
    })
}
