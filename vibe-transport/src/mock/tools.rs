//! MockBlender's tools: one function per blender-core v1 tool, with the live kernel's semantics.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use vibe_errors::{Envelope, ErrorBody, ErrorCode, Reason, sanitize_message};

use super::scene::*;
use super::{CONSOLE_CAPACITY, ConsoleEntry, MockBlender, Transaction};
use crate::snapshot::{SNAPSHOT_VERSION, seal};

pub(super) type ToolResult = Result<Value, ErrorBody>;

fn invalid(field: &str, message: impl AsRef<str>) -> ErrorBody {
    ErrorBody::new(ErrorCode::InvalidArguments, message).with_detail("field", field)
}

pub(super) fn req_str<'a>(params: &'a Value, field: &str) -> Result<&'a str, ErrorBody> {
    params
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(field, format!("`{field}` must be a string")))
}

fn opt_str<'a>(params: &'a Value, field: &str) -> Result<Option<&'a str>, ErrorBody> {
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

fn opt_u32(params: &Value, field: &str) -> Result<Option<u32>, ErrorBody> {
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

fn check_name(field: &str, name: &str) -> Result<(), ErrorBody> {
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
            json!({"type": "MESH", "vertices": c.vertices, "edges": c.edges, "polygons": c.polygons, "material_slots": object.materials.len()})
        }
        ObjectData::Light(kind) => json!({"type": "LIGHT", "light_type": kind}),
        ObjectData::Camera => json!({"type": "CAMERA"}),
        ObjectData::Armature(bones) => json!({"type": "ARMATURE", "bones": bones}),
        ObjectData::Empty => json!({"type": "EMPTY"}),
    }
}

