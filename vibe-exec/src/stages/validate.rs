//! Phase 1: the payload limit first (before any work that grows with the input), then the
//! arguments against the tool's JSON Schema, compiled once per contract. Large arguments are
//! validated on a blocking thread so that one call cannot stall the others; error messages echo
//! at most [`MAX_ECHO_CHARS`] characters of an offending value.

use std::io::Write;

use async_trait::async_trait;
use serde_json::{Value, json};
use vibe_errors::{ErrorBody, ErrorCode, Reason};

use crate::phase::{CallContext, Phase, Stage};
use crate::session::Session;

/// How many schema errors an answer lists.
pub const MAX_SCHEMA_ERRORS: usize = 5;
/// The most characters of an argument's value or name an error message repeats.
pub const MAX_ECHO_CHARS: usize = 200;
/// Arguments of more bytes than this are validated on a blocking thread.
pub const INLINE_VALIDATION_BYTES: u64 = 64 * 1024;

/// Counts serialized bytes and stops at the limit (no copy, no allocation per byte).
struct Counter {
    bytes: u64,
    limit: u64,
}

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len() as u64;
        if self.bytes > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The serialized size of `value`, or `None` once it passes `limit`.
fn size_within(value: &Value, limit: u64) -> Option<u64> {
    let mut counter = Counter { bytes: 0, limit };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.bytes)
}

/// `text` cut to [`MAX_ECHO_CHARS`] characters, saying how much was left out.
pub fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_ECHO_CHARS) {
        None => text.to_owned(),
        Some((at, _)) => format!("{}... ({} more bytes)", &text[..at], text.len() - at),
    }
}

fn schema_errors(validator: &jsonschema::Validator, params: &Value) -> Vec<(String, String)> {
    validator
        .iter_errors(params)
        .take(MAX_SCHEMA_ERRORS)
        .map(|e| {
            let message = e.to_string();
            (
                clip(&field_of(&e.instance_path().to_string(), &message)),
                clip(&message),
            )
        })
        .collect()
}

/// Validates the arguments against the registry's input schema.
#[derive(Debug, Default)]
pub struct SchemaStage;

#[async_trait]
impl Stage for SchemaStage {
    fn phase(&self) -> Phase {
        Phase::Validate
    }

    fn name(&self) -> &'static str {
        "schema"
    }

    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        if !call.params.is_object() {
            return Err(ErrorBody::new(
                ErrorCode::InvalidArguments,
                "arguments must be a JSON object",
            )
            .with_detail("field", "")
            .with_reason(Reason::Schema));
        }
        let limit = session.agreement.contract.limits.max_payload_bytes;
        let Some(size) = size_within(&call.params, limit) else {
            return Err(ErrorBody::new(
                ErrorCode::ContractViolation,
                format!(
                    "the arguments of {} exceed the payload limit of {limit} bytes",
                    call.tool
                ),
            )
            .with_rule(vibe_errors::Rule::MaxPayloadBytes)
            .with_detail("limit", limit));
        };
        // An unknown tool has no validator; the contract check refuses it next.
        let Some(validator) = session.validators.get(&call.tool) else {
            return Ok(());
        };
        let errors = if size <= INLINE_VALIDATION_BYTES {
            schema_errors(validator, &call.params)
        } else {
            let validator = std::sync::Arc::clone(validator);
            let params = call.params.clone();
            tokio::task::spawn_blocking(move || schema_errors(&validator, &params))
                .await
                .map_err(|e| {
                    ErrorBody::new(ErrorCode::InternalError, format!("validation stopped: {e}"))
                })?
        };
        if errors.is_empty() {
            return Ok(());
        }
        let (field, first) = errors.first().cloned().unwrap_or_default();
        Err(ErrorBody::new(
            ErrorCode::InvalidArguments,
            format!("{}: {first}", call.tool),
        )
        .with_detail("field", field)
        .with_reason(Reason::Schema)
        .with_detail(
            "errors",
            Value::Array(
                errors
                    .into_iter()
                    .map(|(f, m)| json!({"field": f, "message": m}))
                    .collect(),
            ),
        ))
    }
}

/// The argument a schema error is about: the first segment of its instance path, or for an
/// unexpected or missing property, the property named in the message.
fn field_of(instance_path: &str, message: &str) -> String {
    let first = instance_path
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or("");
    if !first.is_empty() {
        return first.to_owned();
    }
    // "Additional properties are not allowed ('x' was unexpected)", "\"name\" is a required property"
    let quoted = message.split(['\'', '"']).nth(1).unwrap_or("");
    quoted.to_owned()
}
