//! The error codes of error model v1.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::taxonomy::{FailureClass, Recovery};

/// One of the eight normative error codes of error model v1, or a code this version does not know.
///
/// On the wire a code is a snake_case string. A code from a newer peer parses as
/// [`ErrorCode::Unknown`] and is written back unchanged, so a bridge that relays an answer never
/// loses information it does not understand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The arguments do not match the tool's input schema or a sanity limit.
    InvalidArguments,
    /// A capability the call needs is absent from the host, bridge or Blender profile.
    CapabilityMissing,
    /// The tool is outside its declared `blender_min` / `blender_max` for this Blender.
    UnsupportedBlenderVersion,
    /// The call is outside the negotiated contract (registry, limits, constraints, guards).
    ContractViolation,
    /// A target (object, material, collection, file) does not exist.
    NotFound,
    /// Blender raised while executing deterministically.
    ExecutionFailed,
    /// The call passed its deadline, or was cancelled.
    Timeout,
    /// A fault inside the bridge itself.
    InternalError,
    /// A code from a newer peer that this version does not know; kept verbatim.
    Unknown(String),
}

impl ErrorCode {
    /// The eight normative codes, in the order error model v1 lists them.
    pub const KNOWN: [ErrorCode; 8] = [
        ErrorCode::InvalidArguments,
        ErrorCode::CapabilityMissing,
        ErrorCode::UnsupportedBlenderVersion,
        ErrorCode::ContractViolation,
        ErrorCode::NotFound,
        ErrorCode::ExecutionFailed,
        ErrorCode::Timeout,
        ErrorCode::InternalError,
    ];

    /// The wire spelling of the code.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::InvalidArguments => "invalid_arguments",
            ErrorCode::CapabilityMissing => "capability_missing",
            ErrorCode::UnsupportedBlenderVersion => "unsupported_blender_version",
            ErrorCode::ContractViolation => "contract_violation",
            ErrorCode::NotFound => "not_found",
            ErrorCode::ExecutionFailed => "execution_failed",
            ErrorCode::Timeout => "timeout",
            ErrorCode::InternalError => "internal_error",
            ErrorCode::Unknown(code) => code,
        }
    }

    /// Parses a wire spelling; never fails, unknown spellings become [`ErrorCode::Unknown`].
    pub fn parse(code: &str) -> ErrorCode {
        ErrorCode::KNOWN
            .into_iter()
            .find(|known| known.as_str() == code)
            .unwrap_or_else(|| ErrorCode::Unknown(code.to_owned()))
    }

    /// Whether this is one of the eight codes this version knows.
    pub fn is_known(&self) -> bool {
        !matches!(self, ErrorCode::Unknown(_))
    }

    /// The failure class of an error with this code when no taxonomy reason says otherwise.
    pub fn default_class(&self) -> FailureClass {
        match self {
            ErrorCode::InvalidArguments => FailureClass::E2,
            ErrorCode::ExecutionFailed => FailureClass::E1,
            ErrorCode::NotFound
            | ErrorCode::CapabilityMissing
            | ErrorCode::UnsupportedBlenderVersion => FailureClass::E3,
            ErrorCode::ContractViolation
            | ErrorCode::Timeout
            | ErrorCode::InternalError
            | ErrorCode::Unknown(_) => FailureClass::E0,
        }
    }

    /// Whether repeating the call (after the recovery step) can succeed, when no reason says otherwise.
    pub fn default_retryable(&self) -> bool {
        matches!(
            self,
            ErrorCode::InvalidArguments
                | ErrorCode::ExecutionFailed
                | ErrorCode::NotFound
                | ErrorCode::Timeout
        )
    }

    /// What the agent should do next, when no reason says otherwise.
    pub fn default_recovery(&self) -> Recovery {
        match self {
            ErrorCode::InvalidArguments => Recovery::FixArguments,
            ErrorCode::ExecutionFailed => Recovery::FixAndRetry,
            ErrorCode::NotFound => Recovery::InspectScene,
            ErrorCode::CapabilityMissing | ErrorCode::UnsupportedBlenderVersion => {
                Recovery::ChooseAnotherTool
            }
            ErrorCode::Timeout => Recovery::InspectScene,
            ErrorCode::ContractViolation | ErrorCode::InternalError | ErrorCode::Unknown(_) => {
                Recovery::AskHuman
            }
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = Cow::<'de, str>::deserialize(deserializer)?;
        Ok(ErrorCode::parse(&code))
    }
}

impl JsonSchema for ErrorCode {
    fn schema_name() -> Cow<'static, str> {
        "ErrorCode".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let known: Vec<&str> = ErrorCode::KNOWN.iter().map(ErrorCode::as_str).collect();
        json_schema!({
            "description": "An error model v1 code. The eight normative codes are listed; a reader must accept (and preserve) other snake_case codes from newer peers.",
            "anyOf": [
                { "enum": known },
                { "type": "string", "pattern": "^[a-z][a-z0-9_]*$" }
            ]
        })
    }
}
