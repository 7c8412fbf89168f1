//! Agent code (`python.exec`) in a jailed, supervised headless Blender: the recipe for an
//! embedder that lets its agent write Python.
//!
//! ```text
//! VIBE_BPY_PYTHON=venv/bin/python cargo run --example agent_code   # the bpy module
//! VIBE_BLENDER=/usr/bin/blender cargo run --example agent_code     # blender -b
//! ```
//!
//! Linux only: the kernel runs inside bubblewrap's namespaces with Landlock, seccomp and a
//! memory ceiling (install `bwrap`; the `vibe-jail` launcher is built with this workspace).
//! Negotiation grants `code_exec` only because the kernel's hello reports that jail. The code
//! gate in front is a filter that explains refusals early; the jail is the boundary. A call past
//! its deadline kills the kernel and a fresh one is restored to the state before the call.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use vibe::contract::{
    BridgePolicy, CAP_CODE_EXEC, Constraints, HostProfile, HostProposal, default_registries,
    negotiate,
};
use vibe::errors::Envelope;
use vibe::exec::{Pipeline, Sandbox};
use vibe::transport::jail::Jail;
use vibe::transport::{StdioOptions, SupervisedKernel, Transport, kernel_factory};

fn show(what: &str, envelope: &Envelope) {
    match envelope {
        Envelope::Ok(result) => println!("{what}: ok {result}"),
        Envelope::Err(error) => println!(
            "{what}: REFUSED {} ({}) {}",
            error.code.as_str(),
            error.message,
            serde_json::Value::Object(error.details.clone())
        ),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sandbox = std::env::temp_dir().join(format!("vibe-agent-code-{}", std::process::id()));
    std::fs::create_dir_all(&sandbox)?;
    let jail = Jail::new(&sandbox);
    let factory = if let Some(python) = std::env::var_os("VIBE_BPY_PYTHON") {
        let python = PathBuf::from(python);
        kernel_factory(move || StdioOptions::jailed_bpy_python(&python, &jail))
    } else if let Some(blender) = std::env::var_os("VIBE_BLENDER") {
        let blender = PathBuf::from(blender);
        kernel_factory(move || StdioOptions::jailed_blender(&blender, &jail))
    } else {
        eprintln!("set VIBE_BPY_PYTHON (a Python with bpy) or VIBE_BLENDER (a blender binary)");
        std::process::exit(2);
    };
    let registries = default_registries()?;
    let kernel = Arc::new(
        SupervisedKernel::start(factory, Arc::clone(&registries.tools))
            .await?
            .with_warm_spare()
            .await,
    );
    let blender = kernel.hello().blender.clone();
    println!(
        "kernel: Blender {}, confinement {} ({})",
        blender.version,
        blender.confinement.summary(),
        blender.confinement.layers.join(", ")
    );

    let host = HostProfile {
        name: "agent-code-example".into(),
        version: "1".into(),
        capabilities: ["scene.read", "scene.write", CAP_CODE_EXEC]
            .map(String::from)
            .into(),
        ..HostProfile::default()
    };
    let mut proposal = HostProposal::new("agent-code", host);
    proposal.constraints = Some(Constraints {
        time_per_tool_ms: 3_000,
        ..Constraints::default()
    });
    let mut policy = BridgePolicy::default();
    policy.capabilities.insert(CAP_CODE_EXEC.into());
    let agreement = negotiate(&proposal, &policy, &blender, &registries)
        .map_err(|refusal| refusal.error.message)?;
    let transport: Arc<dyn Transport> = kernel.clone();
    let pipeline = Pipeline::builder(agreement, transport)
        .sandbox(Sandbox::new(&sandbox)?)
        .code_gate()
        .start()
        .await?;

    let build = "import bpy\n\
                 class Crate:\n    def __init__(self, name, size):\n        self.name, self.size = name, size\n\
                 for i in range(3):\n    crate = Crate('Crate%d' % i, 0.5 + i * 0.25)\n\
                 \x20   mesh = bpy.data.meshes.new(crate.name)\n\
                 \x20   obj = bpy.data.objects.new(crate.name, mesh)\n\
                 \x20   obj.location = (i * 2.0, 0.0, crate.size)\n\
                 \x20   bpy.context.scene.collection.objects.link(obj)\n\
                 print(sorted(o.name for o in bpy.data.objects))";
    show(
        "agent code builds three crates",
        &pipeline.call("python.exec", json!({ "code": build })).await,
    );
    let before = pipeline.call("scene.snapshot", json!({})).await;
    let started = std::time::Instant::now();
    show(
        "C-level work the tracer cannot stop",
        &pipeline
            .call("python.exec", json!({"code": "sum(range(10**15))"}))
            .await,
    );
    println!("answered after {:.1} s", started.elapsed().as_secs_f64());
    let after = pipeline.call("scene.snapshot", json!({})).await;
    let fingerprint = |e: &Envelope| e.result().map(|r| r["content_fingerprint"].clone());
    println!(
        "scene restored: {} (kernels replaced: {})",
        fingerprint(&before) == fingerprint(&after),
        kernel.replacements()
    );
    // A blocked pattern is a security block: the session turns read-only until a human resets it.
    show(
        "the gate explains a refusal",
        &pipeline
            .call("python.exec", json!({"code": "import os\nos.system('id')"}))
            .await,
    );
    kernel.close().await?;
    let _ = std::fs::remove_dir_all(&sandbox);
    Ok(())
}
