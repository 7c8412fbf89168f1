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
//! subset of the result), and an image a tool says it made (the registry's `hints.image`) must
//! be in the sandbox: a PNG of the answer's size with image data (its bytes are the
//! renderer's, never compared). Beside each scenario, `<name>.expected.json` holds the normalized
//! answer of every step and the scene's content fingerprint after the last step; every backend
//! must reproduce it exactly. Each scenario starts from Blender's factory scene.
//!
//! Each scenario runs in a session of its own, which [`run`] configures: the capabilities a
//! kernel grants before any `configure` (`scene.read`, `scene.write`, `transactions`), plus those
//! of what the scenario `needs`:
//!
//! * `files`: a sandbox folder (made for the run, removed after it) with `file.read`,
//!   `file.write` and `render`. In `params` and `expect.result`, `${sandbox}` stands for the
//!   sandbox's absolute path, and answers name it the same way, so that the expected outcomes
//!   do not depend on where the run made it.
//! * `code`: `code_exec`, for `python.exec`.
//!
//! The Blender must offer them (MockBlender `with_files()` and with a code handler; a kernel
//! with Cycles, started with agent code allowed); one it does not offer fails the run.
//!
//! A scenario that exchanges models names the formats it uses (`formats: [obj, gltf, stl]`). A
//! Blender whose hello does not list all of them (Debian's 3.4 has no glTF without numpy)
//! cannot run it: [`missing_formats`] says which, and the runners skip the scenario on that
//! Blender and say so, rather than fail it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use vibe_contract::canonical_json;
use vibe_errors::Envelope;

use crate::frame::SessionConfig;
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

/// What a scenario needs beyond the scene tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Need {
    /// A sandbox folder, and the capabilities that read from it and write into it.
    Files,
    /// Agent code (`python.exec`).
    Code,
}

impl Need {
    /// The capabilities it adds to the session.
    pub fn capabilities(self) -> &'static [&'static str] {
        match self {
            Need::Files => &["file.read", "file.write", "render"],
            Need::Code => &["code_exec"],
        }
    }
}

/// The capabilities every scenario's session has: what a kernel grants before any `configure`.
pub const BASE_CAPABILITIES: [&str; 3] = ["scene.read", "scene.write", "transactions"];

/// What stands for the sandbox's absolute path in a scenario's params, expectations and answers.
pub const SANDBOX: &str = "${sandbox}";

/// A conformance scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Its name (and file stem).
    pub name: String,
    /// What it shows.
    pub summary: String,
    /// What it needs beyond the scene tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<Need>,
    /// The model formats its steps import and export; it runs only where the hello lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub formats: Vec<String>,
    /// The calls, in order.
    pub steps: Vec<Step>,
}

impl Scenario {
    /// Whether it needs `need`.
    pub fn needs(&self, need: Need) -> bool {
        self.needs.contains(&need)
    }

    /// The capabilities of its session.
    pub fn capabilities(&self) -> BTreeSet<String> {
        BASE_CAPABILITIES
            .iter()
            .chain(self.needs.iter().flat_map(|n| n.capabilities()))
            .map(|c| c.to_string())
            .collect()
    }
}

