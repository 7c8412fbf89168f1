//! The animate pack: `keyframe.set`, `timeline.set` and `animation.read` (the kernel's
//! `animate.py`). The keys, what can be keyed and their evaluation are in `mock/animation.rs`.
//! A scalar property (a camera's `lens`, a light's `energy`) takes and answers its values as
//! numbers, a vector as lists.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use vibe_errors::{ErrorBody, ErrorCode};

use super::{ToolResult, invalid, req_str};
use crate::mock::MockBlender;
use crate::mock::animation::{
    Interpolation, Key, PROPERTIES, Property, Timeline, evaluate, pose, property,
};
use crate::mock::scene::Object;

/// Blender's MAXFRAME: keys and the current frame within +-MAXFRAME, the range within 0..=it.
const MAX_FRAME: i64 = 1_048_574;
/// Keys or frames in one `keyframe.set` call.
const MAX_KEYS: usize = 256;
/// The highest frame rate.
const MAX_FPS: i64 = 240;

/// `value` as a whole number within `low..=high`, or the kernel's refusal naming `field`.
fn whole(field: &str, value: Option<&Value>, low: i64, high: i64) -> Result<i64, ErrorBody> {
    value
        .and_then(Value::as_i64)
        .filter(|n| (low..=high).contains(n))
        .ok_or_else(|| {
            invalid(
                field,
                format!("`{field}` must be a whole number {low} to {high}"),
            )
        })
}

fn frame_of(field: &str, value: Option<&Value>) -> Result<i32, ErrorBody> {
    // Within +-MAX_FRAME, so it fits.
    whole(field, value, -MAX_FRAME, MAX_FRAME).map(|n| n as i32)
}

fn property_arg(params: &Value, object: &Object) -> Result<&'static Property, ErrorBody> {
    let name = req_str(params, "property")?;
    let property = property(name).ok_or_else(|| {
        let names: Vec<&str> = PROPERTIES.iter().map(|p| p.name).collect();
        invalid(
            "property",
            format!("`property` must be one of {}", names.join(", ")),
        )
    })?;
    match property.data_of {
        Some(kind) if !property.applies(object) => Err(invalid(
            "property",
            format!(
                "`{name}` applies to {} objects; {:?} is a {} object",
                kind.as_str(),
                object.name,
                object.kind.as_str()
            ),
        )),
        _ => Ok(property),
    }
}

/// One key `{frame, value, interpolation}` of `property` checked: a number for a scalar, a list
/// of its components for a vector, every component within the property's bounds.
fn key_arg(entry: &Value, property: &Property) -> Result<Key, ErrorBody> {
    let (prop, size) = (property.name, property.components);
    let fields = entry
        .as_object()
        .filter(|o| {
            o.keys()
                .all(|k| ["frame", "value", "interpolation"].contains(&k.as_str()))
        })
        .ok_or_else(|| invalid("frames", "each key must be {frame, value, interpolation}"))?;
    let frame = frame_of("frames", fields.get("frame"))?;
    let shape = if size == 1 {
        "a number".to_owned()
    } else {
        format!("{size} numbers")
    };
    let given = fields.get("value");
    let items: Option<Vec<&Value>> = if size == 1 {
        given.filter(|v| v.is_number()).map(|v| vec![v])
    } else {
        given.and_then(Value::as_array).map(|a| a.iter().collect())
    };
    let items = items.filter(|a| a.len() == size).ok_or_else(|| {
        invalid(
            "frames",
            format!("a key's `value` for {prop} must be {shape}"),
        )
    })?;
    let mut value = Vec::with_capacity(size);
    for item in items {
        let v = item
            .as_f64()
            .filter(|f| f.is_finite())
            .ok_or_else(|| invalid("frames", format!("`frames` must be {shape}")))?;
        value.push(v);
    }
    if value
        .iter()
        .any(|v| !(property.low..=property.high).contains(v))
    {
        return Err(invalid(
            "frames",
            format!("a key's `value` for {prop} must be {}", property.bounds),
        ));
    }
    let interpolation = match fields.get("interpolation") {
        None => Interpolation::Bezier,
        Some(v) => v.as_str().and_then(Interpolation::parse).ok_or_else(|| {
            invalid(
                "frames",
                "`interpolation` must be one of CONSTANT, LINEAR, BEZIER",
            )
        })?,
    };
    Ok(Key {
        frame,
        value: value.into_iter().map(|v| v as f32).collect(),
        interpolation,
    })
}

