//! The files MockBlender's model exchange writes and reads: OBJ text, ASCII STL, glTF JSON with
//! its `.bin`. Each writer is deterministic; each reader takes what its writer makes (and files
//! of the same shape) and says what it cannot read.

use std::fmt::Write as _;

use serde_json::{Value, json};
use vibe_errors::ErrorBody;

use super::exchange::Imported;
use super::exchange_geometry::{
    Geometry, Transform, euler_to_quaternion, from_y_up, quaternion_to_euler, to_y_up,
};

/// One mesh object to write: its name, transform and geometry.
pub(super) type Mesh = (String, Transform, Geometry);

fn number(x: f64) -> String {
    // Blender's writers: six decimals, no negative zero.
    let text = format!("{x:.6}");
    if text
        .trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        text.trim_start_matches('-').to_owned()
    } else {
        text
    }
}

fn parse3(words: &[&str]) -> Result<[f32; 3], String> {
    let values: Vec<f32> = words
        .iter()
        .take(3)
        .map(|w| {
            w.parse::<f32>()
                .map_err(|_| format!("{w:?} is not a number"))
        })
        .collect::<Result<_, _>>()?;
    <[f32; 3]>::try_from(values).map_err(|_| "a vertex needs three numbers".to_owned())
}

/// OBJ, Y-up, world space (Blender's exporter defaults), one `o` per object.
pub(super) fn write_obj(meshes: &[Mesh]) -> String {
    let mut out = String::from("# MockBlender\n");
    let mut offset = 1;
    for (name, transform, geometry) in meshes {
        let _ = writeln!(out, "o {name}");
        for v in &geometry.vertices {
            let [x, y, z] = to_y_up(transform.apply(*v));
            let _ = writeln!(out, "v {} {} {}", number(x), number(y), number(z));
        }
        for face in &geometry.faces {
            let indices: Vec<String> = face.iter().map(|i| (i + offset).to_string()).collect();
            let _ = writeln!(out, "f {}", indices.join(" "));
        }
        offset += geometry.vertices.len();
    }
    out
}

/// OBJ as Blender imports it: each `o` an object at the origin turned 90 degrees about X (the
/// Y-up axes), its vertices as written; a file without `o` is one object named `stem`.
pub(super) fn read_obj(text: &str, stem: &str) -> Result<Vec<Imported>, String> {
    let mut objects: Vec<(String, usize, Geometry)> = Vec::new();
    let mut total = 0;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first().copied() {
            Some("o") => {
                let name = line.trim_start()[1..].trim().to_owned();
                objects.push((
                    name,
                    total,
                    Geometry {
                        vertices: vec![],
                        faces: vec![],
                    },
                ));
            }
            Some("v") => {
                if objects.is_empty() {
                    objects.push((
                        stem.to_owned(),
                        total,
                        Geometry {
                            vertices: vec![],
                            faces: vec![],
                        },
                    ));
                }
                let v = parse3(&words[1..])?;
                if let Some(object) = objects.last_mut() {
                    object.2.vertices.push(v);
                }
                total += 1;
            }
            Some("f") => {
                let (_, first, geometry) = objects.last_mut().ok_or("a face before any vertex")?;
                let mut face = Vec::new();
                for word in &words[1..] {
                    let index: usize = word
                        .split('/')
                        .next()
                        .and_then(|i| i.parse().ok())
                        .ok_or_else(|| format!("face index {word:?} is not a positive number"))?;
                    let local = index
                        .checked_sub(1 + *first)
                        .filter(|i| *i < geometry.vertices.len())
                        .ok_or("MockBlender reads only faces on their own object's vertices")?;
                    face.push(local);
                }
                geometry.faces.push(face);
            }
            _ => {}
        }
    }
    let turned = Transform {
        rotation: [std::f32::consts::FRAC_PI_2, 0.0, 0.0],
        ..Transform::identity()
    };
    Ok(objects
        .into_iter()
        .map(|(name, _, geometry)| Imported {
            name,
            transform: turned,
            geometry,
        })
        .collect())
}

/// ASCII STL, Z-up, world space: every object's faces as triangles in one solid.
pub(super) fn write_stl(meshes: &[Mesh]) -> String {
    let mut out = String::from("solid MockBlender\n");
    for (_, transform, geometry) in meshes {
        for [a, b, c] in geometry.triangles() {
            let p = [a, b, c].map(|i| transform.apply(geometry.vertices[i]));
            let u = [0, 1, 2].map(|k| p[1][k] - p[0][k]);
            let v = [0, 1, 2].map(|k| p[2][k] - p[0][k]);
            let n = [
                u[1] * v[2] - u[2] * v[1],
                u[2] * v[0] - u[0] * v[2],
                u[0] * v[1] - u[1] * v[0],
            ];
            let length = n
                .iter()
                .map(|x| x * x)
                .sum::<f64>()
                .sqrt()
                .max(f64::MIN_POSITIVE);
            let n = n.map(|x| x / length);
            let _ = writeln!(
                out,
                "facet normal {} {} {}\n outer loop",
                number(n[0]),
                number(n[1]),
                number(n[2])
            );
            for q in p {
                let _ = writeln!(
                    out,
                    "  vertex {} {} {}",
                    number(q[0]),
                    number(q[1]),
                    number(q[2])
                );
            }
            let _ = writeln!(out, " endloop\nendfacet");
        }
    }
    out.push_str("endsolid MockBlender\n");
    out
}

