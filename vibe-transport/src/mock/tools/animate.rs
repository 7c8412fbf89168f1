//! The animate pack: `keyframe.set`, `timeline.set` and `animation.read` (the kernel's
//! `animate.py`). The keys and their evaluation are in `mock/animation.rs`.

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
/// The largest key value.
const MAX_VALUE: f64 = 1.0e6;
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

fn property_arg(params: &Value) -> Result<&'static Property, ErrorBody> {
    let name = req_str(params, "property")?;
    property(name).ok_or_else(|| {
        let names: Vec<&str> = PROPERTIES.iter().map(|p| p.name).collect();
        invalid(
            "property",
            format!("`property` must be one of {}", names.join(", ")),
        )
    })
}

/// One key `{frame, value, interpolation}` checked.
fn key_arg(entry: &Value, size: usize) -> Result<Key, ErrorBody> {
    let fields = entry
        .as_object()
        .filter(|o| {
            o.keys()
                .all(|k| ["frame", "value", "interpolation"].contains(&k.as_str()))
        })
        .ok_or_else(|| invalid("frames", "each key must be {frame, value, interpolation}"))?;
    let frame = frame_of("frames", fields.get("frame"))?;
    let items = fields
        .get("value")
        .and_then(Value::as_array)
        .filter(|a| a.len() == size)
        .ok_or_else(|| invalid("frames", format!("a key's `value` must be {size} numbers")))?;
    let mut value = Vec::with_capacity(size);
    for item in items {
        let v = item
            .as_f64()
            .filter(|f| f.is_finite())
            .ok_or_else(|| invalid("frames", format!("`frames` must be {size} numbers")))?;
        value.push(v);
    }
    if value.iter().any(|v| v.abs() > MAX_VALUE) {
        return Err(invalid(
            "frames",
            format!("a key's values must be within +-{MAX_VALUE}"),
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

fn keys_json(keys: &[Key]) -> Value {
    Value::Array(
        keys.iter()
            .map(|k| {
                json!({
                    "frame": k.frame,
                    "value": k.value.iter().map(|v| f64::from(*v)).collect::<Vec<_>>(),
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
        let property = property_arg(params)?;
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
                .map(|entry| key_arg(entry, property.components))
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
                .map(|(prop, keys)| {
                    let values: Vec<f64> = evaluate(keys, at).into_iter().map(f64::from).collect();
                    (prop.clone(), json!(values))
                })
                .collect();
            out["at_frame"] = json!(at);
            out["evaluated"] = Value::Object(evaluated);
        }
        Ok(out)
    }
}