fn no_repeats(frames: impl IntoIterator<Item = i32>) -> Result<(), ErrorBody> {
    let mut seen = std::collections::BTreeSet::new();
    for frame in frames {
        if !seen.insert(frame) {
            return Err(invalid("frames", format!("frame {frame} is given twice")));
        }
    }
    Ok(())
}

/// A value as the tools answer it: a number for a scalar (one component), a list for a vector.
fn value_json(value: &[f32]) -> Value {
    match value {
        [scalar] => json!(f64::from(*scalar)),
        _ => json!(value.iter().map(|v| f64::from(*v)).collect::<Vec<_>>()),
    }
}

fn keys_json(keys: &[Key]) -> Value {
    Value::Array(
        keys.iter()
            .map(|k| {
                json!({
                    "frame": k.frame,
                    "value": value_json(&k.value),
                    "interpolation": k.interpolation.as_str(),
                })
            })
            .collect(),
    )
}

/// `{property: keys}` of every keyed property.
fn animation_json(object: &Object) -> Map<String, Value> {
    object
        .animation
        .iter()
        .map(|(name, keys)| (name.clone(), keys_json(keys)))
        .collect()
}

/// A snapshot's object with its animation summary, `{property: number of keys}`, under
/// `animation` when it has keys (the kernel's `animate.with_summary`).
pub(in crate::mock) fn with_summary(mut out: Value, object: &Object) -> Value {
    if !object.animation.is_empty()
        && let Some(map) = out.as_object_mut()
    {
        let counts: BTreeMap<&str, usize> = object
            .animation
            .iter()
            .map(|(name, keys)| (name.as_str(), keys.len()))
            .collect();
        map.insert("animation".into(), json!(counts));
    }
    out
}

/// The timeline as the tools and the snapshot answer it.
pub(in crate::mock) fn timeline_json(timeline: &Timeline) -> Value {
    json!({
        "frame_start": timeline.frame_start,
        "frame_end": timeline.frame_end,
        "fps": timeline.fps,
        "frame_current": timeline.frame_current,
    })
}

impl MockBlender {
    /// Every animated object posed at the current frame (Blender's `frame_set`).
    fn pose_all(&mut self) {
        let frame = self.scene.timeline.frame_current;
        for object in self.scene.objects.values_mut() {
            pose(object, frame);
        }
    }

