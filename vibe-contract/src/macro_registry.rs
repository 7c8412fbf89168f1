//! The macro registry: named sequences of tool calls with declared determinism and rollback.

use std::collections::{BTreeSet, HashMap};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use vibe_errors::Determinism;

use crate::fingerprint::Fingerprint;
use crate::registry_error::RegistryError;
use crate::schema_check::{check_strict, check_valid, property_names};
use crate::tool_registry::ToolRegistry;

/// How a macro undoes itself when a step fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RollbackMode {
    /// Run the whole macro inside a transaction and roll it back on failure.
    Transaction,
}

/// A declarative check before or after a macro runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Condition {
    /// An object of this name exists.
    ObjectExists(String),
    /// No object of this name exists.
    ObjectAbsent(String),
    /// The object is in the collection.
    ObjectInCollection {
        /// The object.
        object: String,
        /// The collection.
        collection: String,
    },
}

impl Condition {
    /// The condition with `${input}` references replaced.
    pub fn expand(&self, inputs: &Map<String, Value>) -> Condition {
        let text = |s: &String| match substitute(&Value::String(s.clone()), inputs) {
            Some(Value::String(out)) => out,
            Some(other) => other.to_string(),
            None => s.clone(),
        };
        match self {
            Condition::ObjectExists(name) => Condition::ObjectExists(text(name)),
            Condition::ObjectAbsent(name) => Condition::ObjectAbsent(text(name)),
            Condition::ObjectInCollection { object, collection } => Condition::ObjectInCollection {
                object: text(object),
                collection: text(collection),
            },
        }
    }

    fn strings(&self) -> Vec<&String> {
        match self {
            Condition::ObjectExists(name) | Condition::ObjectAbsent(name) => vec![name],
            Condition::ObjectInCollection { object, collection } => vec![object, collection],
        }
    }
}

/// One step of a macro: a tool and its (templated) arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MacroStep {
    /// The tool to call.
    pub tool: String,
    /// Its arguments; strings may refer to the macro's inputs as `${input}`.
    #[serde(default)]
    pub args: Map<String, Value>,
}

/// One macro.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MacroSpec {
    /// snake_case name.
    pub macro_name: String,
    /// The macro's own semver version.
    pub version: semver::Version,
    /// What it does.
    #[serde(default)]
    pub summary: String,
    /// Strict JSON Schema of its inputs.
    pub inputs: Value,
    /// The steps, run in order; a failed step stops the rest.
    pub steps: Vec<MacroStep>,
    /// Declared determinism: at most as strong as its steps combined.
    pub determinism: Determinism,
    /// Checked before the first step.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "serde_norway::with::singleton_map_recursive"
    )]
    #[schemars(with = "Vec<Condition>")]
    pub preconditions: Vec<Condition>,
    /// Checked after the last step.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "serde_norway::with::singleton_map_recursive"
    )]
    #[schemars(with = "Vec<Condition>")]
    pub postconditions: Vec<Condition>,
    /// How a failure is undone; none means partial effects are reported instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackMode>,
    /// The macro's fingerprint; computed on load, and checked when the file declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
}

impl MacroSpec {
    /// The fingerprint of the macro's content (everything but the `fingerprint` field).
    pub fn content_fingerprint(&self) -> Fingerprint {
        let mut content = self.clone();
        content.fingerprint = None;
        Fingerprint::of(&content)
    }

    /// The steps with inputs (and the inputs schema's defaults) substituted into their arguments.
    /// An argument whose whole value is `${input}` for an input that is absent is left out.
    pub fn expand(&self, inputs: &Map<String, Value>) -> Vec<(String, Map<String, Value>)> {
        let inputs = self.with_defaults(inputs);
        self.steps
            .iter()
            .map(|step| {
                let args = step
                    .args
                    .iter()
                    .filter_map(|(key, value)| substitute(value, &inputs).map(|v| (key.clone(), v)))
                    .collect();
                (step.tool.clone(), args)
            })
            .collect()
    }

    /// The inputs with the schema's defaults filled in for absent properties.
    pub fn with_defaults(&self, inputs: &Map<String, Value>) -> Map<String, Value> {
        let mut all = inputs.clone();
        if let Some(props) = self.inputs.get("properties").and_then(Value::as_object) {
            for (name, prop) in props {
                if let (false, Some(default)) = (all.contains_key(name), prop.get("default")) {
                    all.insert(name.clone(), default.clone());
                }
            }
        }
        all
    }
}

