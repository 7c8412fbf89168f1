//! Phase 1: arguments against the tool's JSON Schema, compiled once per contract.

use async_trait::async_trait;
use serde_json::{Value, json};
use vibe_errors::{ErrorBody, ErrorCode};

use crate::phase::{CallContext, Phase, Stage};
use crate::session::Session;

/// How many schema errors an answer lists.
pub const MAX_SCHEMA_ERRORS: usize = 5;

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
            .with_detail("reason", "schema"));
        }
        // An unknown tool has no validator; the contract check refuses it next.
        let Some(validator) = session.validators.get(&call.tool) else {
            return Ok(());
        };
        if validator.is_valid(&call.params) {
            return Ok(());
        }
        let errors: Vec<(String, String)> = validator
            .iter_errors(&call.params)
            .take(MAX_SCHEMA_ERRORS)
            .map(|e| {
                (
                    field_of(&e.instance_path().to_string(), &e.to_string()),
                    e.to_string(),
                )
            })
            .collect();
        let (field, first) = errors.first().cloned().unwrap_or_default();
        Err(ErrorBody::new(
            ErrorCode::InvalidArguments,
            format!("{}: {first}", call.tool),
        )
        .with_detail("field", field)
        .with_detail("reason", "schema")
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
