//! The tool registry: what a tool is called, what it takes, what it promises.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use vibe_errors::{Determinism, ErrorCode};

use crate::effects::Effect;
use crate::fingerprint::Fingerprint;
use crate::registry_error::RegistryError;
use crate::schema_check::{check_strict, check_valid};
use crate::version::BlenderVersion;

/// The most tools one contract may expose (contract v1's tool surface cap).
pub const MAX_TOOLS: usize = 35;

/// MCP-style behaviour hints of a tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolHints {
    /// The tool never changes the scene.
    pub read_only: bool,
    /// The tool may destroy data (delete, remove, overwrite).
    pub destructive: bool,
    /// The tool's part in a transaction, if it has one: the bridge keeps a transaction's
    /// `begin` state out of the kernel's reach and hands it to kernels that take over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<TransactionRole>,
    /// The tool reads one object by its `name` (the bridge's lookups use it: re-discovery,
    /// read-backs, plans, macro preconditions).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lookup: bool,
    /// The tool lists the scene's objects, optionally of one `type` (the result verifier's
    /// counts use it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub listing: bool,
    /// The tool answers the scene's canonical data (`scene.snapshot`): the bridge seals it
    /// (data fingerprints, indices, the scene's fingerprints) in its return phase, so every
    /// backend's fingerprints come from one implementation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub snapshot: bool,
    /// The bridge's own checks of this tool's calls, beyond the schema.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<BridgeCheck>,
    /// The output field that names an image the tool wrote into the session's sandbox (a
    /// render): the bridge reads it back and returns it with the answer (`_meta.image`), so the
    /// agent sees what it made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// A check the bridge makes on a tool's calls, declared in the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BridgeCheck {
    /// The contract's sanity limits on `levels`, `count` and `segments`, before the call.
    Sanity,
    /// The polygon budget (`sanity.max_polygons`), planned from the object's size before the
    /// call.
    PolygonBudget,
    /// After success, the object named in the answer is read back with the lookup tool and its
    /// transform compared with the answer.
    ReadBack,
}

/// A tool's part in a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransactionRole {
    /// Opens a transaction.
    Begin,
    /// Closes it, keeping its effects.
    Commit,
    /// Closes it, undoing its effects.
    Rollback,
}

/// How long a tool may take: which of the contract's deadlines applies to it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TimeClass {
    /// Reads, edits, transactions, agent code: `time_per_tool_ms` (15 s by default).
    #[default]
    Quick,
    /// File loads and saves: `time_file_ms` (2 min by default).
    File,
    /// Renders: `time_render_ms` (10 min by default).
    Render,
}

impl TimeClass {
    fn is_quick(&self) -> bool {
        *self == TimeClass::Quick
    }
}

/// What a tool needs from the session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolRequirements {
    /// Capabilities the contract must grant (`scene.read`, `scene.write`, `transactions`,
    /// `file.read`, `file.write`, `render`, `code_exec`).
    #[serde(default)]
    pub capabilities: BTreeSet<String>,
    /// The oldest Blender the tool runs on.
    pub blender_min: BlenderVersion,
    /// The newest Blender the tool runs on (inclusive); none means no upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blender_max: Option<BlenderVersion>,
    /// The tool needs Blender's UI (a window: viewport capture, anything drawn). Seed 001 makes
    /// UI use opt-in: negotiation leaves the tool out unless the session negotiated the `ui`
    /// feature flag, which a headless Blender never offers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ui: bool,
}

/// One tool of a registry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Dotted name, e.g. `object.move`.
    pub name: String,
    /// One paragraph for a model: what the tool does and its rules.
    pub summary: String,
    /// Strict JSON Schema of the arguments (`additionalProperties: false`).
    pub inputs: Value,
    /// JSON Schema of the result.
    pub outputs: Value,
    /// The error codes the tool may answer with.
    pub error_codes: Vec<ErrorCode>,
    /// Determinism class.
    pub determinism: Determinism,
    /// Whether repeating the same call converges to the same scene.
    pub idempotent: bool,
    /// Behaviour hints.
    pub hints: ToolHints,
    /// Which of the contract's deadlines applies (`quick` when absent).
    #[serde(default, skip_serializing_if = "TimeClass::is_quick")]
    pub time_class: TimeClass,
    /// Capabilities and Blender range.
    pub requires: ToolRequirements,
    /// What it does to data-blocks (see [`Effect`]): the actuator lock and the record of
    /// what the agent made follow these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<Effect>,
}

impl ToolSpec {
    /// Whether the tool changes the scene.
    pub fn mutates(&self) -> bool {
        !self.hints.read_only
    }

    /// The tool's part in a transaction, if any.
    pub fn transaction_role(&self) -> Option<TransactionRole> {
        self.hints.transaction
    }

