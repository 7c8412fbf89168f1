//! The frames of wire protocol v1 (see `PROTOCOL.md`).
//!
//! A frame is one compact JSON object on one line. On the wire every frame is a flat object with
//! a `type` and the fields of that type; [`Frame::parse`] reads that flat shape in one pass
//! (no buffering of an internally tagged enum) and checks that the fields a type needs are there.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use vibe_contract::{BlenderProfile, SanityLimits};
use vibe_errors::{Envelope, ErrorBody};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The kernel's name in its hello.
pub const KERNEL_NAME: &str = "vibe-kernel";

/// The first frame a kernel sends: who it is and what it needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Protocol version (1).
    pub protocol: u32,
    /// Always `vibe-kernel`.
    pub kernel: String,
    /// The kernel's own version.
    pub kernel_version: String,
    /// The Blender it runs in.
    pub blender: BlenderProfile,
    /// Whether an `auth` frame must come before anything else.
    pub auth_required: bool,
    /// The largest frame the kernel accepts or sends, in bytes.
    pub max_frame_bytes: u64,
    /// A random id of this kernel's start: a different instance behind the same address is a
    /// restarted Blender, whose scene and session are gone (older kernels send none).
    pub instance: Option<String>,
    /// The most calls one `batch` frame may carry; `None`: the kernel takes no batches (an older
    /// kernel), and a batch goes as pipelined calls.
    #[serde(default)]
    pub max_batch_calls: Option<u32>,
    /// The model formats `file.import` and `file.export` take on this Blender (`gltf`, `glb`,
    /// `obj`, `fbx`, `stl`, `usd`); `None`: the kernel does not say (an older kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formats: Option<Vec<String>>,
}

/// One call inside a `batch` frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchedCall {
    /// Request id, unique among calls in flight.
    pub id: u64,
    /// Registry tool name.
    pub tool: String,
    /// Arguments (a JSON object).
    pub params: Value,
    /// Milliseconds the kernel has, from receipt of the batch.
    pub deadline_ms: u64,
}

/// Per-session settings the bridge sends after the handshake (`configure`). Built with
/// [`SessionConfig::new`] and its setters; the fields stay readable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionConfig {
    /// The contract's session id.
    pub session_id: String,
    /// The granted capabilities; the kernel refuses tools that need others.
    pub capabilities: BTreeSet<String>,
    /// Sanity limits, enforced again on the kernel side.
    pub sanity: SanityLimits,
    /// The sandbox folder for file.save and render.still (absolute, canonical), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Read-only project roots (absolute, canonical): `file.open` may open `.blend` files from
    /// them (and from the sandbox); nothing is ever written into them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub project_roots: Vec<String>,
    /// The deadline of one call, in milliseconds, when a call frame gives none.
    pub time_per_tool_ms: u64,
    /// The contract's bound on calls in flight: a stream transport holds its call slots to it
    /// from this `configure` on (the pipeline's own bound is the same number). `None` keeps the
    /// transport's bound ([`HandshakeOptions::max_concurrent_calls`](crate::HandshakeOptions)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_calls: Option<u32>,
}

impl SessionConfig {
    /// Settings for session `session_id`: no capability granted, the default sanity limits,
    /// no sandbox or project root, 15 s a call, no bound of its own on calls in flight.
    pub fn new(session_id: impl Into<String>) -> SessionConfig {
        SessionConfig {
            session_id: session_id.into(),
            capabilities: BTreeSet::new(),
            sanity: SanityLimits::default(),
            sandbox: None,
            project_roots: Vec::new(),
            time_per_tool_ms: 15_000,
            max_concurrent_calls: None,
        }
    }

    /// Grants `capabilities` (`scene.read`, `scene.write`, ...).
    pub fn capabilities<S: Into<String>>(
        mut self,
        capabilities: impl IntoIterator<Item = S>,
    ) -> SessionConfig {
        self.capabilities = capabilities.into_iter().map(Into::into).collect();
        self
    }

