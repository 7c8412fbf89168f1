//! The non-blocking writer: a bounded queue in front of a background thread that owns the log.
//! Callers push and go on; the thread wakes once for a burst of records ([`GATHER`]), not once
//! per record, so a call pays neither the hashing, the disk nor a thread wake-up.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::json;

use crate::error::AuditError;
use crate::log::AuditLog;
use crate::record::{Event, RecordKind};

/// What happens when the queue is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overflow {
    /// The caller waits for room: nothing is lost, a slow disk slows the bridge.
    #[default]
    Backpressure,
    /// The record is dropped and counted; the count is written as a `dropped` record before the
    /// next record, so the loss is itself in the chain.
    Drop,
}

/// How many records the background thread writes before it ends a batch even if more wait.
pub const MAX_BATCH: usize = 4096;

/// How long the background thread, woken by a record, waits for more before it writes them:
/// records queued meanwhile wake nobody, so a call costs a push onto the queue, not a thread
/// wake-up. A record reaches the sink at most this long after it was queued (plus the write);
/// [`AuditWriter::flush`], [`AuditWriter::record_durable`] and a half-full queue do not wait.
pub const GATHER: Duration = Duration::from_millis(2);

enum Message {
    Record(Box<Event>),
    Flush(SyncSender<Result<(), String>>),
    Durable(Box<Event>, SyncSender<Result<(), String>>),
}

/// The queue between callers and the background thread.
struct Queue {
    messages: VecDeque<Message>,
    capacity: usize,
    /// The thread waits with nothing to do: the next message wakes it.
    idle: bool,
    /// A flush or durable record waits: the thread writes now, without gathering.
    urgent: bool,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled for the thread: work came while it was idle, something urgent, or closing.
    work: Condvar,
    /// Signalled for callers waiting for room (backpressure).
    room: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Logs from any thread without blocking on I/O.
pub struct AuditWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    overflow: Overflow,
    dropped: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for AuditWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditWriter")
            .field("overflow", &self.overflow)
            .finish_non_exhaustive()
    }
}

fn stopped() -> AuditError {
    AuditError::WriterFailed("the writer thread stopped".into())
}

impl AuditWriter {
    /// Starts the background thread with a queue of `capacity` records.
    pub fn spawn(log: AuditLog, capacity: usize, overflow: Overflow) -> AuditWriter {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                messages: VecDeque::new(),
                capacity: capacity.max(1),
                idle: false,
                urgent: false,
                closed: false,
            }),
            work: Condvar::new(),
            room: Condvar::new(),
        });
        let dropped = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(Mutex::new(None));
        let thread = {
            let (shared, dropped, failed) = (
                Arc::clone(&shared),
                Arc::clone(&dropped),
                Arc::clone(&failed),
            );
            std::thread::Builder::new()
                .name("vibe-audit".into())
                .spawn(move || {
                    let _closing = Closing(&shared);
                    run(log, &shared, &dropped, &failed);
                })
                .ok()
        };
        if thread.is_none() {
            *failed.lock().unwrap_or_else(|e| e.into_inner()) =
                Some("the writer thread could not start".into());
        }
        AuditWriter {
            shared,
            thread,
            overflow,
            dropped,
            failed,
        }
    }

    /// An error if the writer failed.
    fn check_failed(&self) -> Result<(), AuditError> {
        match self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            Some(error) => Err(AuditError::WriterFailed(error)),
            None => Ok(()),
        }
    }

    /// Puts `message` on the queue, waiting for room (`wait`) or answering `None` when full.
    /// An urgent message wakes the thread at once; a record only an idle thread.
    fn push(&self, message: Message, urgent: bool, wait: bool) -> Result<Option<()>, AuditError> {
        let mut queue = self.shared.lock();
        loop {
            if queue.closed {
                return Err(AuditError::WriterFailed("closed".into()));
            }
            if queue.messages.len() < queue.capacity {
                break;
            }
            if !wait {
                return Ok(None);
            }
            self.shared.work.notify_one();
            queue = self
                .shared
                .room
                .wait(queue)
                .unwrap_or_else(|e| e.into_inner());
            self.check_failed()?;
        }
        queue.messages.push_back(message);
        queue.urgent |= urgent;
        let wake = urgent || queue.idle || queue.messages.len() * 2 >= queue.capacity;
        queue.idle = false;
        drop(queue);
        if wake {
            self.shared.work.notify_one();
        }
        Ok(Some(()))
    }

    /// Queues an event. With [`Overflow::Drop`] a full queue answers [`AuditError::Dropped`]
    /// (the drop is recorded); with backpressure the call waits for room.
    pub fn record(&self, event: Event) -> Result<(), AuditError> {
        self.check_failed()?;
        let wait = self.overflow == Overflow::Backpressure;
        match self.push(Message::Record(Box::new(event)), false, wait)? {
            Some(()) => Ok(()),
            None => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                Err(AuditError::Dropped)
            }
        }
    }

    /// Writes `event` and makes it durable (an fsync for files) before it returns, whatever
    /// the overflow mode and the sink's durability option: for security records, which must be
    /// on disk before the answer that reports them. Waits for room in the queue even in
    /// [`Overflow::Drop`] mode: a security record is never dropped.
    pub fn record_durable(&self, event: Event) -> Result<(), AuditError> {
        self.check_failed()?;
        let (done, wait) = sync_channel(1);
        self.push(Message::Durable(Box::new(event), done), true, true)?;
        wait.recv()
            .map_err(|_| stopped())?
            .map_err(AuditError::WriterFailed)
    }

    /// Waits until everything queued so far is written and flushed.
    pub fn flush(&self) -> Result<(), AuditError> {
        let (done, wait) = sync_channel(1);
        self.push(Message::Flush(done), true, true)?;
        wait.recv()
            .map_err(|_| stopped())?
            .map_err(AuditError::WriterFailed)
    }

    /// A guard that flushes when it goes out of scope (at the end of a request, a session).
    pub fn flush_guard(&self) -> FlushGuard<'_> {
        FlushGuard { writer: self }
    }
}

