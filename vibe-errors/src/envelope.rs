//! The envelope of error model v1 and where Vibe's extra information lives in it.
//!
//! On the wire an answer is exactly one of
//!
//! ```json
//! {"ok": true,  "result": {...}}
//! {"ok": false, "error": {"code": "...", "message": "...", "details": {...}}}
//! ```
//!
//! and nothing else at the top level, so a strict v1 reader never meets a key it does not know.
//! Vibe's extra information rides inside the two places v1 leaves open:
//!
//! * on success, under the reserved key `_meta` of the result object ([`Meta`]: determinism
//!   class, echoed seed, fingerprint, retry count);
//! * on failure, inside `details`: `reason` (the taxonomy), `class` (E0-E3), `retryable`,
//!   `recovery` (the agent's next step), and per-failure fields such as `field`, `context` or
//!   `cancelled`.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::code::ErrorCode;
use crate::determinism::Determinism;
use crate::sanitize::sanitize_message;
use crate::taxonomy::{FailureClass, Reason, Recovery};

/// The reserved key of a success result that carries [`Meta`].
pub const META_KEY: &str = "_meta";

/// One answer: a result or an error, never both, never neither.
#[derive(Clone, Debug, PartialEq)]
pub enum Envelope {
    /// `{"ok": true, "result": ...}`.
    Ok(Value),
    /// `{"ok": false, "error": ...}`.
    Err(ErrorBody),
}

/// Extra information about a successful answer, stored under `result._meta`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Meta {
    /// The determinism class of the tool or macro that produced the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub determinism: Option<Determinism>,
    /// The seed the call ran with, echoed for `deterministic_with_seed` tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<Value>,
    /// The fingerprint (`blake3:<hex>`) of a returned snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// How many fast retries preceded this answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_count: Option<u32>,
    /// What happened in Blender since the session's last answer that the session must know
    /// (`{"event": "file_loaded", "file": ..., "transaction_dropped": ...}`); on a failure the
    /// same list is `details.events`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Value>,
    /// The image the answer made (a render), read back from the sandbox for the agent to see
    /// (the registry's `hints.image` names the tools that make one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<crate::image::Image>,
    /// Why the image the answer made is not returned with it (too large, not a PNG, unreadable);
    /// the file is still in the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_omitted: Option<String>,
}

impl Envelope {
    /// A success envelope.
    pub fn ok(result: impl Into<Value>) -> Envelope {
        Envelope::Ok(result.into())
    }

    /// Whether this is a success.
    pub fn is_ok(&self) -> bool {
        matches!(self, Envelope::Ok(_))
    }

    /// The result of a success.
    pub fn result(&self) -> Option<&Value> {
        match self {
            Envelope::Ok(result) => Some(result),
            Envelope::Err(_) => None,
        }
    }

    /// The error of a failure.
    pub fn error(&self) -> Option<&ErrorBody> {
        match self {
            Envelope::Ok(_) => None,
            Envelope::Err(error) => Some(error),
        }
    }

    /// The [`Meta`] of a success, if it carries one that parses.
    pub fn meta(&self) -> Option<Meta> {
        let meta = self.result()?.get(META_KEY)?;
        serde_json::from_value(meta.clone()).ok()
    }

    /// Attaches `meta` to a success (merged over any meta already there); failures are unchanged.
    ///
    /// A result that is not a JSON object is first wrapped as `{"value": result}`, because v1
    /// leaves no other place for the extra keys.
    pub fn with_meta(self, meta: Meta) -> Envelope {
        let Envelope::Ok(result) = self else {
            return self;
        };
        let mut object = match result {
            Value::Object(object) => object,
            other => Map::from_iter([("value".to_owned(), other)]),
        };
        let mut merged = object
            .get(META_KEY)
            .and_then(|old| serde_json::from_value::<Meta>(old.clone()).ok())
            .unwrap_or_default();
        merged.determinism = meta.determinism.or(merged.determinism);
        merged.seed = meta.seed.or(merged.seed);
        merged.fingerprint = meta.fingerprint.or(merged.fingerprint);
        merged.retry_count = meta.retry_count.or(merged.retry_count);
        merged.events.extend(meta.events);
        merged.image = meta.image.or(merged.image);
        merged.image_omitted = meta.image_omitted.or(merged.image_omitted);
        let meta_value = serde_json::to_value(merged).unwrap_or(Value::Null);
        object.insert(META_KEY.to_owned(), meta_value);
        Envelope::Ok(Value::Object(object))
    }

