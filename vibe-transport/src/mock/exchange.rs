//! MockBlender's model exchange, the twin of the kernel's `exchange.py`: `file.export` writes a
//! real, small, deterministic file into the sandbox and `file.import` reads it back, so that a
//! round trip on the mock means what it means on Blender.
//!
//! It claims only the formats it can write and read faithfully ([`MOCK_FORMATS`]): OBJ text,
//! ASCII STL and glTF (JSON with a `.bin` beside it). It reads what it writes (and files of the
//! same shape), with the importers' defaults as Blender applies them:
//!
//! * OBJ is written Y-up in world space; imported, each `o` is an object at the origin with
//!   Blender's X rotation of 90 degrees (the Y-up vertices kept as read).
//! * STL is written Z-up in world space, triangles; imported, the whole file is one object
//!   named after the file, its vertices merged by position.
//! * glTF is written Y-up, one node per object with its translation, rotation and scale, the
//!   vertices split per face (as Blender's exporter splits them by flat normals); imported,
//!   each node is an object with its transform back in Z-up, its vertices as written.
//!
//! Taken names get Blender's counter names (`Box.001`). A mesh's geometry is what the mock
//! imported, or the box or plane its counts and extent describe (the primitives the agent
//! makes); a mesh it holds no geometry for is refused on export (execution_failed).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};
use vibe_errors::{ErrorBody, ErrorCode};

use super::MockBlender;
use super::exchange_geometry::{Geometry, Transform};
use super::scene::{MeshCounts, Object, ObjectData, ObjectType};
use super::tools::{ToolResult, check_name, invalid, not_found, opt_str, req_str};

/// The formats MockBlender imports and exports (its hello lists them).
pub const MOCK_FORMATS: [&str; 3] = ["gltf", "obj", "stl"];

/// Every format the registry names.
const FORMATS: [&str; 6] = ["gltf", "glb", "obj", "fbx", "stl", "usd"];

fn by_extension(path: &str) -> Option<&'static str> {
    let extension = Path::new(path).extension()?.to_str()?.to_ascii_lowercase();
    Some(match extension.as_str() {
        "gltf" => "gltf",
        "glb" => "glb",
        "obj" => "obj",
        "fbx" => "fbx",
        "stl" => "stl",
        "usd" | "usda" | "usdc" | "usdz" => "usd",
        _ => return None,
    })
}

/// The call's format, by the kernel's rules: `format` must be known and agree with the path's
/// extension, which gives it when absent; one the mock lacks is capability_missing.
fn chosen_format(params: &Value, relative: &str) -> Result<&'static str, ErrorBody> {
    let given = opt_str(params, "format")?;
    let extension = by_extension(relative);
    let format = match (given, extension) {
        (Some(g), _) if !FORMATS.contains(&g) => {
            return Err(invalid("format", format!("unknown format {g:?}")));
        }
        (None, None) => {
            return Err(invalid(
                "format",
                format!("path {relative:?} has no known model extension; name the format"),
            ));
        }
        (Some(g), e) if e != Some(g) => {
            return Err(invalid(
                "path",
                format!("path {relative:?} does not end in an extension of format {g:?}"),
            ));
        }
        (_, Some(e)) => e,
        (Some(_), None) => unreachable!("a given format without an extension was refused"),
    };
    if !MOCK_FORMATS.contains(&format) {
        return Err(ErrorBody::new(
            ErrorCode::CapabilityMissing,
            format!(
                "this Blender cannot import or export {format}; it has: {}",
                MOCK_FORMATS.join(", ")
            ),
        )
        .with_detail("field", "format")
        .with_detail("format", format)
        .with_detail("formats", json!(MOCK_FORMATS)));
    }
    Ok(format)
}

fn failed(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ExecutionFailed, message).with_detail("field", "path")
}

/// One object a file holds.
pub(super) struct Imported {
    pub(super) name: String,
    pub(super) transform: Transform,
    pub(super) geometry: Geometry,
}

