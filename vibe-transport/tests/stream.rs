//! The one stream transport: [`Connection`] over any byte stream is a [`Transport`], numbers
//! its own requests, and cancels by the call's token.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::FramedRead;
use vibe_errors::{Envelope, ErrorBody, ErrorCode};
use vibe_transport::serve::{ServeOptions, serve_mock};
use vibe_transport::{
    CANCEL_GRACE, Call, CancellationToken, Connection, DEFAULT_MAX_FRAME_BYTES, Frame,
    HandshakeOptions, LineCodec, MockBlender, Transport, TransportError,
};

const DEADLINE: Duration = Duration::from_secs(10);

#[cfg(unix)]
#[tokio::test]
async fn a_unix_socket_is_a_transport_like_any_stream() {
    let (bridge, kernel) = tokio::net::UnixStream::pair().unwrap();
    let mock = Arc::new(Mutex::new(MockBlender::new()));
    tokio::spawn(async move {
        let (r, w) = kernel.into_split();
        let _ = serve_mock(r, w, mock, ServeOptions::default()).await;
    });
    let (r, w) = bridge.into_split();
    let connection = Connection::establish(r, w, HandshakeOptions::default())
        .await
        .unwrap();
    let transport: &dyn Transport = &connection;
    let info = transport
        .call(Call::new("object.info", json!({"name": "Cube"}), DEADLINE))
        .await
        .unwrap();
    assert_eq!(info.result().unwrap()["type"], "MESH");
    let moved = transport
        .call_batch(vec![
            Call::new(
                "object.move",
                json!({"name": "Cube", "delta": [1, 2, 3]}),
                DEADLINE,
            ),
            Call::new("object.info", json!({"name": "Cube"}), DEADLINE),
        ])
        .await;
    assert_eq!(
        moved[1].as_ref().unwrap().result().unwrap()["location"],
        json!([1.0, 2.0, 3.0])
    );
    transport.close().await.unwrap();
    let after = transport
        .call(Call::new("object.info", json!({"name": "Cube"}), DEADLINE))
        .await;
    assert!(matches!(after, Err(TransportError::Closed(_))), "{after:?}");
}

/// Says a MockBlender's hello on `writer`, as a kernel speaks first; the frames read from
/// `reader` follow.
async fn greet<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    reader: R,
    writer: &mut W,
) -> FramedRead<R, LineCodec> {
    let hello = Frame::Hello(Box::new(MockBlender::new().hello()));
    writer.write_all(&hello.to_line()).await.unwrap();
    writer.flush().await.unwrap();
    FramedRead::new(reader, LineCodec::new(DEFAULT_MAX_FRAME_BYTES))
}

/// What the fake kernel below does with a cancel.
#[derive(Clone, Copy)]
enum OnCancel {
    /// Answers the cancelled call `timeout` with `details.cancelled`, as the Python kernel does.
    Answer,
    /// Ignores it, as a kernel busy in C code does.
    Ignore,
}

/// A kernel that answers every call with its own request id, except `slow`, which it never
/// answers by itself. It records the ids it saw, in order.
async fn fake_kernel<R, W>(
    reader: R,
    mut writer: W,
    on_cancel: OnCancel,
    seen: Arc<Mutex<Vec<u64>>>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut frames = greet(reader, &mut writer).await;
    while let Some(Ok(line)) = frames.next().await {
        let answer = match Frame::parse(&line) {
            Ok(Frame::Call { id, tool, .. }) => {
                seen.lock().unwrap().push(id);
                if tool == "slow" {
                    continue;
                }
                Frame::Result {
                    id,
                    envelope: Envelope::Ok(json!({ "id": id })),
                }
            }
            Ok(Frame::Batch { calls }) => {
                for call in calls {
                    seen.lock().unwrap().push(call.id);
                    let answer = Frame::Result {
                        id: call.id,
                        envelope: Envelope::Ok(json!({ "id": call.id })),
                    };
                    writer.write_all(&answer.to_line()).await.unwrap();
                }
                writer.flush().await.unwrap();
                continue;
            }
            Ok(Frame::Cancel { id }) => match on_cancel {
                OnCancel::Ignore => continue,
                OnCancel::Answer => Frame::Result {
                    id,
                    envelope: Envelope::Err(
                        ErrorBody::new(ErrorCode::Timeout, "slow was cancelled")
                            .with_detail("cancelled", true),
                    ),
                },
            },
            _ => break,
        };
        writer.write_all(&answer.to_line()).await.unwrap();
        writer.flush().await.unwrap();
    }
}

