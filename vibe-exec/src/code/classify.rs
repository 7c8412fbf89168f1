//! The error classifier: Blender / Python error text to a kind and a failure class (seed 004's
//! ErrorClassifier, seed 003's E0-E3). Table-driven; the table is tested on messages captured from
//! live Blender runs (`tests/fixtures/blender_errors.json`).

use vibe_errors::FailureClass;

/// What kind of error the text describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorKind {
    /// The code does not parse (the model can fix it).
    Syntax,
    /// The code raised while running (the model may fix it).
    Runtime,
    /// A Blender-specific failure: wrong context or mode, an operator's poll failed.
    Blender,
    /// A missing file, no memory, no permission.
    Resource,
    /// The connection to Blender, or Blender itself, failed.
    Infrastructure,
    /// Nothing in the table matched.
    Unknown,
}

/// The classification table: the first row whose needle occurs in the text wins.
pub const TABLE: [(&str, ErrorKind); 29] = [
    ("SyntaxError", ErrorKind::Syntax),
    ("IndentationError", ErrorKind::Syntax),
    ("TabError", ErrorKind::Syntax),
    ("invalid syntax", ErrorKind::Syntax),
    ("unexpected indent", ErrorKind::Syntax),
    ("poll() failed", ErrorKind::Blender),
    ("context is incorrect", ErrorKind::Blender),
    ("Operator bpy.ops", ErrorKind::Blender),
    ("must be in object mode", ErrorKind::Blender),
    ("must be in edit mode", ErrorKind::Blender),
    ("bpy_struct", ErrorKind::Blender),
    ("bpy_prop_collection", ErrorKind::Blender),
    ("is not in object mode", ErrorKind::Blender),
    ("MemoryError", ErrorKind::Resource),
    ("FileNotFoundError", ErrorKind::Resource),
    ("No such file", ErrorKind::Resource),
    ("PermissionError", ErrorKind::Resource),
    ("Permission denied", ErrorKind::Resource),
    ("out of memory", ErrorKind::Resource),
    ("Connection refused", ErrorKind::Infrastructure),
    ("Broken pipe", ErrorKind::Infrastructure),
    ("connection lost", ErrorKind::Infrastructure),
    ("not a vibe kernel", ErrorKind::Infrastructure),
    ("kernel process exited", ErrorKind::Infrastructure),
    ("Error:", ErrorKind::Runtime),
    ("Exception", ErrorKind::Runtime),
    ("Traceback", ErrorKind::Runtime),
    ("RecursionError", ErrorKind::Runtime),
    ("TimeoutError", ErrorKind::Runtime),
];

impl ErrorKind {
    /// The failure class of this kind: syntax is a format failure of the model's output (E2),
    /// runtime and Blender errors are execution failures (E1), resources and infrastructure
    /// escalate (E0), unknown errors go to verification (E3).
    pub fn class(self) -> FailureClass {
        match self {
            ErrorKind::Syntax => FailureClass::E2,
            ErrorKind::Runtime | ErrorKind::Blender => FailureClass::E1,
            ErrorKind::Resource | ErrorKind::Infrastructure => FailureClass::E0,
            ErrorKind::Unknown => FailureClass::E3,
        }
    }
}

/// Classifies error text.
pub fn classify(text: &str) -> ErrorKind {
    TABLE
        .iter()
        .find(|(needle, _)| text.contains(needle))
        .map_or(ErrorKind::Unknown, |(_, kind)| *kind)
}