fn principled_json(p: &Principled) -> Value {
    json!({"base_color": floats(&p.base_color), "metallic": f64::from(p.metallic), "roughness": f64::from(p.roughness)})
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
        let registries = vibe_contract::blender_core_v1()
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
            "material.list" => Ok(self.material_list()),
            "mesh.assign_material" => self.assign_material(params),
            "modifier.add" => self.modifier_add(params),
            "modifier.remove" => self.modifier_remove(params),
            "transaction.begin" => self.tx_begin(params),
            "transaction.commit" => self.tx_commit(),
            "transaction.rollback" => self.tx_rollback(),
            "python.exec" => self.python_exec(params),
            "file.save" => self.file_save(params),
            "file.open" => self.file_open(params),
            other => Err(ErrorBody::new(
                ErrorCode::CapabilityMissing,
                format!("MockBlender cannot run {other}: it has no renderer"),
            )
            .with_detail("tool", other)),
        }
    }

    /// Resolves an object name, telling identity drift (renamed behind the session's back)
    /// from a name that never existed.
    fn resolve(&mut self, field: &str, name: &str) -> Result<String, ErrorBody> {
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

    fn kernel_status(&self) -> Value {
        json!({
            "state": if self.busy { "busy" } else { "ready" },
            "protocol": crate::frame::PROTOCOL_VERSION,
            "blender_version": self.version.to_string(),
            "transaction_open": self.transaction.is_some(),
            "file": self.file_name(),
        })
    }

    pub(super) fn snapshot(&self) -> Value {
        let objects: Vec<Value> = self.scene.objects.values().map(object_json).collect();
        let mut snapshot = json!({
            "snapshot_version": SNAPSHOT_VERSION,
            "scene": self.scene.name,
            "blender_version": self.version.to_string(),
            "objects": objects,
            "collections": self.collections_json(),
            "materials": self.materials_json(),
        });
        seal(&mut snapshot);
        snapshot
    }

    fn collections_json(&self) -> Vec<Value> {
        let mut collections: Vec<&Collection> = self.scene.collections.iter().collect();
        collections.sort_by(|a, b| a.name.cmp(&b.name));
        collections
            .into_iter()
            .map(|c| {
                let mut children: Vec<&str> = self.scene.collections.iter().filter(|k| k.parent.as_deref() == Some(&c.name)).map(|k| k.name.as_str()).collect();
                children.sort();
                let objects: Vec<&str> = self.scene.objects.values().filter(|o| o.collections.contains(&c.name)).map(|o| o.name.as_str()).collect();
                json!({"name": c.name, "parent": c.parent, "children": children, "objects": objects})
            })
            .collect()
    }

    fn material_users(&self, name: &str) -> usize {
        self.scene
            .objects
            .values()
            .flat_map(|o| &o.materials)
            .filter(|m| m.as_deref() == Some(name))
            .count()
    }

    fn materials_json(&self) -> Vec<Value> {
        self.scene
            .materials
            .values()
            .map(|m| json!({"name": m.name, "principled": m.principled.as_ref().map(principled_json), "users": self.material_users(&m.name)}))
            .collect()
    }

    fn telemetry(&self) -> Value {
        let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
        for object in self.scene.objects.values() {
            *by_type.entry(object.kind.as_str()).or_default() += 1;
        }
        let mut collections: Vec<&str> = self
            .scene
            .collections
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        collections.sort();
        json!({
            "scene": self.scene.name,
            "object_count": self.scene.objects.len(),
            "objects_by_type": by_type,
            "polygon_total": self.scene.objects.values().map(Object::polygons).sum::<u64>(),
            "collections": collections,
            "materials": self.scene.materials.keys().collect::<Vec<_>>(),
            "active_object": self.scene.active,
            "state": if self.busy { "busy" } else { "ready" },
        })
    }

    fn blender_errors(&self, params: &Value) -> ToolResult {
        let limit = opt_u32(params, "limit")?.unwrap_or(50);
        if !(1..=200).contains(&limit) {
            return Err(invalid("limit", "`limit` must be 1-200"));
        }
        let skip = self.console.len().saturating_sub(limit as usize);
        let errors: Vec<Value> = self
            .console
            .iter()
            .skip(skip)
            .map(|e| json!({"seq": e.seq, "source": e.source, "message": e.message}))
            .collect();
        Ok(json!({"errors": errors, "dropped": self.console_dropped}))
    }

    fn list_collections(&self) -> Value {
        json!({"collections": self.collections_json()})
    }

    fn create_collection(&mut self, params: &Value) -> ToolResult {
        let name = req_str(params, "name")?;
        check_name("name", name)?;
        let parent = opt_str(params, "parent")?.filter(|p| *p != MASTER_COLLECTION);
        if let Some(parent) = parent {
            check_name("parent", parent)?;
            if !self.scene.has_collection(parent) {
                return Err(not_found("parent", "collection", parent));
            }
        }
        if name == MASTER_COLLECTION {
            return Err(invalid("name", "the master collection cannot be created"));
        }
        if let Some(existing) = self.scene.collections.iter().find(|c| c.name == name) {
            if existing.parent.as_deref() != parent {
                return Err(invalid(
                    "name",
                    format!("collection {name:?} exists under another parent"),
                )
                .with_detail("reason", "name_taken"));
            }
            return Ok(json!({"name": name, "parent": parent, "created": false}));
        }
        self.scene.collections.push(Collection {
            name: name.to_owned(),
            parent: parent.map(str::to_owned),
        });
        Ok(json!({"name": name, "parent": parent, "created": true}))
    }

    fn object_list(&self, params: &Value) -> ToolResult {
        let kind = opt_str(params, "type")?;
        let collection = opt_str(params, "collection")?;
        if let Some(c) = collection
            && !self.scene.has_collection(c)
        {
            return Err(not_found("collection", "collection", c));
        }
        let objects: Vec<Value> = self
            .scene
            .objects
            .values()
            .filter(|o| kind.is_none_or(|k| k == o.kind.as_str()))
            .filter(|o| collection.is_none_or(|c| o.collections.iter().any(|oc| oc == c)))
            .map(|o| json!({"name": o.name, "type": o.kind.as_str()}))
            .collect();
        Ok(json!({"objects": objects}))
    }

    fn object_info(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        Ok(self.info_of(&name))
    }

    fn scenegraph_find(&self, params: &Value) -> ToolResult {
        let glob = opt_str(params, "name_glob")?;
        let kind = opt_str(params, "type")?;
        let collection = opt_str(params, "collection")?;
        let material = opt_str(params, "material")?;
        let has_parent = match params.get("has_parent") {
            None => None,
            Some(v) => Some(
                v.as_bool()
                    .ok_or_else(|| invalid("has_parent", "`has_parent` must be a boolean"))?,
            ),
        };
        let matches: Vec<&str> = self
            .scene
            .objects
            .values()
            .filter(|o| glob.is_none_or(|g| glob_match(g, &o.name)))
            .filter(|o| kind.is_none_or(|k| k == o.kind.as_str()))
            .filter(|o| collection.is_none_or(|c| o.collections.iter().any(|oc| oc == c)))
            .filter(|o| {
                material.is_none_or(|m| o.materials.iter().any(|om| om.as_deref() == Some(m)))
            })
            .filter(|o| has_parent.is_none_or(|h| h == o.parent.is_some()))
            .map(|o| o.name.as_str())
            .collect();
        Ok(json!({"matches": matches}))
    }

    fn audit_identity(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let object = self.object(&name);
        let created = self.created.contains(&object.uid);
        let children = self.scene.children(&name);
        let mut reasons = Vec::new();
        let mut high = false;
        if object.kind == ObjectType::Armature {
            high = true;
            reasons.push("an armature: deleting it breaks every mesh it deforms".to_owned());
        }
        if object.linked {
            high = true;
            reasons.push("linked from a library".to_owned());
        }
        if object.library_override {
            high = true;
            reasons.push("a library override (proxy)".to_owned());
        }
        if !children.is_empty() {
            high = true;
            reasons.push(format!("has {} children", children.len()));
        }
        if !created {
            reasons.push("not created by the agent in this session".to_owned());
        }
        let risk = if high {
            "high"
        } else if created {
            "low"
        } else {
            "medium"
        };
        Ok(json!({
            "name": name,
            "type": object.kind.as_str(),
            "is_proxy": object.library_override,
            "is_linked": object.linked,
            "created_by_agent": created,
            "children": children,
            "risk": risk,
            "risk_reasons": reasons,
        }))
    }

    fn target_collection(&self, params: &Value) -> Result<String, ErrorBody> {
        match opt_str(params, "collection")? {
            Some(c) => {
                check_name("collection", c)?;
                if self.scene.has_collection(c) {
                    Ok(c.to_owned())
                } else {
                    Err(not_found("collection", "collection", c))
                }
            }
            None => Ok(self.scene.default_collection()),
        }
    }

    fn new_object(&mut self, params: &Value, kind: ObjectType, data: ObjectData) -> ToolResult {
        let name = req_str(params, "name")?;
        check_name("name", name)?;
        if self.scene.objects.contains_key(name) {
            return Err(invalid(
                "name",
                format!("an object named {name:?} exists; choose another name"),
            )
            .with_detail("reason", "name_taken"));
        }
        let collection = self.target_collection(params)?;
        let location = opt_vec::<3>(params, "location")?;
        let rotation = opt_vec::<3>(params, "rotation_euler")?;
        let scale = opt_vec::<3>(params, "scale")?;
        let uid = self.scene.next_uid;
        self.scene.next_uid += 1;
        let mut object = Object::new(uid, name, kind, data, &collection);
        if let Some(l) = location {
            object.location = f32s(l);
        }
        if let Some(r) = rotation {
            object.rotation = f32s(r);
        }
        if let Some(s) = scale {
            object.scale = f32s(s);
        }
        self.scene.objects.insert(name.to_owned(), object);
        self.created.insert(uid);
        self.seen.insert(name.to_owned(), uid);
        Ok(self.info_of(name))
    }

    fn object_create(&mut self, params: &Value) -> ToolResult {
        let kind = req_str(params, "type")?;
        let primitive = opt_str(params, "primitive")?;
        let light_type = opt_str(params, "light_type")?;
        if primitive.is_some() && kind != "MESH" {
            return Err(invalid("primitive", "`primitive` applies to MESH only"));
        }
        if light_type.is_some() && kind != "LIGHT" {
            return Err(invalid("light_type", "`light_type` applies to LIGHT only"));
        }
        let (kind, data) = match kind {
            "EMPTY" => (ObjectType::Empty, ObjectData::Empty),
            "CAMERA" => (ObjectType::Camera, ObjectData::Camera),
            "LIGHT" => {
                let lt = light_type.unwrap_or("POINT");
                if !["POINT", "SUN", "SPOT", "AREA"].contains(&lt) {
                    return Err(invalid(
                        "light_type",
                        "`light_type` must be POINT, SUN, SPOT or AREA",
                    ));
                }
                (ObjectType::Light, ObjectData::Light(lt.to_owned()))
            }
            "MESH" => {
                let p =
                    primitive.ok_or_else(|| invalid("primitive", "a MESH needs a `primitive`"))?;
                let counts = primitive_counts(p)
                    .ok_or_else(|| invalid("primitive", format!("unknown primitive {p:?}")))?;
                (ObjectType::Mesh, ObjectData::Mesh(counts))
            }
            other => return Err(invalid("type", format!("unknown object type {other:?}"))),
        };
        self.new_object(params, kind, data)
    }

    fn create_primitive(&mut self, params: &Value, primitive: &str) -> ToolResult {
        if let Some(size) = opt_f64(params, "size")?
            && !(size > 0.0 && size <= 1.0e4)
        {
            return Err(invalid("size", "`size` must be in (0, 10000]"));
        }
        let counts = primitive_counts(primitive)
            .ok_or_else(|| ErrorBody::new(ErrorCode::InternalError, "unknown primitive"))?;
        self.new_object(params, ObjectType::Mesh, ObjectData::Mesh(counts))
    }

    fn object_move(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let location = opt_vec::<3>(params, "location")?;
        let delta = opt_vec::<3>(params, "delta")?;
        let new_location = match (location, delta) {
            (Some(l), None) => f32s(l),
            (None, Some(d)) => {
                let old = self.object(&name).location;
                [0, 1, 2].map(|i| (f64::from(old[i]) + d[i]) as f32)
            }
            _ => {
                return Err(invalid(
                    "delta",
                    "give exactly one of `location` and `delta`",
                ));
            }
        };
        if let Some(object) = self.scene.objects.get_mut(&name) {
            object.location = new_location;
        }
        Ok(self.info_of(&name))
    }

    fn set_transform(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let location = opt_vec::<3>(params, "location")?;
        let rotation = opt_vec::<3>(params, "rotation_euler")?;
        let scale = opt_vec::<3>(params, "scale")?;
        if location.is_none() && rotation.is_none() && scale.is_none() {
            return Err(invalid(
                "location",
                "give at least one of `location`, `rotation_euler`, `scale`",
            ));
        }
        if let Some(object) = self.scene.objects.get_mut(&name) {
            if let Some(l) = location {
                object.location = f32s(l);
            }
            if let Some(r) = rotation {
                object.rotation = f32s(r);
            }
            if let Some(s) = scale {
                object.scale = f32s(s);
            }
        }
        Ok(self.info_of(&name))
    }

    fn rename(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        self.refuse_object(&name, "rename")?;
        let wanted = req_str(params, "new_name")?;
        check_name("new_name", wanted)?;
        if wanted == name {
            return Ok(json!({"old_name": name, "name": name}));
        }
        if self.scene.objects.contains_key(wanted) {
            return Err(invalid(
                "new_name",
                format!("an object named {wanted:?} exists; choose another name"),
            )
            .with_detail("reason", "name_taken"));
        }
        let actual = wanted.to_owned();
        self.scene.rename_object(&name, &actual);
        let uid = self.object(&actual).uid;
        self.seen.insert(actual.clone(), uid);
        self.seen.remove(&name);
        Ok(json!({"old_name": name, "name": actual}))
    }

    fn delete(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        self.refuse_object(&name, "remove")?;
        let children = self.scene.children(&name);
        if !children.is_empty() {
            return Err(invalid(
                "name",
                format!(
                    "{name:?} has children ({}); unparent or delete them first",
                    children.join(", ")
                ),
            )
            .with_detail("children", children));
        }
        if let Some(object) = self.scene.objects.remove(&name) {
            self.forget_object(object.uid);
        }
        self.seen.remove(&name);
        if self.scene.active.as_deref() == Some(name.as_str()) {
            self.scene.active = None;
        }
        Ok(json!({"deleted": name}))
    }

    fn assign_collection(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let collection = req_str(params, "collection")?;
        check_name("collection", collection)?;
        if !self.scene.has_collection(collection) {
            return Err(not_found("collection", "collection", collection));
        }
        // The kernel's `opt_str(...) or "move"`: an empty mode is the default too.
        let mode = opt_str(params, "mode")?
            .filter(|m| !m.is_empty())
            .unwrap_or("move");
        if !["move", "link"].contains(&mode) {
            return Err(invalid("mode", "`mode` must be move or link"));
        }
        if mode == "move" {
            self.refuse_object(&name, "unlink")?;
        }
        if let Some(object) = self.scene.objects.get_mut(&name) {
            if mode == "move" {
                object.collections = vec![collection.to_owned()];
            } else if !object.collections.iter().any(|c| c == collection) {
                object.collections.push(collection.to_owned());
            }
        }
        Ok(self.info_of(&name))
    }

    fn set_parent(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let parent = match params.get("parent") {
            Some(Value::Null) => None,
            Some(Value::String(p)) => Some(self.resolve("parent", p)?),
            _ => return Err(invalid("parent", "`parent` must be an object name or null")),
        };
        if let Some(p) = &parent
            && self.scene.is_ancestor(&name, p)
        {
            return Err(invalid(
                "parent",
                format!("parenting {name:?} to {p:?} would make a cycle"),
            )
            .with_detail("reason", "cycle"));
        }
        if let Some(object) = self.scene.objects.get_mut(&name) {
            object.parent = parent;
        }
        Ok(self.info_of(&name))
    }

    fn set_active(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        self.scene.active = Some(name.clone());
        Ok(json!({"active_object": name}))
    }

    fn ensure_principled(&mut self, params: &Value) -> ToolResult {
        let name = req_str(params, "name")?;
        check_name("name", name)?;
        let base_color = opt_vec::<4>(params, "base_color")?;
        let metallic = opt_f64(params, "metallic")?;
        let roughness = opt_f64(params, "roughness")?;
        for (field, value) in [("metallic", metallic), ("roughness", roughness)] {
            if value.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
                return Err(invalid(field, format!("`{field}` must be in [0, 1]")));
            }
        }
        if base_color.is_some_and(|c| c.iter().any(|v| !(0.0..=1.0).contains(v))) {
            return Err(invalid(
                "base_color",
                "`base_color` components must be in [0, 1]",
            ));
        }
        let created = !self.scene.materials.contains_key(name);
        let material = self
            .scene
            .materials
            .entry(name.to_owned())
            .or_insert_with(|| Material {
                name: name.to_owned(),
                principled: None,
            });
        let principled = material.principled.get_or_insert_with(Principled::default);
        if let Some(c) = base_color {
            principled.base_color = f32s(c);
        }
        if let Some(m) = metallic {
            principled.metallic = m as f32;
        }
        if let Some(r) = roughness {
            principled.roughness = r as f32;
        }
        let mut out = principled_json(principled);
        out["name"] = json!(name);
        out["created"] = json!(created);
        Ok(out)
    }

    fn material_list(&self) -> Value {
        json!({"materials": self.materials_json()})
    }

    fn mesh_object(&mut self, params: &Value) -> Result<String, ErrorBody> {
        let name = self.resolve("name", req_str(params, "name")?)?;
        if self.object(&name).kind != ObjectType::Mesh {
            return Err(invalid(
                "name",
                format!(
                    "{name:?} is a {}, not a MESH",
                    self.object(&name).kind.as_str()
                ),
            ));
        }
        Ok(name)
    }

    fn assign_material(&mut self, params: &Value) -> ToolResult {
        let name = self.mesh_object(params)?;
        let material = req_str(params, "material")?;
        check_name("material", material)?;
        if !self.scene.materials.contains_key(material) {
            return Err(not_found("material", "material", material));
        }
        let slot = opt_u32(params, "slot")?.unwrap_or(0) as usize;
        let slots = self.object(&name).materials.len();
        if slot > slots || slot > 31 {
            return Err(invalid(
                "slot",
                format!("slot {slot} is past the end; the object has {slots} slots"),
            ));
        }
        if let Some(object) = self.scene.objects.get_mut(&name) {
            if slot == slots {
                object.materials.push(Some(material.to_owned()));
            } else {
                object.materials[slot] = Some(material.to_owned());
            }
        }
        Ok(self.info_of(&name))
    }

    fn modifier_add(&mut self, params: &Value) -> ToolResult {
        let name = self.mesh_object(params)?;
        let kind = req_str(params, "modifier_type")?;
        if !["SUBSURF", "BEVEL", "ARRAY", "MIRROR", "SOLIDIFY"].contains(&kind) {
            return Err(invalid(
                "modifier_type",
                format!("unknown modifier type {kind:?}"),
            ));
        }
        let applies: &[(&str, &str)] = &[
            ("levels", "SUBSURF"),
            ("count", "ARRAY"),
            ("width", "BEVEL"),
            ("segments", "BEVEL"),
            ("thickness", "SOLIDIFY"),
        ];
        for (field, owner) in applies {
            if params.get(*field).is_some() && kind != *owner {
                return Err(invalid(field, format!("`{field}` applies to {owner} only")));
            }
        }
        let requested_name = opt_str(params, "modifier_name")?;
        if let Some(n) = requested_name {
            check_name("modifier_name", n)?;
        }
        let base = requested_name.unwrap_or(Modifier::default_name(kind));
        let existing: BTreeSet<&str> = self
            .object(&name)
            .modifiers
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        let unique = if existing.contains(base) {
            (1..)
                .map(|n| format!("{base}.{n:03}"))
                .find(|c| !existing.contains(c.as_str()))
                .unwrap_or_default()
        } else {
            base.to_owned()
        };
        let mut modifier = Modifier::with_defaults(unique, kind);
        let sanity = self.session.sanity.clone();
        let limit = |field: &str, value: u32, max: u32| -> Result<u32, ErrorBody> {
            if value > max {
                Err(ErrorBody::from_reason(
                    Reason::SanityLimit,
                    format!("{field} {value} exceeds the sanity limit of {max}"),
                )
                .with_detail("field", field)
                .with_detail("limit", max))
            } else {
                Ok(value)
            }
        };
        if let Some(levels) = opt_u32(params, "levels")? {
            let levels = limit("levels", levels, sanity.max_subdivision_levels)?;
            modifier.levels = levels;
            modifier.render_levels = levels;
        }
        if kind == "SUBSURF" {
            limit(
                "levels",
                modifier.render_levels.max(modifier.levels),
                sanity.max_subdivision_levels,
            )?;
        }
        if let Some(count) = opt_u32(params, "count")? {
            modifier.count = limit("count", count, sanity.max_array_count)?;
        }
        if let Some(segments) = opt_u32(params, "segments")? {
            modifier.segments = limit("segments", segments, sanity.max_bevel_segments)?;
        }
        if let Some(width) = opt_f64(params, "width")? {
            modifier.width = width as f32;
        }
        if let Some(thickness) = opt_f64(params, "thickness")? {
            modifier.thickness = thickness as f32;
        }
        let estimate = modifier.estimate(self.object(&name).estimated_polygons());
        if estimate > sanity.max_polygons {
            return Err(ErrorBody::from_reason(
                Reason::SanityLimit,
                format!(
                    "the modifier would give about {estimate} polygons, over the budget of {}",
                    sanity.max_polygons
                ),
            )
            .with_detail("field", "modifier_type")
            .with_detail("limit", sanity.max_polygons)
            .with_detail("estimate", estimate));
        }
        let added = modifier.name.clone();
        if let Some(object) = self.scene.objects.get_mut(&name) {
            object.modifiers.push(modifier);
        }
        self.record_modifier(&name, &added);
        Ok(self.info_of(&name))
    }

    fn modifier_remove(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        let modifier = req_str(params, "modifier_name")?;
        let position = self
            .object(&name)
            .modifiers
            .iter()
            .position(|m| m.name == modifier)
            .ok_or_else(|| not_found("modifier_name", "modifier", modifier))?;
        self.refuse_modifier(&name, modifier)?;
        if let Some(object) = self.scene.objects.get_mut(&name) {
            object.modifiers.remove(position);
        }
        self.forget_modifier(&name, modifier);
        Ok(self.info_of(&name))
    }

    fn tx_begin(&mut self, params: &Value) -> ToolResult {
        opt_str(params, "label")?;
        if let Some(open) = &self.transaction {
            return Err(ErrorBody::new(
                ErrorCode::ContractViolation,
                format!("transaction {} is open; transactions do not nest", open.id),
            )
            .with_detail("rule", "transaction_open")
            .with_detail("transaction", open.id.as_str()));
        }
        self.transactions_started += 1;
        let id = format!("tx-{}", self.transactions_started);
        self.transaction = Some(Transaction {
            id: id.clone(),
            scene: self.scene.clone(),
            created: self.created.clone(),
            modifiers: self.modifiers.clone(),
        });
        Ok(json!({"transaction": id}))
    }

    fn no_transaction(action: &str) -> ErrorBody {
        ErrorBody::new(
            ErrorCode::ContractViolation,
            format!("{action} without an open transaction"),
        )
        .with_detail("rule", "no_transaction")
    }

    fn tx_commit(&mut self) -> ToolResult {
        let tx = self
            .transaction
            .take()
            .ok_or_else(|| Self::no_transaction("commit"))?;
        Ok(json!({"transaction": tx.id, "committed": true}))
    }

    fn tx_rollback(&mut self) -> ToolResult {
        let tx = self
            .transaction
            .take()
            .ok_or_else(|| Self::no_transaction("rollback"))?;
        self.restore_scene(tx.scene);
        self.created = tx.created;
        self.modifiers = tx.modifiers;
        Ok(json!({"transaction": tx.id, "rolled_back": true}))
    }

    fn python_exec(&mut self, params: &Value) -> ToolResult {
        let code = req_str(params, "code")?.to_owned();
        let Some(handler) = self.code.as_mut() else {
            return Err(ErrorBody::new(
                ErrorCode::CapabilityMissing,
                "MockBlender cannot run Python",
            ));
        };
        let before = self.scene.clone();
        let outcome = handler(&code, &mut self.scene);
        let stdout = match outcome {
            Ok(stdout) => stdout,
            Err(raw) => {
                // Atomic: a failed run leaves nothing behind.
                self.restore_scene(before);
                return Err(ErrorBody::from_raw(ErrorCode::ExecutionFailed, raw));
            }
        };
        // The twin of the kernel's in-kernel actuator lock for code (lock.py).
        let broken = code_lock_violations(&before, &self.scene, &self.created);
        if !broken.is_empty() {
            self.restore_scene(before);
            let summary: Vec<String> = broken
                .iter()
                .map(|(name, what)| format!("{name} {what}"))
                .collect();
            let listed: Vec<Value> = broken
                .iter()
                .map(|(name, what)| json!({"name": name, "what": what}))
                .collect();
            return Err(ErrorBody::from_reason(
                Reason::ActuatorLock,
                format!(
                    "actuator lock: agent code may not delete, rename or unlink objects it did not \
                     create ({}); the call was rolled back",
                    summary.join("; ")
                ),
            )
            .with_detail("violations", listed)
            .with_detail("rolled_back", true));
        }
        let known: BTreeSet<u64> = before.objects.values().map(|o| o.uid).collect();
        let mut made = Vec::new();
        for object in self.scene.objects.values() {
            if !known.contains(&object.uid) {
                self.created.insert(object.uid);
                made.push(object.name.clone());
            }
        }
        Ok(json!({"stdout": stdout, "truncated": false, "created": made}))
    }
}

