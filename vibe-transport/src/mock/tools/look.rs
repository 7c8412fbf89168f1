//! The look pack's tools: `camera.set`, `object.aim`, `light.set` and `world.set` (the kernel's
//! `look.py`), the answer shapes of camera and light data, and the aiming math both share.
//!
//! Every check runs before anything changes, in the kernel's order, so a refused call leaves
//! the scene as it was and names the same field.

use serde_json::{Value, json};
use vibe_errors::ErrorBody;

use super::{ToolResult, floats, invalid, opt_f64, opt_str, opt_vec, req_str};
use crate::mock::MockBlender;
use crate::mock::scene::{CameraData, LightData, ObjectData, World};

/// Below this share of its length, a direction counts as straight up or down: the horizontal
/// part that would orient the object's up axis is noise.
pub(crate) const AIM_VERTICAL_EPSILON: f64 = 1e-9;

/// The smallest and largest spot cone angle, in radians (1 and 180 degrees, Blender's limits).
const SPOT_SIZE_RANGE: (f64, f64) = (0.017_453_292_519_943_295, std::f64::consts::PI);

/// Camera data as `object.info` and `scene.snapshot` report it.
pub(super) fn camera_data_json(c: &CameraData) -> Value {
    json!({
        "type": "CAMERA",
        "camera_type": c.camera_type,
        "lens": f64::from(c.lens),
        "sensor_width": f64::from(c.sensor_width),
        "clip_start": f64::from(c.clip_start),
        "clip_end": f64::from(c.clip_end),
        "ortho_scale": f64::from(c.ortho_scale),
    })
}

/// The spot settings of a light: numbers for a spot light, nulls for the other types.
fn spot_json(l: &LightData) -> (Value, Value) {
    if l.light_type == "SPOT" {
        (
            json!(f64::from(l.spot_size)),
            json!(f64::from(l.spot_blend)),
        )
    } else {
        (Value::Null, Value::Null)
    }
}

/// Light data as `object.info` and `scene.snapshot` report it.
pub(super) fn light_data_json(l: &LightData) -> Value {
    let (spot_size, spot_blend) = spot_json(l);
    json!({
        "type": "LIGHT",
        "light_type": l.light_type,
        "energy": f64::from(l.energy),
        "color": floats(&l.color),
        "size": f64::from(l.size()),
        "spot_size": spot_size,
        "spot_blend": spot_blend,
    })
}

/// The world as `scene.snapshot` reports it.
pub(in crate::mock) fn world_json(w: &World) -> Value {
    json!({"name": w.name, "color": floats(&w.color), "strength": f64::from(w.strength)})
}

/// An optional number within `[min, max]`; out of range is invalid_arguments naming `field`.
fn bounded(
    params: &Value,
    field: &str,
    min: f64,
    max: f64,
    what: &str,
) -> Result<Option<f64>, ErrorBody> {
    match opt_f64(params, field)? {
        Some(v) if !(v.is_finite() && (min..=max).contains(&v)) => {
            Err(invalid(field, format!("`{field}` must be {what}")))
        }
        other => Ok(other),
    }
}

/// An optional linear RGB colour, three numbers 0..1.
fn rgb(params: &Value, field: &str) -> Result<Option<[f64; 3]>, ErrorBody> {
    let colour = opt_vec::<3>(params, field)?;
    if colour.is_some_and(|c| c.iter().any(|x| !(0.0..=1.0).contains(x))) {
        return Err(invalid(field, format!("`{field}` must be 3 numbers 0..1")));
    }
    Ok(colour)
}

fn opt_bool(params: &Value, field: &str) -> Result<Option<bool>, ErrorBody> {
    match params.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(invalid(field, format!("`{field}` must be a boolean"))),
    }
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn length(v: [f64; 3]) -> f64 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}

