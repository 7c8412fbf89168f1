//! MockBlender's tools: one function per blender-core v1 tool, with the live kernel's semantics.
//!
//! This module holds the dispatcher and what the tools share (the argument checks, name
//! resolution, the answer shapes); the tools themselves are by family, as in the kernel:
//! `reads`, `objects` (objects and collections), `materials` (materials and modifiers),
//! `transactions` and `agent_code` (`python.exec`) below this module, and `files.rs` beside it
//! (`file.save`, `file.open`), `animate` (the animate pack); the actuator lock's rules are in
//! `lock.rs`.

mod agent_code;
mod animate;
mod look;
mod materials;
mod objects;
mod reads;
mod transactions;

use serde_json::{Value, json};
use vibe_errors::{Envelope, ErrorBody, ErrorCode, Reason, sanitize_message};

use super::scene::*;
use super::{CONSOLE_CAPACITY, ConsoleEntry, MockBlender};

pub(super) type ToolResult = Result<Value, ErrorBody>;

pub(super) fn invalid(field: &str, message: impl AsRef<str>) -> ErrorBody {
    ErrorBody::new(ErrorCode::InvalidArguments, message).with_detail("field", field)
}

pub(super) fn req_str<'a>(params: &'a Value, field: &str) -> Result<&'a str, ErrorBody> {
    params
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(field, format!("`{field}` must be a string")))
}

pub(super) fn opt_str<'a>(params: &'a Value, field: &str) -> Result<Option<&'a str>, ErrorBody> {
    match params.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(field, format!("`{field}` must be a string"))),
    }
}

fn opt_f64(params: &Value, field: &str) -> Result<Option<f64>, ErrorBody> {
    match params.get(field) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| invalid(field, format!("`{field}` must be a number"))),
    }
}

pub(super) fn opt_u32(params: &Value, field: &str) -> Result<Option<u32>, ErrorBody> {
    match params.get(field) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| invalid(field, format!("`{field}` must be a non-negative integer"))),
    }
}

fn opt_vec<const N: usize>(params: &Value, field: &str) -> Result<Option<[f64; N]>, ErrorBody> {
    let Some(value) = params.get(field) else {
        return Ok(None);
    };
    let items = value
        .as_array()
        .filter(|a| a.len() == N)
        .ok_or_else(|| invalid(field, format!("`{field}` must be {N} numbers")))?;
    let mut out = [0.0; N];
    for (slot, item) in out.iter_mut().zip(items) {
        *slot = item
            .as_f64()
            .filter(|f| f.is_finite())
            .ok_or_else(|| invalid(field, format!("`{field}` must be {N} numbers")))?;
    }
    Ok(Some(out))
}

fn f32s<const N: usize>(v: [f64; N]) -> [f32; N] {
    v.map(|x| x as f32)
}

fn floats(v: &[f32]) -> Value {
    Value::Array(v.iter().map(|x| json!(f64::from(*x))).collect())
}

pub(super) fn check_name(field: &str, name: &str) -> Result<(), ErrorBody> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(invalid(
            field,
            format!("`{field}` must be 1-63 bytes without control characters"),
        ));
    }
    Ok(())
}

pub(super) fn not_found(field: &str, what: &str, name: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::NotFound,
        format!("{what} {name:?} does not exist"),
    )
    .with_detail("field", field)
    .with_detail("name", name)
}

fn object_json(object: &Object) -> Value {
    let mut collections = object.collections.clone();
    collections.sort();
    json!({
        "name": object.name,
        "type": object.kind.as_str(),
        "location": floats(&object.location),
        "rotation_euler": floats(&object.rotation),
        "scale": floats(&object.scale),
        "parent": object.parent,
        "collections": collections,
        "materials": object.materials,
        "modifiers": object.modifiers.iter().map(modifier_json).collect::<Vec<_>>(),
        "data": data_json(object),
    })
}

fn modifier_json(m: &Modifier) -> Value {
    match m.kind.as_str() {
        "SUBSURF" => {
            json!({"name": m.name, "type": m.kind, "levels": m.levels, "render_levels": m.render_levels})
        }
        "BEVEL" => {
            json!({"name": m.name, "type": m.kind, "width": f64::from(m.width), "segments": m.segments})
        }
        "ARRAY" => json!({"name": m.name, "type": m.kind, "count": m.count}),
        "SOLIDIFY" => json!({"name": m.name, "type": m.kind, "thickness": f64::from(m.thickness)}),
        _ => json!({"name": m.name, "type": m.kind}),
    }
}

