//! Sealing a `scene.snapshot` result: data fingerprints, indices and scene fingerprints.
//!
//! Kernels (the Python kernel, MockBlender) return the snapshot's canonical data; the bridge
//! hashes it in its return phase (for a tool whose registry entry says `hints.snapshot`), so
//! every backend's fingerprints come from one implementation:
//!
//! * each object gets `data_fingerprint`, over its `data` block;
//! * `indices`: `by_name` (name -> position in `objects`), `by_collection` and `by_material`
//!   (name -> sorted object names);
//! * `content_fingerprint`, over `objects`, `collections`, `materials`, the scene `camera`, the
//!   `world` and the `timeline` only: equal for equal scenes whatever Blender produced them;
//! * `fingerprint`, over everything else in the snapshot, including `snapshot_version` and
//!   `blender_version`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use vibe_contract::Fingerprint;

/// The snapshot schema version.
pub const SNAPSHOT_VERSION: u64 = 1;

/// Adds fingerprints and indices to a snapshot result in place; other values are left alone.
pub fn seal(snapshot: &mut Value) {
    let Some(root) = snapshot.as_object_mut() else {
        return;
    };
    let mut by_name = Map::new();
    let mut by_collection: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut by_material: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    if let Some(objects) = root.get_mut("objects").and_then(Value::as_array_mut) {
        for (i, object) in objects.iter_mut().enumerate() {
            let Some(object) = object.as_object_mut() else {
                continue;
            };
            let data = object.get("data").cloned().unwrap_or(Value::Null);
            object.insert(
                "data_fingerprint".into(),
                json!(Fingerprint::of_value(&data)),
            );
            let Some(name) = object
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_owned)
            else {
                continue;
            };
            by_name.insert(name.clone(), json!(i));
            for (key, index) in [
                ("collections", &mut by_collection),
                ("materials", &mut by_material),
            ] {
                for entry in object
                    .get(key)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(entry) = entry.as_str() {
                        index.entry(entry.to_owned()).or_default().push(json!(name));
                    }
                }
            }
        }
    }
    let sorted = |index: BTreeMap<String, Vec<Value>>| -> Value {
        Value::Object(
            index
                .into_iter()
                .map(|(k, mut names)| {
                    names.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
                    names.dedup();
                    (k, Value::Array(names))
                })
                .collect(),
        )
    };
    root.insert(
        "indices".into(),
        json!({"by_name": by_name, "by_collection": sorted(by_collection), "by_material": sorted(by_material)}),
    );
    let mut content = json!({
        "objects": root.get("objects").cloned().unwrap_or(Value::Null),
        "collections": root.get("collections").cloned().unwrap_or(Value::Null),
        "materials": root.get("materials").cloned().unwrap_or(Value::Null),
    });
    // The scene camera, the world and the timeline, where the kernel reports them (the look and
    // animate packs' settings); a snapshot without them keeps the fingerprint it had.
    for key in ["camera", "world", "timeline"] {
        if let (Some(value), Some(map)) = (root.get(key), content.as_object_mut()) {
            map.insert(key.into(), value.clone());
        }
    }
    root.insert(
        "content_fingerprint".into(),
        json!(Fingerprint::of_value(&content)),
    );
    root.remove("fingerprint");
    let fingerprint = Fingerprint::of_value(&Value::Object(root.clone()));
    root.insert("fingerprint".into(), json!(fingerprint));
}

/// The content fingerprint of a snapshot result: the one it was sealed with, or the one sealing
/// would give it. `None` when the value is not a snapshot (not an object).
pub fn content_fingerprint(snapshot: &Value) -> Option<String> {
    if let Some(sealed) = snapshot.get("content_fingerprint").and_then(Value::as_str) {
        return Some(sealed.to_owned());
    }
    let mut sealed = snapshot.clone();
    seal(&mut sealed);
    sealed
        .get("content_fingerprint")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// An answer as the bridge returns it: a snapshot tool's result (`snapshot`: the tool's
/// `hints.snapshot`) sealed, an error completed with its guidance (class, retryable, recovery;
/// the message sanitized again). The pipeline's `seal` stage, its stages' reads and the
/// conformance scenarios all return answers through this one step.
pub fn returned(snapshot: bool, answer: vibe_errors::Envelope) -> vibe_errors::Envelope {
    use vibe_errors::Envelope;
    match answer {
        Envelope::Ok(mut result) if snapshot => {
            seal(&mut result);
            Envelope::Ok(result)
        }
        Envelope::Err(error) => Envelope::Err(error.with_guidance()),
        other => other,
    }
}

/// A snapshot result, sealed: what the bridge's return phase gives a caller.
pub fn sealed(mut snapshot: Value) -> Value {
    seal(&mut snapshot);
    snapshot
}