async fn connect(on_cancel: OnCancel) -> (Connection, Arc<Mutex<Vec<u64>>>) {
    let (bridge, kernel) = tokio::io::duplex(64 * 1024);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (r, w) = tokio::io::split(kernel);
    tokio::spawn(fake_kernel(r, w, on_cancel, Arc::clone(&seen)));
    let (r, w) = tokio::io::split(bridge);
    let connection = Connection::establish(r, w, HandshakeOptions::default())
        .await
        .unwrap();
    (connection, seen)
}

/// A `slow` call (the fake kernel does not answer it by itself) whose token fires after `ms`.
async fn slow_call_cancelled_after(
    connection: &Connection,
    deadline: Duration,
    ms: u64,
) -> Result<Envelope, TransportError> {
    let token = CancellationToken::new();
    let call = Call::new("slow", json!({}), deadline).cancelled_by(token.clone());
    let (answer, ()) = tokio::join!(connection.call(call), async {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        token.cancel();
    });
    answer
}

#[tokio::test]
async fn the_transport_numbers_its_requests_and_matches_each_answer() {
    let (connection, seen) = connect(OnCancel::Answer).await;
    let calls = (0..40).map(|_| connection.call(Call::new("object.info", json!({}), DEADLINE)));
    let answers = futures::future::join_all(calls).await;
    let mut ids: Vec<u64> = answers
        .iter()
        .map(|a| {
            a.as_ref().unwrap().result().unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    // Each caller got the answer to its own request, and no two requests shared an id.
    let mut sent = seen.lock().unwrap().clone();
    sent.sort_unstable();
    ids.sort_unstable();
    assert_eq!(ids, sent);
    ids.dedup();
    assert_eq!(ids.len(), 40);
}

/// A kernel that answers the calls it reads in reverse order of each burst, several answers in
/// one write and one answer's line split across two writes, then closes the stream after
/// `answer_at_most` answers.
async fn bursting_kernel<R, W>(reader: R, mut writer: W, answer_at_most: usize)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut frames = greet(reader, &mut writer).await;
    let mut answered = 0;
    let mut burst = Vec::new();
    while answered < answer_at_most {
        let Some(Ok(line)) = frames.next().await else {
            return;
        };
        let Ok(Frame::Call { id, params, .. }) = Frame::parse(&line) else {
            return;
        };
        burst.push((id, params["n"].clone()));
        if burst.len() < 7 {
            continue;
        }
        let mut bytes = Vec::new();
        for (id, n) in burst.drain(..).rev().take(answer_at_most - answered) {
            let envelope = Envelope::Ok(json!({ "n": n }));
            bytes.extend(Frame::Result { id, envelope }.to_line());
            answered += 1;
        }
        let (first, rest) = bytes.split_at(bytes.len() / 2 + 1);
        for part in [first, rest] {
            writer.write_all(part).await.unwrap();
            writer.flush().await.unwrap();
            tokio::task::yield_now().await;
        }
    }
    // The stream ends with calls still in flight.
}

/// Callers on several threads read answers while they wait (and the reader task reads when no
/// caller does): every answer reaches the call it answers, whoever read it, and the end of the
/// stream fails every call still in flight and every later one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_reaches_its_own_caller_whoever_reads_it() {
    const CALLS: usize = 210;
    const ANSWERED: usize = 140;
    let (bridge, kernel) = tokio::io::duplex(64 * 1024);
    let (r, w) = tokio::io::split(kernel);
    tokio::spawn(bursting_kernel(r, w, ANSWERED));
    let (r, w) = tokio::io::split(bridge);
    let mut options = HandshakeOptions::default();
    options.max_concurrent_calls = CALLS;
    let connection = Arc::new(Connection::establish(r, w, options).await.unwrap());
    let callers: Vec<_> = (0..CALLS)
        .map(|n| {
            let connection = Arc::clone(&connection);
            tokio::spawn(async move {
                let call = Call::new("object.info", json!({ "n": n }), DEADLINE);
                (n, connection.call(call).await)
            })
        })
        .collect();
    let mut answered = 0;
    for caller in callers {
        let (n, answer) = caller.await.unwrap();
        match answer {
            Ok(envelope) => {
                assert_eq!(envelope.result().unwrap()["n"], json!(n), "call {n}");
                answered += 1;
            }
            Err(error) => assert!(
                matches!(error, TransportError::ConnectionLost(_)),
                "call {n}: {error:?}"
            ),
        }
    }
    assert_eq!(answered, ANSWERED);
    let later = connection
        .call(Call::new("object.info", json!({ "n": 0 }), DEADLINE))
        .await;
    assert!(matches!(later, Err(TransportError::Closed(_))), "{later:?}");
}