/// Flushes its writer on drop.
#[derive(Debug)]
pub struct FlushGuard<'a> {
    writer: &'a AuditWriter,
}

impl Drop for FlushGuard<'_> {
    fn drop(&mut self) {
        let _ = self.writer.flush();
    }
}

impl Drop for AuditWriter {
    /// Closes the queue; the thread writes what is left, flushes, and ends.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_one();
        self.shared.room.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Closes the queue when the thread ends, even by a panic: callers waiting for room, or
/// queuing later, get an error instead of waiting for a thread that is gone.
struct Closing<'a>(&'a Shared);

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.room.notify_all();
    }
}

/// The next messages to write, at most [`MAX_BATCH`]; empty once closed and drained. Sleeps
/// while there is nothing, then gathers for up to [`GATHER`] unless something is urgent.
fn next_batch(shared: &Shared) -> Vec<Message> {
    let mut queue = shared.lock();
    while queue.messages.is_empty() && !queue.closed {
        queue.idle = true;
        queue = shared.work.wait(queue).unwrap_or_else(|e| e.into_inner());
    }
    queue.idle = false;
    if !queue.urgent && !queue.closed {
        queue = shared
            .work
            .wait_timeout_while(queue, GATHER, |q| {
                !q.urgent && !q.closed && q.messages.len() * 2 < q.capacity
            })
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    let take = queue.messages.len().min(MAX_BATCH);
    let batch: Vec<Message> = queue.messages.drain(..take).collect();
    queue.urgent = queue
        .messages
        .iter()
        .any(|m| !matches!(m, Message::Record(_)));
    drop(queue);
    shared.room.notify_all();
    batch
}

fn run(log: AuditLog, shared: &Shared, dropped: &AtomicU64, failed: &Mutex<Option<String>>) {
    let mut log = log;
    let fail = |error: AuditError| {
        *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
    };
    loop {
        let batch = next_batch(shared);
        if batch.is_empty() {
            break;
        }
        for message in batch {
            match message {
                Message::Record(event) => {
                    let lost = dropped.swap(0, Ordering::Relaxed);
                    if lost > 0
                        && let Err(e) = log.append(&Event::incident(
                            &event.session,
                            RecordKind::Dropped,
                            json!({"count": lost}),
                        ))
                    {
                        fail(e);
                    }
                    if let Err(e) = log.append(&event) {
                        fail(e);
                    }
                }
                Message::Durable(event, done) => {
                    let result = log
                        .append(&event)
                        .map(|_| ())
                        .and_then(|()| log.sync())
                        .map_err(|e| e.to_string());
                    if let Err(e) = &result {
                        fail(AuditError::WriterFailed(e.clone()));
                    }
                    let _ = done.send(result);
                }
                Message::Flush(done) => {
                    let result = log.flush().map_err(|e| e.to_string());
                    if let Err(e) = &result {
                        fail(AuditError::WriterFailed(e.clone()));
                    }
                    let _ = done.send(result);
                }
            }
        }
        if let Err(e) = log.flush() {
            fail(e);
        }
    }
    let lost = dropped.swap(0, Ordering::Relaxed);
    if lost > 0 {
        let _ = log.append(&Event::incident(
            "vibe-audit",
            RecordKind::Dropped,
            json!({"count": lost}),
        ));
    }
    let _ = log.flush();
}