    /// The envelope as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            Envelope::Ok(result) => {
                let mut map = Map::with_capacity(2);
                map.insert("ok".to_owned(), Value::Bool(true));
                map.insert("result".to_owned(), result.clone());
                Value::Object(map)
            }
            Envelope::Err(error) => {
                let mut map = Map::with_capacity(2);
                map.insert("ok".to_owned(), Value::Bool(false));
                map.insert("error".to_owned(), error.to_value());
                Value::Object(map)
            }
        }
    }

    /// Parses an envelope from a JSON value, with a precise error when it is not a v1 envelope.
    pub fn from_value(value: Value) -> Result<Envelope, EnvelopeParseError> {
        serde_json::from_value(value).map_err(|e| EnvelopeParseError(e.to_string()))
    }

    /// Parses an envelope from JSON bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Envelope, EnvelopeParseError> {
        serde_json::from_slice(bytes).map_err(|e| EnvelopeParseError(e.to_string()))
    }

    /// The envelope as compact JSON text.
    pub fn to_json_string(&self) -> String {
        // Serializing a `Value`-backed envelope cannot fail: keys are strings, no maps with
        // non-string keys, no custom serializers that error.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

impl From<ErrorBody> for Envelope {
    fn from(error: ErrorBody) -> Envelope {
        Envelope::Err(error)
    }
}

/// The text was not an error model v1 envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvelopeParseError(pub String);

impl fmt::Display for EnvelopeParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not an error model v1 envelope: {}", self.0)
    }
}

impl std::error::Error for EnvelopeParseError {}

impl Serialize for Envelope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        match self {
            Envelope::Ok(result) => {
                map.serialize_entry("ok", &true)?;
                map.serialize_entry("result", result)?;
            }
            Envelope::Err(error) => {
                map.serialize_entry("ok", &false)?;
                map.serialize_entry("error", error)?;
            }
        }
        map.end()
    }
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

#[derive(Deserialize)]
struct WireEnvelope {
    ok: bool,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let wire = WireEnvelope::deserialize(deserializer)?;
        match (wire.ok, wire.result, wire.error) {
            (true, Some(result), None) => Ok(Envelope::Ok(result)),
            (false, None, Some(error)) => Ok(Envelope::Err(error)),
            (true, None, _) => Err(D::Error::custom("`ok: true` without `result`")),
            (false, _, None) => Err(D::Error::custom("`ok: false` without `error`")),
            (true, Some(_), Some(_)) => Err(D::Error::custom("`ok: true` with an `error`")),
            (false, Some(_), Some(_)) => Err(D::Error::custom("`ok: false` with a `result`")),
        }
    }
}

