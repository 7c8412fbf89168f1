//! The quickstart's agent session against a real Blender, ending with a rendered still.
//!
//! ```text
//! VIBE_BPY_PYTHON=venv/bin/python cargo run --example live_blender   # bpy module, headless, stdio
//! VIBE_BLENDER=/usr/bin/blender cargo run --example live_blender     # blender -b, stdio
//! cargo run --example live_blender -- --tcp 127.0.0.1:9833 --token-file token.txt   # GUI add-on
//! ```
//!
//! The still (Cycles on the CPU, 320 x 240) lands in the session's sandbox folder; its path is
//! printed at the end.

use std::path::PathBuf;
use std::sync::Arc;

#[path = "shared/agent_session.rs"]
mod agent_session;

use serde_json::json;
use vibe::contract::{BridgePolicy, HostProfile, HostProposal, blender_core_v1, negotiate};
use vibe::exec::{Pipeline, Sandbox};
use vibe::transport::{StdioOptions, StdioTransport, TcpOptions, TcpTransport, Transport};

async fn connect(args: &[String]) -> Result<Arc<dyn Transport>, Box<dyn std::error::Error>> {
    if let Some(i) = args.iter().position(|a| a == "--tcp") {
        let addr = args.get(i + 1).ok_or("--tcp needs an address")?;
        let mut options = TcpOptions::new(addr.parse()?);
        if let Some(j) = args.iter().position(|a| a == "--token-file") {
            let file = args.get(j + 1).ok_or("--token-file needs a path")?;
            options = options.with_token(std::fs::read_to_string(file)?.trim());
        }
        return Ok(Arc::new(TcpTransport::connect(options).await?));
    }
    if let Some(python) = std::env::var_os("VIBE_BPY_PYTHON") {
        return Ok(Arc::new(
            StdioTransport::spawn(StdioOptions::bpy_python(python)?).await?,
        ));
    }
    if let Some(blender) = std::env::var_os("VIBE_BLENDER") {
        return Ok(Arc::new(
            StdioTransport::spawn(StdioOptions::blender(blender)?).await?,
        ));
    }
    Err("no Blender: set VIBE_BPY_PYTHON (a Python with bpy) or VIBE_BLENDER (a blender binary), or pass --tcp ADDR".into())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let transport = connect(&args).await?;
    let blender = transport.hello().blender.clone();
    println!(
        "Blender {} ({}), kernel {}",
        blender.version,
        if blender.background {
            "headless"
        } else {
            "GUI"
        },
        transport.hello().kernel_version
    );

    let host = HostProfile {
        name: "live_blender".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        capabilities: [
            "scene.read",
            "scene.write",
            "transactions",
            "file.write",
            "render",
        ]
        .map(String::from)
        .into(),
        ..HostProfile::default()
    };
    let agreement = negotiate(
        &HostProposal::new(format!("live-{}", std::process::id()), host),
        &BridgePolicy::default(),
        &blender,
        &blender_core_v1()?,
    )
    .map_err(|r| r.error.message)?;
    let sandbox: PathBuf = std::env::temp_dir().join(format!("vibe-live-{}", std::process::id()));
    std::fs::create_dir_all(&sandbox)?;
    let pipeline = Pipeline::builder(agreement, Arc::clone(&transport))
        .sandbox(Sandbox::new(&sandbox)?)
        .start()
        .await?;

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
    transport.close().await?;
    let png = sandbox.join("renders/scene.png");
    if !still.is_ok() || !png.exists() {
        return Err(format!("the render failed: {}", still.to_json_string()).into());
    }
    println!(
        "\nrendered {} ({} bytes); saved the scene: {}",
        png.display(),
        std::fs::metadata(&png)?.len(),
        saved.is_ok()
    );
    Ok(())
}