/// ASCII STL as Blender imports it: one object named `stem` at the origin, its vertices merged
/// by position.
pub(super) fn read_stl(text: &str, stem: &str) -> Result<Vec<Imported>, String> {
    if !text.trim_start().starts_with("solid") {
        return Err("MockBlender reads only ASCII STL".into());
    }
    let mut geometry = Geometry {
        vertices: vec![],
        faces: vec![],
    };
    let mut index = std::collections::HashMap::new();
    let mut corners = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() != Some(&"vertex") {
            continue;
        }
        let v = parse3(&words[1..])?;
        let key = v.map(f32::to_bits);
        let i = *index.entry(key).or_insert_with(|| {
            geometry.vertices.push(v);
            geometry.vertices.len() - 1
        });
        corners.push(i);
        if corners.len() == 3 {
            geometry.faces.push(std::mem::take(&mut corners));
        }
    }
    Ok(vec![Imported {
        name: stem.to_owned(),
        transform: Transform::identity(),
        geometry,
    }])
}

/// glTF 2.0, Y-up: one node per object (translation, rotation, scale), one mesh each with its
/// vertices split per face and triangles; the buffer goes to `bin_name` beside the JSON.
pub(super) fn write_gltf(meshes: &[Mesh], bin_name: &str) -> (String, Vec<u8>) {
    let (mut bin, mut nodes, mut gltf_meshes, mut accessors, mut views) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (name, transform, geometry) in meshes {
        let mut positions = Vec::new();
        let mut indices = Vec::new();
        for face in &geometry.faces {
            let first = positions.len() as u32;
            positions.extend(
                face.iter()
                    .map(|&i| to_y_up(geometry.vertices[i].map(f64::from)).map(|x| x as f32)),
            );
            indices.extend(
                (1..face.len().saturating_sub(1) as u32)
                    .flat_map(|k| [first, first + k, first + k + 1]),
            );
        }
        let (mut min, mut max) = ([f32::MAX; 3], [f32::MIN; 3]);
        for p in &positions {
            for k in 0..3 {
                min[k] = min[k].min(p[k]);
                max[k] = max[k].max(p[k]);
            }
        }
        let start = bin.len();
        bin.extend(positions.iter().flatten().flat_map(|x| x.to_le_bytes()));
        views.push(json!({"buffer": 0, "byteOffset": start, "byteLength": bin.len() - start}));
        accessors.push(json!({"bufferView": views.len() - 1, "componentType": 5126, "count": positions.len(), "type": "VEC3", "min": min, "max": max}));
        let start = bin.len();
        bin.extend(indices.iter().flat_map(|i| i.to_le_bytes()));
        views.push(json!({"buffer": 0, "byteOffset": start, "byteLength": bin.len() - start}));
        accessors.push(json!({"bufferView": views.len() - 1, "componentType": 5125, "count": indices.len(), "type": "SCALAR"}));
        gltf_meshes.push(json!({"name": name, "primitives": [{"attributes": {"POSITION": accessors.len() - 2}, "indices": accessors.len() - 1, "mode": 4}]}));
        let [x, y, z, w] = euler_to_quaternion(transform.rotation.map(f64::from));
        let [qx, qy, qz] = to_y_up([x, y, z]);
        let [sx, sy, sz] = transform.scale.map(f64::from);
        nodes.push(json!({
            "name": name, "mesh": gltf_meshes.len() - 1,
            "translation": to_y_up(transform.location.map(f64::from)),
            "rotation": [qx, qy, qz, w], "scale": [sx, sz, sy],
        }));
    }
    let document = json!({
        "asset": {"version": "2.0", "generator": "MockBlender"},
        "scene": 0, "scenes": [{"nodes": (0..nodes.len()).collect::<Vec<_>>()}],
        "nodes": nodes, "meshes": gltf_meshes, "accessors": accessors, "bufferViews": views,
        "buffers": [{"uri": bin_name, "byteLength": bin.len()}],
    });
    (
        serde_json::to_string_pretty(&document).unwrap_or_default(),
        bin,
    )
}

fn field<'a>(value: &'a Value, path: &[&str]) -> Result<&'a Value, String> {
    path.iter()
        .try_fold(value, |v, k| v.get(*k))
        .ok_or_else(|| format!("the glTF has no {}", path.join(".")))
}

fn index(value: &Value, path: &[&str]) -> Result<usize, String> {
    field(value, path)?
        .as_u64()
        .map(|i| i as usize)
        .ok_or_else(|| format!("{} is not an index", path.join(".")))
}