impl JsonSchema for Envelope {
    fn schema_name() -> Cow<'static, str> {
        "Envelope".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let error = generator.subschema_for::<ErrorBody>();
        let meta = generator.subschema_for::<Meta>();
        json_schema!({
            "description": "Error model v1: every Vibe answer is exactly one of these two shapes.",
            "oneOf": [
                {
                    "type": "object",
                    "properties": {
                        "ok": { "const": true },
                        "result": {
                            "description": "The tool's output. Vibe's own extras live under `_meta`.",
                            "properties": { "_meta": meta }
                        }
                    },
                    "required": ["ok", "result"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {
                        "ok": { "const": false },
                        "error": error
                    },
                    "required": ["ok", "error"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

/// Raw error text kept beside a sanitized message; never serialized, never shown by `Debug`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RawText(Option<String>);

impl fmt::Debug for RawText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(_) => f.write_str("RawText(<redacted>)"),
            None => f.write_str("RawText(None)"),
        }
    }
}

fn null_as_empty<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Map<String, Value>, D::Error> {
    Ok(Option::<Map<String, Value>>::deserialize(deserializer)?.unwrap_or_default())
}

/// The `error` object of a failure: `code`, a one-line `message`, structured `details`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// The error code.
    pub code: ErrorCode,
    /// One line for a human or a model; never a stack trace.
    pub message: String,
    /// Structured details: `reason`, `class`, `retryable`, `recovery`, and per-failure fields.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub details: Map<String, Value>,
    /// The unsanitized text this error was built from, if any.
    #[serde(skip)]
    #[schemars(skip)]
    raw: RawText,
}

/// Equality is equality on the wire: the redacted raw text does not take part.
impl PartialEq for ErrorBody {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code && self.message == other.message && self.details == other.details
    }
}

impl ErrorBody {
    /// An error with `code` and `message` (sanitized), with the code's default class,
    /// retryability and recovery in `details`.
    pub fn new(code: ErrorCode, message: impl AsRef<str>) -> ErrorBody {
        let mut details = Map::new();
        details.insert("class".into(), class_value(code.default_class()));
        details.insert("retryable".into(), Value::Bool(code.default_retryable()));
        details.insert("recovery".into(), recovery_value(code.default_recovery()));
        ErrorBody {
            code,
            message: sanitize_message(message.as_ref()),
            details,
            raw: RawText::default(),
        }
    }

    /// An error for a taxonomy reason: the code, class, retryability and recovery come from the
    /// taxonomy row. A reason without a row (the [`Reason::DETAIL`] reasons, [`Reason::Other`])
    /// has no code of its own: use [`ErrorBody::new`] with the code, then
    /// [`ErrorBody::with_reason`].
    pub fn from_reason(reason: Reason, message: impl AsRef<str>) -> ErrorBody {
        let code = reason
            .entry()
            .map(|row| row.code)
            .unwrap_or(ErrorCode::InternalError);
        ErrorBody::new(code, message).with_reason(reason)
    }

    /// An error built from raw Blender / Python error text: the message is its sanitized last
    /// line, and the raw text is kept, redacted, for [`ErrorBody::expose_raw`].
    pub fn from_raw(code: ErrorCode, raw: impl Into<String>) -> ErrorBody {
        let raw = raw.into();
        let mut body = ErrorBody::new(code, &raw);
        body.raw = RawText(Some(raw));
        body
    }

    /// Sets `details.reason`; a reason with a taxonomy row also sets class, retryable and recovery.
    pub fn with_reason(mut self, reason: Reason) -> ErrorBody {
        if let Some(row) = reason.entry() {
            self.details.insert("class".into(), class_value(row.class));
            self.details
                .insert("retryable".into(), Value::Bool(row.retryable));
            self.details
                .insert("recovery".into(), recovery_value(row.recovery));
        }
        self.details
            .insert("reason".into(), Value::String(reason.as_str().to_owned()));
        self
    }

    /// Fills in what an agent needs that a peer left out: the message is sanitized again, and
    /// `class`, `retryable` and `recovery` are added from the reason (or the code) when absent.
    /// Kernels may send bare errors; the bridge completes them with this.
    pub fn with_guidance(mut self) -> ErrorBody {
        self.message = sanitize_message(&self.message);
        let (class, retryable, recovery) = match self.reason().and_then(|r| r.entry()) {
            Some(row) => (row.class, row.retryable, row.recovery),
            None => (
                self.code.default_class(),
                self.code.default_retryable(),
                self.code.default_recovery(),
            ),
        };
        self.details
            .entry("class")
            .or_insert_with(|| class_value(class));
        self.details
            .entry("retryable")
            .or_insert(Value::Bool(retryable));
        self.details
            .entry("recovery")
            .or_insert_with(|| recovery_value(recovery));
        self
    }

    /// Adds or replaces one detail.
    pub fn with_detail(mut self, key: impl Into<String>, value: impl Into<Value>) -> ErrorBody {
        self.details.insert(key.into(), value.into());
        self
    }

    /// Adds `details.context`: where a passed-on error came from (a macro step, a retry).
    pub fn with_context(self, context: impl Into<Value>) -> ErrorBody {
        self.with_detail("context", context)
    }

    /// The taxonomy reason, if `details.reason` is set.
    pub fn reason(&self) -> Option<Reason> {
        self.details.get("reason")?.as_str().map(Reason::parse)
    }

    /// Sets `details.rule`: which rule of a guard refused.
    pub fn with_rule(mut self, rule: crate::Rule) -> ErrorBody {
        self.details
            .insert("rule".into(), Value::String(rule.as_str().to_owned()));
        self
    }

    /// The rule, if `details.rule` is set.
    pub fn rule(&self) -> Option<crate::Rule> {
        self.details.get("rule")?.as_str().map(crate::Rule::parse)
    }

    /// The failure class from `details.class`, else the code's default.
    pub fn class(&self) -> FailureClass {
        self.details
            .get("class")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_else(|| self.code.default_class())
    }

    /// Whether a retry can help, from `details.retryable`, else the code's default.
    pub fn retryable(&self) -> bool {
        self.details
            .get("retryable")
            .and_then(Value::as_bool)
            .unwrap_or_else(|| self.code.default_retryable())
    }

    /// The agent's next step, from `details.recovery`, else the code's default.
    pub fn recovery(&self) -> Recovery {
        self.details
            .get("recovery")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_else(|| self.code.default_recovery())
    }

    /// The raw text this error was built from. It is never serialized by default: call this only
    /// where the reader is trusted (a local debug log), never for an agent.
    pub fn expose_raw(&self) -> Option<&str> {
        self.raw.0.as_deref()
    }

    /// The error as JSON, with the raw text under `details.raw` when there is one. For trusted
    /// readers only; the default serialization leaves it out.
    pub fn to_value_with_raw(&self) -> Value {
        let mut value = self.to_value();
        if let (Some(raw), Some(details)) = (
            self.expose_raw(),
            value.get_mut("details").and_then(Value::as_object_mut),
        ) {
            details.insert("raw".into(), Value::String(raw.to_owned()));
        }
        value
    }

    /// The error object as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::with_capacity(3);
        map.insert("code".into(), Value::String(self.code.as_str().to_owned()));
        map.insert("message".into(), Value::String(self.message.clone()));
        map.insert("details".into(), Value::Object(self.details.clone()));
        Value::Object(map)
    }
}

impl fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ErrorBody {}

fn class_value(class: FailureClass) -> Value {
    serde_json::to_value(class).unwrap_or(Value::Null)
}

fn recovery_value(recovery: Recovery) -> Value {
    serde_json::to_value(recovery).unwrap_or(Value::Null)
}