/// The formats `scenario` needs that the Blender of `hello` lacks (a hello without `formats`
/// has none); empty: it can run there.
pub fn missing_formats(scenario: &Scenario, hello: &crate::frame::Hello) -> Vec<String> {
    let offered = hello.formats.as_deref().unwrap_or_default();
    scenario
        .formats
        .iter()
        .filter(|f| !offered.contains(f))
        .cloned()
        .collect()
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

/// Result fields of one tool that differ between Blender builds for the same scene: the size of
/// a saved `.blend` or an exported model is its writer's. Left out of the scenarios' normalized answers (the registry
/// still holds them to their type).
const BUILD_SPECIFIC_RESULTS: [(&str, &str); 2] =
    [("file.save", "bytes"), ("file.export", "bytes")];

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

/// The default registries, loaded once.
fn registries() -> Result<&'static vibe_contract::Registries, String> {
    static REGISTRY: std::sync::OnceLock<Result<vibe_contract::Registries, String>> =
        std::sync::OnceLock::new();
    REGISTRY
        .get_or_init(|| vibe_contract::default_registries().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// An answer as a caller of the pipeline gets it from its return phase: a snapshot tool's
/// result (`hints.snapshot`) sealed, an error completed with its guidance. The scenarios run
/// transports bare, so they apply the pipeline's return step ([`crate::snapshot::returned`]).
pub fn as_returned(tool: &str, envelope: Envelope) -> Envelope {
    let snapshot = registries()
        .ok()
        .and_then(|r| r.tools.get(tool))
        .is_some_and(|spec| spec.hints.snapshot);
    crate::snapshot::returned(snapshot, envelope)
}

/// Whether an answer keeps the registry's promise for its tool: a result valid by the tool's
/// `outputs` schema (its `_meta` aside), an error code among its `error_codes`. Every target's
/// every answer of the scenarios is held to it.
pub fn by_registry(tool: &str, envelope: &Envelope) -> Result<(), String> {
    let spec = registries()?
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

/// Every string in `value` with `from` replaced by `to`.
fn replace_in(value: &Value, from: &str, to: &str) -> Value {
    match value {
        Value::String(text) => Value::String(text.replace(from, to)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| replace_in(v, from, to)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), replace_in(v, from, to)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Whether the image a tool says it made (the registry's `hints.image` names the result field
/// with its sandbox path) is there: a PNG of the answer's `width` x `height` with image data.
/// Its bytes differ between renderers and are not compared; that a picture exists, of the size
/// asked, is the same everywhere.
fn image_made(tool: &str, envelope: &Envelope, sandbox: Option<&str>) -> Result<(), String> {
    let Some(field) = registries()?
        .tools
        .get(tool)
        .and_then(|spec| spec.hints.image.as_deref())
    else {
        return Ok(());
    };
    let Some(result) = envelope.result() else {
        return Ok(());
    };
    let relative = result
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{tool}: the answer names no image in `{field}`"))?;
    let sandbox = sandbox.ok_or_else(|| format!("{tool}: an image without a sandbox"))?;
    let path = Path::new(sandbox).join(relative);
    let bytes = std::fs::read(&path).map_err(|e| format!("{tool}: {}: {e}", path.display()))?;
    let image = vibe_errors::Image::png(bytes).map_err(|e| format!("{tool}: {relative}: {e}"))?;
    let side = |key: &str| result.get(key).and_then(Value::as_u64);
    if side("width") != Some(u64::from(image.width))
        || side("height") != Some(u64::from(image.height))
    {
        return Err(format!(
            "{tool}: {relative} is {} x {}, the answer says {:?} x {:?}",
            image.width,
            image.height,
            side("width"),
            side("height")
        ));
    }
    if png_image_data(&image.data) == 0 {
        return Err(format!("{tool}: {relative} holds no image data"));
    }
    Ok(())
}

/// The bytes of a PNG's image data chunks (IDAT), 0 when its chunks do not add up to a whole
/// file ending in IEND.
fn png_image_data(png: &[u8]) -> usize {
    let mut at = 8;
    let mut data = 0;
    while let Some(header) = png.get(at..at + 8) {
        let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let Some(end) = (at + 12)
            .checked_add(length)
            .filter(|&end| end <= png.len())
        else {
            return 0;
        };
        match &header[4..8] {
            b"IDAT" => data += length,
            b"IEND" => return data,
            _ => {}
        }
        at = end;
    }
    0
}

/// The sandbox folder of one run, removed when dropped.
struct Sandbox(PathBuf);

impl Sandbox {
    fn new(scenario: &str) -> Result<Sandbox, String> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "vibe-conformance-{scenario}-{}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        // Kernels compare resolved paths: hand them the canonical one.
        let path = std::fs::canonicalize(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Sandbox(path))
    }

    fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Configures the transport's session for `scenario`: its capabilities, which the Blender must
/// offer, and the sandbox.
async fn configure(
    transport: &dyn Transport,
    scenario: &Scenario,
    sandbox: Option<&Sandbox>,
    deadline: Duration,
) -> Result<(), String> {
    let capabilities = scenario.capabilities();
    let offered = &transport.hello().blender.features;
    let missing: Vec<&String> = capabilities.difference(offered).collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} needs {missing:?}, which this Blender does not offer (it offers {offered:?})",
            scenario.name
        ));
    }
    let mut session = SessionConfig::new(format!("conformance-{}", scenario.name))
        .capabilities(capabilities)
        .time_per_tool_ms(deadline.as_millis().try_into().unwrap_or(u64::MAX));
    session.sandbox = sandbox.map(Sandbox::path);
    let answer = transport
        .configure(&session)
        .await
        .map_err(|e| format!("{}: configure: {e}", scenario.name))?;
    if answer.is_ok() {
        Ok(())
    } else {
        Err(format!(
            "{}: configure refused: {}",
            scenario.name,
            answer.to_json_string()
        ))
    }
}

/// Runs a scenario on a transport whose Blender is at the factory scene, in a session
/// configured for it (see the module's documentation). Every answer is checked against its
/// step's `expect` and against the registry; the first that fails ends the run with an error.
pub async fn run(
    transport: &dyn Transport,
    scenario: &Scenario,
    deadline: Duration,
) -> Result<Outcome, String> {
    let sandbox = if scenario.needs(Need::Files) {
        Some(Sandbox::new(&scenario.name)?)
    } else {
        None
    };
    configure(transport, scenario, sandbox.as_ref(), deadline).await?;
    let sandbox_path = sandbox.as_ref().map(Sandbox::path);
    // `${sandbox}` in, the sandbox's path out.
    let expand = |value: &Value| match &sandbox_path {
        Some(path) => replace_in(value, SANDBOX, path),
        None => value.clone(),
    };
    let contract = |value: &Value| match &sandbox_path {
        Some(path) => replace_in(value, path, SANDBOX),
        None => value.clone(),
    };
    let mut steps = Vec::with_capacity(scenario.steps.len());
    for (i, step) in scenario.steps.iter().enumerate() {
        let mut step = step.clone();
        if let Value::Object(params) = expand(&Value::Object(std::mem::take(&mut step.params))) {
            step.params = params;
        }
        step.expect.result = step.expect.result.as_ref().map(expand);
        let call = Call::new(
            step.call.clone(),
            Value::Object(step.params.clone()),
            deadline,
        );
        let envelope = transport
            .call(call)
            .await
            .map_err(|e| format!("{} step {i}: transport error: {e}", scenario.name))?;
        let envelope = as_returned(&step.call, envelope);
        check(&step, &envelope).map_err(|e| format!("{} step {i}: {e}", scenario.name))?;
        by_registry(&step.call, &envelope)
            .map_err(|e| format!("{} step {i}: {e}", scenario.name))?;
        image_made(&step.call, &envelope, sandbox_path.as_deref())
            .map_err(|e| format!("{} step {i}: {e}", scenario.name))?;
        let mut answer = contract(&normalize(&envelope));
        if let Some(result) = answer.get_mut("result").and_then(Value::as_object_mut) {
            for (_, field) in BUILD_SPECIFIC_RESULTS
                .iter()
                .filter(|(t, _)| *t == step.call)
            {
                result.remove(*field);
            }
        }
        steps.push(answer);
    }
    let snapshot_tool = registries()?
        .tools
        .tools()
        .iter()
        .find(|spec| spec.hints.snapshot)
        .map(|spec| spec.name.clone())
        .ok_or("the registry has no snapshot tool")?;
    let snapshot = transport
        .call(Call::new(snapshot_tool, json!({}), deadline))
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
        })?;
    Ok(Outcome { steps, scene })
}