    /// The sandbox folder (absolute, canonical).
    pub fn sandbox(mut self, sandbox: impl Into<String>) -> SessionConfig {
        self.sandbox = Some(sandbox.into());
        self
    }

    /// The read-only project roots (absolute, canonical).
    pub fn project_roots<S: Into<String>>(
        mut self,
        roots: impl IntoIterator<Item = S>,
    ) -> SessionConfig {
        self.project_roots = roots.into_iter().map(Into::into).collect();
        self
    }

    /// The sanity limits.
    pub fn sanity(mut self, sanity: SanityLimits) -> SessionConfig {
        self.sanity = sanity;
        self
    }

    /// The deadline of one call, in milliseconds.
    pub fn time_per_tool_ms(mut self, ms: u64) -> SessionConfig {
        self.time_per_tool_ms = ms;
        self
    }

    /// The bound on calls in flight (the contract's `max_concurrent_calls`).
    pub fn max_concurrent_calls(mut self, bound: u32) -> SessionConfig {
        self.max_concurrent_calls = Some(bound);
        self
    }

    /// The deadline of one call under these settings (at least 1 ms).
    pub fn call_deadline(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.time_per_tool_ms.max(1))
    }
}

/// A transaction handed to a kernel with a restore: its id and the snapshot of its `begin`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionCarry {
    /// The transaction's id.
    pub id: String,
    /// The `.blend` of the scene at `begin` (the kernel copies it).
    pub snapshot: String,
}

/// One frame of wire protocol v1.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// Kernel -> bridge, first: identity and needs.
    Hello(Box<Hello>),
    /// Bridge -> kernel: the token, when the hello asks for one.
    Auth {
        /// The shared secret.
        token: String,
    },
    /// Kernel -> bridge: the token was right.
    AuthOk,
    /// Bridge -> kernel: per-session settings; answered by a `result` with the same id.
    Configure {
        /// Request id.
        id: u64,
        /// The settings.
        session: Box<SessionConfig>,
    },
    /// Bridge -> kernel: run a tool.
    Call {
        /// Request id, unique among calls in flight.
        id: u64,
        /// Registry tool name.
        tool: String,
        /// Arguments (a JSON object).
        params: Value,
        /// Milliseconds the kernel has, from receipt.
        deadline_ms: u64,
    },
    /// Bridge -> kernel: several calls, run in order on Blender's main thread in one hop; each
    /// is answered by a `result` of its own as soon as it is done.
    Batch {
        /// The calls, in the order they run.
        calls: Vec<BatchedCall>,
    },
    /// Bridge -> kernel: save the whole scene as a `.blend` at `path` (the last good state a
    /// replacement kernel is restored from); answered by a `result` with the same id.
    Checkpoint {
        /// Request id.
        id: u64,
        /// Where to write, inside the kernel's private folder.
        path: String,
    },
    /// Bridge -> kernel: replace the scene with the `.blend` at `path` (Python auto-execution
    /// off), forgetting cached references and any open transaction; answered by a `result`.
    Restore {
        /// Request id.
        id: u64,
        /// The checkpoint to load.
        path: String,
        /// The transaction open at the checkpoint, if any; the kernel takes it over.
        transaction: Option<TransactionCarry>,
    },
    /// Bridge -> kernel: list every object (name, data, scene collections, whether the scene
    /// holds it) for the actuator lock's check; answered by a `result` with the same id.
    Inventory {
        /// Request id.
        id: u64,
    },
    /// Bridge -> kernel: stop call `id` as soon as feasible.
    Cancel {
        /// The call to cancel.
        id: u64,
    },
    /// Kernel -> bridge: the one answer to request `id`.
    Result {
        /// The request id.
        id: u64,
        /// The answer.
        envelope: Envelope,
    },
    /// Either way: a protocol error; the sender closes the connection after it.
    Error {
        /// What went wrong.
        error: ErrorBody,
    },
    /// Bridge -> kernel: the session ends; the kernel closes the connection.
    Bye,
}