/// A name Blender would give: `name` if free, else the first free `<base>.NNN`.
fn unique_name(taken: &impl Fn(&str) -> bool, name: &str) -> String {
    if !taken(name) {
        return name.to_owned();
    }
    let base = match name.rsplit_once('.') {
        Some((b, n)) if n.len() == 3 && n.bytes().all(|c| c.is_ascii_digit()) => b,
        _ => name,
    };
    (1..)
        .map(|n| format!("{base}.{n:03}"))
        .find(|candidate| !taken(candidate))
        .unwrap_or_default()
}

impl MockBlender {
    pub(super) fn file_import(&mut self, params: &Value) -> ToolResult {
        let relative = req_str(params, "path")?;
        let format = chosen_format(params, relative)?;
        let path = self.sandbox_path("path", relative)?;
        if path.is_dir() {
            return Err(ErrorBody::from_reason(
                vibe_errors::Reason::Sandbox,
                format!("path {relative:?} is a folder, not a file"),
            )
            .with_detail("field", "path"));
        }
        if !path.is_file() {
            return Err(not_found("path", "file", relative));
        }
        let collection = match opt_str(params, "collection")? {
            Some(c) => {
                check_name("collection", c)?;
                if !self.scene.has_collection(c) {
                    return Err(not_found("collection", "collection", c));
                }
                c.to_owned()
            }
            None => self.scene.default_collection(),
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| failed(format!("could not read {relative:?}: {e}")))?;
        self.check_model_references(format, relative, &path, &text)?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let objects = match format {
            "obj" => super::exchange_formats::read_obj(&text, &stem),
            "stl" => super::exchange_formats::read_stl(&text, &stem),
            _ => {
                // Every URI was checked to lie inside the sandbox (exchange_refs).
                let folder = path.parent().unwrap_or(&path);
                let bin = |uri: &str| -> Result<Vec<u8>, ErrorBody> {
                    let file = super::exchange_refs::uri_path(folder, uri);
                    std::fs::read(&file).map_err(|_| not_found("path", "file", uri))
                };
                super::exchange_formats::read_gltf(&text, bin)?
            }
        }
        .map_err(|why| failed(format!("could not import {relative:?} as {format}: {why}")))?;
        let mut made = Vec::new();
        for imported in objects {
            let name = unique_name(
                &|n: &str| self.scene.objects.contains_key(n),
                &imported.name,
            );
            let counts = imported.geometry.counts();
            let uid = self.scene.next_uid;
            self.scene.next_uid += 1;
            let mut object = Object::new(
                uid,
                &name,
                ObjectType::Mesh,
                ObjectData::Mesh(counts),
                &collection,
            );
            object.mesh_extent = imported.geometry.extent();
            object.location = imported.transform.location;
            object.rotation = imported.transform.rotation;
            object.scale = imported.transform.scale;
            self.scene.objects.insert(name.clone(), object);
            self.geometry.insert(uid, imported.geometry);
            self.created.insert(uid);
            self.seen.insert(name.clone(), uid);
            made.push(name);
        }
        made.sort();
        // The mock's importers make no materials.
        Ok(json!({"format": format, "objects": made, "materials": []}))
    }

    /// The objects to export: those named (meshes only), or every mesh in the scene.
    fn export_objects(&mut self, params: &Value) -> Result<Vec<String>, ErrorBody> {
        let Some(names) = params.get("objects") else {
            let meshes: Vec<String> = self
                .scene
                .objects
                .values()
                .filter(|o| o.kind == ObjectType::Mesh)
                .map(|o| o.name.clone())
                .collect();
            if meshes.is_empty() {
                return Err(invalid("objects", "the scene has no mesh object to export"));
            }
            return Ok(meshes);
        };
        let names: Vec<&str> = names
            .as_array()
            .filter(|a| !a.is_empty())
            .and_then(|a| a.iter().map(Value::as_str).collect())
            .ok_or_else(|| {
                invalid(
                    "objects",
                    "`objects` must be a non-empty list of object names",
                )
            })?;
        let mut chosen = Vec::new();
        let mut seen = BTreeSet::new();
        for name in names {
            let name = self.resolve("objects", name)?;
            let kind = self.scene.objects[&name].kind;
            if kind != ObjectType::Mesh {
                return Err(invalid(
                    "objects",
                    format!(
                        "{name:?} is a {}; only mesh objects are exported",
                        kind.as_str()
                    ),
                ));
            }
            if seen.insert(name.clone()) {
                chosen.push(name);
            }
        }
        Ok(chosen)
    }