/// What agent code did to objects the agent did not create (by uid): `(name, what)` pairs in
/// name order, with the kernel's words.
fn code_lock_violations(
    before: &Scene,
    after: &Scene,
    created: &BTreeSet<u64>,
) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (name, was) in &before.objects {
        if created.contains(&was.uid) || was.collections.is_empty() {
            continue;
        }
        let now = after.objects.values().find(|o| o.uid == was.uid);
        let what = match now {
            None => "deleted".to_owned(),
            Some(now) if &now.name != name => format!("renamed to {:?}", now.name),
            Some(now) if now.collections.is_empty() => "unlinked from the scene".to_owned(),
            Some(now) => {
                let lost: Vec<&str> = was
                    .collections
                    .iter()
                    .filter(|c| !now.collections.contains(c))
                    .map(String::as_str)
                    .collect();
                if lost.is_empty() {
                    continue;
                }
                format!("unlinked from {}", lost.join(", "))
            }
        };
        found.push((name.clone(), what));
    }
    // The other data-blocks the mock has: materials and collections the agent did not make.
    for material in before.materials.keys() {
        if !after.materials.contains_key(material) {
            found.push((material.clone(), "(material) deleted or renamed".to_owned()));
        }
    }
    for collection in &before.collections {
        if !after.collections.iter().any(|c| c.name == collection.name) {
            found.push((
                collection.name.clone(),
                "(collection) deleted or renamed".to_owned(),
            ));
        }
    }
    found
}