/// The XYZ Euler rotation (radians) that turns an object's -Z axis along `direction`, with its
/// +Y axis up (towards world +Z), as Blender's `to_track_quat('-Z', 'Y')` does: the rotation's
/// columns are the object's axes in the world, and the Euler angles are read from them as
/// Blender's `to_euler('XYZ')` reads a matrix (of its two solutions, the one with the smaller
/// angles). Straight down is no rotation, straight up a half turn about Y. `None` for a zero
/// direction.
pub(crate) fn aim_euler(direction: [f64; 3]) -> Option<[f64; 3]> {
    let len = length(direction);
    if !(len.is_finite() && len > 0.0) {
        return None;
    }
    let n = direction.map(|c| c / len);
    if n[0].hypot(n[1]) <= AIM_VERTICAL_EPSILON {
        let euler = if n[2] < 0.0 {
            [0.0; 3]
        } else {
            [0.0, std::f64::consts::PI, 0.0]
        };
        return Some(euler);
    }
    // Adding zero turns -0.0 into 0.0, so that signs of zero never pick an angle of -pi.
    let z = n.map(|c| -c + 0.0);
    let side = [-z[1], z[0], 0.0];
    let side_len = length(side);
    let x = side.map(|c| c / side_len);
    let y = cross(z, x);
    let cy = x[0].hypot(x[1]);
    let first = [y[2].atan2(z[2]), (-x[2]).atan2(cy), x[1].atan2(x[0])];
    let second = [
        (-y[2]).atan2(-z[2]),
        (-x[2]).atan2(-cy),
        (-x[1]).atan2(-x[0]),
    ];
    let size = |e: &[f64; 3]| e.iter().map(|a| a.abs()).sum::<f64>();
    let best = if size(&first) > size(&second) {
        second
    } else {
        first
    };
    // No negative zeros in answers.
    Some(best.map(|a| a + 0.0))
}

impl MockBlender {
    pub(super) fn camera_set(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let ObjectData::Camera(current) = &self.object(&name).data else {
            return Err(not_a(&name, self.object(&name).kind.as_str(), "a camera"));
        };
        let make_active = opt_bool(params, "make_active")?;
        let lens = bounded(params, "lens", 1.0, 5000.0, "1-5000 mm")?;
        let sensor_width = bounded(params, "sensor_width", 1.0, 1000.0, "1-1000 mm")?;
        let clip_start = bounded(params, "clip_start", 1e-6, 1e6, "1e-6 to 1e6")?;
        let clip_end = bounded(params, "clip_end", 1e-6, 1e6, "1e-6 to 1e6")?;
        let kind = opt_str(params, "type")?;
        if kind.is_some_and(|k| !["PERSP", "ORTHO"].contains(&k)) {
            return Err(invalid("type", "`type` must be PERSP or ORTHO"));
        }
        let ortho_scale = opt_f64(params, "ortho_scale")?;
        if ortho_scale.is_some_and(|s| !(s > 0.0 && s <= 1e6)) {
            return Err(invalid("ortho_scale", "`ortho_scale` must be in (0, 1e6]"));
        }
        let start = clip_start.unwrap_or(f64::from(current.clip_start));
        let end = clip_end.unwrap_or(f64::from(current.clip_end));
        if start >= end {
            let field = if clip_start.is_some() {
                "clip_start"
            } else {
                "clip_end"
            };
            return Err(invalid(
                field,
                format!("clip_start ({start}) must be below clip_end ({end})"),
            ));
        }
        if let Some(object) = self.scene.objects.get_mut(&name)
            && let ObjectData::Camera(camera) = &mut object.data
        {
            let set = |slot: &mut f32, value: Option<f64>| {
                if let Some(v) = value {
                    *slot = v as f32;
                }
            };
            set(&mut camera.lens, lens);
            set(&mut camera.sensor_width, sensor_width);
            set(&mut camera.clip_start, clip_start);
            set(&mut camera.clip_end, clip_end);
            set(&mut camera.ortho_scale, ortho_scale);
            if let Some(k) = kind {
                camera.camera_type = k.to_owned();
            }
        }
        if make_active == Some(true) {
            self.scene.camera = Some(name.clone());
        }
        let ObjectData::Camera(camera) = &self.object(&name).data else {
            return Err(not_a(&name, "changed", "a camera"));
        };
        Ok(json!({
            "name": name,
            "active": self.scene.camera.as_deref() == Some(name.as_str()),
            "lens": f64::from(camera.lens),
            "sensor_width": f64::from(camera.sensor_width),
            "clip_start": f64::from(camera.clip_start),
            "clip_end": f64::from(camera.clip_end),
            "type": camera.camera_type,
            "ortho_scale": f64::from(camera.ortho_scale),
        }))
    }

