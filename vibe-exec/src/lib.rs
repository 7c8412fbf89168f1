//! # vibe-exec: the execution pipeline
//!
//! Seeds 001 and 000 made mechanical. Every tool call goes through six phases, each a list of
//! [`Stage`]s an embedder can see ([`Pipeline::stage_names`]), extend
//! ([`PipelineBuilder::stage`], [`PipelineBuilder::stage_before`]) and replace
//! ([`PipelineBuilder::replace`]) within the phase order:
//!
//! | phase | default stages | refusal |
//! |---|---|---|
//! | 1 validate | `schema`: arguments against the registry's JSON Schema, compiled once per contract | `invalid_arguments` |
//! | 2 check | `breaker`, `contract` (agreed tool, Blender range, capability, payload limit), `read_only`, `busy`, `transaction`, `sandbox`, `sanity`, `actuator_lock`, `code_gate` | per guard |
//! | 3 plan | `polygon_budget`: reads the object before `modifier.add` | `invalid_arguments`, reason `sanity_limit` |
//! | 4 execute | `execute`: the transport call, with deadline, re-discovery and idempotent retry | the kernel's envelope |
//! | 5 verify | `read_back` (optional: [`PipelineBuilder::read_back`]) | `execution_failed` |
//! | 6 return | `seal`: a snapshot tool's result (the registry's `hints.snapshot`) sealed with its fingerprints and indices, an error completed with its guidance; `meta`: determinism class, echoed seed, snapshot fingerprint in `result._meta`; `image`: the image a tool made (the registry's `hints.image`), read back from the sandbox into `_meta.image` | |
//!
//! Refusals in phases 1 and 2 never reach the transport and have no side effect.
//!
//! A stage an embedder writes has the powers the built-in ones use, on the [`Session`] it is
//! given: [`Session::read`] (a read-only tool straight to Blender, as the plan, the read-back
//! and re-discovery read), [`Session::audit_incident`], [`Session::strike`],
//! [`Session::open_breaker`], and the session's state. Nothing on a `Pipeline` or a `Session`
//! reaches the transport around the guards; only the `execute` stage sends what may change the
//! scene.
//!
//! Every call has one call id, the pipeline's own ([`Pipeline::next_call_id`]): the audit,
//! [`Pipeline::cancel`] and the code history use it, whatever the transport numbers its
//! repeats and read-backs underneath.
//!
//! [`Pipeline::call_batch`] runs many calls in order, each through every stage with its own
//! envelope and audit records; consecutive reads share one call slot and reach the kernel as
//! one batch frame (one hop of Blender's main thread), and a call that may change the scene
//! runs alone after the calls before it answered.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use vibe_contract::*;
//! use vibe_exec::Pipeline;
//! use vibe_transport::{MockBlender, MockTransport, Transport};
//!
//! let transport: Arc<dyn Transport> = Arc::new(MockTransport::new(MockBlender::new()));
//! let caps: std::collections::BTreeSet<String> = ["scene.read", "scene.write", "transactions"].map(String::from).into();
//! let host = HostProfile { name: "doc".into(), version: "1".into(), capabilities: caps, ..HostProfile::default() };
//! let agreement = negotiate(&HostProposal::new("s-1", host), &BridgePolicy::default(), &transport.hello().blender, &default_registries().unwrap()).unwrap();
//! let pipeline = Pipeline::builder(agreement, transport).start().await.unwrap();
//!
//! assert!(pipeline.call("mesh.create_cube", serde_json::json!({"name": "Box"})).await.is_ok());
//! // Seed 000's hallucinated purge: the agent did not create "Cube", so it may not delete it.
//! let purge = pipeline.call("object.delete", serde_json::json!({"name": "Cube"})).await;
//! assert_eq!(purge.error().unwrap().details["reason"], "actuator_lock");
//! // Its own object it may delete.
//! assert!(pipeline.call("object.delete", serde_json::json!({"name": "Box"})).await.is_ok());
//! # });
//! ```
//!
//! ## Guards (DESIGN section 4)
//!
//! * **Read-only** — `KILL_VIBE` in the environment, the contract, [`Pipeline::set_read_only`],
//!   a security block, or [`SECURITY_STRIKES`] sandbox refusals: every mutation is refused with
//!   reason `read_only`; reads are served.
//! * **Actuator lock** — the session's [`CreatedRegistry`] of objects the agent created
//!   (following its renames, restored by a rollback): deleting anything else is refused.
//! * **Sandbox** — [`Sandbox::resolve`]: relative portable names only, no `..`, no
//!   `HUMAN_ONLY/` in any case, no symlink out.
//! * **Sanity** — the contract's limits on subdivision levels, array counts, bevel segments,
//!   and (in the plan phase) the polygon budget.
//! * **Temporary storage** — the contract's `temp_storage_mib`: a call that may write files
//!   (registry: `file.write` or `code_exec`) starts only while the sandbox is below it, and a
//!   call that leaves the sandbox past it fails with the files it wrote removed
//!   ([`stages::TempStorageBefore`], [`stages::TempStorageAfter`]).
//! * **Memory** — [`PipelineBuilder::start`] refuses a kernel whose jail allows more than the
//!   agreed `max_memory_mib` ([`PipelineError::MemoryCeiling`]); the jail's `RLIMIT_AS` holds it.
//! * **Busy** — while a `file.save` is in flight, mutations wait for ready (the kernel also
//!   refuses during loads and saves).
//! * **Circuit breaker** — a call past its deadline, or a protocol violation, opens it: every
//!   later call is refused until [`Session::human_reset`].
//! * **Identity drift** — a `not_found` for an object the session created triggers
//!   re-discovery by name, at most [`MAX_REDISCOVERY`] times, then escalates (reason
//!   `identity_drift`, recovery `ask_human`).
//! * **Transactions** — one at a time per kernel, owned by the session that began it
//!   ([`KernelLock`], shared by [`Pipeline::fork`]); nested begins, commits without a begin and
//!   writes into another session's transaction are refused.
//! * **Code** — `python.exec` is refused unless [`PipelineBuilder::code_gate`] installs the
//!   [`code::CodeGateStage`]: agent code parsed by a real Python parser and checked against an AST
//!   policy (import allowlist, no dunders, no eval / exec / open / getattr, no handlers or timers,
//!   no file, quit or add-on operators, no script nodes or text modules; identifiers NFKC-normalized)
//!   before it reaches Blender, where the kernel checks it again and runs it with restricted
//!   builtins, captured stdout and a deadline. The gate is a filter; the boundary is the
//!   kernel's jail (`vibe_transport::jail`). Agent code is bound by the actuator lock too
//!   ([`code::lock`]): on a transport with a `CodeBoundary` (a supervised, jailed kernel) the
//!   kernel that ran the code is retired and the bridge decides on a fresh kernel's inventory;
//!   elsewhere the kernel's in-kernel check is a filter. See [`mod@code`] for the fast retry loop of seed 003
//!   ([`code::FastRetry`], [`code::CodeFixer`]), the [`code::RetryManager`], the
//!   [`code::ExecutionHistory`], the [`code::ResultVerifier`] and the error classifier. The
//!   visual verifier closes seed 003's cycle: [`Pipeline::render_and_judge`] renders through
//!   the pipeline and hands the picture to an [`code::ImageVerifier`] the embedder implements
//!   (a vision model, an image metric), with the verdict's score, feedback and time bounded.
//!
//! ## Timeouts, cancellation, idempotency, concurrency
//!
//! Each call's deadline is the contract's deadline for the tool's time class, declared in the
//! registry: `time_per_tool_ms` for `quick` tools (reads, edits, transactions, agent code; 15 s
//! by default), `time_file_ms` for `file` tools (`file.save`, `file.open`; 2 min) and
//! `time_render_ms` for `render` tools (10 min). A missed deadline answers
//! `timeout` (reason `deadlock`, partial effects unknown) and opens the breaker;
//! [`Pipeline::cancel`] answers `timeout` with `details.cancelled = true` (a call not yet sent
//! is not sent; one the kernel runs is asked to stop, and a supervised kernel that does not
//! stop within a second is replaced). An idempotent tool
//! whose connection dropped is sent once more (it converges); a non-idempotent one never is.
//! At most the agreed `max_concurrent_calls` calls run at once; the rest **queue** in FIFO
//! order, and a call that cannot start within its deadline answers `timeout` without having
//! started. Every negotiated value, where it is enforced and the test that crosses it, is
//! tabled in `vibe-contract`'s crate docs.
//!
//! Macros ([`Pipeline::run_macro`]) run their steps through the same pipeline; see
//! [`mod@macros`].
//!
//! ## Performance
//!
//! `cargo bench -p vibe-exec`, measured 2026-11-23 (criterion, current-thread runtime, 2-core
//! VM; each beside the bare `MockTransport` call of the same run): `object.info` through all
//! six phases ~6.6 us vs ~2.7 us bare (ratio 2.5, target <= 3); `object.move`, which also
//! passes the mutation guards, ~7.3 us vs ~2.6 us bare (ratio 2.8). With an audit writer (into
//! a sink that drops the lines) `object.info` takes ~16-20 us: the two records a call makes cost
//! more than the in-memory call itself; on the live path, where a call is ~150 us, the writer
//! adds 1-7% (`cargo bench --bench live_kernel`).

mod batch;
pub mod code;
pub mod macros;
mod phase;
mod pipeline;
mod sandbox;
mod session;
pub mod stages;

pub use phase::{CallContext, Phase, Stage};
pub use pipeline::{Pipeline, PipelineBuilder, PipelineError, default_stages};
pub use sandbox::{
    HUMAN_ONLY, MAX_PATH_BYTES, MAX_READ_PATH_BYTES, ProjectRoot, Sandbox, SandboxViolation,
    readable_file,
};
pub use session::{
    CreatedRegistry, KILL_SWITCH_ENV, KernelLock, MAX_REDISCOVERY, ReadError, SECURITY_STRIKES,
    Session,
};