#[cfg(test)]
mod code_lock_tests {
    use super::*;

    fn agent(scene: &mut Scene) {
        let mut made = scene.objects["Cube"].clone();
        made.uid = 99;
        made.name = "Box".into();
        scene.objects.insert("Box".into(), made);
    }

    #[test]
    fn every_way_to_take_a_protected_object_is_named() {
        let before = Scene::default_startup();
        let created = BTreeSet::new();
        let mut deleted = before.clone();
        deleted.objects.remove("Cube");
        assert_eq!(
            code_lock_violations(&before, &deleted, &created),
            [("Cube".into(), "deleted".into())]
        );
        let mut renamed = before.clone();
        let mut cube = renamed.objects.remove("Cube").unwrap();
        cube.name = "junk".into();
        renamed.objects.insert("junk".into(), cube);
        assert_eq!(
            code_lock_violations(&before, &renamed, &created),
            [("Cube".into(), "renamed to \"junk\"".into())]
        );
        let mut unlinked = before.clone();
        unlinked
            .objects
            .get_mut("Camera")
            .unwrap()
            .collections
            .clear();
        assert_eq!(
            code_lock_violations(&before, &unlinked, &created),
            [("Camera".into(), "unlinked from the scene".into())]
        );
        let mut two = before.clone();
        two.objects
            .get_mut("Light")
            .unwrap()
            .collections
            .push("Props".into());
        let mut moved = two.clone();
        moved.objects.get_mut("Light").unwrap().collections = vec!["Props".into()];
        assert_eq!(
            code_lock_violations(&two, &moved, &created),
            [("Light".into(), "unlinked from Collection".into())]
        );
    }

    #[test]
    fn property_edits_and_the_agents_own_objects_are_free() {
        let before = Scene::default_startup();
        let mut edited = before.clone();
        edited.objects.get_mut("Cube").unwrap().location = [1.0, 2.0, 3.0];
        agent(&mut edited);
        assert!(code_lock_violations(&before, &edited, &BTreeSet::new()).is_empty());
        let mut own = edited.clone();
        own.objects.remove("Box");
        assert!(code_lock_violations(&edited, &own, &BTreeSet::from([99])).is_empty());
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
