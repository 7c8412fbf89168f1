//! The non-blocking writer: a bounded queue in front of a background thread that owns the log.
//! Callers push and go on; the thread wakes once for a burst of records ([`GATHER`]), not once
//! per record, so a call pays neither the hashing, the disk nor a thread wake-up. The records
//! it wrote go back to the callers to be freed ([`SPENT_BYTES`]).

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

/// How much memory of the records written (their values, about) the background thread hands back
/// for callers to free instead of freeing it itself. An event's values are many small
/// allocations made on the caller's thread; freed on another thread they contend for the
/// allocator's lock with the caller's own allocations (with glibc's malloc that cost more than
/// the rest of the record, measured on the mock). A record larger than what is left of this, or
/// than 64 KiB, is freed by the thread, so what waits to be freed stays bounded. The count is an
/// estimate (strings, array items, map nodes): the memory behind it is of the same order, not
/// exactly it.
pub const SPENT_BYTES: usize = 1 << 20;

/// The largest record (by [`held_bytes`]) handed back; a larger one is freed by the thread, so
/// that a push never frees more than [`SPENT_PER_PUSH`] records of this size.
const SPENT_RECORD_BYTES: usize = 64 << 10;

/// How many written records each push frees, at most: more than a call pushes, so the records
/// handed back never pile up while calls come.
const SPENT_PER_PUSH: usize = 4;

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
    /// Records written, with the memory they hold ([`held_bytes`]), for the next callers to free.
    spent: Vec<(Box<Event>, usize)>,
    /// The memory `spent` holds, at most [`SPENT_BYTES`].
    spent_bytes: usize,
    /// How many records callers freed.
    #[cfg(test)]
    freed_by_callers: usize,
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
                spent: Vec::new(),
                spent_bytes: 0,
                #[cfg(test)]
                freed_by_callers: 0,
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
        let mut freed: [Option<Box<Event>>; SPENT_PER_PUSH] = Default::default();
        for slot in &mut freed {
            let Some((event, size)) = queue.spent.pop() else {
                break;
            };
            queue.spent_bytes -= size;
            #[cfg(test)]
            {
                queue.freed_by_callers += 1;
            }
            *slot = Some(event);
        }
        drop(queue);
        if wake {
            self.shared.work.notify_one();
        }
        drop(freed); // on this thread, which made them, and outside the lock
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

/// About how much memory `event` holds, walked without recursion (any depth is fine): the
/// boxed event, its strings, 32 bytes per array item and a 640-byte node per 11 entries of an
/// object (serde_json's map is a B-tree). Not its sealed size: redaction can make that far
/// smaller. The walk stops once past [`SPENT_RECORD_BYTES`]: such a record is not handed back
/// whatever its size, and a large answer is not walked whole for nothing.
fn held_bytes(event: &Event) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let mut bytes = 256 + event.session.len() + text(&event.tool) + text(&event.class);
    let mut stack: Vec<&serde_json::Value> = [&event.args, &event.envelope, &event.detail]
        .into_iter()
        .flatten()
        .collect();
    while let Some(value) = stack.pop() {
        if bytes > SPENT_RECORD_BYTES {
            break;
        }
        match value {
            serde_json::Value::String(text) => bytes += text.len(),
            serde_json::Value::Array(items) => {
                bytes += 32 * items.len();
                stack.extend(items);
            }
            serde_json::Value::Object(map) => {
                bytes += 640 * map.len().div_ceil(11);
                for (key, item) in map {
                    bytes += key.len();
                    stack.push(item);
                }
            }
            _ => {}
        }
    }
    bytes
}

/// Hands written records back for callers to free, while they fit in [`SPENT_BYTES`]; the
/// rest are freed here.
fn hand_back(shared: &Shared, spent: Vec<(Box<Event>, usize)>) {
    let mut left = Vec::new();
    {
        let mut queue = shared.lock();
        for (event, size) in spent {
            if size <= SPENT_RECORD_BYTES && queue.spent_bytes + size <= SPENT_BYTES {
                queue.spent_bytes += size;
                queue.spent.push((event, size));
            } else {
                left.push(event);
            }
        }
    }
    drop(left);
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
        let mut spent = Vec::new();
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
                    match log.append(&event) {
                        Ok(_) => {
                            let size = held_bytes(&event);
                            spent.push((event, size));
                        }
                        Err(e) => fail(e),
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
                    // Everything before the flush is handed back when it returns.
                    hand_back(shared, std::mem::take(&mut spent));
                    let _ = done.send(result);
                }
            }
        }
        if let Err(e) = log.flush() {
            fail(e);
        }
        hand_back(shared, spent);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::ChainHead;
    use crate::redact::Redactor;
    use crate::sink::MemorySink;
    use crate::verify::verify_reader;

    /// What waits to be freed after each flush: (records, bytes held as counted).
    fn spent(writer: &AuditWriter) -> (usize, usize) {
        let queue = writer.shared.lock();
        let counted: usize = queue.spent.iter().map(|(_, size)| size).sum();
        assert_eq!(counted, queue.spent_bytes, "the count follows the records");
        (queue.spent.len(), queue.spent_bytes)
    }

    /// Written records wait to be freed by the next callers, within SPENT_BYTES whatever their
    /// size; each push frees some, so calls that keep coming keep the list short; and every
    /// record still reaches the sink, chained, in order.
    #[test]
    fn written_records_are_freed_by_callers_within_a_bound() {
        let sink = MemorySink::new();
        let log = AuditLog::new(
            Box::new(sink.clone()),
            ChainHead::genesis(),
            Redactor::default(),
        );
        let writer = AuditWriter::spawn(log, 4096, Overflow::Backpressure);
        let record_code = |ids: std::ops::Range<u64>, bytes: usize| {
            let code = "x".repeat(bytes);
            for i in ids {
                writer
                    .record(Event::call("s", i, "python.exec", json!({"code": code})))
                    .unwrap();
            }
            writer.flush().unwrap();
        };
        // Large records: 64 of ~40 KB, more than SPENT_BYTES together, and 4 of ~100 KB, more
        // than a record handed back may hold.
        record_code(0..64, 40_000);
        let (records, bytes) = spent(&writer);
        assert!(bytes <= SPENT_BYTES, "{bytes} bytes wait");
        assert!(records <= SPENT_BYTES / 40_000, "{records}");
        record_code(64..68, 100_000);
        let queue = writer.shared.lock();
        assert!(
            queue
                .spent
                .iter()
                .all(|(_, size)| *size <= SPENT_RECORD_BYTES)
        );
        drop(queue);
        // Small records, pushed one by one with a flush each. A flush returns once what was
        // written before it is handed back, so each record is freed by the next push.
        let freed_before = writer.shared.lock().freed_by_callers;
        for i in 68..168 {
            writer
                .record(Event::call("s", i, "object.info", json!({"name": "Cube"})))
                .unwrap();
            writer.flush().unwrap();
            let (waiting, bytes) = spent(&writer);
            assert!(bytes <= SPENT_BYTES);
            assert!(
                waiting <= 1 + SPENT_BYTES / 100_000,
                "{waiting} records wait"
            );
        }
        let freed = writer.shared.lock().freed_by_callers - freed_before;
        assert!(
            freed >= 99,
            "callers freed {freed} of the 100 small records"
        );
        assert!(
            spent(&writer).0 >= 1,
            "the last one waits for the next push"
        );
        drop(writer);
        let report = verify_reader(&sink.bytes()[..], ChainHead::genesis(), "m").unwrap();
        assert!(report.is_intact(), "{report:?}");
        assert_eq!(report.records, 168);
    }
}
