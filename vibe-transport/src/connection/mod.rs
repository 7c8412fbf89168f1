//! The one stream transport: the client side of wire protocol v1 over any
//! `AsyncRead`/`AsyncWrite` pair (a TCP stream, a child's stdin and stdout, a Unix socket, an
//! in-memory pipe): handshake, ids of its own, id-matched dispatch, deadlines, cancellation,
//! batches and a concurrency bound. [`Connection`] is a [`Transport`] by itself; the TCP
//! backend adds reconnection around it, the stdio backend a child process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use vibe_errors::Envelope;

use crate::codec::{CodecError, LineCodec};
use crate::error::TransportError;
use crate::frame::{Frame, Hello, KERNEL_NAME, PROTOCOL_VERSION, SessionConfig};
use crate::transport::{CANCEL_GRACE, Call, Transport};

mod batch;
mod read;
pub use batch::{BATCH_ANSWER_GATHER, MAX_BATCH_CALLS};

/// How the handshake goes.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HandshakeOptions {
    /// How long to wait for the hello (and the auth answer).
    pub deadline: Duration,
    /// The token to prove, when the kernel asks for one.
    pub token: Option<String>,
    /// Whether lines before the hello that are not frames are console output (stdio, where
    /// Blender prints a banner) rather than proof that the peer is not a vibe kernel (TCP).
    pub skip_noise: bool,
    /// The most noise lines kept before the hello; more is an error.
    pub max_noise_lines: usize,
    /// The largest frame accepted, in bytes.
    pub max_frame_bytes: usize,
    /// How many calls may be in flight at once, until a session's `configure` gives the
    /// contract's bound ([`SessionConfig::max_concurrent_calls`]).
    pub max_concurrent_calls: usize,
    /// How long a caller keeps polling for its answer before its task sleeps
    /// ([`BUSY_POLL`] by default; zero sleeps at once). A quick call's answer comes back
    /// within it without waking a sleeping CPU, which on a virtual machine costs more than the
    /// call; a slower call costs at most this much CPU more. The stdio kernel does the same on
    /// its side (`VIBE_KERNEL_SPIN_US`, PROTOCOL.md §5).
    pub busy_poll: Duration,
}

/// The default [`HandshakeOptions::busy_poll`]: long enough for a quick call's round trip.
pub const BUSY_POLL: Duration = Duration::from_micros(200);

impl Default for HandshakeOptions {
    fn default() -> Self {
        HandshakeOptions {
            deadline: Duration::from_secs(5),
            token: None,
            skip_noise: false,
            max_noise_lines: 10_000,
            max_frame_bytes: crate::codec::DEFAULT_MAX_FRAME_BYTES,
            max_concurrent_calls: 8,
            busy_poll: BUSY_POLL,
        }
    }
}

type Waiter = oneshot::Sender<Result<Envelope, TransportError>>;

/// The write side, shared by callers (who write directly when it is free) and the writer task
/// (which coalesces what queued up while it was busy). `None` once closed.
type SharedWriter = Arc<tokio::sync::Mutex<Option<BufWriter<Box<dyn AsyncWrite + Send + Unpin>>>>>;

struct Shared {
    pending: Mutex<HashMap<u64, Waiter>>,
    /// Set once the connection ends; every later call fails with it.
    closed: Mutex<Option<TransportError>>,
    /// The highest id ever sent: a result for a larger id is a protocol violation.
    highest_sent: AtomicU64,
    /// The next request id: the connection numbers what it sends, so ids never collide.
    next_id: AtomicU64,
}

impl Shared {
    fn fail_all(&self, error: TransportError) {
        let mut closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        if closed.is_none() {
            *closed = Some(error.clone());
        }
        drop(closed);
        let waiters: Vec<Waiter> = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.drain().map(|(_, w)| w).collect()
        };
        for waiter in waiters {
            let _ = waiter.send(Err(error.clone()));
        }
    }

    fn closed_error(&self) -> Option<TransportError> {
        self.closed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A live protocol connection: a reader task (and a waiting caller, in turn) reads answers, a
/// writer task sends what callers do not write themselves.
pub struct Connection {
    hello: Hello,
    shared: Arc<Shared>,
    /// The read side: the reader task's, and a waiting caller's in turn.
    read: read::SharedRead,
    outgoing: mpsc::Sender<Outgoing>,
    writer: SharedWriter,
    permits: Arc<Semaphore>,
    /// How many call slots `permits` stands for now.
    bound: std::sync::atomic::AtomicUsize,
    console: Arc<Mutex<Vec<String>>>,
    busy_poll: Duration,
    /// The cancel of requests that have none of their own: never cancelled.
    never: CancellationToken,
}

/// What the writer task is asked to do.
enum Outgoing {
    /// Write one frame line.
    Line(Vec<u8>),
    /// Write `bye`, then close the write side (stdin of a child, the TCP write half).
    Close,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("hello", &self.hello)
            .finish_non_exhaustive()
    }
}