fn floats<const N: usize>(node: &Value, key: &str, default: [f64; N]) -> Result<[f64; N], String> {
    let Some(items) = node.get(key) else {
        return Ok(default);
    };
    let values: Vec<f64> = items
        .as_array()
        .ok_or_else(|| format!("node {key} is not an array"))?
        .iter()
        .map(|v| {
            v.as_f64()
                .ok_or_else(|| format!("node {key} holds a non-number"))
        })
        .collect::<Result<_, _>>()?;
    <[f64; N]>::try_from(values).map_err(|_| format!("node {key} has the wrong length"))
}

/// The bytes of accessor `i`, as `count` items of `width` bytes.
fn accessor_bytes<'a>(
    doc: &Value,
    buffers: &'a [Vec<u8>],
    i: usize,
    component: u64,
    width: usize,
) -> Result<(&'a [u8], usize), String> {
    let accessor = field(doc, &["accessors"])?
        .get(i)
        .ok_or("a missing accessor")?;
    if accessor.get("componentType").and_then(Value::as_u64) != Some(component) {
        return Err("MockBlender reads only float positions and 32-bit indices".into());
    }
    let count = index(accessor, &["count"])?;
    let view = field(doc, &["bufferViews"])?
        .get(index(accessor, &["bufferView"])?)
        .ok_or("a missing bufferView")?;
    let buffer = buffers
        .get(index(view, &["buffer"])?)
        .ok_or("a missing buffer")?;
    let start = view.get("byteOffset").and_then(Value::as_u64).unwrap_or(0) as usize
        + accessor
            .get("byteOffset")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
    let bytes = buffer
        .get(start..start + count * width)
        .ok_or("an accessor past its buffer's end")?;
    Ok((bytes, count))
}

/// glTF as Blender imports it: each node with a mesh an object with the node's transform in
/// Z-up, its vertices as written. `bin` reads a buffer file named by the document.
pub(super) fn read_gltf(
    text: &str,
    bin: impl Fn(&str) -> Result<Vec<u8>, ErrorBody>,
) -> Result<Result<Vec<Imported>, String>, ErrorBody> {
    let doc: Value = match serde_json::from_str(text) {
        Ok(doc) => doc,
        Err(e) => return Ok(Err(format!("not a glTF JSON document: {e}"))),
    };
    let mut buffers = Vec::new();
    for buffer in doc
        .get("buffers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match buffer.get("uri").and_then(Value::as_str) {
            Some(uri) if !uri.starts_with("data:") => buffers.push(bin(uri)?),
            _ => {
                return Ok(Err(
                    "MockBlender reads only buffers in files beside the glTF".into(),
                ));
            }
        }
    }
    Ok(gltf_objects(&doc, &buffers))
}

fn gltf_objects(doc: &Value, buffers: &[Vec<u8>]) -> Result<Vec<Imported>, String> {
    let mut out = Vec::new();
    for node in field(doc, &["nodes"])?
        .as_array()
        .ok_or("nodes is not an array")?
    {
        if node.get("children").is_some() {
            return Err("MockBlender reads only glTF without node hierarchies".into());
        }
        let mesh = field(doc, &["meshes"])?
            .get(index(node, &["mesh"])?)
            .ok_or("a missing mesh")?;
        let mut geometry = Geometry {
            vertices: vec![],
            faces: vec![],
        };
        for primitive in field(mesh, &["primitives"])?
            .as_array()
            .ok_or("primitives is not an array")?
        {
            let first = geometry.vertices.len();
            let (bytes, _) = accessor_bytes(
                doc,
                buffers,
                index(primitive, &["attributes", "POSITION"])?,
                5126,
                12,
            )?;
            for chunk in bytes.chunks_exact(12) {
                let c = [0, 4, 8].map(|o| {
                    f32::from_le_bytes([chunk[o], chunk[o + 1], chunk[o + 2], chunk[o + 3]])
                });
                geometry
                    .vertices
                    .push(from_y_up(c.map(f64::from)).map(|x| x as f32));
            }
            let (bytes, _) =
                accessor_bytes(doc, buffers, index(primitive, &["indices"])?, 5125, 4)?;
            let corners: Vec<usize> = bytes
                .chunks_exact(4)
                .map(|c| first + u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
                .collect();
            if corners.iter().any(|&i| i >= geometry.vertices.len()) {
                return Err("an index past the vertices".into());
            }
            geometry
                .faces
                .extend(corners.chunks_exact(3).map(<[usize]>::to_vec));
        }
        let [x, y, z, w] = floats(node, "rotation", [0.0, 0.0, 0.0, 1.0])?;
        let [qx, qy, qz] = from_y_up([x, y, z]);
        let [sx, sy, sz] = floats(node, "scale", [1.0; 3])?;
        let transform = Transform {
            location: from_y_up(floats(node, "translation", [0.0; 3])?).map(|x| x as f32),
            rotation: quaternion_to_euler([qx, qy, qz, w]).map(|x| x as f32),
            scale: [sx, sz, sy].map(|x| x as f32),
        };
        let name = node
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("Object")
            .to_owned();
        out.push(Imported {
            name,
            transform,
            geometry,
        });
    }
    Ok(out)
}
