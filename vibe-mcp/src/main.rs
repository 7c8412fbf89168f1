//! # vibe-mcp: Vibe's MCP server
//!
//! `vibe-mcp` serves one Blender to one MCP host over stdio (JSON-RPC on stdout, logs on
//! stderr only). Install it with `cargo install --path vibe-mcp`; on Linux also install the
//! jail's launcher beside it (`cargo install --path vibe-transport --features jail --bin
//! vibe-jail`), which a headless Blender is started through.
//!
//! ```text
//! vibe-mcp --mock                                   # MockBlender, no Blender needed
//! vibe-mcp --blender /usr/bin/blender               # a headless Blender it starts, jailed
//! vibe-mcp --bpy-python venv/bin/python --packs look,animate
//! vibe-mcp --tcp 127.0.0.1:9833 --token-file ~/.vibe-token   # the GUI add-on
//! ```
//!
//! ## Design
//!
//! * **The contract is the tool list.** The server negotiates a session contract with the
//!   kernel (the packs of `--packs`, or the default ones; `core` always), and lists exactly the
//!   agreed tools, named with `_` for the registry's dots (`object_move`), and the agreed
//!   macros as tools of their own (`macro_build_and_place`). Nothing about a tool is written
//!   here: names, schemas, hints and time classes all come from the registries, so a new pack
//!   is served without a change to this crate. A selection over the contract's 35-tool cap, or
//!   of an unknown pack, is refused by negotiation and the server exits with that refusal.
//! * **Every answer is the envelope.** A `tools/call` goes through the full pipeline (schema,
//!   contract, guards, kernel, checks, audit) and answers `structuredContent` = the error model
//!   v1 envelope, the same JSON as a text block, and `isError = !ok`. Each tool's
//!   `outputSchema` is that envelope with the registry's `outputs` as `result`. Argument errors
//!   are tool errors the model reads and corrects, never JSON-RPC errors.
//! * **The model sees its render.** A tool whose registry names an image output (`render.still`)
//!   has the PNG read back from the sandbox by the pipeline (at most
//!   [`MAX_IMAGE_BYTES`](vibe::errors::MAX_IMAGE_BYTES) bytes, a named limit of the error
//!   model) and answered as an MCP image content block beside the envelope, which keeps the
//!   image's type and size but not its bytes.
//! * **Long calls report progress.** A tool whose registry time class is not `quick` (renders,
//!   file loads and saves) sends `notifications/progress` when the request carries a
//!   `progressToken`: seconds run against the deadline (see [`progress`]).
//! * **Cancellation is the pipeline's.** `notifications/cancelled` for a call becomes
//!   `Pipeline::cancel`: a call not yet sent never runs, the kernel stops one it runs, and work
//!   Blender cannot stop has its kernel killed and a fresh one restored. A macro is not
//!   cancelled half-way (a transactional one commits or rolls back whole).
//! * **Resources.** `vibe://scene/snapshot` and `vibe://blender/errors` are read through the
//!   agreed read tools, as calls of the pipeline (see [`resources`]).
//! * **Agent code only where it is confined.** `--allow-code` asks for `code_exec`;
//!   negotiation grants it only on a kernel jailed on every axis (or a GUI add-on whose operator
//!   opted in on the Blender side), and only then is `python_exec` listed. Without the flag it
//!   is never listed. The server says on stderr which it is, and why.
//! * **A private sandbox per user.** The agent writes only into the sandbox:
//!   `$XDG_DATA_HOME/vibe/sandbox` (or `~/.local/share/vibe/sandbox`) unless `--sandbox` names
//!   another, created 0700. An existing folder that another user owns or may write is refused;
//!   one others may read is served with a warning (see [`sandbox`]). The hash-chained audit log
//!   lives beside it (`sandbox.vibe_audit.jsonl`), one writer per log: give each host its own
//!   `--sandbox` when several run at once.
//!
//! Flags: see [`options::USAGE`] (`vibe-mcp --help`).

mod mock_delay;
mod options;
mod progress;
mod resources;
mod sandbox;
mod server;
mod start;

use std::process::ExitCode;
use std::sync::Arc;

use rmcp::ServiceExt;

use crate::options::{Command, USAGE};
use crate::server::VibeServer;

fn main() -> ExitCode {
    let options = match options::parse(std::env::args().skip(1)) {
        Ok(Command::Serve(options)) => options,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!("vibe-mcp {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("vibe-mcp: {error}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("vibe-mcp: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(&options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("vibe-mcp: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(options: &options::Options) -> Result<(), Box<dyn std::error::Error>> {
    let started = start::start(options).await?;
    let pipeline = Arc::clone(&started.pipeline);
    let server = VibeServer::new(Arc::clone(&pipeline))?;
    for line in start::describe(options, &pipeline, server.tool_count()) {
        eprintln!("vibe-mcp: {line}");
    }
    eprintln!(
        "vibe-mcp: sandbox {}, audit log {}",
        started.sandbox.display(),
        started.audit.display()
    );
    let served = async {
        let running = match server.serve(rmcp::transport::stdio()).await {
            Ok(running) => running,
            // The host went away before it initialized: nothing was served, nothing failed.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
            Err(error) => return Err(error.into()),
        };
        running.waiting().await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    }
    .await;
    // Stops a kernel it started and flushes the audit log, however the service ended.
    let _ = pipeline.close().await;
    eprintln!("vibe-mcp: session over");
    served
}
