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
    Connect(String),
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
    /// The connection dropped while the call was in flight: it may or may not have run.
    #[error("connection lost while the call was in flight; it may or may not have run: {0}")]
    ConnectionLost(String),
    /// The transport is closed (after `close`, a halt, or a dead child).
    #[error("the transport is closed: {0}")]
    Closed(String),
    /// Two calls in flight share an id.
    #[error("call id {0} is already in flight")]
    DuplicateId(u64),
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
        matches!(
            self,
            TransportError::Deadline(_)
                | TransportError::ConnectionLost(_)
                | TransportError::Protocol(_)
        )
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
            TransportError::Deadline(after) => ErrorBody::from_reason(Reason::Deadlock, message)
                .with_detail("deadline_ms", after.as_millis() as u64)
                .with_detail(
                    "partial_effects",
                    "unknown: the kernel may still be running the call",
                ),
            TransportError::Protocol(_) => {
                ErrorBody::from_reason(Reason::ContractViolation, message)
            }
            TransportError::QueueTimeout(_) => ErrorBody::new(ErrorCode::Timeout, message)
                .with_detail("cancelled", true)
                .with_detail("partial_effects", "none: the call was never sent"),
            TransportError::ConnectionLost(_) => ErrorBody::new(ErrorCode::InternalError, message)
                .with_detail("transport", "connection_lost"),
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
            TransportError::ConnectionLost(_) => "connection_lost",
            TransportError::Closed(_) => "closed",
            TransportError::DuplicateId(_) => "duplicate_id",
            TransportError::QueueTimeout(_) => "queue_timeout",
            TransportError::KernelRestarted { .. } => "kernel_restarted",
        }
    }
}
