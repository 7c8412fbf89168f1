//! # vibe-contract: the session contract v1
//!
//! A host (an MCP server, an agent loop) may only call what was negotiated, within the limits
//! agreed, against a Blender whose version fits. This crate holds the contract's types, the tool
//! and macro registries, their fingerprints, and the negotiation that produces a contract.
//!
//! ```
//! use vibe_contract::{BlenderProfile, BridgePolicy, HostProfile, HostProposal, negotiate};
//!
//! let registries = vibe_contract::default_registries().unwrap();
//! let blender = BlenderProfile {
//!     version: "5.0.1".parse().unwrap(),
//!     build_hash: None,
//!     platform: "linux".into(),
//!     background: true,
//!     features: ["scene.read", "scene.write", "transactions"].map(String::from).into(),
//!     confinement: Default::default(),
//! };
//! let host = HostProfile {
//!     name: "my-agent".into(),
//!     version: "0.1".into(),
//!     capabilities: ["scene.read", "scene.write", "transactions"].map(String::from).into(),
//!     ..HostProfile::default()
//! };
//! let agreement = negotiate(&HostProposal::new("s-1", host), &BridgePolicy::default(), &blender, &registries).unwrap();
//! assert!(agreement.tool("object.move").is_ok());
//! // No `file.write` capability: file.save is excluded, and a call would say why.
//! assert_eq!(agreement.tool("file.save").unwrap_err().code.as_str(), "capability_missing");
//! assert!(agreement.contract.fingerprint_is_valid());
//! ```
//!
//! ## Design
//!
//! * **Registries are data.** [`ToolRegistry`] and [`MacroRegistry`] load from YAML (read with
//!   `serde_norway`, the maintained fork of the deprecated `serde_yaml`) and validate on load
//!   with precise [`RegistryError`]s: YAML errors with line and column, duplicate names, more
//!   than [`MAX_TOOLS`] tools, input schemas that are not valid or not strict JSON Schema
//!   (`additionalProperties: false`), macro steps naming unknown tools or arguments, and a macro
//!   declaring a determinism stronger than its steps deliver.
//! * **Fingerprints.** [`Fingerprint`] is blake3 over canonical JSON (sorted keys, floats
//!   rounded to 1e-6, no whitespace), written `blake3:<hex>`. Registries, schemas, macros and the
//!   agreed contract each have one; a registry ref whose fingerprint does not match is refused.
//!   A registry's fingerprint covers a manifest of its entries' own fingerprints, so the agreed
//!   subset of a session is fingerprinted without hashing every schema again.
//! * **Negotiation is a pure function** ([`negotiate()`]): same inputs, same contract. Tools whose
//!   Blender range or capabilities do not fit are *excluded* (recorded in the contract; a call
//!   answers `unsupported_blender_version` or `capability_missing`) rather than failing the whole
//!   session; limits are only ever tightened. See the [`negotiate`](mod@negotiate) module for the
//!   rules and [`RefusalRule`] for each refusal.
//! * **MCP.** [`Agreement::mcp_tools`] renders the agreed tools, and the agreed macros as tools
//!   named [`MCP_MACRO_PREFIX`] and their name, as MCP `tools/list` entries, each with an
//!   `outputSchema`: the envelope whose `result` is the registry's `outputs`.
//!
//! ## Every negotiated value: where it is enforced, and the test that crosses it
//!
//! Each value of an agreement is held in one place, its refusal names it and its value, and a
//! test crosses it (tests named by file and function; "live" ones run against real Blender in
//! CI).
//!
//! | value | enforced by | refusal | test that crosses it |
//! |---|---|---|---|
//! | `constraints.time_per_tool_ms` (quick class) | `Pipeline::deadline_for` sets each call's deadline from its registry `time_class`; the transport stops waiting, `SupervisedKernel` kills and restores a kernel past it; the kernel interrupts `python.exec` at 80% | `timeout`, `details.deadline_ms` | `vibe-exec/tests/limits.rs` `each_tool_gets_the_deadline_of_its_time_class`; live: `vibe-exec/tests/live_limits.rs` `a_render_gets_its_own_deadline_and_runaway_code_does_not`, `live_code.rs` `runaway_code_times_out_and_the_next_call_succeeds` |
//! | `constraints.time_file_ms` (file class) | as above | `timeout`, `details.deadline_ms` | `limits.rs` `each_tool_gets_the_deadline_of_its_time_class` (a save under and past 3 s) |
//! | `constraints.time_render_ms` (render class) | as above | `timeout`, `details.deadline_ms` | live: `live_limits.rs` `a_render_gets_its_own_deadline_and_runaway_code_does_not` (a 6 s render completes past the quick class's 1 s, and is stopped under a render class of 2 s) |
//! | `constraints.max_memory_mib` | the jail's `RLIMIT_AS` (`Jail::memory_mib`, set in the launcher); `PipelineBuilder::start` refuses a kernel whose hello reports a higher jail ceiling. A kernel outside the jail has no OS ceiling | `PipelineError::MemoryCeiling`; an allocation past it fails in Blender | `limits.rs` `a_kernel_jailed_above_the_agreed_memory_is_refused_at_start`; live: `vibe-transport/tests/escape.rs` (the corpus's `memory` payloads under a lower ceiling) |
//! | `constraints.temp_storage_mib` | `TempStorageBefore` / `TempStorageAfter` (`vibe-exec`): the sandbox and the kernel's own folders (`Transport::storage_folders`: a jailed kernel's private folder, a supervisor's checkpoints) are measured before and after each call that may write files (registry: `file.write` or `code_exec`) | `contract_violation`, `rule: temp_storage_mib`, `limit`, `used_bytes`, `removed` | `vibe-exec/tests/temp_storage.rs`; live: `live_limits.rs` `a_render_past_temporary_storage_fails_and_leaves_no_file` |
//! | `constraints.sanity` (`max_subdivision_levels`, `max_array_count`, `max_bevel_segments`) | `SanityGuard` on the arguments, and the kernel and MockBlender on what they are given | `invalid_arguments`, reason `sanity_limit`, `limit` | `vibe-exec/tests/pipeline.rs` `refusals_in_phases_one_and_two_never_reach_the_transport`; conformance `04_refusals` (MockBlender and every live Blender) |
//! | `constraints.sanity.max_polygons` | `PolygonBudget` (plan phase, from the object's size) | `invalid_arguments`, reason `sanity_limit` | `pipeline.rs` `the_polygon_budget_is_planned_before_execution` |
//! | `constraints.code_gate` | `CodeGateGuard` (`Enforcing` blocks and turns the session read-only; `LogOnly` records) | `contract_violation`, reason `security_block` | `vibe-exec/tests/code_gate.rs` `enforcing_mode_blocks_and_turns_the_session_read_only`, `log_only_mode_records_and_runs` |
//! | `constraints.read_only` | `ReadOnlyGuard` (also `KILL_VIBE` in the environment) | `contract_violation`, reason `read_only` | `vibe-exec/tests/kill_switch.rs` `kill_vibe_in_the_environment_refuses_every_mutation` |
//! | `limits.tool_surface_cap` | [`negotiate()`], rule [`RefusalRule::ToolSurfaceExceeded`] | the refusal names the count and the cap | `vibe-contract/tests/negotiation.rs` `golden_refusal_per_rule` |
//! | `limits.max_concurrent_calls` | the pipeline's call slots (a semaphore of the agreed size); a call waits for a slot within its deadline, and the wait counts against it. The pipeline sends the same bound at `configure`, and a stream transport holds its own slots to it from then on | `timeout`, `partial_effects: none` | `limits.rs` `max_concurrent_calls_bounds_a_thousand_calls_in_flight` (1,000 calls, at most and at least 3 at the transport); `deadline_budget.rs`; vibe-transport `stream.rs` `configure_sets_the_bound_on_calls_in_flight` |
//! | `limits.max_payload_bytes` | `SchemaStage`, before any validation; frames past the codec's maximum are refused by the transports | `contract_violation`, `rule: max_payload_bytes`, `limit` | `limits.rs` `a_payload_past_the_limit_is_refused_before_validation` |
//! | `capabilities.granted` / `tools` | negotiation excludes what is not granted; `ContractCheck` refuses a call to an excluded or unknown tool; the kernel checks the capability again | `capability_missing` / `unsupported_blender_version` / `contract_violation`, with the reason | `negotiation.rs` `default_negotiation_and_mcp_rendering`; `vibe-exec/tests/live_code.rs` `an_unconfined_kernel_is_not_granted_code` |
//! | `capabilities.feature_flags` (`ui`) and `ui_optional` | negotiation leaves a tool that declares `requires.ui` out unless the `ui` flag was negotiated on a Blender with a window; `ui_optional` tells the host whether it asked for the UI at all | `capability_missing`, naming the UI | `negotiation.rs` `a_ui_tool_needs_the_ui_flag_and_a_window` |
//! | `audit` (`verbosity`, `keep_code`, `keep_paths`, `sinks`) | `vibe-audit`'s redaction and writer; security records are synced to the sink before the answer that reports them, whatever the writer's overflow and durability modes (`AuditWriter::record_durable`); a kernel the bridge replaced is a `recovered` record, a restart nobody asked for a `security` one | (records, not refusals) | `vibe-audit/tests/chain.rs` `redaction_follows_the_audit_policy`, `a_security_record_is_durable_before_it_returns_and_never_dropped`; `vibe-exec/tests/audit_records.rs` |
//!
//! ## The default registries: packs under the cap
//!
//! The contract caps a session at [`MAX_TOOLS`] (35) tools, so the tools come in packs, each a
//! registry of its own with its own version and fingerprint ([`Pack`]); a host selects packs at
//! negotiation (`HostProposal::packs`; `core` always), the cap applies to the tools the
//! selection lets the session call, and a selection past it is refused with
//! `tool_surface_exceeded`, naming each pack and its count. The contract records each selected
//! pack's reference (`SessionContract::packs`); the catalog of every pack ([`catalog`]) is what
//! a kernel implements and what `tool_registry_ref` pins.
//!
//! | pack | registry | tools | default |
//! |---|---|---|---|
//! | `core` | blender-core 3.0.0 | 24: kernel status, snapshot, telemetry, console errors, identity audit, object list / info / find / create / transform / rename / delete, cube and plane, the active object, materials with emission, alpha, transmission and a texture, modifiers, transactions, a still render or a fast preview | always |
//! | `organize` | blender-organize 1.0.0 | 4: collections (list, ensure, assign) and parenting | yes |
//! | `io` | blender-io 1.1.0 | 4: `file.save`, `file.open`, `file.import`, `file.export` (glTF, GLB, OBJ, FBX, STL, USD where the Blender has them) | yes |
//! | `code` | blender-code 1.0.0 | 1: `python.exec` (with `code_exec`) | yes |
//! | `look` | blender-look 1.0.0 | 4: `camera.set` (lens, sensor, clipping, projection, the scene camera), `object.aim`, `light.set` (type, power, colour, size, spot cone), `world.set` (background colour and strength) | no |
//! | `animate` | blender-animate 1.1.0 | 3: `keyframe.set` (transforms, a camera's lens, a light's energy and colour), `timeline.set`, `animation.read` | no |
//!
//! blender-core 2.0.0 was blender-core 1.3.0 with `file.save`, `file.open` and `python.exec`
//! moved to their packs; 3.0.0 drops `material.list` (every material and its inputs are in
//! `scene.snapshot`) and moves the collection and parenting tools, unchanged, to `organize`,
//! so that the packs an agent needs to build, light, animate and exchange a scene fit the cap
//! together. A host that names no packs gets 33 tools.
//! The catalog's fingerprint (a test keeps this line current):
//!
//! `blender 3.0.0 = blake3:889977bfea465eb262b511af7616ebeef8ac1a6479ebbd283ed268abea52049b`
//!
//! ## Performance
//!
//! `cargo bench -p vibe-contract` (criterion; each figure beside a baseline of the same run, on
//! a 2-core machine): negotiation with the default registry ~47 us (target <= 50 us), beside
//! ~1.7 us to merely serialize the agreed contract; canonical fingerprinting of the registry
//! ~605 MiB/s, 62% of `serde_json::to_vec` + blake3 over the same value (~970 MiB/s; target
//! >= 50%).