/// Replaces `${input}` references; `None` when the whole value refers to an absent input.
fn substitute(value: &Value, inputs: &Map<String, Value>) -> Option<Value> {
    match value {
        Value::String(text) => {
            if let Some(name) = whole_reference(text) {
                return inputs.get(name).cloned();
            }
            let mut out = String::with_capacity(text.len());
            let mut rest = text.as_str();
            while let Some(start) = rest.find("${") {
                out.push_str(&rest[..start]);
                let after = &rest[start + 2..];
                match after.find('}') {
                    Some(end) => {
                        let name = &after[..end];
                        match inputs.get(name) {
                            Some(Value::String(s)) => out.push_str(s),
                            Some(other) => out.push_str(&other.to_string()),
                            None => {}
                        }
                        rest = &after[end + 1..];
                    }
                    None => {
                        out.push_str(&rest[start..]);
                        rest = "";
                    }
                }
            }
            out.push_str(rest);
            Some(Value::String(out))
        }
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .filter_map(|item| substitute(item, inputs))
                .collect(),
        )),
        Value::Object(map) => Some(Value::Object(
            map.iter()
                .filter_map(|(k, v)| substitute(v, inputs).map(|v| (k.clone(), v)))
                .collect(),
        )),
        other => Some(other.clone()),
    }
}

fn whole_reference(text: &str) -> Option<&str> {
    let name = text.strip_prefix("${")?.strip_suffix('}')?;
    (!name.contains(['{', '}', '$'])).then_some(name)
}

fn references(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(text) => {
            let mut rest = text.as_str();
            while let Some(start) = rest.find("${") {
                let after = &rest[start + 2..];
                let Some(end) = after.find('}') else { break };
                out.insert(after[..end].to_owned());
                rest = &after[end + 1..];
            }
        }
        Value::Array(items) => items.iter().for_each(|item| references(item, out)),
        Value::Object(map) => map.values().for_each(|item| references(item, out)),
        _ => {}
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMacroRegistry {
    registry: String,
    version: semver::Version,
    #[serde(default)]
    summary: String,
    tool_registry: String,
    macros: Vec<MacroSpec>,
}

/// A loaded macro registry, validated against the tool registry it builds on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MacroRegistry {
    /// The registry's name.
    pub registry: String,
    /// Its semver version.
    pub version: semver::Version,
    /// A sentence about it.
    pub summary: String,
    /// The tool registry its steps use.
    pub tool_registry: String,
    macros: Vec<MacroSpec>,
    #[serde(skip)]
    index: HashMap<String, usize>,
    #[serde(skip)]
    fingerprint: Fingerprint,
}

/// A manifest fingerprint: the registry's identity and each macro's own fingerprint, in order.
fn manifest_fingerprint(
    registry: &str,
    version: &semver::Version,
    tool_registry: &str,
    macros: &[MacroSpec],
) -> Fingerprint {
    let entries: Vec<Value> = macros
        .iter()
        .map(|m| {
            serde_json::json!([
                m.macro_name,
                m.fingerprint
                    .clone()
                    .unwrap_or_else(|| m.content_fingerprint())
            ])
        })
        .collect();
    Fingerprint::of_value(&serde_json::json!({
        "registry": registry,
        "version": version.to_string(),
        "tool_registry": tool_registry,
        "macros": entries,
    }))
}

fn check_macro_name(name: &str) -> Result<(), RegistryError> {
    let ok = name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(RegistryError::InvalidName {
            kind: "macro",
            name: name.to_owned(),
            why: "must be snake_case, at most 64 characters".to_owned(),
        })
    }
}

impl MacroRegistry {
    /// Builds and validates a macro registry against `tools`.
    pub fn new(
        registry: impl Into<String>,
        version: semver::Version,
        summary: impl Into<String>,
        tool_registry: impl Into<String>,
        mut macros: Vec<MacroSpec>,
        tools: &ToolRegistry,
    ) -> Result<MacroRegistry, RegistryError> {
        let tool_registry = tool_registry.into();
        if tool_registry != tools.registry {
            return Err(RegistryError::WrongToolRegistry {
                expected: tool_registry,
                actual: tools.registry.clone(),
            });
        }
        let mut index = HashMap::with_capacity(macros.len());
        for (i, spec) in macros.iter_mut().enumerate() {
            validate_macro(spec, tools)?;
            if index.insert(spec.macro_name.clone(), i).is_some() {
                return Err(RegistryError::DuplicateName {
                    kind: "macro",
                    name: spec.macro_name.clone(),
                });
            }
        }
        let registry = registry.into();
        let fingerprint = manifest_fingerprint(&registry, &version, &tool_registry, &macros);
        Ok(MacroRegistry {
            registry,
            version,
            summary: summary.into(),
            tool_registry,
            macros,
            index,
            fingerprint,
        })
    }