    /// The MCP name of the tool: dots become underscores, because several MCP hosts only
    /// accept `[A-Za-z0-9_-]` in tool names.
    pub fn mcp_name(&self) -> String {
        self.name.replace('.', "_")
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolRegistry {
    registry: String,
    version: semver::Version,
    #[serde(default)]
    summary: String,
    /// YAML anchors shared by the entries; expanded on load, not part of the content.
    #[serde(default)]
    #[allow(dead_code)]
    definitions: Option<Value>,
    tools: Vec<ToolSpec>,
}

/// A loaded, validated tool registry. Immutable: a change makes a new registry.
///
/// Its fingerprint is that of a manifest: the registry's name, version and summary and, in
/// order, each tool's name with the fingerprint of its full entry. Any change to any value of
/// any tool changes it, and a subset is fingerprinted without hashing every schema again.
#[derive(Clone, Debug)]
pub struct ToolRegistry {
    /// The registry's name, e.g. `blender-core`.
    pub registry: String,
    /// Its semver version.
    pub version: semver::Version,
    /// A sentence about it.
    pub summary: String,
    tools: Vec<Arc<ToolSpec>>,
    /// Per tool: the fingerprint of the entry and of its schemas.
    entry_fingerprints: Vec<(Fingerprint, Fingerprint)>,
    index: HashMap<String, usize>,
    fingerprint: Fingerprint,
}

impl Serialize for ToolRegistry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Content<'a> {
            registry: &'a str,
            version: &'a semver::Version,
            summary: &'a str,
            tools: &'a [Arc<ToolSpec>],
        }
        Content {
            registry: &self.registry,
            version: &self.version,
            summary: &self.summary,
            tools: &self.tools,
        }
        .serialize(serializer)
    }
}

fn manifest_fingerprint(
    registry: &str,
    version: &semver::Version,
    summary: &str,
    tools: &[Arc<ToolSpec>],
    entry_fingerprints: &[(Fingerprint, Fingerprint)],
) -> Fingerprint {
    let entries: Vec<Value> = tools
        .iter()
        .zip(entry_fingerprints)
        .map(|(tool, (entry, _))| serde_json::json!([tool.name, entry]))
        .collect();
    Fingerprint::of_value(&serde_json::json!({
        "registry": registry,
        "version": version.to_string(),
        "summary": summary,
        "tools": entries,
    }))
}

impl PartialEq for ToolRegistry {
    fn eq(&self, other: &Self) -> bool {
        self.registry == other.registry
            && self.version == other.version
            && self.summary == other.summary
            && self.tools == other.tools
    }
}

/// Each effect has what its action needs, and names only arguments the tool takes.
fn check_effects(tool: &ToolSpec) -> Result<(), RegistryError> {
    for (index, effect) in tool.effects.iter().enumerate() {
        let invalid = |message: String| RegistryError::InvalidEffect {
            tool: tool.name.clone(),
            index,
            message,
        };
        if let Some(problem) = effect.problem() {
            return Err(invalid(problem.into()));
        }
        let named = [&effect.param, &effect.owner]
            .into_iter()
            .flatten()
            .chain(effect.unless.keys());
        for argument in named {
            if tool
                .inputs
                .pointer(&format!("/properties/{argument}"))
                .is_none()
            {
                return Err(invalid(format!(
                    "names `{argument}`, which is not an argument"
                )));
            }
        }
    }
    Ok(())
}

/// `hints.image` names a required string field of the tool's outputs.
fn check_image_hint(tool: &ToolSpec) -> Result<(), RegistryError> {
    let Some(field) = &tool.hints.image else {
        return Ok(());
    };
    let is_string =
        tool.outputs.pointer(&format!("/properties/{field}/type")) == Some(&Value::from("string"));
    let required = tool.outputs["required"]
        .as_array()
        .is_some_and(|r| r.iter().any(|f| f == field.as_str()));
    if is_string && required {
        return Ok(());
    }
    Err(RegistryError::InvalidHint {
        tool: tool.name.clone(),
        hint: "image",
        message: format!("`{field}` is not a required string field of the outputs"),
    })
}

fn check_tool_name(name: &str) -> Result<(), RegistryError> {
    let invalid = |why: &str| RegistryError::InvalidName {
        kind: "tool",
        name: name.to_owned(),
        why: why.to_owned(),
    };
    if name.len() > 64 {
        return Err(invalid("longer than 64 characters"));
    }
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() < 2 {
        return Err(invalid("must be dotted, like `object.move`"));
    }
    for part in parts {
        let mut chars = part.chars();
        let starts_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        if !starts_ok || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
            return Err(invalid(
                "each part must be lowercase letters, digits and `_`",
            ));
        }
    }
    Ok(())
}

impl ToolRegistry {
    /// Builds and validates a registry from its parts.
    pub fn new(
        registry: impl Into<String>,
        version: semver::Version,
        summary: impl Into<String>,
        tools: Vec<ToolSpec>,
    ) -> Result<ToolRegistry, RegistryError> {
        if tools.len() > MAX_TOOLS {
            return Err(RegistryError::TooManyTools {
                count: tools.len(),
                max: MAX_TOOLS,
            });
        }
        ToolRegistry::uncapped(registry, version, summary, tools)
    }

