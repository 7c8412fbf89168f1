//! Quickstart: an agent session on the embedded MockBlender, end to end.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! It negotiates a contract, builds a small scene, rolls a transaction back, watches seed 000's
//! "hallucinated purge" get blocked, switches the session read-only, and writes and verifies
//! the audit log. No Blender needed: the same session runs against a real one in the
//! `live_blender` example.

use std::sync::Arc;

use serde_json::{Value, json};
use vibe::audit::{AuditLog, AuditWriter, FileOptions, Overflow, Redactor, verify_files};
use vibe::contract::{BridgePolicy, HostProfile, HostProposal, blender_core_v1, negotiate};
use vibe::errors::Envelope;
use vibe::exec::Pipeline;
use vibe::transport::{MockBlender, MockTransport, Transport};

/// One line for an answer: the interesting part of a result, or the error's code and reason.
fn summary(envelope: &Envelope) -> String {
    match envelope {
        Envelope::Ok(result) if result.get("content_fingerprint").is_some() => {
            format!(
                "ok {} objects, content fingerprint {}",
                result["objects"].as_array().map_or(0, Vec::len),
                result["content_fingerprint"].as_str().unwrap_or("?")
            )
        }
        Envelope::Ok(result) => {
            let keys = [
                "name",
                "location",
                "collections",
                "materials",
                "deleted",
                "transaction",
                "risk",
                "created_by_agent",
                "object_count",
                "active_object",
                "macro",
            ];
            let shown: serde_json::Map<String, Value> = keys
                .iter()
                .filter_map(|k| result.get(*k).map(|v| (k.to_string(), v.clone())))
                .collect();
            format!("ok {}", Value::Object(shown))
        }
        Envelope::Err(error) => format!(
            "REFUSED {} (reason: {}, recovery: {}): {}",
            error.code,
            error
                .details
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("-"),
            error.recovery_name(),
            error.message
        ),
    }
}

trait RecoveryName {
    fn recovery_name(&self) -> String;
}