/// A kernel on a thread of its own: answers each call `delay` after it read it.
fn kernel_thread<R, W>(reader: R, mut writer: W, delay: Duration)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut frames = greet(reader, &mut writer).await;
            while let Some(Ok(line)) = frames.next().await {
                if let Ok(Frame::Call { id, .. }) = Frame::parse(&line) {
                    tokio::time::sleep(delay).await;
                    let envelope = Envelope::Ok(json!({ "id": id }));
                    writer
                        .write_all(&Frame::Result { id, envelope }.to_line())
                        .await
                        .unwrap();
                    writer.flush().await.unwrap();
                }
            }
        });
    });
}

/// A stream whose read stalls (as a preempted thread does) right after it found nothing and
/// registered its waker, once, when the task `stall` names reads it.
struct Stalling<R> {
    inner: R,
    stall: Arc<Mutex<Option<tokio::task::Id>>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Stalling<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let me = tokio::task::try_id();
        if polled.is_pending()
            && me.is_some()
            && self
                .stall
                .lock()
                .unwrap()
                .take_if(|t| Some(*t) == me)
                .is_some()
        {
            std::thread::sleep(Duration::from_millis(300));
        }
        polled
    }
}

/// The answer comes while a caller that read the stream still holds the read side (its thread
/// stalled): the reader task, woken by the answer on another thread, reads it once the caller
/// lets go, instead of giving up and leaving the answer unread until the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_comes_while_a_caller_holds_the_read_side_is_read() {
    let (bridge, kernel) = tokio::io::duplex(64 * 1024);
    let (r, w) = tokio::io::split(kernel);
    kernel_thread(r, w, Duration::from_millis(50));
    let (r, w) = tokio::io::split(bridge);
    let stall = Arc::new(Mutex::new(None));
    let reader = Stalling {
        inner: r,
        stall: Arc::clone(&stall),
    };
    let mut options = HandshakeOptions::default();
    options.busy_poll = Duration::ZERO; // the caller reads once, then waits for its answer
    let connection = Arc::new(Connection::establish(reader, w, options).await.unwrap());
    // Let the reader task have its first poll.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let answer = tokio::spawn(async move {
        *stall.lock().unwrap() = Some(tokio::task::id());
        let call = Call::new("object.info", json!({}), Duration::from_secs(5));
        connection.call(call).await
    })
    .await
    .unwrap();
    assert!(answer.is_ok(), "{answer:?}");
}