    /// As [`ToolRegistry::new`], without the tool cap: the catalog of several packs.
    pub(crate) fn uncapped(
        registry: impl Into<String>,
        version: semver::Version,
        summary: impl Into<String>,
        tools: Vec<ToolSpec>,
    ) -> Result<ToolRegistry, RegistryError> {
        let mut index = HashMap::with_capacity(tools.len());
        let mut mcp_names = BTreeSet::new();
        for (i, tool) in tools.iter().enumerate() {
            check_tool_name(&tool.name)?;
            if index.insert(tool.name.clone(), i).is_some() || !mcp_names.insert(tool.mcp_name()) {
                return Err(RegistryError::DuplicateName {
                    kind: "tool",
                    name: tool.name.clone(),
                });
            }
            check_valid(&tool.name, "inputs", &tool.inputs)?;
            check_strict(&tool.name, &tool.inputs)?;
            check_valid(&tool.name, "outputs", &tool.outputs)?;
            if let Some(code) = tool.error_codes.iter().find(|code| !code.is_known()) {
                return Err(RegistryError::UnknownErrorCode {
                    tool: tool.name.clone(),
                    code: code.to_string(),
                });
            }
            check_effects(tool)?;
            check_image_hint(tool)?;
            if let Some(max) = tool.requires.blender_max
                && max < tool.requires.blender_min
            {
                return Err(RegistryError::EmptyBlenderRange {
                    tool: tool.name.clone(),
                    min: tool.requires.blender_min.to_string(),
                    max: max.to_string(),
                });
            }
        }
        let (registry, summary) = (registry.into(), summary.into());
        let entry_fingerprints: Vec<(Fingerprint, Fingerprint)> = tools
            .iter()
            .map(|tool| {
                let schemas = serde_json::json!({"inputs": tool.inputs, "outputs": tool.outputs});
                (Fingerprint::of(tool), Fingerprint::of_value(&schemas))
            })
            .collect();
        let tools: Vec<Arc<ToolSpec>> = tools.into_iter().map(Arc::new).collect();
        let fingerprint =
            manifest_fingerprint(&registry, &version, &summary, &tools, &entry_fingerprints);
        Ok(ToolRegistry {
            registry,
            version,
            summary,
            tools,
            entry_fingerprints,
            index,
            fingerprint,
        })
    }

    /// Loads a registry from YAML.
    pub fn from_yaml_str(text: &str) -> Result<ToolRegistry, RegistryError> {
        let raw: RawToolRegistry =
            serde_norway::from_str(text).map_err(|e| RegistryError::from_yaml(&e))?;
        ToolRegistry::new(raw.registry, raw.version, raw.summary, raw.tools)
    }

    /// Loads a registry from JSON text.
    pub fn from_json_str(text: &str) -> Result<ToolRegistry, RegistryError> {
        let raw: RawToolRegistry =
            serde_json::from_str(text).map_err(|e| RegistryError::from_json(&e))?;
        ToolRegistry::new(raw.registry, raw.version, raw.summary, raw.tools)
    }

    /// The registry as YAML (anchors expanded); loading it again gives the same fingerprint.
    pub fn to_yaml(&self) -> String {
        serde_norway::to_string(self).unwrap_or_default()
    }

    /// The tools, in registry order.
    pub fn tools(&self) -> &[Arc<ToolSpec>] {
        &self.tools
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.index.get(name).map(|&i| self.tools[i].as_ref())
    }

    /// A tool by name, shared.
    pub fn get_shared(&self, name: &str) -> Option<Arc<ToolSpec>> {
        self.index.get(name).map(|&i| Arc::clone(&self.tools[i]))
    }

    /// The tool names, in registry order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|tool| tool.name.as_str())
    }

    /// The fingerprint of the registry's content.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The fingerprint of every tool's input and output schemas, by name.
    pub fn schemas_fingerprint(&self) -> Fingerprint {
        let schemas: serde_json::Map<String, Value> = self
            .tools
            .iter()
            .zip(&self.entry_fingerprints)
            .map(|(tool, (_, schemas))| (tool.name.clone(), Value::String(schemas.to_string())))
            .collect();
        Fingerprint::of_value(&Value::Object(schemas))
    }

    /// A new registry with the tools `keep` accepts, in the same order.
    pub fn subset(&self, keep: impl Fn(&ToolSpec) -> bool) -> ToolRegistry {
        let (tools, entry_fingerprints): (Vec<Arc<ToolSpec>>, Vec<(Fingerprint, Fingerprint)>) =
            self.tools
                .iter()
                .zip(&self.entry_fingerprints)
                .filter(|(tool, _)| keep(tool))
                .map(|(tool, fps)| (Arc::clone(tool), fps.clone()))
                .unzip();
        let index = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let fingerprint = manifest_fingerprint(
            &self.registry,
            &self.version,
            &self.summary,
            &tools,
            &entry_fingerprints,
        );
        ToolRegistry {
            registry: self.registry.clone(),
            version: self.version.clone(),
            summary: self.summary.clone(),
            tools,
            entry_fingerprints,
            index,
            fingerprint,
        }
    }
}
