//! MockBlender's `file.import` refuses a model naming files outside the sandbox, as the kernel
//! does (`import_refs.py`): glTF buffer and image URIs, an OBJ's material libraries and their
//! texture maps, written as an attacker would write them; the scene stays as it was. The same
//! files naming files inside import.

use serde_json::{Value, json};
use vibe_errors::{Envelope, ErrorCode};
use vibe_transport::mock::MockBlender;

#[path = "support/session.rs"]
mod session;
use vibe_transport::{SessionConfig, snapshot};

/// Three vertices of a triangle as 9 little-endian floats, then its indices as 3 u32.
fn triangle_bytes() -> Vec<u8> {
    let mut bytes: Vec<u8> = [0.0f32, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    bytes.extend([0u32, 1, 2].iter().flat_map(|i| i.to_le_bytes()));
    bytes
}

fn gltf(buffer: &str, image: Option<&str>) -> String {
    let mut doc = json!({
        "asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0, "name": "Tri"}],
        "meshes": [{"primitives": [{"attributes": {"POSITION": 0}, "indices": 1}]}],
        "buffers": [{"uri": buffer, "byteLength": 48}],
        "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": 36},
                        {"buffer": 0, "byteOffset": 36, "byteLength": 12}],
        "accessors": [{"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3",
                       "min": [0, 0, 0], "max": [1, 1, 0]},
                      {"bufferView": 1, "componentType": 5125, "count": 3, "type": "SCALAR"}]
    });
    if let Some(image) = image {
        doc["images"] = json!([{"uri": image}]);
    }
    doc.to_string()
}

struct Setup {
    mock: MockBlender,
    sandbox: tempfile::TempDir,
    outside: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let sandbox = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        for folder in [sandbox.path(), outside.path()] {
            std::fs::write(folder.join("secret.bin"), triangle_bytes()).unwrap();
            std::fs::write(folder.join("secret.png"), b"\x89PNG\r\n\x1a\n").unwrap();
            std::fs::write(folder.join("evil.mtl"), "newmtl Skin\nmap_Kd secret.png\n").unwrap();
        }
        let mut mock = MockBlender::new().with_files();
        let session = SessionConfig::new("agent")
            .capabilities(session::FILE_SESSION_CAPABILITIES)
            .sandbox(sandbox.path().to_string_lossy());
        assert!(matches!(mock.configure(&session), Envelope::Ok(_)));
        Setup {
            mock,
            sandbox,
            outside,
        }
    }

    fn write(&self, relative: &str, content: &str) -> String {
        let path = self.sandbox.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
        relative.to_owned()
    }

    fn fingerprint(&mut self) -> String {
        match self.mock.execute("scene.snapshot", &json!({})) {
            Envelope::Ok(snap) => snapshot::content_fingerprint(&snap).unwrap().to_owned(),
            Envelope::Err(e) => panic!("{e}"),
        }
    }

    fn import(&mut self, relative: &str) -> Envelope {
        self.mock.execute("file.import", &json!({"path": relative}))
    }

    fn refused(&mut self, relative: &str, label: &str) {
        let before = self.fingerprint();
        match self.import(relative) {
            Envelope::Err(e) => {
                assert_eq!(e.code, ErrorCode::ContractViolation, "{label}: {e}");
                assert_eq!(
                    e.details.get("reason"),
                    Some(&Value::from("sandbox")),
                    "{label}"
                );
                assert_eq!(
                    e.details.get("field"),
                    Some(&Value::from("path")),
                    "{label}"
                );
            }
            Envelope::Ok(result) => panic!("{label}: imported {result}"),
        }
        assert_eq!(self.fingerprint(), before, "{label}");
    }

    /// The ways a model at the sandbox's top might name `name` outside it.
    fn outside_forms(&self, name: &str) -> Vec<(&'static str, String)> {
        let target = self
            .outside
            .path()
            .join(name)
            .to_string_lossy()
            .into_owned();
        let top = self.outside.path().file_name().unwrap().to_string_lossy();
        let up = format!("../{top}/{name}");
        vec![
            ("absolute", target.clone()),
            ("dotdot", up.clone()),
            ("file uri", format!("file://{target}")),
            ("percent", up.replace("..", "%2e%2e")),
            ("backslash", up.replace('/', "\\")),
            ("quoted", format!("\"{up}\"")),
            ("lexical", format!("models/../../{top}/{name}")),
        ]
    }
}

#[test]
fn a_gltf_naming_a_buffer_or_an_image_outside_is_refused() {
    let mut s = Setup::new();
    for (label, uri) in s.outside_forms("secret.bin") {
        let path = s.write("evil.gltf", &gltf(&uri, None));
        s.refused(&path, label);
    }
    for (label, uri) in s.outside_forms("secret.png") {
        let path = s.write("evil.gltf", &gltf("secret.bin", Some(&uri)));
        s.refused(&path, label);
    }
    let path = s.write("HUMAN_ONLY.gltf", &gltf("HUMAN_ONLY/secret.bin", None));
    s.refused(&path, "human only");
}

#[test]
fn a_gltf_naming_files_inside_imports() {
    let mut s = Setup::new();
    let path = s.write(
        "models/tri.gltf",
        &gltf("../secret.bin", Some("..%2Fsecret.png")),
    );
    match s.import(&path) {
        Envelope::Ok(result) => assert_eq!(result["objects"], json!(["Tri"])),
        Envelope::Err(e) => panic!("{e} {:?}", e.details),
    }
}

#[test]
fn an_obj_naming_a_material_library_or_a_texture_outside_is_refused() {
    let mut s = Setup::new();
    let obj =
        |mtllib: &str| format!("mtllib {mtllib}\no Tri\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n");
    // OBJ names files, not URIs: `%2e%2e` is a folder's name there.
    let forms = |s: &Setup, name| {
        let mut all = s.outside_forms(name);
        all.retain(|(label, _)| *label != "percent");
        all
    };
    for (label, name) in forms(&s, "evil.mtl") {
        let path = s.write("evil.obj", &obj(&name));
        s.refused(&path, label);
    }
    for (label, name) in forms(&s, "secret.png") {
        for line in [
            format!("map_Kd -s 1 1 1 {name}"),
            format!("bump -bm 0.5 {name}"),
            format!("norm {name}"),
        ] {
            s.write("skin.mtl", &format!("newmtl Skin\n{line}\n"));
            let path = s.write("evil.obj", &obj("skin.mtl"));
            s.refused(&path, label);
        }
    }
    s.write(
        "mats/skin.mtl",
        "newmtl Skin\nmap_Kd -s 1 1 1 ../secret.png\n",
    );
    let path = s.write("tri.obj", &obj("mats/skin.mtl"));
    match s.import(&path) {
        Envelope::Ok(result) => assert_eq!(result["objects"], json!(["Tri"])),
        Envelope::Err(e) => panic!("{e} {:?}", e.details),
    }
}
