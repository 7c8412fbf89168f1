//! An MCP server over stdio for AI hosts (Claude Desktop, Cursor, any MCP client), built on rmcp.
//!
//! ```text
//! cargo run --example mcp_server -- --mock                      # MockBlender, no Blender needed
//! cargo run --example mcp_server -- --blender /usr/bin/blender  # a headless Blender it starts
//! cargo run --example mcp_server -- --bpy-python venv/bin/python
//! cargo run --example mcp_server -- --tcp 127.0.0.1:9833 --token-file token.txt   # GUI add-on
//! ```
//!
//! Options: `--sandbox DIR` (where file.save and render.still may write; default `mcp/sandbox`
//! in this user's private temp folder `<temp>/vibe-<uid>`), `--audit FILE` (default `<sandbox>.vibe_audit.jsonl` beside the
//! sandbox, one per sandbox; never inside it), `--project-root DIR` (repeatable: a read-only
//! folder of the human's that `file_open` may open `.blend` files from; the jail may read it,
//! nothing writes into it), `--allow-code` (offer `python.exec`).
//!
//! A headless Blender (`--blender`, `--bpy-python`) is started in the jail (Linux: bubblewrap,
//! Landlock, seccomp, rlimits; see `vibe_transport::jail`) and supervised: a call past its
//! deadline kills it and a fresh one is restored to the state before the call. `--allow-code`
//! asks for `code_exec`, which negotiation grants only on a jailed kernel, or on a GUI add-on
//! whose operator started Blender with `VIBE_ALLOW_UNCONFINED_CODE=1`; otherwise `python_exec` is
//! not offered and the server says why on stderr. `--no-jail` starts a headless kernel unconfined
//! (no agent code then). The agreed registry becomes MCP tools (dots in names become underscores); every
//! `tools/call` goes through the full pipeline and answers with the envelope as
//! `structuredContent`, the same JSON as text, and `isError = !ok`. A `notifications/cancelled`
//! for a call becomes `Pipeline::cancel`. Argument errors are tool
//! errors the model can read and correct, never JSON-RPC errors. Logs go to stderr only.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use vibe::audit::{AuditLog, AuditWriter, FileOptions, Overflow, Redactor};
use vibe::contract::{Agreement, AuditPolicy, CAP_CODE_EXEC};
use vibe::errors::{Envelope, ErrorBody, ErrorCode};
use vibe::exec::Pipeline;
use vibe::{Target, connect};

struct VibeServer {
    pipeline: Arc<Pipeline>,
    agreement: Arc<Agreement>,
    tools: Vec<rmcp::model::Tool>,
}

impl ServerHandler for VibeServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        if let Ok(implementation) = serde_json::from_value(
            json!({"name": "vibe-blender", "version": env!("CARGO_PKG_VERSION")}),
        ) {
            info.server_info = implementation;
        }
        info.instructions = Some(
            "Drives a real Blender through a negotiated contract. Every answer is {ok, result} or {ok:false, error:{code, message, details}}; \
             details.recovery says what to do next. Call scene_telemetry to re-check the scene after a failure; \
             object_audit_identity before changing anything you did not create; you may only delete objects you created."
                .into(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        serde_json::from_value(json!({"tools": self.tools}))
            .map_err(|e| McpError::internal_error(e.to_string(), None))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let envelope = match self.agreement.tool_for_mcp_name(&request.name) {
            Some(spec) => {
                let params = Value::Object(request.arguments.unwrap_or_default());
                // MCP cancellation (notifications/cancelled) is the pipeline's cancel: the kernel
                // stops the call, or its supervisor kills and restores it.
                let id = self.pipeline.next_call_id();
                let call = self.pipeline.call_with_id(id, &spec.name, params);
                tokio::pin!(call);
                tokio::select! {
                    envelope = &mut call => envelope,
                    () = context.ct.cancelled() => {
                        self.pipeline.cancel(id).await;
                        call.await
                    }
                }
            }
            // An unknown tool is a tool error too: the model sees it and can pick another.
            None => Envelope::Err(
                ErrorBody::new(
                    ErrorCode::ContractViolation,
                    format!("tool {:?} is not in the agreed contract", request.name),
                )
                .with_detail("rule", "tool_not_agreed"),
            ),
        };
        let result: CallToolResult = serde_json::from_value(envelope.to_mcp_tool_result())
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(result.into())
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: mcp_server (--mock | --blender PATH | --bpy-python PATH | --tcp ADDR [--token-file FILE]) [--sandbox DIR] [--project-root DIR]... [--audit FILE] [--allow-code] [--no-jail]"
    );
    std::process::exit(2)
}

