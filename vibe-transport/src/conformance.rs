//! Conformance scenarios: the same call sequences run against MockBlender and every live
//! Blender, with normalized answers and scene fingerprints that must agree.
//!
//! A scenario is a YAML file in the workspace's `tests/conformance/` folder:
//!
//! ```yaml
//! name: transactions
//! summary: What the scenario shows.
//! steps:
//!   - call: mesh.create_cube
//!     params: { name: Box }
//!     expect: { ok: true }
//!   - call: object.info
//!     params: { name: Nope }
//!     expect: { ok: false, code: not_found }
//! ```
//!
//! `expect` is checked on every run (`ok`, and `code` / `reason` for errors, `result` as a
//! subset of the result). Beside each scenario, `<name>.expected.json` holds the normalized
//! answer of every step and the scene's content fingerprint after the last step; every backend
//! must reproduce it exactly. Each scenario starts from Blender's factory scene.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use vibe_contract::canonical_json;
use vibe_errors::Envelope;

use crate::snapshot::SNAPSHOT_TOOL;
use crate::transport::{Call, Transport};

/// What a step expects, checked on every run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Success or failure.
    pub ok: bool,
    /// The error code, for failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// `details.reason`, for failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A subset of the result, for successes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// One call of a scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// The tool.
    pub call: String,
    /// Its arguments.
    #[serde(default)]
    pub params: Map<String, Value>,
    /// What must come back.
    pub expect: Expect,
}

/// A conformance scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Its name (and file stem).
    pub name: String,
    /// What it shows.
    pub summary: String,
    /// The calls, in order.
    pub steps: Vec<Step>,
}

/// What a run produced: the normalized answers and the final content fingerprint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// One normalized answer per step.
    pub steps: Vec<Value>,
    /// The scene's content fingerprint after the last step.
    pub scene: String,
}

/// Loads every `*.yaml` scenario of a folder, sorted by file name.
pub fn load_dir(dir: &Path) -> Result<Vec<Scenario>, String> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_norway::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
        })
        .collect()
}

/// Keys that differ between Blender builds for the same scene; left out of normalized answers.
const BUILD_SPECIFIC: [&str; 4] = ["fingerprint", "blender_version", "kernel_version", "_meta"];

fn strip(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !BUILD_SPECIFIC.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
        other => other.clone(),
    }
}

/// An answer with what may differ between Blender builds removed: results without build
/// fingerprints and versions, numbers rounded to 1e-6; errors reduced to code, reason, field
/// and rule (messages are for people and may be worded differently).
pub fn normalize(envelope: &Envelope) -> Value {
    match envelope {
        Envelope::Ok(result) => {
            let canonical: Value =
                serde_json::from_str(&canonical_json(&strip(result))).unwrap_or(Value::Null);
            json!({"ok": true, "result": canonical})
        }
        Envelope::Err(error) => json!({
            "ok": false,
            "code": error.code.as_str(),
            "reason": error.details.get("reason"),
            "field": error.details.get("field"),
            "rule": error.details.get("rule"),
        }),
    }
}

fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|av| contains(av, v))),
        (Value::Array(a), Value::Array(e)) => {
            a.len() == e.len() && a.iter().zip(e).all(|(a, e)| contains(a, e))
        }
        (Value::Number(a), Value::Number(e)) => match (a.as_f64(), e.as_f64()) {
            (Some(a), Some(e)) => (a - e).abs() <= 1e-6,
            _ => a == e,
        },
        (a, e) => a == e,
    }
}

/// Whether an answer keeps the registry's promise for its tool: a result valid by the tool's
/// `outputs` schema (its `_meta` aside), an error code among its `error_codes`. Every target's
/// every answer of the scenarios is held to it.
pub fn by_registry(tool: &str, envelope: &Envelope) -> Result<(), String> {
    static REGISTRY: std::sync::OnceLock<Result<vibe_contract::Registries, String>> =
        std::sync::OnceLock::new();
    let registries = REGISTRY
        .get_or_init(|| vibe_contract::blender_core_v1().map_err(|e| e.to_string()))
        .as_ref()?;
    let spec = registries
        .tools
        .get(tool)
        .ok_or_else(|| format!("{tool} is not in the registry"))?;
    match envelope {
        Envelope::Ok(result) => {
            let mut result = result.clone();
            if let Some(map) = result.as_object_mut() {
                map.remove("_meta");
            }
            let validator = jsonschema::validator_for(&spec.outputs)
                .map_err(|e| format!("{tool}: its outputs schema does not compile: {e}"))?;
            let errors: Vec<String> = validator
                .iter_errors(&result)
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .collect();
            if errors.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{tool} answered outside its outputs schema: {}",
                    errors.join("; ")
                ))
            }
        }
        Envelope::Err(error) if spec.error_codes.contains(&error.code) => Ok(()),
        Envelope::Err(error) => Err(format!(
            "{tool} answered {}, which is not among its error_codes {:?}",
            error.code, spec.error_codes
        )),
    }
}

/// Checks one answer against its step's `expect`.
pub fn check(step: &Step, envelope: &Envelope) -> Result<(), String> {
    let e = &step.expect;
    let describe = || {
        format!(
            "{} {}: got {}",
            step.call,
            Value::Object(step.params.clone()),
            envelope.to_json_string()
        )
    };
    match envelope {
        Envelope::Ok(result) => {
            if !e.ok {
                return Err(format!("expected a failure; {}", describe()));
            }
            if let Some(subset) = &e.result
                && !contains(result, subset)
            {
                return Err(format!("result does not contain {subset}; {}", describe()));
            }
        }
        Envelope::Err(error) => {
            if e.ok {
                return Err(format!("expected success; {}", describe()));
            }
            if let Some(code) = &e.code
                && error.code.as_str() != code
            {
                return Err(format!("expected code {code}; {}", describe()));
            }
            if let Some(reason) = &e.reason
                && error.details.get("reason").and_then(Value::as_str) != Some(reason)
            {
                return Err(format!("expected reason {reason}; {}", describe()));
            }
        }
    }
    Ok(())
}

/// Runs a scenario on a transport whose Blender is at the factory scene.
pub async fn run(
    transport: &dyn Transport,
    scenario: &Scenario,
    deadline: Duration,
) -> Result<Outcome, String> {
    let mut steps = Vec::with_capacity(scenario.steps.len());
    for (i, step) in scenario.steps.iter().enumerate() {
        let call = Call::new(
            transport.next_id(),
            step.call.clone(),
            Value::Object(step.params.clone()),
            deadline,
        );
        let envelope = transport
            .call(call)
            .await
            .map_err(|e| format!("{} step {i}: transport error: {e}", scenario.name))?;
        check(step, &envelope).map_err(|e| format!("{} step {i}: {e}", scenario.name))?;
        by_registry(&step.call, &envelope)
            .map_err(|e| format!("{} step {i}: {e}", scenario.name))?;
        steps.push(normalize(&envelope));
    }
    let snapshot = transport
        .call(Call::new(
            transport.next_id(),
            SNAPSHOT_TOOL,
            json!({}),
            deadline,
        ))
        .await
        .map_err(|e| format!("{}: final snapshot: {e}", scenario.name))?;
    let scene = snapshot
        .result()
        .and_then(crate::snapshot::content_fingerprint)
        .ok_or_else(|| {
            format!(
                "{}: final snapshot failed: {}",
                scenario.name,
                snapshot.to_json_string()
            )
        })?
        .to_owned();
    Ok(Outcome { steps, scene })
}