    pub(super) fn keyframe_set(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let property = property_arg(params, &self.scene.objects[&name])?;
        let delete = match params.get("delete") {
            None => false,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| invalid("delete", "`delete` must be a boolean"))?,
        };
        let entries = params
            .get("frames")
            .and_then(Value::as_array)
            .filter(|a| (1..=MAX_KEYS).contains(&a.len()))
            .ok_or_else(|| {
                invalid(
                    "frames",
                    format!("`frames` must be a list of 1 to {MAX_KEYS} entries"),
                )
            })?;
        if delete {
            let frames = entries
                .iter()
                .map(|f| frame_of("frames", Some(f)))
                .collect::<Result<Vec<i32>, ErrorBody>>()?;
            no_repeats(frames.iter().copied())?;
            self.delete_keys(&name, property.name, &frames)?;
        } else {
            let keys = entries
                .iter()
                .map(|entry| key_arg(entry, property))
                .collect::<Result<Vec<Key>, ErrorBody>>()?;
            no_repeats(keys.iter().map(|k| k.frame))?;
            let object = self.scene.objects.get_mut(&name).expect("resolved");
            let list = object
                .animation
                .entry(property.name.to_owned())
                .or_default();
            for key in keys {
                list.retain(|k| k.frame != key.frame);
                let at = list.partition_point(|k| k.frame < key.frame);
                list.insert(at, key);
            }
        }
        self.pose_all();
        let keys = self.scene.objects[&name]
            .animation
            .get(property.name)
            .map_or(json!([]), |keys| keys_json(keys));
        Ok(json!({"name": name, "property": property.name, "keys": keys}))
    }

    /// Deletes the keys at `frames` after checking each has one; a property left without keys
    /// is not animated any more.
    fn delete_keys(&mut self, name: &str, property: &str, frames: &[i32]) -> Result<(), ErrorBody> {
        let object = self.scene.objects.get_mut(name).expect("resolved");
        let empty = Vec::new();
        let keys = object.animation.get(property).unwrap_or(&empty);
        if let Some(missing) = frames.iter().find(|f| !keys.iter().any(|k| k.frame == **f)) {
            return Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!("{name} has no {property} key at frame {missing}"),
            )
            .with_detail("field", "frames")
            .with_detail("name", name)
            .with_detail("frame", *missing));
        }
        if let Some(keys) = object.animation.get_mut(property) {
            keys.retain(|k| !frames.contains(&k.frame));
            if keys.is_empty() {
                object.animation.remove(property);
            }
        }
        Ok(())
    }

    pub(super) fn timeline_set(&mut self, params: &Value) -> ToolResult {
        let given = |field: &str| params.get(field).filter(|v| !v.is_null());
        let (start, end, fps, current) = (
            given("frame_start"),
            given("frame_end"),
            given("fps"),
            given("frame_current"),
        );
        if start.is_none() && end.is_none() && fps.is_none() && current.is_none() {
            return Err(invalid(
                "frame_start",
                "give at least one of `frame_start`, `frame_end`, `fps`, `frame_current`",
            ));
        }
        let timeline = self.scene.timeline;
        let new_start = match start {
            Some(v) => whole("frame_start", Some(v), 0, MAX_FRAME)? as i32,
            None => timeline.frame_start,
        };
        let new_end = match end {
            Some(v) => whole("frame_end", Some(v), 0, MAX_FRAME)? as i32,
            None => timeline.frame_end,
        };
        let fps = fps.map(|v| whole("fps", Some(v), 1, MAX_FPS)).transpose()?;
        let current = current
            .map(|v| frame_of("frame_current", Some(v)))
            .transpose()?;
        if new_start > new_end {
            let field = if end.is_some() {
                "frame_end"
            } else {
                "frame_start"
            };
            return Err(invalid(
                field,
                format!("frame_start ({new_start}) must not be after frame_end ({new_end})"),
            ));
        }
        let timeline = &mut self.scene.timeline;
        timeline.frame_start = new_start;
        timeline.frame_end = new_end;
        if let Some(fps) = fps {
            timeline.fps = fps as u32;
        }
        if let Some(current) = current {
            timeline.frame_current = current;
            self.pose_all();
        }
        Ok(timeline_json(&self.scene.timeline))
    }

    pub(super) fn animation_read(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let at = match params.get("at_frame") {
            None => None,
            Some(v) => Some(frame_of("at_frame", Some(v))?),
        };
        let object = &self.scene.objects[&name];
        let mut out = json!({"name": name, "animation": animation_json(object)});
        if let Some(at) = at {
            let evaluated: Map<String, Value> = object
                .animation
                .iter()
                .map(|(prop, keys)| (prop.clone(), value_json(&evaluate(keys, at))))
                .collect();
            out["at_frame"] = json!(at);
            out["evaluated"] = Value::Object(evaluated);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use vibe_errors::{Envelope, ErrorBody, ErrorCode};

    use crate::mock::MockBlender;

    fn ok(mock: &mut MockBlender, tool: &str, params: Value) -> Value {
        match mock.execute(tool, &params) {
            Envelope::Ok(result) => result,
            Envelope::Err(e) => panic!("{tool} {params}: {e}"),
        }
    }

    fn refused(mock: &mut MockBlender, tool: &str, params: Value) -> ErrorBody {
        match mock.execute(tool, &params) {
            Envelope::Err(e) => e,
            Envelope::Ok(result) => panic!("{tool} {params} succeeded: {result}"),
        }
    }

    fn linear(frame: i32, value: Value) -> Value {
        json!({"frame": frame, "value": value, "interpolation": "LINEAR"})
    }

    #[test]
    fn lens_keys_are_numbers_and_evaluate_linearly() {
        let mut mock = MockBlender::new();
        let out = ok(
            &mut mock,
            "keyframe.set",
            json!({"name": "Camera", "property": "lens", "frames": [linear(1, json!(50)), linear(21, json!(100))]}),
        );
        assert_eq!(
            out["keys"],
            json!([linear(1, json!(50.0)), linear(21, json!(100.0))])
        );
        // 50 + 50 * 5 / 20 and 50 + 50 * 11 / 20, by hand.
        let read = ok(
            &mut mock,
            "animation.read",
            json!({"name": "Camera", "at_frame": 6}),
        );
        assert_eq!(read["evaluated"], json!({"lens": 62.5}));
        let read = ok(
            &mut mock,
            "animation.read",
            json!({"name": "Camera", "at_frame": 12}),
        );
        assert_eq!(read["evaluated"], json!({"lens": 77.5}));
    }

    #[test]
    fn the_current_frame_poses_energy_and_colour() {
        let mut mock = MockBlender::new();
        ok(
            &mut mock,
            "keyframe.set",
            json!({"name": "Light", "property": "energy", "frames": [linear(1, json!(0)), linear(11, json!(1000))]}),
        );
        ok(
            &mut mock,
            "keyframe.set",
            json!({"name": "Light", "property": "color", "frames": [linear(1, json!([1, 0, 0])), linear(11, json!([0, 0.5, 1]))]}),
        );
        ok(&mut mock, "timeline.set", json!({"frame_current": 6}));
        let info = ok(&mut mock, "object.info", json!({"name": "Light"}));
        // Halfway: 500 W; red 1 -> 0, green 0 -> 0.5, blue 0 -> 1.
        assert_eq!(info["data"]["energy"], json!(500.0));
        assert_eq!(info["data"]["color"], json!([0.5, 0.25, 0.5]));
        let snapshot = ok(&mut mock, "scene.snapshot", json!({}));
        let light = snapshot["objects"]
            .as_array()
            .and_then(|objects| objects.iter().find(|o| o["name"] == "Light"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(light["animation"], json!({"color": 2, "energy": 2}));
    }

    #[test]
    fn a_property_of_another_type_or_shape_is_refused() {
        let mut mock = MockBlender::new();
        let e = refused(
            &mut mock,
            "keyframe.set",
            json!({"name": "Light", "property": "lens", "frames": [linear(1, json!(50))]}),
        );
        assert_eq!(e.code, ErrorCode::InvalidArguments);
        assert_eq!(e.details["field"], "property");
        assert!(
            e.message.contains("CAMERA") && e.message.contains("LIGHT"),
            "{e}"
        );
        let e = refused(
            &mut mock,
            "keyframe.set",
            json!({"name": "Cube", "property": "energy", "frames": [linear(1, json!(10))]}),
        );
        assert!(e.message.contains("MESH"), "{e}");
        for (name, property, value) in [
            ("Camera", "lens", json!([50, 50, 50])),
            ("Camera", "lens", json!(0.5)),
            ("Camera", "lens", json!(5001)),
            ("Camera", "lens", json!(true)),
            ("Light", "energy", json!(-1)),
            ("Light", "energy", json!([1])),
            ("Light", "energy", json!(1_000_001)),
            ("Light", "color", json!(0.5)),
            ("Light", "color", json!([1, 1])),
            ("Light", "color", json!([0.5, 1.5, 0])),
            ("Cube", "location", json!(1)),
        ] {
            let e = refused(
                &mut mock,
                "keyframe.set",
                json!({"name": name, "property": property, "frames": [linear(1, value.clone())]}),
            );
            assert_eq!(e.details["field"], "frames", "{property} {value}");
        }
        for name in ["Camera", "Cube", "Light"] {
            assert!(mock.scene().objects[name].animation.is_empty());
        }
        // The bounds themselves are keys.
        ok(
            &mut mock,
            "keyframe.set",
            json!({"name": "Camera", "property": "lens", "frames": [linear(1, json!(1)), linear(2, json!(5000))]}),
        );
    }
}