fn data_json(object: &Object) -> Value {
    match &object.data {
        ObjectData::Mesh(c) => {
            json!({"type": "MESH", "vertices": c.vertices, "edges": c.edges, "polygons": c.polygons, "extent": object.mesh_extent, "material_slots": object.materials.len()})
        }
        ObjectData::Light(light) => look::light_data_json(light),
        ObjectData::Camera(camera) => look::camera_data_json(camera),
        ObjectData::Armature(bones) => json!({"type": "ARMATURE", "bones": bones}),
        ObjectData::Empty => json!({"type": "EMPTY"}),
    }
}

/// A Principled BSDF's inputs as the kernel reports them: a black emission colour emits nothing
/// at any strength and reads as Blender 4+ writes no emission (white at strength 0).
fn principled_json(p: &Principled) -> Value {
    let (emission_color, emission_strength) = if p.emission_color[..3] == [0.0; 3] {
        ([1.0; 4], 0.0)
    } else {
        (p.emission_color, p.emission_strength)
    };
    json!({
        "base_color": floats(&p.base_color),
        "metallic": f64::from(p.metallic),
        "roughness": f64::from(p.roughness),
        "emission_color": floats(&emission_color),
        "emission_strength": f64::from(emission_strength),
        "alpha": f64::from(p.alpha),
        "transmission": f64::from(p.transmission),
        "texture": p.texture.as_ref().map(|t| json!({"image": t.image, "path": t.path})),
    })
}

/// `*` matches any run, `?` one character, everything else itself.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

impl MockBlender {
    /// Runs a tool and answers; a failed call leaves the scene as it was.
    pub fn execute(&mut self, tool: &str, params: &Value) -> Envelope {
        let answer = self.dispatch(tool, params);
        self.finish(tool, answer)
    }

    /// Puts an earlier scene back. Object ids are never reused (Blender's session UIDs only
    /// grow), so an object made later cannot pass for one the session saw before.
    fn restore_scene(&mut self, earlier: Scene) {
        let next_uid = self.scene.next_uid.max(earlier.next_uid);
        self.scene = earlier;
        self.scene.next_uid = next_uid;
    }

    /// Runs a tool on a copy of the scene, then fails as if Blender raised part-way: the copy is
    /// discarded, so the scene is as it was.
    pub(super) fn execute_and_raise(&mut self, tool: &str, params: &Value) -> Envelope {
        let saved = (
            self.scene.clone(),
            self.created.clone(),
            self.seen.clone(),
            self.modifiers.clone(),
            self.files.clone(),
            self.file.clone(),
        );
        let _ = self.dispatch(tool, params);
        self.restore_scene(saved.0);
        (
            self.created,
            self.seen,
            self.modifiers,
            self.files,
            self.file,
        ) = (saved.1, saved.2, saved.3, saved.4, saved.5);
        let raw = format!(
            "Traceback (most recent call last):\n  File \"<vibe-kernel>\", line 1, in {tool}\nRuntimeError: injected failure in {tool}; the call was rolled back"
        );
        let error = ErrorBody::from_raw(ErrorCode::ExecutionFailed, raw)
            .with_reason(Reason::MutationFailed)
            .with_detail("rolled_back", true);
        self.finish(tool, Err(error))
    }

    fn finish(&mut self, tool: &str, answer: ToolResult) -> Envelope {
        match answer {
            Ok(result) => Envelope::Ok(result),
            Err(error) => {
                if matches!(
                    error.code,
                    ErrorCode::ExecutionFailed | ErrorCode::InternalError
                ) {
                    self.log_console(tool, &error.message);
                }
                Envelope::Err(error)
            }
        }
    }

    fn log_console(&mut self, source: &str, message: &str) {
        self.console_seq += 1;
        if self.console.len() == CONSOLE_CAPACITY {
            self.console.pop_front();
            self.console_dropped += 1;
        }
        self.console.push_back(ConsoleEntry {
            seq: self.console_seq,
            source: source.to_owned(),
            message: sanitize_message(message),
        });
    }