mod confinement;
mod contract;
mod default_registry;
mod effects;
mod fingerprint;
mod macro_registry;
mod mcp;
pub mod negotiate;
mod pack;
mod registry_error;
mod schema_check;
mod tool_registry;
mod version;

pub use confinement::Confinement;
pub use contract::*;
pub use default_registry::{
    ANIMATE_TOOLS_YAML, CATALOG_NAME, CODE_TOOLS_YAML, CORE_TOOLS_YAML, DEFAULT_PACKS,
    IO_TOOLS_YAML, LOOK_TOOLS_YAML, MACROS_YAML, default_registries,
};
pub use effects::{DataKind, Effect, EffectAction};
pub use fingerprint::{
    FINGERPRINT_PREFIX, Fingerprint, canonical_float, canonical_json, write_canonical,
    write_canonical_with,
};
pub use macro_registry::{Condition, MacroRegistry, MacroSpec, MacroStep, RollbackMode};
pub use mcp::{MCP_MACRO_PREFIX, envelope_output_schema};
pub use negotiate::{
    Agreement, BridgePolicy, FLAG_UI, HostProposal, Refusal, RefusalRule, Registries, negotiate,
};
pub use pack::{CORE_PACK, Pack, catalog};
pub use registry_error::RegistryError;
pub use tool_registry::{
    BridgeCheck, MAX_TOOLS, TimeClass, ToolHints, ToolRegistry, ToolRequirements, ToolSpec,
    TransactionRole,
};
pub use version::BlenderVersion;

/// The JSON Schema of [`SessionContract`], as committed in `schema/contract.schema.json`.
pub fn contract_schema_text() -> String {
    let schema = schemars::schema_for!(SessionContract);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}