/// Why the session's peer is not a vibe kernel, from its first line.
fn not_a_kernel(line: &[u8]) -> TransportError {
    let preview: String = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
    TransportError::NotAVibeKernel(format!(
        "its first line is not a vibe hello frame: {preview:?}"
    ))
}

impl Connection {
    /// Runs the handshake over `reader` / `writer` and starts the connection's tasks.
    pub async fn establish<R, W>(
        reader: R,
        writer: W,
        options: HandshakeOptions,
    ) -> Result<Connection, TransportError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let reader: Box<dyn AsyncRead + Send + Unpin> = Box::new(reader);
        let mut frames: read::Frames =
            FramedRead::with_capacity(reader, LineCodec::new(options.max_frame_bytes), 64 * 1024);
        let mut writer = BufWriter::new(writer);
        let console = Arc::new(Mutex::new(Vec::new()));
        let handshake = async {
            let hello = loop {
                let line = match frames.next().await {
                    Some(Ok(line)) => line,
                    Some(Err(CodecError::FrameTooLarge { max })) => {
                        return Err(TransportError::NotAVibeKernel(format!(
                            "its first line exceeds {max} bytes"
                        )));
                    }
                    Some(Err(CodecError::Io(e))) => {
                        return Err(TransportError::Connect(e.into()));
                    }
                    None => {
                        return Err(TransportError::NotAVibeKernel(
                            "the peer closed the connection without a hello".into(),
                        ));
                    }
                };
                match Frame::parse(&line) {
                    Ok(Frame::Hello(hello)) => break hello,
                    Ok(_) => return Err(not_a_kernel(&line)),
                    Err(_) if options.skip_noise => {
                        let mut console = console.lock().unwrap_or_else(|e| e.into_inner());
                        if console.len() >= options.max_noise_lines {
                            return Err(TransportError::NotAVibeKernel(format!(
                                "more than {} lines of output before a hello",
                                options.max_noise_lines
                            )));
                        }
                        console.push(String::from_utf8_lossy(&line).into_owned());
                    }
                    Err(_) => return Err(not_a_kernel(&line)),
                }
            };
            if hello.kernel != KERNEL_NAME {
                return Err(TransportError::NotAVibeKernel(format!(
                    "hello names kernel {:?}",
                    hello.kernel
                )));
            }
            if hello.protocol != PROTOCOL_VERSION {
                return Err(TransportError::ProtocolVersion {
                    expected: PROTOCOL_VERSION,
                    found: hello.protocol,
                });
            }
            if hello.auth_required {
                let token = options.token.clone().ok_or_else(|| {
                    TransportError::Auth("the kernel requires a token and none was given".into())
                })?;
                write_frame(&mut writer, &Frame::Auth { token }).await?;
                match frames.next().await {
                    Some(Ok(line)) => match Frame::parse(&line) {
                        Ok(Frame::AuthOk) => {}
                        Ok(Frame::Error { error }) => {
                            return Err(TransportError::Auth(error.message));
                        }
                        _ => {
                            return Err(TransportError::Protocol(
                                "expected auth_ok after auth".into(),
                            ));
                        }
                    },
                    _ => {
                        return Err(TransportError::Auth(
                            "the kernel closed the connection after auth".into(),
                        ));
                    }
                }
            }
            Ok(*hello)
        };
        let hello = match tokio::time::timeout(options.deadline, handshake).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(TransportError::NotAVibeKernel(format!(
                    "no hello within {:?}: the peer stays silent, as a non-vibe listener does",
                    options.deadline
                )));
            }
        };
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            closed: Mutex::new(None),
            highest_sent: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
        });
        let (outgoing, receiver) = mpsc::channel(1024);
        let boxed: Box<dyn AsyncWrite + Send + Unpin> = Box::new(writer.into_inner());
        let writer: SharedWriter = Arc::new(tokio::sync::Mutex::new(Some(BufWriter::new(boxed))));
        tokio::spawn(write_loop(
            Arc::clone(&writer),
            receiver,
            Arc::clone(&shared),
        ));
        let read = read::shared_read(frames);
        tokio::spawn(read::read_loop(Arc::clone(&read), Arc::clone(&shared)));
        Ok(Connection {
            hello,
            shared,
            read,
            outgoing,
            writer,
            permits: Arc::new(Semaphore::new(options.max_concurrent_calls.max(1))),
            bound: std::sync::atomic::AtomicUsize::new(options.max_concurrent_calls.max(1)),
            console,
            busy_poll: options.busy_poll,
            never: CancellationToken::new(),
        })
    }

    /// The kernel's hello.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// Why the connection ended, if it has.
    pub fn closed(&self) -> Option<TransportError> {
        self.shared.closed_error()
    }

    /// Fails every call in flight and ends the connection (used when a child process dies).
    pub fn fail(&self, error: TransportError) {
        self.shared.fail_all(error);
    }

    /// Sends `configure` and waits for its answer, within `deadline` (the trait's
    /// [`Transport::configure`] gives it the session's call deadline).
    pub async fn configure_within(
        &self,
        session: &SessionConfig,
        deadline: Duration,
    ) -> Result<Envelope, TransportError> {
        if let Some(bound) = session.max_concurrent_calls {
            self.bound_calls(bound as usize);
        }
        let session = Box::new(session.clone());
        self.request(|id| Frame::Configure { id, session }, deadline, None)
            .await
    }

    /// Sends `checkpoint` (save the scene to `path`) and waits for its answer.
    pub async fn checkpoint(
        &self,
        path: &str,
        deadline: Duration,
    ) -> Result<Envelope, TransportError> {
        let path = path.to_owned();
        self.request(|id| Frame::Checkpoint { id, path }, deadline, None)
            .await
    }

    /// Sends `inventory` and waits for its answer.
    pub async fn inventory(&self, deadline: Duration) -> Result<Envelope, TransportError> {
        self.request(|id| Frame::Inventory { id }, deadline, None)
            .await
    }

    /// Sends `restore` (load the scene from `path`) and waits for its answer.
    pub async fn restore(
        &self,
        path: &str,
        transaction: Option<crate::frame::TransactionCarry>,
        deadline: Duration,
    ) -> Result<Envelope, TransportError> {
        let path = path.to_owned();
        self.request(
            |id| Frame::Restore {
                id,
                path,
                transaction,
            },
            deadline,
            None,
        )
        .await
    }

    async fn request(
        &self,
        frame: impl FnOnce(u64) -> Frame,
        deadline: Duration,
        cancel: Option<&CancellationToken>,
    ) -> Result<Envelope, TransportError> {
        if let Some(error) = self.closed() {
            return Err(never_sent(error));
        }
        let start = tokio::time::Instant::now();
        let cancel = cancel.unwrap_or(&self.never);
        // A free slot is taken at once; only a wait for one needs its deadline and the cancel.
        let permit = match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(TransportError::CancelledUnsent),
                permit = self.permit(deadline) => permit?,
            },
        };
        if cancel.is_cancelled() {
            return Err(TransportError::CancelledUnsent);
        }
        let (id, receiver) = self.register();
        // Cancel safety: if this future is dropped from here on, the guard removes the waiter
        // and tells the kernel to stop.
        let mut guard = InFlight {
            id,
            connection: self,
            armed: true,
        };
        if let Err(error) = self.send_line(frame(id).to_line()).await {
            // No complete frame left: the kernel cannot have run it.
            guard.armed = false;
            self.forget(id);
            return Err(error);
        }
        let answer = self.wait(guard, receiver, start, deadline, cancel).await;
        drop(permit);
        answer
    }

    /// Holds the calls in flight to `bound` (at least 1) from now on. Slots taken above a lower
    /// bound are withdrawn as their calls end.
    fn bound_calls(&self, bound: usize) {
        let bound = bound.max(1);
        let old = self.bound.swap(bound, Ordering::SeqCst);
        if bound > old {
            self.permits.add_permits(bound - old);
        } else if bound < old {
            let missing = (old - bound) - self.permits.forget_permits(old - bound);
            if missing > 0 {
                let permits = Arc::clone(&self.permits);
                tokio::spawn(async move {
                    if let Ok(taken) = permits.acquire_many_owned(missing as u32).await {
                        taken.forget();
                    }
                });
            }
        }
    }

    /// One of the connection's call slots, waited for within `deadline`.
    async fn permit(
        &self,
        deadline: Duration,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, TransportError> {
        match tokio::time::timeout(deadline, Arc::clone(&self.permits).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(TransportError::Closed(
                "the connection is shutting down".into(),
            )),
            Err(_) => Err(TransportError::QueueTimeout(deadline)),
        }
    }

    /// A fresh request id and a waiter for its answer.
    fn register(&self) -> (u64, oneshot::Receiver<Result<Envelope, TransportError>>) {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, sender);
        self.shared.highest_sent.fetch_max(id, Ordering::Relaxed);
        (id, receiver)
    }

    /// Writes one frame line: straight to the stream for a lone request, through the writer
    /// task (which coalesces a burst into one flush) when others are in flight. An error means
    /// no complete frame left.
    async fn send_line(&self, line: Vec<u8>) -> Result<(), TransportError> {
        let alone = self
            .shared
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
            <= 1;
        let direct = match self.writer.try_lock() {
            Ok(_) if !alone => None,
            Ok(mut slot) => match slot.as_mut() {
                Some(writer) => Some(
                    async {
                        writer.write_all(&line).await?;
                        writer.flush().await
                    }
                    .await,
                ),
                None => Some(Err(std::io::Error::other("the connection is closed"))),
            },
            Err(_) => None,
        };
        let failed = match direct {
            Some(Ok(())) => false,
            Some(Err(e)) => {
                self.shared
                    .fail_all(TransportError::ConnectionLost(e.into()));
                true
            }
            None => self.outgoing.send(Outgoing::Line(line)).await.is_err(),
        };
        if failed {
            return Err(never_sent(self.closed().unwrap_or_else(|| {
                TransportError::Closed("writer stopped".into())
            })));
        }
        Ok(())
    }

    /// Waits for the answer the guard's request registered, until `deadline` after `start`.
    /// When `cancel` fires first, the kernel is asked to stop the call and its answer is waited
    /// for [`CANCEL_GRACE`] more (within the deadline).
    async fn wait(
        &self,
        mut guard: InFlight<'_>,
        mut receiver: oneshot::Receiver<Result<Envelope, TransportError>>,
        start: tokio::time::Instant,
        deadline: Duration,
        cancel: &CancellationToken,
    ) -> Result<Envelope, TransportError> {
        let until = start + deadline;
        let first = if let Some(answer) = self
            .poll_briefly(&mut receiver, self.busy_poll, cancel)
            .await
        {
            Some(answer)
        } else {
            tokio::select! {
                biased;
                answer = &mut receiver => Some(answer),
                () = cancel.cancelled() => None,
                // Leave the guard armed: it forgets the id and sends the cancel.
                () = tokio::time::sleep_until(until) => {
                    return Err(TransportError::Deadline(deadline));
                }
            }
        };
        let answer = match first {
            Some(answer) => answer,
            None => {
                self.ask_to_cancel(guard.id);
                let grace = (tokio::time::Instant::now() + CANCEL_GRACE).min(until);
                match tokio::time::timeout_at(grace, &mut receiver).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        guard.armed = false;
                        self.forget(guard.id);
                        return Err(if grace < until {
                            TransportError::Cancelled
                        } else {
                            TransportError::Deadline(deadline)
                        });
                    }
                }
            }
        };
        self.settle(guard, answer)
    }

    /// The call's outcome from what its waiter got; the guard has nothing left to cancel.
    fn settle(
        &self,
        mut guard: InFlight<'_>,
        answer: Result<Result<Envelope, TransportError>, oneshot::error::RecvError>,
    ) -> Result<Envelope, TransportError> {
        guard.armed = false;
        match answer {
            Ok(result) => result,
            Err(_) => Err(self
                .closed()
                .unwrap_or_else(|| TransportError::ConnectionLost("waiter dropped".into()))),
        }
    }

    /// The answer, if it comes within `window` (zero: if it is there already). Until then the
    /// task reads what the stream has (the reader task's work, done here so that an answer
    /// the runtime has just seen is not first handed through that task) and yields instead of
    /// sleeping; each yield lets the runtime poll its I/O driver without blocking. Stops early
    /// on a cancel.
    async fn poll_briefly(
        &self,
        receiver: &mut oneshot::Receiver<Result<Envelope, TransportError>>,
        window: Duration,
        cancel: &CancellationToken,
    ) -> Option<Result<Result<Envelope, TransportError>, oneshot::error::RecvError>> {
        let until = std::time::Instant::now() + window;
        loop {
            read::help(&self.read, &self.shared);
            match receiver.try_recv() {
                Ok(answer) => return Some(Ok(answer)),
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Some(receiver.await);
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            if cancel.is_cancelled() || std::time::Instant::now() >= until {
                return None;
            }
            tokio::task::yield_now().await;
        }
    }

    fn forget(&self, id: u64) {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// Best-effort cancel of request `id`: its waiter is failed now, and the kernel is told.
    fn cancel(&self, id: u64) {
        let waiter = self
            .shared
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        if let Some(waiter) = waiter {
            let _ = waiter.send(Err(TransportError::Cancelled));
        }
        self.ask_to_cancel(id);
    }

    /// Tells the kernel to stop request `id`; its waiter keeps waiting.
    fn ask_to_cancel(&self, id: u64) {
        let _ = self
            .outgoing
            .try_send(Outgoing::Line(Frame::Cancel { id }.to_line()));
    }
}

#[async_trait::async_trait]
impl Transport for Connection {
    fn hello(&self) -> &Hello {
        &self.hello
    }

    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        self.configure_within(session, session.call_deadline())
            .await
    }

    /// Sends the call and waits for its answer, within its deadline; its cancel token asks the
    /// kernel to stop it (see [`Transport`]'s cancel contract).
    async fn call(&self, call: Call) -> Result<Envelope, TransportError> {
        let deadline_ms = call.deadline.as_millis().min(u128::from(u64::MAX)) as u64;
        let Call {
            tool,
            params,
            deadline,
            cancel,
            ..
        } = call;
        self.request(
            |id| Frame::Call {
                id,
                tool,
                params,
                deadline_ms,
            },
            deadline,
            Some(&cancel),
        )
        .await
    }

    async fn call_batch(&self, calls: Vec<Call>) -> Vec<Result<Envelope, TransportError>> {
        self.run_batch(calls).await
    }

    /// Sends `bye`, closes the write side and stops accepting calls.
    async fn close(&self) -> Result<(), TransportError> {
        let _ = self.outgoing.send(Outgoing::Close).await;
        self.permits.close();
        self.shared
            .fail_all(TransportError::Closed("closed by the bridge".into()));
        Ok(())
    }

    /// Console lines seen before the hello.
    fn console(&self) -> Vec<String> {
        self.console
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

struct InFlight<'a> {
    id: u64,
    connection: &'a Connection,
    armed: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.connection.cancel(self.id);
        }
    }
}