    fn dispatch(&mut self, tool: &str, params: &Value) -> ToolResult {
        let registries = vibe_contract::default_registries()
            .map_err(|e| ErrorBody::new(ErrorCode::InternalError, e.to_string()))?;
        let spec = registries.tools.get(tool).ok_or_else(|| {
            ErrorBody::new(
                ErrorCode::ContractViolation,
                format!("unknown tool {tool:?}"),
            )
            .with_detail("tool", tool)
        })?;
        if !params.is_object() {
            return Err(invalid("params", "params must be an object"));
        }
        if let Some(cap) = spec
            .requires
            .capabilities
            .iter()
            .find(|c| !self.session.capabilities.contains(*c))
        {
            return Err(ErrorBody::new(
                ErrorCode::CapabilityMissing,
                format!("{tool} needs capability {cap:?}, which this session does not have"),
            )
            .with_detail("capability", cap.as_str()));
        }
        if self.busy && spec.mutates() {
            return Err(ErrorBody::from_reason(
                Reason::Busy,
                "Blender is loading or saving a file; wait until kernel.status says ready",
            ));
        }
        match tool {
            "kernel.status" => Ok(self.kernel_status()),
            "scene.snapshot" => Ok(self.snapshot()),
            "scene.telemetry" => Ok(self.telemetry()),
            "blender.errors" => self.blender_errors(params),
            "scene.list_collections" => Ok(self.list_collections()),
            "scene.create_collection" => self.create_collection(params),
            "object.list" => self.object_list(params),
            "object.info" => self.object_info(params),
            "scenegraph.find" => self.scenegraph_find(params),
            "object.audit_identity" => self.audit_identity(params),
            "object.create" => self.object_create(params),
            "mesh.create_cube" => self.create_primitive(params, "cube"),
            "mesh.create_plane" => self.create_primitive(params, "plane"),
            "object.move" => self.object_move(params),
            "object.set_transform" => self.set_transform(params),
            "object.rename" => self.rename(params),
            "object.delete" => self.delete(params),
            "object.assign_collection" => self.assign_collection(params),
            "object.set_parent" => self.set_parent(params),
            "selection.set_active_object" => self.set_active(params),
            "material.ensure_principled" => self.ensure_principled(params),
            "mesh.assign_material" => self.assign_material(params),
            "modifier.add" => self.modifier_add(params),
            "modifier.remove" => self.modifier_remove(params),
            "transaction.begin" => self.tx_begin(params),
            "transaction.commit" => self.tx_commit(),
            "transaction.rollback" => self.tx_rollback(),
            "python.exec" => self.python_exec(params),
            "file.save" => self.file_save(params),
            "file.open" => self.file_open(params),
            "render.still" => self.render_still(params),
            "camera.set" => self.camera_set(params),
            "object.aim" => self.object_aim(params),
            "light.set" => self.light_set(params),
            "world.set" => self.world_set(params),
            "keyframe.set" => self.keyframe_set(params),
            "timeline.set" => self.timeline_set(params),
            "animation.read" => self.animation_read(params),
            "file.import" => self.file_import(params),
            "file.export" => self.file_export(params),
            other => Err(ErrorBody::new(
                ErrorCode::CapabilityMissing,
                format!("MockBlender cannot run {other}"),
            )
            .with_detail("tool", other)),
        }
    }

    /// Resolves an object name, telling identity drift (renamed behind the session's back)
    /// from a name that never existed.
    pub(super) fn resolve(&mut self, field: &str, name: &str) -> Result<String, ErrorBody> {
        check_name(field, name)?;
        if let Some(object) = self.scene.objects.get(name) {
            self.seen.insert(name.to_owned(), object.uid);
            return Ok(name.to_owned());
        }
        if let Some(&uid) = self.seen.get(name)
            && let Some(current) = self.scene.objects.values().find(|o| o.uid == uid)
        {
            return Err(ErrorBody::from_reason(
                Reason::IdentityDrift,
                format!(
                    "object {name:?} was renamed to {:?} outside this session",
                    current.name
                ),
            )
            .with_detail("field", field)
            .with_detail("name", name)
            .with_detail("current_name", current.name.as_str()));
        }
        Err(not_found(field, "object", name))
    }

    fn object(&self, name: &str) -> &Object {
        &self.scene.objects[name]
    }

    fn info_of(&self, name: &str) -> Value {
        object_json(self.object(name))
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("Cu*", "Cube"));
        assert!(glob_match("C?be", "Cube"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("C?be", "Cbe"));
        assert!(glob_match("*.0??", "Cube.001"));
        assert!(!glob_match("[C]ube", "Cube"));
    }
}
