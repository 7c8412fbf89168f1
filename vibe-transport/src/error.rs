//! Transport errors, and how each becomes an error model v1 envelope.

use std::time::Duration;

use vibe_errors::{ErrorBody, ErrorCode, Reason};

/// Why a call got no envelope from the kernel.
///
/// Every variant is failure class E0 (infrastructure). [`TransportError::to_error_body`] turns
/// one into the envelope an agent sees.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Could not reach the kernel (refused, unreachable, child did not start).
    #[error("could not connect to the kernel: {0}")]
    Connect(#[source] Cause),
    /// The peer answered, but is not a vibe kernel (no hello, or another protocol).
    #[error("the peer is not a vibe kernel: {0}")]
    NotAVibeKernel(String),
    /// The kernel speaks another protocol version.
    #[error("the kernel speaks protocol {found}, this bridge speaks {expected}")]
    ProtocolVersion {
        /// The bridge's version.
        expected: u32,
        /// The kernel's.
        found: u32,
    },
    /// The token was refused, or a token is needed and none was given.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The peer broke the protocol (malformed frame, unknown id, oversized frame); the session
    /// halts.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The call waited for a free slot (the concurrency bound) until its deadline and was never
    /// sent: it did not run.
    #[error("no call slot within {0:?}; the call was never sent")]
    QueueTimeout(Duration),
    /// The caller cancelled the call before its answer arrived; the kernel was asked to stop it
    /// (it may have run in part).
    #[error("cancelled by the caller; the kernel was asked to stop the call")]
    Cancelled,
    /// The caller cancelled the call before it was sent: it did not run.
    #[error("cancelled by the caller before the call was sent; it did not run")]
    CancelledUnsent,
    /// The call's deadline passed before its answer arrived.
    #[error("no answer within {0:?}")]
    Deadline(Duration),
    /// A different kernel instance answered at the same address: Blender restarted, and the
    /// session's scene, transaction and records are gone with the old one.
    #[error(
        "the kernel restarted (instance {old} is now {new}); the session's scene and transaction are gone: start a new session"
    )]
    KernelRestarted {
        /// The instance the session started with.
        old: String,
        /// The instance that answered now.
        new: String,
    },
    /// The kernel's process ended (stdio): how it ended, its last console lines, and whether
    /// this call had been sent to it.
    #[error("{0}")]
    KernelExited(ExitReport),
    /// The connection dropped while the call was in flight: it may or may not have run.
    #[error("connection lost while the call was in flight; it may or may not have run: {0}")]
    ConnectionLost(#[source] Cause),
    /// The transport is closed (after `close`, a halt, or a dead child).
    #[error("the transport is closed: {0}")]
    Closed(String),
}

/// What lies under a [`TransportError::Connect`] or [`TransportError::ConnectionLost`]: a
/// message for the agent, and the I/O error behind it when there is one, kept whole
/// ([`std::error::Error::source`] of the cause returns it).
#[derive(Clone, Debug)]
pub struct Cause {
    message: String,
    io: Option<std::sync::Arc<std::io::Error>>,
}

impl Cause {
    /// A cause with no I/O error behind it.
    pub fn new(message: impl Into<String>) -> Cause {
        Cause {
            message: message.into(),
            io: None,
        }
    }

    /// An I/O error, with what was being done when it happened.
    pub fn io(context: impl std::fmt::Display, error: std::io::Error) -> Cause {
        Cause {
            message: format!("{context}: {error}"),
            io: Some(std::sync::Arc::new(error)),
        }
    }

    /// The message, as the error's text shows it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The I/O error behind it, if there is one.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        self.io.as_deref()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Cause) -> bool {
        self.message == other.message
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<String> for Cause {
    fn from(message: String) -> Cause {
        Cause::new(message)
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Cause {
        Cause::new(message)
    }
}

impl From<std::io::Error> for Cause {
    fn from(error: std::io::Error) -> Cause {
        Cause {
            message: error.to_string(),
            io: Some(std::sync::Arc::new(error)),
        }
    }
}

/// How a kernel process ended, as [`TransportError::KernelExited`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExitReport {
    /// How it ended, as the operating system says (`exit status: 1`, `signal: 9 (SIGKILL)`).
    pub status: String,
    /// The exit code, when it exited by itself.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Its last console lines (stderr), oldest first, at most [`EXIT_CONSOLE_LINES`].
    pub console: Vec<String>,
    /// Whether the call had been sent to the kernel (then it may have run).
    pub sent: bool,
}

/// How many of a dead kernel's last console lines an [`ExitReport`] carries.
pub const EXIT_CONSOLE_LINES: usize = 5;

impl std::fmt::Display for ExitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the kernel process exited ({})", self.status)?;
        if self.sent {
            write!(
                f,
                " while the call was in flight; it may or may not have run"
            )?;
        } else {
            write!(f, "; the call was never sent")?;
        }
        if let Some(last) = self.console.last() {
            write!(f, "; last console line: {last}")?;
        }
        Ok(())
    }
}