    pub(super) fn object_aim(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let given = |field: &str| params.get(field).filter(|v| !v.is_null());
        let (field, target) = match (given("target"), given("target_object")) {
            (Some(_), None) => {
                let point = opt_vec::<3>(params, "target")?.unwrap_or_default();
                if point.iter().any(|c| c.abs() > 1e6) {
                    return Err(invalid("target", "`target` must be 3 numbers within ±1e6"));
                }
                ("target", point)
            }
            (None, Some(_)) => {
                let other = self.resolve("target_object", req_str(params, "target_object")?)?;
                let object = self.object(&other);
                if object.parent.is_some() {
                    return Err(has_parent("target_object", &other));
                }
                ("target_object", object.location.map(f64::from))
            }
            _ => {
                return Err(invalid(
                    "target",
                    "give exactly one of `target` and `target_object`",
                ));
            }
        };
        let object = self.object(&name);
        if object.parent.is_some() {
            return Err(has_parent("name", &name));
        }
        let from = object.location.map(f64::from);
        let direction = [0, 1, 2].map(|i| target[i] - from[i]);
        let euler = aim_euler(direction)
            .filter(|_| length(direction) > 1e-6)
            .ok_or_else(|| {
                invalid(
                    field,
                    format!("{name:?} cannot be aimed at its own location"),
                )
            })?;
        let object = self
            .scene
            .objects
            .get_mut(&name)
            .ok_or_else(|| invalid("name", "the object went away"))?;
        object.rotation = euler.map(|a| a as f32);
        Ok(json!({"name": name, "rotation_euler": floats(&object.rotation)}))
    }

    pub(super) fn light_set(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let ObjectData::Light(current) = &self.object(&name).data else {
            return Err(not_a(&name, self.object(&name).kind.as_str(), "a light"));
        };
        let light_type = opt_str(params, "light_type")?;
        if light_type.is_some_and(|t| !["POINT", "SUN", "SPOT", "AREA"].contains(&t)) {
            return Err(invalid(
                "light_type",
                "`light_type` must be POINT, SUN, SPOT or AREA",
            ));
        }
        let energy = bounded(params, "energy", 0.0, 1e6, "0-1e6 W")?;
        let color = rgb(params, "color")?;
        let size = bounded(params, "size", 0.0, 1e4, "0-1e4")?;
        let (lo, hi) = SPOT_SIZE_RANGE;
        let spot_size = bounded(params, "spot_size", lo, hi, "1-180 degrees in radians")?;
        let spot_blend = bounded(params, "spot_blend", 0.0, 1.0, "0-1")?;
        let kind = light_type.unwrap_or(&current.light_type).to_owned();
        for (field, given) in [("spot_size", spot_size), ("spot_blend", spot_blend)] {
            if given.is_some() && kind != "SPOT" {
                return Err(invalid(
                    field,
                    format!("`{field}` applies to SPOT lights; {name:?} is a {kind} light"),
                ));
            }
        }
        if kind == "SUN" && size.is_some_and(|s| s > std::f64::consts::PI) {
            return Err(invalid(
                "size",
                "a sun's `size` is its angle in radians, at most pi",
            ));
        }
        let object = self
            .scene
            .objects
            .get_mut(&name)
            .ok_or_else(|| invalid("name", "the object went away"))?;
        let ObjectData::Light(light) = &mut object.data else {
            return Err(not_a(&name, "changed", "a light"));
        };
        light.light_type = kind;
        if let Some(e) = energy {
            light.energy = e as f32;
        }
        if let Some(c) = color {
            light.color = c.map(|x| x as f32);
        }
        if let Some(s) = size {
            light.set_size(s as f32);
        }
        if let Some(s) = spot_size {
            light.spot_size = s as f32;
        }
        if let Some(b) = spot_blend {
            light.spot_blend = b as f32;
        }
        let mut answer = light_data_json(light);
        if let Some(map) = answer.as_object_mut() {
            map.remove("type");
            map.insert("name".into(), json!(name));
        }
        Ok(answer)
    }