/// The flat wire shape of every frame, as read (every field optional; `Frame::parse` checks
/// which ones a type needs; a missing `Option` field reads as `None`).
#[derive(Deserialize)]
struct WireFrame {
    #[serde(rename = "type")]
    kind: String,
    id: Option<u64>,
    tool: Option<String>,
    params: Option<Value>,
    deadline_ms: Option<u64>,
    envelope: Option<Envelope>,
    error: Option<ErrorBody>,
    token: Option<String>,
    session: Option<SessionConfig>,
    path: Option<String>,
    transaction: Option<TransactionCarry>,
    // Hello fields.
    protocol: Option<u32>,
    kernel: Option<String>,
    kernel_version: Option<String>,
    blender: Option<BlenderProfile>,
    auth_required: Option<bool>,
    max_frame_bytes: Option<u64>,
    instance: Option<String>,
    max_batch_calls: Option<u32>,
    calls: Option<Vec<BatchedCall>>,
    formats: Option<Vec<String>>,
}

/// A line that is not a valid frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The bytes are not UTF-8.
    #[error("frame is not valid UTF-8")]
    NotUtf8,
    /// The line is not JSON, or not a JSON object.
    #[error("frame is not a JSON object: {0}")]
    NotAnObject(String),
    /// The object has no known `type`, or lacks a field its type needs.
    #[error("invalid frame: {0}")]
    Invalid(String),
}

fn need<T>(value: Option<T>, kind: &str, field: &str) -> Result<T, FrameError> {
    value.ok_or_else(|| FrameError::Invalid(format!("`{kind}` frame without `{field}`")))
}