fn arg_value(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .map(|i| args.get(i + 1).cloned().unwrap_or_else(|| usage()))
}

/// Every `--project-root DIR` given (read-only folders `file_open` may open files from).
fn project_roots(args: &[String]) -> Vec<PathBuf> {
    args.windows(2)
        .filter(|w| w[0] == "--project-root")
        .map(|w| PathBuf::from(&w[1]))
        .collect()
}

/// The Blender the flags name.
fn target(args: &[String]) -> Result<Target, Box<dyn std::error::Error>> {
    if args.iter().any(|a| a == "--mock") {
        return Ok(Target::mock());
    }
    if let Some(blender) = arg_value(args, "--blender") {
        return Ok(Target::blender(blender));
    }
    if let Some(python) = arg_value(args, "--bpy-python") {
        return Ok(Target::bpy_python(python));
    }
    if let Some(addr) = arg_value(args, "--tcp") {
        let token = match arg_value(args, "--token-file") {
            Some(file) => std::fs::read_to_string(file)?.trim().to_owned(),
            None => String::new(),
        };
        return Ok(Target::tcp(addr.parse()?, token));
    }
    usage()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let allow_code = args.iter().any(|a| a == "--allow-code");
    // This user's private temp folder (nobody else can plant a link where the defaults go).
    let home = vibe::transport::kernel::private_base()?.join("mcp");
    let sandbox_dir = arg_value(&args, "--sandbox")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join("sandbox"));
    std::fs::create_dir_all(&sandbox_dir)?;
    // One log per sandbox (one writer per log: a second server on the same sandbox is refused),
    // beside the sandbox and never inside it, where a jailed kernel could write.
    let audit_path = arg_value(&args, "--audit")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let name = sandbox_dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy();
            sandbox_dir.with_file_name(format!("{name}.{}", vibe::audit::DEFAULT_LOG))
        });
    if std::path::absolute(&audit_path)?.starts_with(std::path::absolute(&sandbox_dir)?) {
        return Err(
            "the audit log must not be inside the sandbox, where agent code can write".into(),
        );
    }
    // The host asks for the default audit policy, so the log's redaction is that policy's.
    let log = AuditLog::open_file(
        &audit_path,
        FileOptions::default(),
        Redactor::new(&AuditPolicy::default(), Some(sandbox_dir.clone())),
    )?;
    let audit = Arc::new(AuditWriter::spawn(log, 4096, Overflow::Backpressure));

    let mut capabilities = vec![
        "scene.read",
        "scene.write",
        "transactions",
        "file.write",
        "file.read",
        "render",
    ];
    if allow_code {
        capabilities.push(CAP_CODE_EXEC);
    }
    let mut session = connect(target(&args)?)
        .host("mcp")
        .capabilities(capabilities)
        .sandbox(&sandbox_dir)
        .audit(Arc::clone(&audit));
    for root in project_roots(&args) {
        session = session.project_root(root);
    }
    if args.iter().any(|a| a == "--no-jail") {
        session = session.unjailed();
    }
    let pipeline = Arc::new(session.start().await?);
    let agreement = Arc::clone(&pipeline.session().agreement);
    let blender = pipeline
        .session()
        .agreement
        .contract
        .blender_profile
        .clone();
    if allow_code {
        match agreement
            .contract
            .excluded_tools
            .iter()
            .find(|e| e.name == "python.exec")
        {
            Some(excluded) => eprintln!(
                "vibe mcp_server: python_exec is not offered: {}",
                excluded.why
            ),
            None => eprintln!(
                "vibe mcp_server: python_exec offered (kernel confinement: {})",
                blender.confinement.summary()
            ),
        }
    }
    eprintln!(
        "vibe mcp_server: Blender {} ({}), {} tools, contract {}",
        blender.version,
        if blender.background {
            "headless"
        } else {
            "GUI"
        },
        agreement.tools.tools().len(),
        agreement.contract.fingerprints.contract
    );
    let tools = agreement
        .mcp_tools()
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<Vec<rmcp::model::Tool>, _>>()?;
    let shared = agreement;

    let server = VibeServer {
        pipeline: Arc::clone(&pipeline),
        agreement: shared,
        tools,
    };
    let running = server.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    let _ = pipeline.close().await; // stops a kernel it started, flushes the audit log
    eprintln!(
        "vibe mcp_server: session over; audit log {}",
        audit_path.display()
    );
    Ok(())
}
