//! The JSON Schema of the envelope, as committed in `schema/envelope.schema.json`.

use serde_json::Value;

use crate::envelope::Envelope;

/// The JSON Schema (draft 2020-12) of [`Envelope`], pretty-printed as committed.
pub fn envelope_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(Envelope)).unwrap_or(Value::Null)
}

/// [`envelope_schema`] as the text of the committed file (pretty JSON and a final newline).
pub fn envelope_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&envelope_schema()).unwrap_or_default();
    text.push('\n');
    text
}
