//! A live attack on `file.import` in the jail: a glTF in the sandbox names a buffer outside it
//! (a file of known floats the host holds), and the jailed kernel runs the import with its own
//! reference checks switched off (`VIBE_KERNEL_GATE=off`, honoured only in a full jail). The
//! operating system hides the outside file, so the import fails and nothing enters the scene;
//! with the kernel's checks on, the same call is refused before the importer runs. Needs
//! `VIBE_LIVE=1` and `VIBE_BPY_PYTHON` (a bpy with the glTF add-on and numpy):
//!
//! ```text
//! VIBE_LIVE=1 VIBE_BPY_PYTHON=/opt/vibe-venv/bin/python \
//!   cargo test -p vibe-transport --all-features --test jail_import -- --include-ignored
//! ```
#![cfg(all(target_os = "linux", feature = "jail"))]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use vibe_errors::{Envelope, ErrorCode};
use vibe_transport::jail::Jail;
use vibe_transport::{Call, SessionConfig, StdioOptions, StdioTransport, Transport};

mod support;

/// The path in `var`, in a live run (the opt-in and the path checks are the live tests' own).
fn required(var: &str) -> PathBuf {
    support::live("the jailed import attack");
    support::required(var)
}

/// Nine floats no scene holds by chance: the secret the buffer would leak as three vertices.
const SECRET: [f32; 9] = [13.25, -7.5, 42.125, 3.75, 99.5, -1.625, 17.0, 23.5, -64.25];

fn gltf(buffer_uri: &str) -> String {
    json!({
        "asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0, "name": "Leak"}],
        "meshes": [{"primitives": [{"attributes": {"POSITION": 0}}]}],
        "buffers": [{"uri": buffer_uri, "byteLength": 36}],
        "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": 36}],
        "accessors": [{"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3",
                       "min": [-64.25, -7.5, -1.625], "max": [17.0, 99.5, 42.125]}]
    })
    .to_string()
}

async fn jailed(sandbox: &Path, gate_off: bool) -> StdioTransport {
    let mut jail = Jail::new(sandbox).launcher(env!("CARGO_BIN_EXE_vibe-jail"));
    if gate_off {
        jail = jail.env("VIBE_KERNEL_GATE", "off");
    }
    let options = StdioOptions::jailed_bpy_python(required("VIBE_BPY_PYTHON"), &jail).unwrap();
    let transport = StdioTransport::spawn(options).await.unwrap();
    assert!(transport.hello().blender.confinement.is_jailed());
    let session = SessionConfig::new("import-attack")
        .capabilities(support::session::FILE_SESSION_CAPABILITIES)
        .sandbox(sandbox.canonicalize().unwrap().to_string_lossy());
    assert!(transport.configure(&session).await.unwrap().is_ok());
    transport
}

async fn call(transport: &StdioTransport, tool: &str, params: Value) -> Envelope {
    transport
        .call(Call::new(tool, params, Duration::from_secs(60)))
        .await
        .unwrap()
}

async fn object_names(transport: &StdioTransport) -> Vec<String> {
    let snapshot = call(transport, "scene.snapshot", json!({})).await;
    let objects = &snapshot.result().unwrap()["objects"];
    let mut names: Vec<String> = objects
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|o| o["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_jailed_import_of_a_buffer_outside_is_refused_by_the_os() {
    let sandbox = tempfile::Builder::new()
        .prefix("vibe-import-attack-sandbox-")
        .tempdir()
        .unwrap();
    let outside = tempfile::Builder::new()
        .prefix("vibe-import-attack-outside-")
        .tempdir()
        .unwrap();
    let secret = outside.path().join("secret.bin");
    let bytes: Vec<u8> = SECRET.iter().flat_map(|f| f.to_le_bytes()).collect();
    std::fs::write(&secret, &bytes).unwrap();
    std::fs::write(
        sandbox.path().join("evil.gltf"),
        gltf(&secret.to_string_lossy()),
    )
    .unwrap();

    // The kernel's own checks on: refused before the importer runs.
    let checked = jailed(sandbox.path(), false).await;
    let answer = call(&checked, "file.import", json!({"path": "evil.gltf"})).await;
    let error = answer
        .error()
        .unwrap_or_else(|| panic!("imported: {answer:?}"));
    assert_eq!(error.code, ErrorCode::ContractViolation, "{error}");
    assert_eq!(error.details.get("reason"), Some(&json!("sandbox")));
    checked.close().await.unwrap();

    // Switched off: the importer runs and asks the operating system for the file, which the
    // jail does not show. Nothing of it enters the scene.
    let bare = jailed(sandbox.path(), true).await;
    let before = object_names(&bare).await;
    let answer = call(&bare, "file.import", json!({"path": "evil.gltf"})).await;
    let console = bare.console().join("\n");
    println!("answer with the kernel's checks off: {answer:?}\nconsole: {console}");
    let error = answer
        .error()
        .unwrap_or_else(|| panic!("the jail let the import read the outside file: {answer:?}"));
    assert_eq!(error.code, ErrorCode::ExecutionFailed, "{error}");
    assert_eq!(object_names(&bare).await, before);
    let text = format!("{answer:?}{console}");
    assert!(
        !text.contains("42.125") && !text.contains("-64.25"),
        "{text}"
    );
    bare.close().await.unwrap();
    // The file was there all along, on the host.
    assert_eq!(std::fs::read(&secret).unwrap(), bytes);
}
