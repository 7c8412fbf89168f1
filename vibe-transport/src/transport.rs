//! The `Transport` trait: the one way the bridge reaches a Blender.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use vibe_errors::Envelope;

use crate::error::TransportError;
use crate::frame::{Hello, SessionConfig};

/// One tool call as the transport carries it.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// Unique among the calls in flight on this transport (see [`Transport::next_id`]).
    pub id: u64,
    /// Registry tool name.
    pub tool: String,
    /// Arguments: a JSON object.
    pub params: Value,
    /// How long the caller waits for the answer.
    pub deadline: Duration,
}

impl Call {
    /// A call with the given id, tool, params and deadline.
    pub fn new(id: u64, tool: impl Into<String>, params: Value, deadline: Duration) -> Call {
        Call {
            id,
            tool: tool.into(),
            params,
            deadline,
        }
    }
}

/// A connection to one Blender kernel.
///
/// # Contract
///
/// * **Exactly one answer.** [`Transport::call`] resolves once: with the kernel's envelope
///   (success or a tool error, which are both `Ok`), or with a [`TransportError`] when no
///   envelope could be had. It never waits past the call's deadline (plus scheduling jitter).
/// * **Concurrency.** `call` takes `&self`: many calls may be in flight at once from many tasks.
///   Answers are matched by id, never by order. A transport may bound how many calls are in
///   flight (TCP and stdio: `HandshakeOptions::max_concurrent_calls`, 8 by default; the
///   pipeline above holds the contract's own `max_concurrent_calls`); calls over the bound
///   wait in FIFO order, and the wait counts against their deadline.
/// * **Cancel safety.** Dropping a `call` future abandons the wait: the transport sends a
///   best-effort cancel for that id, and the late answer, if any, is discarded. Whether the
///   kernel ran the call is then unknown; [`Transport::cancel`] does the same explicitly.
/// * **Never resent.** A call in flight when the connection drops fails with
///   [`TransportError::ConnectionLost`] (it may or may not have run). Reconnecting, where a
///   backend does it, is only ever for new calls.
/// * **Halting.** A protocol violation from the peer (malformed frame, oversized frame, unknown
///   id) fails every call in flight and closes the transport for good.
#[async_trait]
pub trait Transport: Send + Sync {
    /// The kernel's hello: protocol, kernel and Blender profile.
    fn hello(&self) -> &Hello;

    /// A fresh call id, unique for this transport's lifetime.
    fn next_id(&self) -> u64;

    /// Sends the session settings; the kernel answers with an envelope.
    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError>;

    /// Runs one tool call. See the trait docs for the contract.
    async fn call(&self, call: Call) -> Result<Envelope, TransportError>;

    /// Runs `calls` in their order and answers each, in the same order (one answer per call,
    /// as [`Transport::call`] gives it). Stream transports send them as one `batch` frame that
    /// the kernel runs on its main thread in one hop; this default runs them one after another.
    async fn call_batch(&self, calls: Vec<Call>) -> Vec<Result<Envelope, TransportError>> {
        let mut answers = Vec::with_capacity(calls.len());
        for call in calls {
            answers.push(self.call(call).await);
        }
        answers
    }

    /// Asks the kernel to stop call `id` as soon as feasible; its waiter gets
    /// [`TransportError::Deadline`] or the kernel's `timeout` envelope with `details.cancelled`.
    async fn cancel(&self, id: u64) -> Result<(), TransportError>;

    /// Ends the session gracefully.
    async fn close(&self) -> Result<(), TransportError>;

    /// Console output the peer printed outside the frame stream (banner, stderr), oldest first.
    fn console(&self) -> Vec<String> {
        Vec::new()
    }

    /// The folders on this machine where the kernel keeps files of the session besides the
    /// sandbox (a jailed kernel's private folder with its snapshots, a supervisor's checkpoints):
    /// the contract's temporary storage counts them. None for a kernel the bridge did not start.
    fn storage_folders(&self) -> Vec<std::path::PathBuf> {
        Vec::new()
    }

    /// The boundary around agent code, when this transport has one (see [`CodeBoundary`]).
    /// Without one, the kernel's own in-kernel check is all there is: a filter.
    fn code_boundary(&self) -> Option<&dyn CodeBoundary> {
        None
    }
}

/// A boundary around agent code: after a call that ran agent code, the kernel that ran it is
/// retired (the transport does so itself, before that call answers), a fresh kernel holds the
/// scene the code left, and the bridge decides with facts from that fresh kernel whether the
/// scene is kept. Nothing the code installed in its own process (timers, handlers, patches)
/// outlives its call, and no code it could reach takes part in the decision.
#[async_trait]
pub trait CodeBoundary: Send + Sync {
    /// Every object (`{"objects": [{name, data, collections, in_scene}]}`), from a kernel that
    /// has run no agent code since it started.
    async fn inventory(&self) -> Result<Value, TransportError>;

    /// After the bridge's check of the last agent code call: keep the scene it left (it becomes
    /// the last good state) or restore the state before it, exactly. A no-op when no agent code
    /// call awaits a decision.
    async fn settle(&self, keep: bool) -> Result<(), TransportError>;
}
