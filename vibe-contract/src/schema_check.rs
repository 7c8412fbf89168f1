//! Checks that a registry's schemas are valid, strict JSON Schema.

use serde_json::Value;

use crate::registry_error::RegistryError;

/// Fails unless `schema` is a valid JSON Schema that compiles.
pub(crate) fn check_valid(
    entry: &str,
    which: &'static str,
    schema: &Value,
) -> Result<(), RegistryError> {
    let invalid = |message: String| RegistryError::InvalidSchema {
        entry: entry.to_owned(),
        which,
        message,
    };
    jsonschema::meta::validate(schema).map_err(|e| invalid(e.to_string()))?;
    jsonschema::validator_for(schema).map_err(|e| invalid(e.to_string()))?;
    Ok(())
}

/// Fails unless `schema` is an object schema that forbids unknown properties.
pub(crate) fn check_strict(entry: &str, schema: &Value) -> Result<(), RegistryError> {
    let not_strict = |message: &str| RegistryError::NotStrict {
        entry: entry.to_owned(),
        message: message.to_owned(),
    };
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(not_strict("`type` must be \"object\""));
    }
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        return Err(not_strict("`additionalProperties` must be false"));
    }
    if !schema.get("properties").is_some_and(Value::is_object) {
        return Err(not_strict("`properties` must be an object"));
    }
    Ok(())
}

/// The property names an object schema declares.
pub(crate) fn property_names(schema: &Value) -> impl Iterator<Item = &str> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|props| props.keys().map(String::as_str))
}