    /// Loads a macro registry from YAML, validated against `tools`.
    pub fn from_yaml_str(text: &str, tools: &ToolRegistry) -> Result<MacroRegistry, RegistryError> {
        let raw: RawMacroRegistry =
            serde_norway::from_str(text).map_err(|e| RegistryError::from_yaml(&e))?;
        MacroRegistry::new(
            raw.registry,
            raw.version,
            raw.summary,
            raw.tool_registry,
            raw.macros,
            tools,
        )
    }

    /// The registry as YAML, with every macro's fingerprint.
    pub fn to_yaml(&self) -> String {
        serde_norway::to_string(self).unwrap_or_default()
    }

    /// The macros, in registry order.
    pub fn macros(&self) -> &[MacroSpec] {
        &self.macros
    }

    /// A macro by name.
    pub fn get(&self, name: &str) -> Option<&MacroSpec> {
        self.index.get(name).map(|&i| &self.macros[i])
    }

    /// The fingerprint of the registry's content.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint.clone()
    }

    /// A new registry with the macros `keep` accepts.
    pub fn subset(&self, keep: impl Fn(&MacroSpec) -> bool) -> MacroRegistry {
        let macros: Vec<MacroSpec> = self.macros.iter().filter(|m| keep(m)).cloned().collect();
        let index = macros
            .iter()
            .enumerate()
            .map(|(i, m)| (m.macro_name.clone(), i))
            .collect();
        let fingerprint =
            manifest_fingerprint(&self.registry, &self.version, &self.tool_registry, &macros);
        MacroRegistry {
            registry: self.registry.clone(),
            version: self.version.clone(),
            summary: self.summary.clone(),
            tool_registry: self.tool_registry.clone(),
            macros,
            index,
            fingerprint,
        }
    }
}

fn validate_macro(spec: &mut MacroSpec, tools: &ToolRegistry) -> Result<(), RegistryError> {
    let name = spec.macro_name.clone();
    check_macro_name(&name)?;
    check_valid(&name, "inputs", &spec.inputs)?;
    check_strict(&name, &spec.inputs)?;
    if spec.steps.is_empty() {
        return Err(RegistryError::EmptyMacro { macro_name: name });
    }
    let declared_inputs: BTreeSet<&str> = property_names(&spec.inputs).collect();
    let mut combined = Determinism::Deterministic;
    for (i, step) in spec.steps.iter().enumerate() {
        let tool = tools
            .get(&step.tool)
            .ok_or_else(|| RegistryError::UnknownStepTool {
                macro_name: name.clone(),
                step: i,
                tool: step.tool.clone(),
            })?;
        combined = combined.combine(tool.determinism);
        let accepted: BTreeSet<&str> = property_names(&tool.inputs).collect();
        if let Some(arg) = step
            .args
            .keys()
            .find(|arg| !accepted.contains(arg.as_str()))
        {
            return Err(RegistryError::UnknownStepArgument {
                macro_name: name.clone(),
                step: i,
                tool: step.tool.clone(),
                argument: arg.clone(),
            });
        }
        let mut used = BTreeSet::new();
        references(&Value::Object(step.args.clone()), &mut used);
        if let Some(input) = used.iter().find(|u| !declared_inputs.contains(u.as_str())) {
            return Err(RegistryError::UnknownTemplateInput {
                macro_name: name.clone(),
                step: i,
                input: input.clone(),
            });
        }
    }
    for (i, condition) in spec
        .preconditions
        .iter()
        .chain(&spec.postconditions)
        .enumerate()
    {
        let mut used = BTreeSet::new();
        for text in condition.strings() {
            references(&Value::String(text.clone()), &mut used);
        }
        if let Some(input) = used.iter().find(|u| !declared_inputs.contains(u.as_str())) {
            return Err(RegistryError::UnknownTemplateInput {
                macro_name: name.clone(),
                step: i,
                input: input.clone(),
            });
        }
    }
    if spec.determinism < combined {
        return Err(RegistryError::DeterminismTooStrong {
            macro_name: name,
            declared: spec.determinism,
            required: combined,
        });
    }
    let actual = spec.content_fingerprint();
    if let Some(declared) = &spec.fingerprint
        && *declared != actual
    {
        return Err(RegistryError::FingerprintMismatch {
            entry: name,
            declared: declared.to_string(),
            actual: actual.to_string(),
        });
    }
    spec.fingerprint = Some(actual);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn substitution_keeps_types_and_drops_absent_inputs() {
        let inputs = json!({"name": "Box", "size": 2.5, "location": [1, 2, 3]});
        let inputs = inputs.as_object().unwrap();
        let args = json!({"name": "${name}", "label": "${name} Material", "size": "${size}", "where": "${location}", "gone": "${missing}"});
        let out = substitute(&args, inputs).unwrap();
        assert_eq!(
            out,
            json!({"name": "Box", "label": "Box Material", "size": 2.5, "where": [1, 2, 3]})
        );
    }
}