impl TransportError {
    /// Whether the session must halt (the peer cannot be trusted any more).
    pub fn halts_session(&self) -> bool {
        matches!(
            self,
            TransportError::Protocol(_) | TransportError::NotAVibeKernel(_)
        )
    }

    /// Whether the call may have run in Blender although no answer came: true when the request
    /// may have been sent (a missed deadline, a dropped connection, an unreadable answer), so
    /// the bridge cannot rule it out.
    pub fn may_have_run(&self) -> bool {
        match self {
            TransportError::KernelExited(report) => report.sent,
            other => matches!(
                other,
                TransportError::Deadline(_)
                    | TransportError::Cancelled
                    | TransportError::ConnectionLost(_)
                    | TransportError::Protocol(_)
            ),
        }
    }

    /// Whether the call was sent and then its connection or kernel went away: the cases where
    /// an idempotent call may be repeated on a recovered transport.
    pub fn lost_in_flight(&self) -> bool {
        match self {
            TransportError::ConnectionLost(_) => true,
            TransportError::KernelExited(report) => report.sent,
            _ => false,
        }
    }

    /// The error model v1 body for this error; `details.may_have_run` is set when the call may
    /// have run.
    pub fn to_error_body(&self) -> ErrorBody {
        let body = self.body();
        if self.may_have_run() {
            body.with_detail("may_have_run", true)
        } else {
            body
        }
    }

    fn body(&self) -> ErrorBody {
        let message = self.to_string();
        match self {
            // Alive as far as the bridge knows, and not answering: hung (or too slow).
            TransportError::Deadline(after) => ErrorBody::from_reason(Reason::Deadlock, message)
                .with_detail("kernel", "hung")
                .with_detail("deadline_ms", after.as_millis() as u64)
                .with_detail(
                    "partial_effects",
                    "unknown: the kernel may still be running the call",
                ),
            TransportError::Protocol(_) => {
                ErrorBody::from_reason(Reason::ContractViolation, message)
            }
            TransportError::Cancelled => ErrorBody::new(ErrorCode::Timeout, message)
                .with_detail("cancelled", true)
                .with_detail(
                    "partial_effects",
                    "unknown: the kernel may have started the call",
                ),
            TransportError::CancelledUnsent => ErrorBody::new(ErrorCode::Timeout, message)
                .with_detail("cancelled", true)
                .with_detail("partial_effects", "none: the call never started"),
            TransportError::QueueTimeout(_) => ErrorBody::new(ErrorCode::Timeout, message)
                .with_detail("cancelled", true)
                .with_detail("partial_effects", "none: the call was never sent"),
            TransportError::ConnectionLost(_) => ErrorBody::new(ErrorCode::InternalError, message)
                .with_detail("transport", "connection_lost")
                .with_detail("kernel", "disconnected"),
            TransportError::KernelExited(report) => {
                let mut body = ErrorBody::new(ErrorCode::InternalError, message)
                    .with_detail("transport", "kernel_exited")
                    .with_detail("kernel", "dead")
                    .with_detail("exit_status", report.status.clone())
                    .with_detail("console", report.console.clone());
                if let Some(code) = report.code {
                    body = body.with_detail("exit_code", code);
                }
                if let Some(signal) = report.signal {
                    body = body.with_detail("signal", signal);
                }
                body
            }
            TransportError::KernelRestarted { .. } => {
                ErrorBody::new(ErrorCode::InternalError, message)
                    .with_detail("transport", "kernel_restarted")
                    .with_detail("kernel", "restarted")
            }
            other => ErrorBody::new(ErrorCode::InternalError, other.to_string())
                .with_detail("transport", other.kind()),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            TransportError::Connect(_) => "connect",
            TransportError::NotAVibeKernel(_) => "not_a_vibe_kernel",
            TransportError::ProtocolVersion { .. } => "protocol_version",
            TransportError::Auth(_) => "auth",
            TransportError::Protocol(_) => "protocol",
            TransportError::Deadline(_) => "deadline",
            TransportError::Cancelled => "cancelled",
            TransportError::CancelledUnsent => "cancelled_unsent",
            TransportError::ConnectionLost(_) => "connection_lost",
            TransportError::Closed(_) => "closed",
            TransportError::QueueTimeout(_) => "queue_timeout",
            TransportError::KernelRestarted { .. } => "kernel_restarted",
            TransportError::KernelExited(_) => "kernel_exited",
        }
    }
}