impl RecoveryName for vibe::errors::ErrorBody {
    fn recovery_name(&self) -> String {
        serde_json::to_value(self.recovery())
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

async fn call(pipeline: &Pipeline, tool: &str, params: Value) -> Envelope {
    let answer = pipeline.call(tool, params.clone()).await;
    println!("  -> {tool} {params}\n     {}", summary(&answer));
    answer
}

fn fingerprint(envelope: &Envelope) -> String {
    envelope
        .result()
        .and_then(|r| r["content_fingerprint"].as_str())
        .unwrap_or("?")
        .to_owned()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("Vibe quickstart: an agent session on the embedded MockBlender\n");

    // 1. The kernel says hello; the host and the bridge negotiate a contract.
    let transport: Arc<dyn Transport> = Arc::new(MockTransport::new(MockBlender::new()));
    let hello = transport.hello();
    println!(
        "kernel: {} {} in Blender {} (background: {})",
        hello.kernel, hello.kernel_version, hello.blender.version, hello.blender.background
    );
    let registries = blender_core_v1()?;
    let host = HostProfile {
        name: "quickstart".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        capabilities: ["scene.read", "scene.write", "transactions", "file.write"]
            .map(String::from)
            .into(),
        optional_flags: ["macros", "transactions"].map(String::from).into(),
        ..HostProfile::default()
    };
    let agreement = negotiate(
        &HostProposal::new("quickstart-1", host),
        &BridgePolicy::default(),
        &hello.blender,
        &registries,
    )
    .map_err(|r| r.error.message)?;
    let contract = &agreement.contract;
    println!(
        "contract {}: {} tools, {} macros agreed; excluded:",
        contract.fingerprints.contract,
        contract.capabilities.tools.len(),
        contract.capabilities.macros.len()
    );
    for excluded in &contract.excluded_tools {
        println!(
            "  - {} ({}): {}",
            excluded.name, excluded.code, excluded.why
        );
    }

    // 2. The pipeline, with an audit log that survives restarts (run the quickstart twice).
    let log_dir = std::env::temp_dir().join("vibe-quickstart");
    std::fs::create_dir_all(&log_dir)?;
    let log_path = log_dir.join(vibe::audit::DEFAULT_LOG);
    let log = AuditLog::open_file(
        &log_path,
        FileOptions::default(),
        Redactor::new(&contract.audit, None),
    )?;
    let audit = Arc::new(AuditWriter::spawn(log, 1024, Overflow::Backpressure));
    let pipeline = Pipeline::builder(agreement, transport)
        .audit(Arc::clone(&audit))
        .start()
        .await?;

    println!("\nBuild a small scene:");
    call(
        &pipeline,
        "scene.create_collection",
        json!({"name": "Props"}),
    )
    .await;
    call(
        &pipeline,
        "mesh.create_cube",
        json!({"name": "Crate", "size": 1, "collection": "Props"}),
    )
    .await;
    call(
        &pipeline,
        "object.move",
        json!({"name": "Crate", "location": [2.0, 0.0, 0.5]}),
    )
    .await;
    call(
        &pipeline,
        "material.ensure_principled",
        json!({"name": "Wood", "base_color": [0.55, 0.35, 0.2, 1.0], "roughness": 0.7}),
    )
    .await;
    call(
        &pipeline,
        "mesh.assign_material",
        json!({"name": "Crate", "material": "Wood"}),
    )
    .await;
    call(&pipeline, "object.move", json!({"name": "Crate"})).await;
    call(
        &pipeline,
        "modifier.add",
        json!({"name": "Crate", "modifier_type": "SUBSURF", "levels": 6}),
    )
    .await;
    let placed = pipeline.run_macro("build_and_place", json!({"name": "Barrel", "location": [-2, 0, 1], "material": "Metal", "base_color": [0.6, 0.6, 0.65, 1.0], "collection": "Props"})).await;
    println!("  -> macro build_and_place\n     {}", summary(&placed));

    println!("\nA transaction, rolled back (the scene fingerprint comes back exactly):");
    let before = fingerprint(&call(&pipeline, "scene.snapshot", json!({})).await);
    call(
        &pipeline,
        "transaction.begin",
        json!({"label": "try a layout"}),
    )
    .await;
    call(
        &pipeline,
        "mesh.create_plane",
        json!({"name": "Draft", "size": 4}),
    )
    .await;
    call(
        &pipeline,
        "object.move",
        json!({"name": "Crate", "delta": [0, 3, 0]}),
    )
    .await;
    call(&pipeline, "transaction.rollback", json!({})).await;
    let after = fingerprint(&call(&pipeline, "scene.snapshot", json!({})).await);
    println!(
        "  fingerprint before {before}\n  fingerprint after  {after}\n  identical: {}",
        before == after
    );

    println!("\nSeed 000's hallucinated purge:");
    call(&pipeline, "object.audit_identity", json!({"name": "Cube"})).await;
    call(&pipeline, "object.delete", json!({"name": "Cube"})).await;
    call(&pipeline, "object.delete", json!({"name": "Barrel"})).await;

    println!("\nRead-only mode (the kill switch, switched on through the API):");
    pipeline.set_read_only("the quickstart is over");
    call(
        &pipeline,
        "object.move",
        json!({"name": "Crate", "delta": [1, 0, 0]}),
    )
    .await;
    call(&pipeline, "scene.telemetry", json!({})).await;
    // A human resets the session; the agent may work again.
    pipeline.session().human_reset("quickstart operator");
    call(
        &pipeline,
        "object.move",
        json!({"name": "Crate", "delta": [1, 0, 0]}),
    )
    .await;

    audit.flush()?;
    let report = verify_files(&[&log_path])?;
    println!(
        "\naudit log {}: {} records, chain {}",
        log_path.display(),
        report.records,
        if report.is_intact() {
            "intact"
        } else {
            "BROKEN"
        }
    );
    if !report.is_intact() {
        return Err("the audit log does not verify".into());
    }
    Ok(())
}