    /// The mesh of `name` in its own space: what was imported, else the primitive its counts
    /// and extent describe.
    fn geometry_of(&self, name: &str) -> Result<Geometry, ErrorBody> {
        let object = &self.scene.objects[name];
        if let Some(geometry) = self.geometry.get(&object.uid) {
            return Ok(geometry.clone());
        }
        let ObjectData::Mesh(counts) = &object.data else {
            return Err(failed(format!("{name:?} is not a mesh")));
        };
        let e = object.mesh_extent;
        match (counts.vertices, counts.edges, counts.polygons) {
            (8, 12, 6) => Ok(Geometry::cuboid(e)),
            (4, 4, 1) => Ok(Geometry::plane(e)),
            _ => Err(failed(format!(
                "MockBlender holds no geometry for mesh {name:?} ({} vertices)",
                counts.vertices
            ))),
        }
    }

    pub(super) fn file_export(&mut self, params: &Value) -> ToolResult {
        let relative = req_str(params, "path")?;
        let format = chosen_format(params, relative)?;
        let path = self.sandbox_target(relative)?;
        let names = self.export_objects(params)?;
        let mut meshes = Vec::new();
        for name in &names {
            let object = &self.scene.objects[name];
            let transform = Transform {
                location: object.location,
                rotation: object.rotation,
                scale: object.scale,
            };
            meshes.push((name.clone(), transform, self.geometry_of(name)?));
        }
        let write = |target: &Path, bytes: &[u8]| -> Result<(), ErrorBody> {
            if let Some(folder) = target.parent() {
                std::fs::create_dir_all(folder)
                    .map_err(|e| failed(format!("could not make the folder: {e}")))?;
            }
            std::fs::write(target, bytes)
                .map_err(|e| failed(format!("could not write {relative:?}: {e}")))
        };
        match format {
            "obj" => write(
                &path,
                super::exchange_formats::write_obj(&meshes).as_bytes(),
            )?,
            "stl" => write(
                &path,
                super::exchange_formats::write_stl(&meshes).as_bytes(),
            )?,
            _ => {
                let stem = relative.rsplit_once('.').map_or(relative, |(s, _)| s);
                let bin_relative = format!("{stem}.bin");
                let bin_path = self.sandbox_target(&bin_relative)?;
                let bin_name = bin_path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let (json, bin) = super::exchange_formats::write_gltf(&meshes, &bin_name);
                write(&bin_path, &bin)?;
                write(&path, json.as_bytes())?;
            }
        }
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Ok(json!({"format": format, "path": relative, "bytes": bytes}))
    }
}

/// Element counts of a geometry.
pub(super) fn counts(vertices: usize, faces: &[Vec<usize>]) -> MeshCounts {
    let mut edges = BTreeSet::new();
    for face in faces {
        for (i, &a) in face.iter().enumerate() {
            let b = face[(i + 1) % face.len()];
            edges.insert((a.min(b), a.max(b)));
        }
    }
    MeshCounts {
        vertices: vertices as u64,
        edges: edges.len() as u64,
        polygons: faces.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::unique_name;

    #[test]
    fn taken_names_get_blenders_counter_names() {
        let taken = |n: &str| ["Box", "Box.001"].contains(&n);
        assert_eq!(unique_name(&taken, "Crate"), "Crate");
        assert_eq!(unique_name(&taken, "Box"), "Box.002");
        assert_eq!(unique_name(&taken, "Box.001"), "Box.002");
    }
}
