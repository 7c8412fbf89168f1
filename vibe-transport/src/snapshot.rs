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

use serde_json::{Map, Value};
use vibe_contract::Fingerprint;

/// The snapshot schema version.
pub const SNAPSHOT_VERSION: u64 = 1;

/// The keys of the objects `content_fingerprint` covers: always the first three (null when
/// missing); the others where the kernel reports them (the look and animate packs' settings), so
/// that a snapshot without them keeps the fingerprint it had.
const CONTENT_KEYS: [&str; 3] = ["objects", "collections", "materials"];
const CONTENT_KEYS_IF_PRESENT: [&str; 3] = ["camera", "world", "timeline"];

/// Adds fingerprints and indices to a snapshot result in place; other values are left alone.
///
/// Each fingerprint is taken over the parts it covers where they lie, never over a copy: on a
/// scene of thousands of objects the copies cost more than the hashing.
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
            let data = Fingerprint::of_value(object.get("data").unwrap_or(&Value::Null));
            object.insert("data_fingerprint".into(), Value::String(data.into()));
            let Some(name) = object.get("name").and_then(Value::as_str) else {
                continue;
            };
            by_name.insert(name.to_owned(), Value::from(i));
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
                        index
                            .entry(entry.to_owned())
                            .or_default()
                            .push(Value::from(name));
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
    let indices = [
        ("by_name", Value::Object(by_name)),
        ("by_collection", sorted(by_collection)),
        ("by_material", sorted(by_material)),
    ];
    root.insert(
        "indices".into(),
        Value::Object(indices.into_iter().map(|(k, v)| (k.into(), v)).collect()),
    );
    let content = CONTENT_KEYS
        .map(|key| (key, root.get(key).unwrap_or(&Value::Null)))
        .into_iter()
        .chain(
            CONTENT_KEYS_IF_PRESENT
                .into_iter()
                .filter_map(|key| root.get(key).map(|value| (key, value))),
        );
    let content = Fingerprint::of_object(content);
    root.insert("content_fingerprint".into(), Value::String(content.into()));
    root.remove("fingerprint");
    let fingerprint = Fingerprint::of_object(root.iter().map(|(k, v)| (k.as_str(), v)));
    root.insert("fingerprint".into(), Value::String(fingerprint.into()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Sealing as the format above describes it, by building each covered value as a copy and
    /// fingerprinting that: the independent computation `seal` must agree with.
    fn seal_by_copies(snapshot: &mut Value) {
        let Some(root) = snapshot.as_object_mut() else {
            return;
        };
        let mut by_name = Map::new();
        let mut by_collection: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut by_material: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if let Some(objects) = root.get_mut("objects").and_then(Value::as_array_mut) {
            for (i, object) in objects.iter_mut().enumerate() {
                let Some(object) = object.as_object_mut() else {
                    continue;
                };
                let data = object.get("data").cloned().unwrap_or(Value::Null);
                let fingerprint = Fingerprint::of_value(&data);
                object.insert("data_fingerprint".into(), json!(fingerprint));
                let Some(name) = object.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let name = name.to_owned();
                by_name.insert(name.clone(), json!(i));
                for (key, index) in [
                    ("collections", &mut by_collection),
                    ("materials", &mut by_material),
                ] {
                    if let Some(entries) = object.get(key).and_then(Value::as_array) {
                        for entry in entries.iter().filter_map(Value::as_str) {
                            index.entry(entry.into()).or_default().push(name.clone());
                        }
                    }
                }
            }
        }
        let sorted = |index: BTreeMap<String, Vec<String>>| {
            let mut out = Map::new();
            for (key, mut names) in index {
                names.sort();
                names.dedup();
                out.insert(key, json!(names));
            }
            Value::Object(out)
        };
        root.insert(
            "indices".into(),
            json!({"by_name": by_name, "by_collection": sorted(by_collection), "by_material": sorted(by_material)}),
        );
        let mut content = Map::new();
        for key in ["objects", "collections", "materials"] {
            content.insert(key.into(), root.get(key).cloned().unwrap_or(Value::Null));
        }
        for key in ["camera", "world", "timeline"] {
            if let Some(value) = root.get(key) {
                content.insert(key.into(), value.clone());
            }
        }
        let content = Fingerprint::of_value(&Value::Object(content));
        root.insert("content_fingerprint".into(), json!(content));
        root.remove("fingerprint");
        let fingerprint = Fingerprint::of_value(&Value::Object(root.clone()));
        root.insert("fingerprint".into(), json!(fingerprint));
    }

    fn names() -> impl Strategy<Value = Value> {
        // Empty, non-ASCII and astral names too: the indices order keys by their bytes, as
        // canonical JSON does, whatever the characters.
        prop_oneof![
            4 => "[A-D]{1,2}".prop_map(Value::String),
            1 => "(|[aé日ｱ😀]{1,2}|A\\u{0})".prop_map(Value::String),
            1 => Just(json!(7)),
        ]
    }

    fn object() -> impl Strategy<Value = Value> {
        let entry = (
            prop::option::of(names()),
            prop::option::of(prop_oneof![
                Just(Value::Null),
                (-10.0f64..10.0).prop_map(|x| json!({"verts": [x, x * 2.0], "kind": "MESH"})),
            ]),
            prop::option::of(prop::collection::vec(names(), 0..4)),
            prop::option::of(prop::collection::vec(names(), 0..3)),
            prop::option::of(extra_key()),
        )
            .prop_map(|(name, data, collections, materials, extra)| {
                let mut object = Map::new();
                let fields = [
                    ("name", name),
                    ("data", data),
                    ("collections", collections.map(Value::Array)),
                    ("materials", materials.map(Value::Array)),
                ];
                for (key, value) in fields {
                    if let Some(value) = value {
                        object.insert(key.into(), value);
                    }
                }
                if let Some(key) = extra {
                    object.entry(key).or_insert(json!({"custom": true}));
                }
                Value::Object(object)
            });
        prop_oneof![9 => entry, 1 => Just(json!("not an object"))]
    }

    /// A key the format does not name (a newer kernel's field): empty, non-ASCII or plain.
    fn extra_key() -> impl Strategy<Value = String> {
        "(|é|日本|😀|zz|Objects)"
    }

    fn snapshot() -> impl Strategy<Value = Value> {
        let objects = prop_oneof![
            9 => prop::collection::vec(object(), 0..12).prop_map(Value::Array),
            // Not a list: no object to fingerprint or index, still hashed as content.
            1 => Just(json!({"E0000": {"name": "E0000"}})),
            1 => Just(json!("objects")),
        ];
        (
            prop::option::of(objects),
            prop::option::of(prop::collection::vec(names(), 0..3)),
            prop::option::of(prop::collection::vec(names(), 0..3)),
            prop::option::of(any::<bool>()),
            prop::option::of("[a-z]{0,4}"),
            prop::option::of(0..250i64),
            any::<bool>(),
            prop::option::of(extra_key()),
        )
            .prop_map(
                |(objects, collections, materials, camera, world, timeline, stale, extra)| {
                    let mut root = Map::new();
                    root.insert("snapshot_version".into(), json!(SNAPSHOT_VERSION));
                    root.insert("blender_version".into(), json!("5.0.1"));
                    if let Some(materials) = materials {
                        root.insert("materials".into(), Value::Array(materials));
                    }
                    if let Some(objects) = objects {
                        root.insert("objects".into(), objects);
                    }
                    if let Some(collections) = collections {
                        root.insert("collections".into(), Value::Array(collections));
                    }
                    if let Some(camera) = camera {
                        root.insert("camera".into(), json!({"active": camera}));
                    }
                    if let Some(world) = world {
                        root.insert("world".into(), json!(world));
                    }
                    if let Some(end) = timeline {
                        root.insert(
                            "timeline".into(),
                            json!({"frame_start": 1, "frame_end": end}),
                        );
                    }
                    if let Some(key) = extra {
                        root.entry(key).or_insert(json!(["kept", 1]));
                    }
                    if stale {
                        // Left by an earlier seal: replaced, never hashed into the new values.
                        for key in ["fingerprint", "content_fingerprint", "indices"] {
                            root.insert(key.into(), json!("stale"));
                        }
                    }
                    Value::Object(root)
                },
            )
    }

    proptest! {
        /// Sealing in place gives exactly what sealing copies gives: every fingerprint and
        /// index, whatever the snapshot holds (names repeated, missing, empty or non-ASCII,
        /// entries that are not objects or not strings, `objects` that is not a list, optional
        /// sections, keys the format does not name, a stale fingerprint).
        #[test]
        fn sealing_in_place_equals_sealing_copies(snapshot in snapshot()) {
            let mut expected = snapshot.clone();
            seal_by_copies(&mut expected);
            let mut sealed = snapshot;
            seal(&mut sealed);
            prop_assert_eq!(sealed, expected);
        }
    }

    #[test]
    fn what_is_not_an_object_is_left_alone() {
        for value in [json!(null), json!([1, 2]), json!("snapshot")] {
            assert_eq!(sealed(value.clone()), value);
        }
    }
}
