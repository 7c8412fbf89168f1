//! # vibe-errors: error model v1
//!
//! Every answer Vibe gives — from the Python kernel inside Blender, from the bridge's guards,
//! from a macro, over MCP — travels in one [`Envelope`]:
//!
//! ```
//! use vibe_errors::{Envelope, ErrorBody, ErrorCode, Reason};
//!
//! let ok = Envelope::ok(serde_json::json!({"name": "Cube"}));
//! assert_eq!(ok.to_json_string(), r#"{"ok":true,"result":{"name":"Cube"}}"#);
//!
//! let refused = Envelope::from(ErrorBody::from_reason(
//!     Reason::ActuatorLock,
//!     "cannot delete 'Armature': the agent did not create it in this session",
//! ));
//! let wire = refused.to_value();
//! assert_eq!(wire["error"]["code"], "contract_violation");
//! assert_eq!(wire["error"]["details"]["reason"], "actuator_lock");
//! assert_eq!(wire["error"]["details"]["recovery"], "ask_human");
//! assert_eq!(Envelope::from_value(wire).unwrap(), refused);
//!
//! // A code from a newer peer survives a round trip.
//! let newer = Envelope::from_slice(br#"{"ok":false,"error":{"code":"rate_limited","message":"slow down","details":{}}}"#).unwrap();
//! assert_eq!(newer.error().unwrap().code, ErrorCode::Unknown("rate_limited".into()));
//! assert!(newer.to_json_string().contains("rate_limited"));
//! ```
//!
//! ## Design
//!
//! * **Exactly v1 on the wire.** `{"ok":true,"result":...}` or
//!   `{"ok":false,"error":{"code","message","details"}}`, no other top-level key. Vibe's extras
//!   live where v1 leaves room: on success under `result._meta` ([`Meta`]: determinism class,
//!   echoed seed, fingerprint, retry count), on failure inside `details` (`reason`, `class`,
//!   `retryable`, `recovery`, and fields such as `field`, `context`, `cancelled`).
//! * **Open codes.** [`ErrorCode`] has the eight normative codes; any other snake_case code parses
//!   as [`ErrorCode::Unknown`] and is written back unchanged. [`Reason`] is open the same way.
//! * **Every failure says what to do.** Each error carries its failure class (E0-E3 of the fast
//!   retry loop), whether a retry can help, and the agent's next step ([`Recovery`]).
//! * **No stack traces.** [`ErrorBody::new`] and [`ErrorBody::from_raw`] run the message through
//!   [`sanitize_message`]: the useful last line stays; tracebacks, `File "...", line N` frames and
//!   absolute paths go. The raw text is kept in a redacted field, serialized only through
//!   [`ErrorBody::to_value_with_raw`].
//! * **MCP without an MCP crate.** [`Envelope::to_mcp_tool_result`] gives the `tools/call` result
//!   (`content` text block, `structuredContent`, `isError`).
//! * **A committed schema.** [`envelope_schema`] is the JSON Schema in
//!   `schema/envelope.schema.json`; a test fails when the file is stale.
//!
//! ## The failure taxonomy
//!
//! Seed 000's failure tables as typed reasons (`details.reason`). *Bridge action* is what Vibe
//! does; *agent recovery* is what the answer tells the agent to do next. A test keeps this table
//! identical to [`taxonomy_markdown`].
//!
//! | reason | code | severity | bridge action | HTTP | class | retryable | agent recovery |
//! |---|---|---|---|---|---|---|---|
//! | `contract_violation` | `contract_violation` | terminal | halt | 500 | E0 | no | ask_human |
//! | `security_block` | `contract_violation` | terminal | read_only | 403 | E0 | no | ask_human |
//! | `deadlock` | `timeout` | terminal | circuit_break | 504 | E0 | no | ask_human |
//! | `sandbox` | `contract_violation` | terminal | reject | 403 | E0 | no | fix_arguments |
//! | `mutation_failed` | `execution_failed` | recoverable | roll_back | 422 | E1 | yes | fix_and_retry |
//! | `busy` | `contract_violation` | recoverable | wait_for_ready | 503 | E0 | yes | wait_for_ready |
//! | `sanity_limit` | `invalid_arguments` | recoverable | reject | 422 | E1 | yes | fix_arguments |
//! | `identity_drift` | `not_found` | reconciliation | re_discover | 404 | E3 | yes | inspect_scene |
//! | `actuator_lock` | `contract_violation` | recoverable | reject | 403 | E3 | no | ask_human |
//! | `read_only` | `contract_violation` | terminal | read_only | 403 | E0 | no | ask_human |
//!
//! Errors without a reason take their class, retryability and recovery from the code:
//! `invalid_arguments` E2 (fix the arguments), `execution_failed` E1 (fix and retry), `not_found`,
//! `capability_missing` and `unsupported_blender_version` E3, `contract_violation`, `timeout`,
//! `internal_error` and unknown codes E0.

mod code;
mod determinism;
mod envelope;
mod image;
mod mcp;
mod rule;
mod sanitize;
mod schema;
mod taxonomy;

pub use code::ErrorCode;
pub use determinism::Determinism;
pub use envelope::{Envelope, EnvelopeParseError, ErrorBody, META_KEY, Meta, RawText};
pub use image::{Image, MAX_IMAGE_BYTES, MAX_IMAGE_SIDE, take_image_data};
pub use rule::Rule;
pub use sanitize::{EMPTY_MESSAGE, MAX_MESSAGE_CHARS, contains_frame, sanitize_message};
pub use schema::{envelope_schema, envelope_schema_text};
pub use taxonomy::{
    FailureClass, ProtocolAction, Reason, Recovery, Severity, TaxonomyEntry, taxonomy,
    taxonomy_markdown,
};
