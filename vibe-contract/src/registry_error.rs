//! Why a registry did not load.

use vibe_errors::Determinism;

/// A registry file that does not load, with where and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The YAML (or JSON) does not parse or does not fit the registry's shape.
    #[error("registry YAML error at line {line}, column {column}: {message}")]
    Yaml {
        /// 1-based line, 0 when unknown.
        line: usize,
        /// 1-based column, 0 when unknown.
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// Two entries share a name.
    #[error("duplicate {kind} name {name:?}")]
    DuplicateName {
        /// `tool` or `macro`.
        kind: &'static str,
        /// The repeated name.
        name: String,
    },
    /// A name is not a dotted lowercase identifier (tools) or snake_case identifier (macros).
    #[error("invalid {kind} name {name:?}: {why}")]
    InvalidName {
        /// `tool` or `macro`.
        kind: &'static str,
        /// The name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// More tools than a contract may expose.
    #[error("registry has {count} tools; a contract allows at most {max}")]
    TooManyTools {
        /// How many tools the registry has.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// An input or output schema is not a valid JSON Schema.
    #[error("{entry}: {which} schema is not valid JSON Schema: {message}")]
    InvalidSchema {
        /// The tool or macro.
        entry: String,
        /// `inputs` or `outputs`.
        which: &'static str,
        /// What the validator said.
        message: String,
    },
    /// An input schema is not strict (an object schema with `additionalProperties: false`).
    #[error("{entry}: inputs schema is not strict: {message}")]
    NotStrict {
        /// The tool or macro.
        entry: String,
        /// What is missing.
        message: String,
    },
    /// `blender_max` is below `blender_min`.
    #[error("{tool}: blender_max {max} is below blender_min {min}")]
    EmptyBlenderRange {
        /// The tool.
        tool: String,
        /// Its minimum.
        min: String,
        /// Its maximum.
        max: String,
    },
    /// A declared effect lacks what its action needs, or names an argument the tool does
    /// not take.
    #[error("{tool}: effect {index}: {message}")]
    InvalidEffect {
        /// The tool.
        tool: String,
        /// The effect's position in `effects`.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A tool's hint names what the tool does not have (`hints.image`: an output field).
    #[error("{tool}: hints.{hint}: {message}")]
    InvalidHint {
        /// The tool.
        tool: String,
        /// The hint.
        hint: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A tool declares an error code this version does not know.
    #[error("{tool}: unknown error code {code:?} in error_codes")]
    UnknownErrorCode {
        /// The tool.
        tool: String,
        /// The code.
        code: String,
    },
    /// A macro step names a tool the tool registry does not have.
    #[error("macro {macro_name}: step {step} names unknown tool {tool:?}")]
    UnknownStepTool {
        /// The macro.
        macro_name: String,
        /// 0-based step index.
        step: usize,
        /// The tool it names.
        tool: String,
    },
    /// A macro step passes an argument its tool does not accept.
    #[error("macro {macro_name}: step {step} passes unknown argument {argument:?} to {tool}")]
    UnknownStepArgument {
        /// The macro.
        macro_name: String,
        /// 0-based step index.
        step: usize,
        /// The step's tool.
        tool: String,
        /// The argument.
        argument: String,
    },
    /// A macro step refers to `${input}` that the macro does not declare.
    #[error("macro {macro_name}: step {step} refers to undeclared input {input:?}")]
    UnknownTemplateInput {
        /// The macro.
        macro_name: String,
        /// 0-based step index (or the condition's index).
        step: usize,
        /// The input name.
        input: String,
    },
    /// A macro declares a determinism class stronger than its steps deliver.
    #[error(
        "macro {macro_name}: declared determinism {declared:?} is stronger than its steps deliver ({required:?})"
    )]
    DeterminismTooStrong {
        /// The macro.
        macro_name: String,
        /// What it declares.
        declared: Determinism,
        /// The class its steps combine to.
        required: Determinism,
    },
    /// A macro has no steps.
    #[error("macro {macro_name} has no steps")]
    EmptyMacro {
        /// The macro.
        macro_name: String,
    },
    /// A declared fingerprint does not match the content.
    #[error("{entry}: declared fingerprint {declared} does not match the content ({actual})")]
    FingerprintMismatch {
        /// The entry.
        entry: String,
        /// The declared fingerprint.
        declared: String,
        /// The computed fingerprint.
        actual: String,
    },
    /// A macro registry was written for another tool registry.
    #[error("macro registry is for tool registry {expected:?}, not {actual:?}")]
    WrongToolRegistry {
        /// What the macro registry names.
        expected: String,
        /// The tool registry it was loaded against.
        actual: String,
    },
}

impl RegistryError {
    pub(crate) fn from_yaml(error: &serde_norway::Error) -> RegistryError {
        let (line, column) = error
            .location()
            .map(|location| (location.line(), location.column()))
            .unwrap_or((0, 0));
        RegistryError::Yaml {
            line,
            column,
            message: error.to_string(),
        }
    }

    pub(crate) fn from_json(error: &serde_json::Error) -> RegistryError {
        RegistryError::Yaml {
            line: error.line(),
            column: error.column(),
            message: error.to_string(),
        }
    }
}