    pub(super) fn world_set(&mut self, params: &Value) -> ToolResult {
        let color = rgb(params, "color")?;
        let strength = bounded(params, "strength", 0.0, 1e6, "0-1e6")?;
        let created = self.scene.world.is_none();
        let world = self.scene.world.get_or_insert_with(World::new);
        if let Some(c) = color {
            world.color = c.map(|x| x as f32);
        }
        if let Some(s) = strength {
            world.strength = s as f32;
        }
        let mut answer = world_json(world);
        if let Some(map) = answer.as_object_mut() {
            let name = map.remove("name").unwrap_or(Value::Null);
            map.insert("world".into(), name);
            map.insert("created".into(), json!(created));
        }
        Ok(answer)
    }
}

/// The refusal of an object of the wrong type.
fn not_a(name: &str, kind: &str, wanted: &str) -> ErrorBody {
    invalid("name", format!("{name:?} is a {kind} object, not {wanted}"))
}

/// The refusal of an object with a parent (its location is not its world location).
fn has_parent(field: &str, name: &str) -> ErrorBody {
    invalid(
        field,
        format!(
            "{name:?} has a parent; object.aim works with objects without one (their location is \
             their place in the world)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::aim_euler;
    use std::f64::consts::{FRAC_PI_2, PI};

    fn close(a: [f64; 3], b: [f64; 3]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    /// Rotates `v` by the XYZ Euler `e` (R = Rz * Ry * Rx), the way Blender applies it.
    fn rotate(e: [f64; 3], v: [f64; 3]) -> [f64; 3] {
        let (sx, cx) = e[0].sin_cos();
        let (sy, cy) = e[1].sin_cos();
        let (sz, cz) = e[2].sin_cos();
        let v = [v[0], cx * v[1] - sx * v[2], sx * v[1] + cx * v[2]];
        let v = [cy * v[0] + sy * v[2], v[1], -sy * v[0] + cy * v[2]];
        [cz * v[0] - sz * v[1], sz * v[0] + cz * v[1], v[2]]
    }

    #[test]
    fn hand_computed_aims() {
        // From [0, -10, 0] at the origin: look along +Y, a quarter turn about X.
        assert!(close(
            aim_euler([0.0, 10.0, 0.0]).unwrap(),
            [FRAC_PI_2, 0.0, 0.0]
        ));
        // From [10, 0, 0] at the origin: look along -X, then a quarter turn about Z.
        assert!(close(
            aim_euler([-10.0, 0.0, 0.0]).unwrap(),
            [FRAC_PI_2, 0.0, FRAC_PI_2]
        ));
        // From [0, 10, 0]: look along -Y, the other way round about Z.
        assert!(close(
            aim_euler([0.0, -10.0, 0.0]).unwrap(),
            [FRAC_PI_2, 0.0, PI]
        ));
        // Straight down is no rotation; straight up a half turn about Y.
        assert!(close(aim_euler([0.0, 0.0, -3.0]).unwrap(), [0.0; 3]));
        assert!(close(aim_euler([0.0, 0.0, 3.0]).unwrap(), [0.0, PI, 0.0]));
        // 45 degrees down towards +Y: tilted an eighth of a turn less than level.
        assert!(close(
            aim_euler([0.0, 1.0, -1.0]).unwrap(),
            [FRAC_PI_2 / 2.0, 0.0, 0.0]
        ));
        assert_eq!(aim_euler([0.0; 3]), None);
    }

    #[test]
    fn minus_z_points_at_the_target_and_y_stays_up() {
        for d in [
            [1.0, 2.0, 3.0],
            [-3.0, 4.0, -5.0],
            [0.2, -7.0, 0.5],
            [-1.0, -1.0, 0.0],
        ] {
            let e = aim_euler(d).unwrap();
            let len = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
            let forward = rotate(e, [0.0, 0.0, -1.0]);
            assert!(close(forward, d.map(|c| c / len)), "{d:?}: {forward:?}");
            // The object's X axis stays level and its Y axis leans up.
            let side = rotate(e, [1.0, 0.0, 0.0]);
            let up = rotate(e, [0.0, 1.0, 0.0]);
            assert!(side[2].abs() < 1e-12 && up[2] >= 0.0, "{d:?}");
        }
    }
}
