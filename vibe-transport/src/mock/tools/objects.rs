//! The tools that make and edit objects and collections: `scene.create_collection`,
//! `object.create`, `mesh.create_cube`, `mesh.create_plane`, `object.move`,
//! `object.set_transform`, `object.rename`, `object.delete`, `object.assign_collection`,
//! `object.set_parent` and `selection.set_active_object` (the kernel's `objects.py`). The
//! actuator lock's rules are in `lock.rs`.

use serde_json::{Value, json};
use vibe_errors::{ErrorBody, ErrorCode, Reason};

use super::{ToolResult, check_name, f32s, invalid, not_found, opt_f64, opt_str, opt_vec, req_str};
use crate::mock::MockBlender;
use crate::mock::scene::{
    CameraData, Collection, LightData, MASTER_COLLECTION, Object, ObjectData, ObjectType,
    primitive_counts, primitive_extent,
};

impl MockBlender {
    pub(super) fn create_collection(&mut self, params: &Value) -> ToolResult {
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
                .with_reason(Reason::NameTaken));
            }
            return Ok(json!({"name": name, "parent": parent, "created": false}));
        }
        self.scene.collections.push(Collection {
            name: name.to_owned(),
            parent: parent.map(str::to_owned),
        });
        Ok(json!({"name": name, "parent": parent, "created": true}))
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

    /// Creates the object; `mesh_extent` is its mesh's size (zeros for other types).
    fn new_object(
        &mut self,
        params: &Value,
        kind: ObjectType,
        data: ObjectData,
        mesh_extent: [f64; 3],
    ) -> ToolResult {
        let name = req_str(params, "name")?;
        check_name("name", name)?;
        if self.scene.objects.contains_key(name) {
            return Err(invalid(
                "name",
                format!("an object named {name:?} exists; choose another name"),
            )
            .with_reason(Reason::NameTaken));
        }
        let collection = self.target_collection(params)?;
        let location = opt_vec::<3>(params, "location")?;
        let rotation = opt_vec::<3>(params, "rotation_euler")?;
        let scale = opt_vec::<3>(params, "scale")?;
        let uid = self.scene.next_uid;
        self.scene.next_uid += 1;
        let mut object = Object::new(uid, name, kind, data, &collection);
        object.mesh_extent = mesh_extent;
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

    pub(super) fn object_create(&mut self, params: &Value) -> ToolResult {
        let kind = req_str(params, "type")?;
        let primitive = opt_str(params, "primitive")?;
        let light_type = opt_str(params, "light_type")?;
        if primitive.is_some() && kind != "MESH" {
            return Err(invalid("primitive", "`primitive` applies to MESH only"));
        }
        if light_type.is_some() && kind != "LIGHT" {
            return Err(invalid("light_type", "`light_type` applies to LIGHT only"));
        }
        let no_mesh = [0.0; 3];
        let (kind, data, extent) = match kind {
            "EMPTY" => (ObjectType::Empty, ObjectData::Empty, no_mesh),
            "CAMERA" => (
                ObjectType::Camera,
                ObjectData::Camera(CameraData::new()),
                no_mesh,
            ),
            "LIGHT" => {
                let lt = light_type.unwrap_or("POINT");
                if !["POINT", "SUN", "SPOT", "AREA"].contains(&lt) {
                    return Err(invalid(
                        "light_type",
                        "`light_type` must be POINT, SUN, SPOT or AREA",
                    ));
                }
                (
                    ObjectType::Light,
                    ObjectData::Light(LightData::new(lt)),
                    no_mesh,
                )
            }
            "MESH" => {
                let p =
                    primitive.ok_or_else(|| invalid("primitive", "a MESH needs a `primitive`"))?;
                let unknown = || invalid("primitive", format!("unknown primitive {p:?}"));
                let counts = primitive_counts(p).ok_or_else(unknown)?;
                // The kernel makes every primitive of `object.create` 2 across.
                let extent = primitive_extent(p, 2.0).ok_or_else(unknown)?;
                (ObjectType::Mesh, ObjectData::Mesh(counts), extent)
            }
            other => return Err(invalid("type", format!("unknown object type {other:?}"))),
        };
        self.new_object(params, kind, data, extent)
    }

    pub(super) fn create_primitive(&mut self, params: &Value, primitive: &str) -> ToolResult {
        let size = opt_f64(params, "size")?.unwrap_or(2.0);
        if !(size > 0.0 && size <= 1.0e4) {
            return Err(invalid("size", "`size` must be in (0, 10000]"));
        }
        let unknown = || ErrorBody::new(ErrorCode::InternalError, "unknown primitive");
        let counts = primitive_counts(primitive).ok_or_else(unknown)?;
        let extent = primitive_extent(primitive, size).ok_or_else(unknown)?;
        self.new_object(params, ObjectType::Mesh, ObjectData::Mesh(counts), extent)
    }

    pub(super) fn object_move(&mut self, params: &Value) -> ToolResult {
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

    pub(super) fn set_transform(&mut self, params: &Value) -> ToolResult {
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

    pub(super) fn rename(&mut self, params: &Value) -> ToolResult {
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
            .with_reason(Reason::NameTaken));
        }
        let actual = wanted.to_owned();
        self.scene.rename_object(&name, &actual);
        let uid = self.object(&actual).uid;
        self.seen.insert(actual.clone(), uid);
        self.seen.remove(&name);
        Ok(json!({"old_name": name, "name": actual}))
    }

    pub(super) fn delete(&mut self, params: &Value) -> ToolResult {
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
        if self.scene.camera.as_deref() == Some(name.as_str()) {
            self.scene.camera = None;
        }
        Ok(json!({"deleted": name}))
    }

    pub(super) fn assign_collection(&mut self, params: &Value) -> ToolResult {
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

    pub(super) fn set_parent(&mut self, params: &Value) -> ToolResult {
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
            .with_reason(Reason::Cycle));
        }
        if let Some(object) = self.scene.objects.get_mut(&name) {
            object.parent = parent;
        }
        Ok(self.info_of(&name))
    }

    pub(super) fn set_active(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        self.scene.active = Some(name.clone());
        Ok(json!({"active_object": name}))
    }
}