#[tokio::test(start_paused = true)]
async fn a_cancel_the_kernel_answers_is_answered_by_the_kernel() {
    let (connection, _) = connect(OnCancel::Answer).await;
    let started = tokio::time::Instant::now();
    let answer = slow_call_cancelled_after(&connection, DEADLINE, 300).await;
    let error = answer.unwrap().error().cloned().unwrap();
    assert_eq!(error.code, ErrorCode::Timeout);
    assert_eq!(error.details["cancelled"], true);
    // The kernel's answer came at once: no grace was spent.
    assert_eq!(started.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn a_cancel_the_kernel_ignores_fails_after_the_grace() {
    let (connection, _) = connect(OnCancel::Ignore).await;
    let started = tokio::time::Instant::now();
    let answer = slow_call_cancelled_after(&connection, DEADLINE, 300).await;
    assert!(
        matches!(answer, Err(TransportError::Cancelled)),
        "{answer:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_millis(300) + CANCEL_GRACE);
    // The connection goes on: a late answer would be discarded, the next call is answered.
    let next = connection
        .call(Call::new("object.info", json!({}), DEADLINE))
        .await
        .unwrap();
    assert!(next.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_cancel_never_waits_past_the_deadline() {
    let (connection, _) = connect(OnCancel::Ignore).await;
    let deadline = Duration::from_millis(500);
    let started = tokio::time::Instant::now();
    let answer = slow_call_cancelled_after(&connection, deadline, 300).await;
    assert!(
        matches!(answer, Err(TransportError::Deadline(d)) if d == deadline),
        "{answer:?}"
    );
    assert_eq!(started.elapsed(), deadline);
}

/// A refused connection keeps its I/O error as the error's source, not only as text.
#[tokio::test]
async fn a_refused_connection_keeps_its_io_error_as_the_source() {
    // A port nobody listens on: bind, note it, close.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let error = vibe_transport::TcpTransport::connect(vibe_transport::TcpOptions::new(addr))
        .await
        .unwrap_err();
    assert!(matches!(error, TransportError::Connect(_)), "{error}");
    let cause = std::error::Error::source(&error).expect("a cause");
    let io = cause
        .source()
        .and_then(|e| e.downcast_ref::<std::io::Error>())
        .expect("the io error under the cause");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(error.to_string().contains(&addr.to_string()), "{error}");
}

/// A kernel that answers `configure`, and holds calls until the bridge sends nothing for 5 ms,
/// then answers all it holds; it records the most calls it held at once.
async fn holding_kernel<R, W>(reader: R, mut writer: W, most: Arc<Mutex<usize>>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut frames = greet(reader, &mut writer).await;
    let mut held = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_millis(5), frames.next()).await;
        let answers: Vec<Frame> = match next {
            Ok(Some(Ok(line))) => match Frame::parse(&line) {
                Ok(Frame::Configure { id, .. }) => vec![Frame::Result {
                    id,
                    envelope: Envelope::Ok(json!({})),
                }],
                Ok(Frame::Call { id, .. }) => {
                    held.push(id);
                    let mut most = most.lock().unwrap();
                    *most = (*most).max(held.len());
                    continue;
                }
                _ => return,
            },
            Ok(_) => return,
            Err(_) => held
                .drain(..)
                .map(|id| Frame::Result {
                    id,
                    envelope: Envelope::Ok(json!({})),
                })
                .collect(),
        };
        for answer in answers {
            writer.write_all(&answer.to_line()).await.unwrap();
        }
        writer.flush().await.unwrap();
    }
}

/// The contract's `max_concurrent_calls`, sent at `configure`, is the bound a stream transport
/// holds from then on: the one bound, fed from the contract.
#[tokio::test(start_paused = true)]
async fn configure_sets_the_bound_on_calls_in_flight() {
    for (bound, expected) in [(None, 8), (Some(3), 3), (Some(12), 12)] {
        let (bridge, kernel) = tokio::io::duplex(256 * 1024);
        let most = Arc::new(Mutex::new(0));
        let (r, w) = tokio::io::split(kernel);
        tokio::spawn(holding_kernel(r, w, Arc::clone(&most)));
        let (r, w) = tokio::io::split(bridge);
        // Before a session says otherwise: the handshake's bound, 8 by default.
        let connection = Connection::establish(r, w, HandshakeOptions::default())
            .await
            .unwrap();
        let mut session = vibe_transport::SessionConfig::new("bounded");
        if let Some(bound) = bound {
            session = session.max_concurrent_calls(bound);
        }
        assert!(connection.configure(&session).await.unwrap().is_ok());
        let calls = (0..30).map(|_| connection.call(Call::new("hold", json!({}), DEADLINE)));
        let answers = futures::future::join_all(calls).await;
        assert!(
            answers
                .iter()
                .all(|a| a.as_ref().is_ok_and(Envelope::is_ok))
        );
        assert_eq!(*most.lock().unwrap(), expected, "bound {bound:?}");
    }
}

/// A call cancelled before it leaves (waiting for a call slot, or cancelled already) is not sent
/// and says it did not run.
#[tokio::test(start_paused = true)]
async fn a_call_cancelled_before_it_is_sent_never_reaches_the_kernel() {
    let (bridge, kernel) = tokio::io::duplex(64 * 1024);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (r, w) = tokio::io::split(kernel);
    tokio::spawn(fake_kernel(r, w, OnCancel::Ignore, Arc::clone(&seen)));
    let (r, w) = tokio::io::split(bridge);
    let mut options = HandshakeOptions::default();
    options.max_concurrent_calls = 1;
    let connection = Connection::establish(r, w, options).await.unwrap();

    // The one slot is taken by a call the kernel never answers.
    let busy = connection.call(Call::new("slow", json!({}), Duration::from_secs(5)));
    let token = CancellationToken::new();
    let queued =
        connection.call(Call::new("object.info", json!({}), DEADLINE).cancelled_by(token.clone()));
    let (_, queued, ()) = tokio::join!(busy, queued, async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        token.cancel();
    });
    assert!(
        matches!(queued, Err(TransportError::CancelledUnsent)),
        "{queued:?}"
    );

    let fired = CancellationToken::new();
    fired.cancel();
    let early = connection
        .call(Call::new("object.info", json!({}), DEADLINE).cancelled_by(fired.clone()))
        .await;
    assert!(
        matches!(early, Err(TransportError::CancelledUnsent)),
        "{early:?}"
    );
    let batch = connection
        .call_batch(vec![
            Call::new("object.info", json!({}), DEADLINE).cancelled_by(fired),
            Call::new("object.info", json!({}), DEADLINE),
        ])
        .await;
    assert!(
        matches!(batch[0], Err(TransportError::CancelledUnsent)),
        "{batch:?}"
    );
    assert!(batch[1].as_ref().is_ok_and(Envelope::is_ok), "{batch:?}");
    // The kernel saw the slow call and the batch's live call only.
    assert_eq!(seen.lock().unwrap().len(), 2, "{:?}", seen.lock().unwrap());
    let error = TransportError::CancelledUnsent.to_error_body();
    assert_eq!(
        error.details["partial_effects"],
        "none: the call never started"
    );
}