impl Frame {
    /// Parses one line (without its newline).
    pub fn parse(line: &[u8]) -> Result<Frame, FrameError> {
        if std::str::from_utf8(line).is_err() {
            return Err(FrameError::NotUtf8);
        }
        let first = line.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            return Err(FrameError::NotAnObject("expected `{`".into()));
        }
        let wire: WireFrame = serde_json::from_slice(line).map_err(|e| {
            if e.is_data() {
                FrameError::Invalid(e.to_string())
            } else {
                FrameError::NotAnObject(e.to_string())
            }
        })?;
        let kind = wire.kind.as_str();
        Ok(match kind {
            "hello" => Frame::Hello(Box::new(Hello {
                protocol: need(wire.protocol, kind, "protocol")?,
                kernel: need(wire.kernel, kind, "kernel")?,
                kernel_version: need(wire.kernel_version, kind, "kernel_version")?,
                blender: need(wire.blender, kind, "blender")?,
                auth_required: need(wire.auth_required, kind, "auth_required")?,
                max_frame_bytes: need(wire.max_frame_bytes, kind, "max_frame_bytes")?,
                instance: wire.instance,
                max_batch_calls: wire.max_batch_calls,
                formats: wire.formats,
            })),
            "auth" => Frame::Auth {
                token: need(wire.token, kind, "token")?,
            },
            "auth_ok" => Frame::AuthOk,
            "configure" => Frame::Configure {
                id: need(wire.id, kind, "id")?,
                session: Box::new(need(wire.session, kind, "session")?),
            },
            "call" => {
                let params = wire
                    .params
                    .unwrap_or_else(|| Value::Object(Default::default()));
                if !params.is_object() {
                    return Err(FrameError::Invalid(
                        "`call` params must be an object".into(),
                    ));
                }
                Frame::Call {
                    id: need(wire.id, kind, "id")?,
                    tool: need(wire.tool, kind, "tool")?,
                    params,
                    deadline_ms: need(wire.deadline_ms, kind, "deadline_ms")?,
                }
            }
            "batch" => {
                let calls = need(wire.calls, kind, "calls")?;
                if calls.iter().any(|c| !c.params.is_object()) {
                    return Err(FrameError::Invalid(
                        "`batch` call params must be objects".into(),
                    ));
                }
                Frame::Batch { calls }
            }
            "cancel" => Frame::Cancel {
                id: need(wire.id, kind, "id")?,
            },
            "inventory" => Frame::Inventory {
                id: need(wire.id, kind, "id")?,
            },
            "checkpoint" => Frame::Checkpoint {
                id: need(wire.id, kind, "id")?,
                path: need(wire.path, kind, "path")?,
            },
            "restore" => Frame::Restore {
                id: need(wire.id, kind, "id")?,
                path: need(wire.path, kind, "path")?,
                transaction: wire.transaction,
            },
            "result" => Frame::Result {
                id: need(wire.id, kind, "id")?,
                envelope: need(wire.envelope, kind, "envelope")?,
            },
            "error" => Frame::Error {
                error: need(wire.error, kind, "error")?,
            },
            "bye" => Frame::Bye,
            other => return Err(FrameError::Invalid(format!("unknown frame type {other:?}"))),
        })
    }

    /// The frame's `type` on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Hello(_) => "hello",
            Frame::Auth { .. } => "auth",
            Frame::AuthOk => "auth_ok",
            Frame::Configure { .. } => "configure",
            Frame::Call { .. } => "call",
            Frame::Batch { .. } => "batch",
            Frame::Cancel { .. } => "cancel",
            Frame::Inventory { .. } => "inventory",
            Frame::Checkpoint { .. } => "checkpoint",
            Frame::Restore { .. } => "restore",
            Frame::Result { .. } => "result",
            Frame::Error { .. } => "error",
            Frame::Bye => "bye",
        }
    }

    /// The frame as one line of compact JSON, with its newline.
    pub fn to_line(&self) -> Vec<u8> {
        let mut wire = WireOut {
            kind: self.kind(),
            ..WireOut::default()
        };
        match self {
            Frame::Hello(hello) => {
                wire.protocol = Some(hello.protocol);
                wire.kernel = Some(&hello.kernel);
                wire.kernel_version = Some(&hello.kernel_version);
                wire.blender = Some(&hello.blender);
                wire.auth_required = Some(hello.auth_required);
                wire.max_frame_bytes = Some(hello.max_frame_bytes);
                wire.instance = hello.instance.as_deref();
                wire.max_batch_calls = hello.max_batch_calls;
                wire.formats = hello.formats.as_deref();
            }
            Frame::Auth { token } => wire.token = Some(token),
            Frame::AuthOk | Frame::Bye => {}
            Frame::Configure { id, session } => {
                wire.id = Some(*id);
                wire.session = Some(session);
            }
            Frame::Call {
                id,
                tool,
                params,
                deadline_ms,
            } => {
                wire.id = Some(*id);
                wire.tool = Some(tool);
                wire.params = Some(params);
                wire.deadline_ms = Some(*deadline_ms);
            }
            Frame::Batch { calls } => wire.calls = Some(calls),
            Frame::Cancel { id } | Frame::Inventory { id } => wire.id = Some(*id),
            Frame::Checkpoint { id, path } => {
                wire.id = Some(*id);
                wire.path = Some(path);
            }
            Frame::Restore {
                id,
                path,
                transaction,
            } => {
                wire.id = Some(*id);
                wire.path = Some(path);
                wire.transaction = transaction.as_ref();
            }
            Frame::Result { id, envelope } => {
                wire.id = Some(*id);
                wire.envelope = Some(envelope);
            }
            Frame::Error { error } => wire.error = Some(error),
        }
        // Only strings, numbers and JSON values: serializing cannot fail.
        let mut line = serde_json::to_vec(&wire).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// The flat wire shape again, borrowing the frame's parts: writing a frame copies nothing.
#[derive(Default, Serialize)]
struct WireOut<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    envelope: Option<&'a Envelope>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<&'a SessionConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    transaction: Option<&'a TransactionCarry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    blender: Option<&'a BlenderProfile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_required: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_frame_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_batch_calls: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    calls: Option<&'a [BatchedCall]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    formats: Option<&'a [String]>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_hello_may_list_its_model_formats() {
        let blender = r#"{"version":"5.0.1","build_hash":"a","platform":"linux","background":true,"features":[]}"#;
        let older = format!(
            r#"{{"type":"hello","protocol":1,"kernel":"vibe-kernel","kernel_version":"0.1.0","blender":{blender},"auth_required":false,"max_frame_bytes":1024}}"#
        );
        let Frame::Hello(hello) = Frame::parse(older.as_bytes()).unwrap() else {
            panic!("not a hello")
        };
        assert_eq!(hello.formats, None);
        let newer = format!(r#"{},"formats":["obj","stl"]}}"#, &older[..older.len() - 1]);
        let Frame::Hello(hello) = Frame::parse(newer.as_bytes()).unwrap() else {
            panic!("not a hello")
        };
        assert_eq!(
            hello.formats,
            Some(vec!["obj".to_owned(), "stl".to_owned()])
        );
        let again = Frame::parse(&Frame::Hello(hello.clone()).to_line()).unwrap();
        assert_eq!(again, Frame::Hello(hello));
    }

    #[test]
    fn call_round_trip() {
        let frame = Frame::Call {
            id: 7,
            tool: "object.move".into(),
            params: json!({"name": "Cube"}),
            deadline_ms: 100,
        };
        let line = frame.to_line();
        assert_eq!(
            std::str::from_utf8(&line).unwrap(),
            "{\"type\":\"call\",\"id\":7,\"tool\":\"object.move\",\"params\":{\"name\":\"Cube\"},\"deadline_ms\":100}\n"
        );
        assert_eq!(Frame::parse(&line[..line.len() - 1]).unwrap(), frame);
    }

    #[test]
    fn batch_round_trip() {
        let frame = Frame::Batch {
            calls: vec![BatchedCall {
                id: 3,
                tool: "object.info".into(),
                params: json!({"name": "Cube"}),
                deadline_ms: 50,
            }],
        };
        let line = frame.to_line();
        assert_eq!(
            std::str::from_utf8(&line).unwrap(),
            "{\"type\":\"batch\",\"calls\":[{\"id\":3,\"tool\":\"object.info\",\"params\":{\"name\":\"Cube\"},\"deadline_ms\":50}]}\n"
        );
        assert_eq!(Frame::parse(&line[..line.len() - 1]).unwrap(), frame);
        assert!(matches!(
            Frame::parse(
                br#"{"type":"batch","calls":[{"id":1,"tool":"t","params":[],"deadline_ms":1}]}"#
            ),
            Err(FrameError::Invalid(_))
        ));
        assert!(matches!(
            Frame::parse(br#"{"type":"batch"}"#),
            Err(FrameError::Invalid(_))
        ));
    }

    #[test]
    fn bad_frames() {
        assert_eq!(Frame::parse(&[0xff, 0xfe]), Err(FrameError::NotUtf8));
        assert!(matches!(
            Frame::parse(b"[1,2]"),
            Err(FrameError::NotAnObject(_))
        ));
        assert!(matches!(
            Frame::parse(b"{\"type\":\"nope\"}"),
            Err(FrameError::Invalid(_))
        ));
        assert!(matches!(
            Frame::parse(b"{\"type\":\"call\",\"id\":1}"),
            Err(FrameError::Invalid(_))
        ));
        assert!(matches!(
            Frame::parse(b"{\"id\":1}"),
            Err(FrameError::Invalid(_))
        ));
        assert!(matches!(
            Frame::parse(b"{\"type\":"),
            Err(FrameError::NotAnObject(_))
        ));
    }
}
