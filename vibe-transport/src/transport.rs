//! The `Transport` trait: the one way the bridge reaches a Blender.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use vibe_errors::Envelope;

use crate::error::TransportError;
use crate::frame::{Hello, SessionConfig};

/// How long a cancelled call may take to stop by itself: a stream transport keeps waiting this
/// long for the kernel's own answer (a kernel answers a call it stopped with `timeout` and
/// `details.cancelled`) before the call fails with [`TransportError::Cancelled`]; a supervised
/// kernel still running the call then is killed and replaced.
pub const CANCEL_GRACE: Duration = Duration::from_millis(1_000);

/// What is left of `deadline` after waiting since `since` (for a call slot, a turn): the wait
/// counts in whole milliseconds, as deadlines are said on the wire and in answers, so a call
/// that did not wait keeps its deadline to the millisecond. At least 1 ms.
pub fn deadline_left(deadline: Duration, since: tokio::time::Instant) -> Duration {
    let waited = Duration::from_millis(since.elapsed().as_millis() as u64);
    deadline
        .saturating_sub(waited)
        .max(Duration::from_millis(1))
}

/// One tool call as the transport carries it. The transport gives it its wire id: ids are the
/// transport's business, never the caller's.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Call {
    /// Registry tool name.
    pub tool: String,
    /// Arguments: a JSON object.
    pub params: Value,
    /// How long the caller waits for the answer.
    pub deadline: Duration,
    /// Fired to ask the kernel to stop the call (see the cancel contract of [`Transport`]).
    pub cancel: CancellationToken,
}

impl Call {
    /// A call of `tool` with `params`, answered within `deadline`.
    pub fn new(tool: impl Into<String>, params: Value, deadline: Duration) -> Call {
        Call {
            tool: tool.into(),
            params,
            deadline,
            cancel: CancellationToken::new(),
        }
    }

    /// The same call, cancelled when `token` fires.
    pub fn cancelled_by(mut self, token: CancellationToken) -> Call {
        self.cancel = token;
        self
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
///   flight: a stream transport holds the contract's `max_concurrent_calls` from the session's
///   `configure` on ([`SessionConfig::max_concurrent_calls`], which the pipeline sends; the
///   pipeline holds the same number), and `HandshakeOptions::max_concurrent_calls` (8) before
///   that. Calls over the bound wait in FIFO order, and the wait counts against their deadline.
/// * **Cancelling.** When the call's [`Call::cancel`] token fires, the kernel is asked to stop
///   the call, and the wait goes on for up to [`CANCEL_GRACE`] (within the deadline) for the
///   kernel's answer; with none by then the call fails with [`TransportError::Cancelled`] and
///   whether it ran is unknown. Dropping a `call` future abandons the wait: the transport asks
///   the kernel to stop it, and the late answer, if any, is discarded.
/// * **Ids.** The transport numbers what it sends; callers never see or choose wire ids.
/// * **Never resent.** A call in flight when the connection drops fails with
///   [`TransportError::ConnectionLost`] (it may or may not have run). Reconnecting, where a
///   backend does it, is only ever for new calls.
/// * **Halting.** A protocol violation from the peer (malformed frame, oversized frame, unknown
///   id) fails every call in flight and closes the transport for good.
#[async_trait]
pub trait Transport: Send + Sync {
    /// The kernel's hello: protocol, kernel and Blender profile.
    fn hello(&self) -> &Hello;

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
