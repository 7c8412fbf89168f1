//! The quickstart's agent session against a real Blender, ending with a rendered still.
//!
//! ```text
//! VIBE_BPY_PYTHON=venv/bin/python cargo run --example live_blender   # bpy module, headless, stdio
//! VIBE_BLENDER=/usr/bin/blender cargo run --example live_blender     # blender -b, stdio
//! cargo run --example live_blender -- --tcp 127.0.0.1:9833 --token-file token.txt   # GUI add-on
//! ```
//!
//! It starts on `vibe::connect`: a headless Blender runs jailed and supervised. The still
//! (Cycles on the CPU, 320 x 240) lands in the session's sandbox folder, a temporary folder
//! removed at the end; its size is printed.

#[path = "shared/agent_session.rs"]
mod agent_session;

use serde_json::json;
use vibe::{Target, connect};

/// The Blender the example drives: `--tcp ADDR --token-file FILE` (the GUI add-on), else
/// `VIBE_BPY_PYTHON` or `VIBE_BLENDER` (a jailed, supervised headless Blender).
fn target(args: &[String]) -> Result<Target, Box<dyn std::error::Error>> {
    if let Some(i) = args.iter().position(|a| a == "--tcp") {
        let addr = args.get(i + 1).ok_or("--tcp needs an address")?;
        let token = match args.iter().position(|a| a == "--token-file") {
            Some(j) => {
                std::fs::read_to_string(args.get(j + 1).ok_or("--token-file needs a path")?)?
            }
            None => String::new(),
        };
        return Ok(Target::tcp(addr.parse()?, token.trim()));
    }
    if let Some(python) = std::env::var_os("VIBE_BPY_PYTHON") {
        return Ok(Target::bpy_python(python));
    }
    if let Some(blender) = std::env::var_os("VIBE_BLENDER") {
        return Ok(Target::blender(blender));
    }
    Err("no Blender: set VIBE_BPY_PYTHON (a Python with bpy) or VIBE_BLENDER (a blender binary), or pass --tcp ADDR".into())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sandbox = tempfile::tempdir()?;
    let pipeline = connect(target(&args)?)
        .host("live_blender")
        .capabilities([
            "scene.read",
            "scene.write",
            "transactions",
            "file.write",
            "render",
        ])
        .sandbox(sandbox.path())
        .start()
        .await?;
    let blender = &pipeline.session().agreement.contract.blender_profile;
    println!(
        "Blender {} ({})",
        blender.version,
        if blender.background {
            "headless"
        } else {
            "GUI"
        }
    );

    let identical = agent_session::run(&pipeline).await;
    println!("\nrolled-back scene identical: {identical}");

    println!("\nRender the result:");
    agent_session::call(&pipeline, "object.set_transform", json!({"name": "Camera", "location": [6.0, -6.0, 4.5], "rotation_euler": [1.1, 0.0, 0.785]})).await;
    let still = agent_session::call(
        &pipeline,
        "render.still",
        json!({"path": "renders/scene.png", "width": 320, "height": 240, "samples": 8, "seed": 7}),
    )
    .await;
    let saved = agent_session::call(&pipeline, "file.save", json!({"path": "scene.blend"})).await;
    pipeline.close().await?;
    let png = std::fs::read(sandbox.path().join("renders/scene.png")).unwrap_or_default();
    if !still.is_ok() || !png.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Err(format!("the render failed: {}", still.to_json_string()).into());
    }
    println!(
        "\nrendered renders/scene.png (a PNG of {} bytes); saved the scene: {}",
        png.len(),
        saved.is_ok()
    );
    Ok(())
}
