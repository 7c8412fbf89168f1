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

#[path = "shared/agent_session.rs"]
mod agent_session;

use vibe::audit::{AuditLog, AuditWriter, FileOptions, Overflow, Redactor, verify_files};
use vibe::contract::{BridgePolicy, HostProfile, HostProposal, default_registries, negotiate};
use vibe::exec::Pipeline;
use vibe::transport::{MockBlender, MockTransport, Transport};

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
    let registries = default_registries()?;
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

    agent_session::run(&pipeline).await;

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