#[cfg(test)]
mod tests {
    use super::png_image_data;

    /// A PNG-shaped byte string from (kind, data) chunks; CRCs are not read by the check.
    fn chunks(list: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        for (kind, data) in list {
            png.extend_from_slice(&(data.len() as u32).to_be_bytes());
            png.extend_from_slice(*kind);
            png.extend_from_slice(data);
            png.extend_from_slice(&[0; 4]);
        }
        png
    }

    #[test]
    fn image_data_is_the_idat_bytes_of_a_whole_file() {
        let header: &[u8] = &[0; 13];
        let whole = chunks(&[
            (b"IHDR", header),
            (b"IDAT", &[1; 5]),
            (b"IDAT", &[2; 7]),
            (b"IEND", &[]),
        ]);
        assert_eq!(png_image_data(&whole), 12);
        // No image data, no end, a chunk running past the file: nothing to show.
        assert_eq!(
            png_image_data(&chunks(&[
                (b"IHDR", header),
                (b"IDAT", &[]),
                (b"IEND", &[])
            ])),
            0
        );
        assert_eq!(
            png_image_data(&chunks(&[(b"IHDR", header), (b"IDAT", &[1; 5])])),
            0
        );
        assert_eq!(png_image_data(&whole[..whole.len() - 13]), 0);
        let mut lying = whole.clone();
        lying[33..37].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(png_image_data(&lying), 0);
    }

    #[cfg(feature = "mock")]
    #[test]
    fn the_mock_renders_a_png_with_image_data() {
        let png = crate::mock::png::solid_png(4, 3, [1, 2, 3]);
        // A stored deflate block of 3 rows of 1 + 4 * 3 bytes: 39 bytes inside zlib's frame.
        assert!(png_image_data(&png) > 39, "{}", png_image_data(&png));
    }

    #[cfg(feature = "mock")]
    #[test]
    fn a_render_must_leave_a_png_of_its_answers_size() {
        use super::image_made;
        use serde_json::json;
        use vibe_errors::Envelope;
        let dir = tempfile::tempdir().unwrap();
        let sandbox = dir.path().to_str().unwrap();
        std::fs::write(
            dir.path().join("r.png"),
            crate::mock::png::solid_png(16, 12, [9, 9, 9]),
        )
        .unwrap();
        let answer = |path: &str, width: u32, height: u32| {
            Envelope::Ok(json!({"path": path, "width": width, "height": height}))
        };
        assert_eq!(
            image_made("render.still", &answer("r.png", 16, 12), Some(sandbox)),
            Ok(())
        );
        let wrong = image_made("render.still", &answer("r.png", 16, 13), Some(sandbox));
        assert!(wrong.unwrap_err().contains("16 x 12"));
        let missing = image_made("render.still", &answer("gone.png", 16, 12), Some(sandbox));
        assert!(missing.unwrap_err().contains("gone.png"));
        // A tool that makes no image is not checked.
        assert_eq!(
            image_made("object.list", &answer("gone.png", 1, 1), None),
            Ok(())
        );
    }
}
