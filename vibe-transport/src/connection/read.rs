//! The read side: answers read off the stream and handed to their waiters, in the order they
//! came. A task of its own drives it; a caller polling for its answer reads too (`help`), with
//! that task's waker, so that an answer the runtime's I/O driver has just seen reaches its
//! caller without first passing through the task (on a `block_on` caller, one more scheduler
//! round per call: the caller is polled before the task the driver woke).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures::StreamExt;
use tokio::io::AsyncRead;
use tokio_util::codec::FramedRead;

use super::Shared;
use crate::codec::{CodecError, LineCodec};
use crate::error::TransportError;
use crate::frame::Frame;

/// The stream's frames, read by whoever holds the lock.
pub(super) type Frames = FramedRead<Box<dyn AsyncRead + Send + Unpin>, LineCodec>;

/// The read side: its frames, the waker of the task that drives it, and whether the
/// connection ended (the task then stops).
pub(super) struct ReadSide {
    frames: Frames,
    /// The reader task's waker, from its last poll; readiness always wakes that task.
    waker: Option<Waker>,
    ended: bool,
}

/// The read side shared by the reader task and the callers that help it.
pub(super) type SharedRead = Arc<Mutex<ReadSide>>;

pub(super) fn shared_read(frames: Frames) -> SharedRead {
    Arc::new(Mutex::new(ReadSide {
        frames,
        waker: None,
        ended: false,
    }))
}

impl ReadSide {
    /// Reads and dispatches every frame the stream has now; ready once the connection ended
    /// (by the stream's end, an I/O error or a protocol violation, each failing every call).
    fn drain(&mut self, cx: &mut Context<'_>, shared: &Shared) -> Poll<()> {
        while !self.ended {
            let read = match self.frames.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(line))) => Ok(line),
                Poll::Ready(Some(Err(CodecError::FrameTooLarge { max }))) => Err(
                    TransportError::Protocol(format!("the kernel sent a frame over {max} bytes")),
                ),
                Poll::Ready(Some(Err(CodecError::Io(e)))) => {
                    Err(TransportError::ConnectionLost(e.into()))
                }
                Poll::Ready(None) => Err(TransportError::ConnectionLost(
                    "the kernel closed the connection".into(),
                )),
            };
            if let Err(error) = read.and_then(|line| dispatch(&line, shared)) {
                self.ended = true;
                shared.fail_all(error);
            }
        }
        Poll::Ready(())
    }
}

/// Hands one answer line to its waiter; an error for a line that breaks the protocol.
fn dispatch(line: &[u8], shared: &Shared) -> Result<(), TransportError> {
    match Frame::parse(line) {
        Ok(Frame::Result { id, envelope }) => {
            let waiter = shared
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            match waiter {
                Some(waiter) => {
                    let _ = waiter.send(Ok(envelope));
                    Ok(())
                }
                // A late answer to a call that timed out or was cancelled.
                None if id <= shared.highest_sent.load(Ordering::Relaxed) => {
                    tracing::debug!(id, "discarding a late answer");
                    Ok(())
                }
                None => Err(TransportError::Protocol(format!(
                    "answer for id {id}, which was never sent"
                ))),
            }
        }
        Ok(Frame::Error { error }) => Err(TransportError::Protocol(format!(
            "the kernel reported: {}",
            error.message
        ))),
        Ok(other) => Err(TransportError::Protocol(format!(
            "unexpected `{}` frame from the kernel",
            other.kind()
        ))),
        Err(e) => Err(TransportError::Protocol(format!(
            "malformed frame from the kernel: {e}"
        ))),
    }
}

/// The reader task: drains the read side each time the stream has something, until the
/// connection ends. It waits for the lock: a caller on another thread holds it only for one
/// drain, which never blocks. Giving up on a held lock would lose a wake-up: the stream's
/// readiness wakes this task once (taking its waker) and the holder may have finished reading
/// before the data came.
pub(super) async fn read_loop(read: SharedRead, shared: Arc<Shared>) {
    std::future::poll_fn(|cx| {
        let mut side = read.lock().unwrap_or_else(|e| e.into_inner());
        if !side.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            side.waker = Some(cx.waker().clone());
        }
        side.drain(cx, &shared)
    })
    .await
}

/// A caller's turn at reading, while it polls for its answer: what the stream has now is
/// read and dispatched (its own answer included), as the reader task would, with that task's
/// waker. Skipped while someone else reads, and before the task's first poll; wakes the task
/// when the connection ended, so that it stops.
pub(super) fn help(read: &SharedRead, shared: &Shared) {
    let Ok(mut side) = read.try_lock() else {
        return;
    };
    let Some(waker) = side.waker.clone() else {
        return;
    };
    let ended = side
        .drain(&mut Context::from_waker(&waker), shared)
        .is_ready();
    drop(side);
    if ended {
        waker.wake();
    }
}
