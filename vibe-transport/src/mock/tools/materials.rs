//! The tools for materials and modifiers: `material.ensure_principled` (with emission, alpha,
//! transmission and an image texture from the sandbox),
//! `mesh.assign_material`, `modifier.add` (within the session's sanity limits) and
//! `modifier.remove` (the kernel's `materials.py`).

use std::collections::BTreeSet;

use serde_json::{Value, json};
use vibe_errors::{ErrorBody, Reason};

use super::{
    ToolResult, check_name, f32s, invalid, not_found, opt_f64, opt_str, opt_u32, opt_vec,
    principled_json, req_str,
};
use crate::mock::MockBlender;
use crate::mock::scene::{Image, Material, Modifier, ObjectType, Principled, Texture};

/// The Principled inputs that take a number in [0, 1] (emission strength goes to 1000).
const UNIT_INPUTS: [&str; 4] = ["metallic", "roughness", "alpha", "transmission"];

impl MockBlender {
    pub(super) fn ensure_principled(&mut self, params: &Value) -> ToolResult {
        let name = req_str(params, "name")?;
        check_name("name", name)?;
        let base_color = opt_vec::<4>(params, "base_color")?;
        let emission_color = opt_vec::<4>(params, "emission_color")?;
        let mut units = [None; 4];
        for (slot, field) in units.iter_mut().zip(UNIT_INPUTS) {
            *slot = opt_f64(params, field)?;
            if slot.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
                return Err(invalid(field, format!("`{field}` must be in [0, 1]")));
            }
        }
        for (field, color) in [
            ("base_color", base_color),
            ("emission_color", emission_color),
        ] {
            if color.is_some_and(|c| c.iter().any(|v| !(0.0..=1.0).contains(v))) {
                return Err(invalid(
                    field,
                    format!("`{field}` components must be in [0, 1]"),
                ));
            }
        }
        let emission_strength = opt_f64(params, "emission_strength")?;
        if emission_strength.is_some_and(|v| !(0.0..=1000.0).contains(&v)) {
            return Err(invalid(
                "emission_strength",
                "`emission_strength` must be in [0, 1000]",
            ));
        }
        let texture = match params.get("texture") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(_) => Some(Some(self.texture_argument(req_str(params, "texture")?)?)),
        };
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
        let [metallic, roughness, alpha, transmission] = units;
        let numbers = [
            (&mut principled.metallic, metallic),
            (&mut principled.roughness, roughness),
            (&mut principled.alpha, alpha),
            (&mut principled.transmission, transmission),
            (&mut principled.emission_strength, emission_strength),
        ];
        for (slot, value) in numbers {
            if let Some(v) = value {
                *slot = v as f32;
            }
        }
        if let Some(c) = base_color {
            principled.base_color = f32s(c);
        }
        if let Some(c) = emission_color {
            principled.emission_color = f32s(c);
        }
        if let Some(t) = texture {
            principled.texture = t;
        }
        let mut out = principled_json(principled);
        out["name"] = json!(name);
        out["created"] = json!(created);
        Ok(out)
    }

    /// The texture `relative` names, as the kernel loads it: a PNG or JPEG file inside the
    /// sandbox (not_found when missing, invalid_arguments when it is not such an image), its
    /// image data-block reused when that file was loaded before, else named after the file
    /// (`.001` and on when the name is taken).
    fn texture_argument(&mut self, relative: &str) -> Result<Texture, ErrorBody> {
        let lower = relative.to_ascii_lowercase();
        if ![".png", ".jpg", ".jpeg"].iter().any(|e| lower.ends_with(e)) {
            return Err(invalid(
                "texture",
                "`texture` must be the path of a .png or .jpg file inside the sandbox",
            ));
        }
        let file = self.sandbox_path("texture", relative)?;
        let Ok(bytes) = std::fs::read(&file) else {
            return Err(not_found("texture", "file", relative));
        };
        let png = bytes.starts_with(b"\x89PNG\r\n\x1a\n");
        let jpeg = bytes.starts_with(&[0xFF, 0xD8, 0xFF]);
        if !(png || jpeg) {
            return Err(invalid(
                "texture",
                format!("{relative:?} is not an image Blender can read"),
            ));
        }
        let file = file.to_string_lossy().into_owned();
        let images = &mut self.scene.images;
        let image = match images.iter().find(|i| i.file == file) {
            Some(image) => image.name.clone(),
            None => {
                let base = relative.rsplit('/').next().unwrap_or(relative).to_owned();
                let taken = |n: &str| images.iter().any(|i| i.name == n);
                let name = if taken(&base) {
                    (1..)
                        .map(|n| format!("{base}.{n:03}"))
                        .find(|c| !taken(c))
                        .unwrap_or_default()
                } else {
                    base
                };
                images.push(Image {
                    name: name.clone(),
                    file,
                });
                name
            }
        };
        Ok(Texture {
            image,
            path: relative.to_owned(),
        })
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

    pub(super) fn assign_material(&mut self, params: &Value) -> ToolResult {
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

    pub(super) fn modifier_add(&mut self, params: &Value) -> ToolResult {
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

    pub(super) fn modifier_remove(&mut self, params: &Value) -> ToolResult {
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
}