async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut BufWriter<W>,
    frame: &Frame,
) -> Result<(), TransportError> {
    writer
        .write_all(&frame.to_line())
        .await
        .map_err(|e| TransportError::ConnectionLost(e.into()))?;
    writer
        .flush()
        .await
        .map_err(|e| TransportError::ConnectionLost(e.into()))
}

/// Writes queued frames, coalescing whatever is ready into one flush.
async fn write_loop(
    writer: SharedWriter,
    mut receiver: mpsc::Receiver<Outgoing>,
    shared: Arc<Shared>,
) {
    while let Some(first) = receiver.recv().await {
        let mut slot = writer.lock().await;
        let Some(out) = slot.as_mut() else { return };
        let mut next = Some(first);
        let mut result = Ok(());
        let mut closing = false;
        while let Some(item) = next.take() {
            match item {
                Outgoing::Line(line) => result = out.write_all(&line).await,
                Outgoing::Close => {
                    result = out.write_all(&Frame::Bye.to_line()).await;
                    closing = true;
                }
            }
            if result.is_err() || closing {
                break;
            }
            next = receiver.try_recv().ok();
        }
        if result.is_ok() {
            result = out.flush().await;
        }
        if let Err(e) = result {
            shared.fail_all(TransportError::ConnectionLost(e.into()));
            *slot = None;
            return;
        }
        if closing {
            let _ = out.shutdown().await;
            *slot = None;
            return;
        }
    }
}

/// A call that never left the bridge: it did not run, whatever ended the connection.
fn never_sent(error: TransportError) -> TransportError {
    match error {
        TransportError::Closed(_) => error,
        other => TransportError::Closed(format!("the call was never sent: {other}")),
    }
}
