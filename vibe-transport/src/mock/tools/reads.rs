//! The tools that read: `kernel.status`, `scene.snapshot`, `scene.telemetry`,
//! `blender.errors`, `scene.list_collections`, `object.list`, `object.info`, `scenegraph.find`,
//! and `object.audit_identity` (the kernel's `reads.py`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{
    ToolResult, glob_match, invalid, not_found, object_json, opt_str, opt_u32, principled_json,
    req_str,
};
use crate::mock::MockBlender;
use crate::mock::scene::{Collection, Object, ObjectType};
use crate::snapshot::SNAPSHOT_VERSION;

impl MockBlender {
    pub(super) fn kernel_status(&self) -> Value {
        json!({
            "state": if self.busy { "busy" } else { "ready" },
            "protocol": crate::frame::PROTOCOL_VERSION,
            "blender_version": self.version.to_string(),
            "transaction_open": self.transaction.is_some(),
            "file": self.file_name(),
        })
    }

    pub(in crate::mock) fn snapshot(&self) -> Value {
        let objects: Vec<Value> = self
            .scene
            .objects
            .values()
            .map(|o| super::animate::with_summary(object_json(o), o))
            .collect();
        let snapshot = json!({
            "snapshot_version": SNAPSHOT_VERSION,
            "scene": self.scene.name,
            "blender_version": self.version.to_string(),
            "objects": objects,
            "collections": self.collections_json(),
            "materials": self.materials_json(),
            "camera": self.scene.camera,
            "world": self.scene.world.as_ref().map(super::look::world_json),
            "timeline": super::animate::timeline_json(&self.scene.timeline),
        });
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

    pub(super) fn telemetry(&self) -> Value {
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

    pub(super) fn blender_errors(&self, params: &Value) -> ToolResult {
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

    pub(super) fn list_collections(&self) -> Value {
        json!({"collections": self.collections_json()})
    }

    pub(super) fn object_list(&self, params: &Value) -> ToolResult {
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

    pub(super) fn object_info(&mut self, params: &Value) -> ToolResult {
        let name = self.resolve("name", req_str(params, "name")?)?;
        Ok(self.info_of(&name))
    }

    pub(super) fn scenegraph_find(&self, params: &Value) -> ToolResult {
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

    pub(super) fn audit_identity(&mut self, params: &Value) -> ToolResult {
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
}
