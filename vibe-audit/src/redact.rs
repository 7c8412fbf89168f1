//! Redaction by the contract's audit rules: code as a hash unless allowed, secrets never, paths
//! relative to the sandbox.

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};
use vibe_contract::AuditPolicy;

use crate::record::{Event, write_body};

/// Argument keys whose values are secrets and are never written.
pub const SECRET_KEYS: [&str; 6] = [
    "token",
    "password",
    "secret",
    "api_key",
    "authorization",
    "auth",
];

/// Argument keys that hold agent-written code.
pub const CODE_KEYS: [&str; 2] = ["code", "script"];

/// Argument keys that hold file paths.
pub const PATH_KEYS: [&str; 3] = ["path", "filepath", "output"];

/// Applies the audit policy to values before they are written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Redactor {
    keep_code: bool,
    keep_paths: bool,
    sandbox: Option<PathBuf>,
}

impl Redactor {
    /// The redactor for a contract's audit policy and the session's sandbox folder.
    pub fn new(policy: &AuditPolicy, sandbox: Option<PathBuf>) -> Redactor {
        Redactor {
            keep_code: policy.keep_code,
            keep_paths: policy.keep_paths,
            sandbox,
        }
    }

    /// Whether [`Redactor::redact`] would change `value` (checked without allocating, so the
    /// common case — nothing to redact — costs no copy).
    pub fn needs_redaction(&self, value: &Value) -> bool {
        match value {
            Value::Object(map) => map.iter().any(|(key, item)| {
                is_one_of(key, &SECRET_KEYS)
                    || (!self.keep_code && is_one_of(key, &CODE_KEYS) && item.is_string())
                    || (!self.keep_paths && is_one_of(key, &PATH_KEYS) && item.is_string())
                    || self.needs_redaction(item)
            }),
            Value::Array(items) => items.iter().any(|item| self.needs_redaction(item)),
            _ => false,
        }
    }

    /// A copy of `value` with secrets removed, code hashed and paths made sandbox-relative.
    pub fn redact(&self, value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, item)| {
                        let redacted = if is_one_of(key, &SECRET_KEYS) {
                            json!("[redacted]")
                        } else if !self.keep_code && is_one_of(key, &CODE_KEYS) && item.is_string() {
                            let code = item.as_str().unwrap_or_default();
                            json!({"blake3": format!("blake3:{}", blake3::hash(code.as_bytes()).to_hex()), "bytes": code.len()})
                        } else if !self.keep_paths && is_one_of(key, &PATH_KEYS) && item.is_string() {
                            json!(self.relative(item.as_str().unwrap_or_default()))
                        } else {
                            self.redact(item)
                        };
                        (key.clone(), redacted)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(|item| self.redact(item)).collect()),
            other => other.clone(),
        }
    }

    /// Writes `event`'s part of a record line (see [`write_body`]) into `out`, redacted. Copies
    /// the event only when something in it is to be redacted.
    pub(crate) fn render(&self, event: &Event, out: &mut Vec<u8>) {
        let dirty = |v: &Option<Value>| v.as_ref().is_some_and(|v| self.needs_redaction(v));
        if dirty(&event.args) || dirty(&event.envelope) || dirty(&event.detail) {
            let redacted = Event {
                args: event.args.as_ref().map(|a| self.redact(a)),
                envelope: event.envelope.as_ref().map(|e| self.redact(e)),
                detail: event.detail.as_ref().map(|d| self.redact(d)),
                ..event.clone()
            };
            write_body(out, &redacted);
        } else {
            write_body(out, event);
        }
    }

    /// A path relative to the sandbox; an absolute path outside it keeps only its file name,
    /// marked `<outside sandbox>/`.
    pub fn relative(&self, path: &str) -> String {
        let p = Path::new(path);
        if !p.is_absolute() {
            return path.to_owned();
        }
        if let Some(root) = &self.sandbox
            && let Ok(rest) = normalize(p).strip_prefix(normalize(root))
        {
            return rest.display().to_string();
        }
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!("<outside sandbox>/{name}")
    }
}

/// Whether `key` is one of `keys`, ignoring ASCII case (without a lowercase copy: every key of
/// every record is looked at).
fn is_one_of(key: &str, keys: &[&str]) -> bool {
    keys.iter().any(|k| k.eq_ignore_ascii_case(key))
}

/// Removes `.` and resolves `..` lexically (the audit log records what was asked, it does not
/// touch the file system).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
