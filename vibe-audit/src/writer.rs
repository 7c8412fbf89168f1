//! The non-blocking writer: a bounded queue in front of a background thread that owns the log.
//! Callers render their event (redacted, as the bytes of its part of the record line) and push
//! it; the thread wakes once for a burst of records ([`GATHER`]), not once per record, seals
//! them into the chain and writes them, so a call pays neither the hashing, the disk nor a
//! thread wake-up. The buffers it wrote from go back to the callers for their next records
//! ([`SPARE_BYTES`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use vibe_errors::Envelope;

use crate::error::AuditError;
use crate::log::AuditLog;
use crate::record::{Body, Event, RecordKind, write_body};
use crate::redact::Redactor;

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

/// How long the background thread gathers records before it writes them: woken by a record, it
/// waits this long for more; after a batch it looks again this long later, without sleeping
/// in between, so while records keep coming it wakes once per `GATHER` and no caller ever
/// wakes it (a call costs a push onto the queue, not a thread wake-up). A record reaches the
/// sink at most this long after it was queued (plus the write); [`AuditWriter::flush`],
/// [`AuditWriter::record_durable`] and a half-full queue do not wait.
pub const GATHER: Duration = Duration::from_millis(2);

/// How many bytes of buffers (their capacity and their own bookkeeping) the background thread
/// keeps for callers to render their next records into, once it wrote from them. A record is
/// rendered on its caller's thread, where its event was made: read on another thread, an
/// event's values (many small allocations) cost a cache miss each, and freed there they contend
/// for the allocator's lock (measured on the live path, both cost more than the rest of the
/// record). Passed as one buffer, a record costs the thread a few cache lines, and reused, no
/// allocation at all. A buffer larger than 64 KiB, or than what is left of this, is freed by
/// the thread.
pub const SPARE_BYTES: usize = 1 << 20;

/// The largest buffer (by [`Rendered::bytes`]) kept for reuse.
const SPARE_BUFFER_BYTES: usize = 64 << 10;

/// A record as its caller rendered it: its event's part of the record line (redacted), and
/// the event's session (for a `dropped` record the thread may write before it).
#[derive(Default)]
struct Rendered {
    body: Vec<u8>,
    session: String,
}

impl Rendered {
    /// The memory it holds, itself included (its place in the pool's list).
    fn bytes(&self) -> usize {
        std::mem::size_of::<Rendered>() + self.body.capacity() + self.session.capacity()
    }
}

enum Message {
    Record(Rendered),
    Flush(SyncSender<Result<(), String>>),
    Durable(Rendered, SyncSender<Result<(), String>>),
}

/// Buffers written from, for callers to render into again, within [`SPARE_BYTES`].
#[derive(Default)]
struct Spare {
    buffers: Vec<Rendered>,
    /// Their capacity, at most [`SPARE_BYTES`].
    bytes: usize,
    /// How many records were rendered into a reused buffer.
    #[cfg(test)]
    reused: usize,
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

impl Queue {
    fn has_room(&self) -> bool {
        self.messages.len() < self.capacity
    }
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled for the thread: work came while it was idle, something urgent, or closing.
    work: Condvar,
    /// Signalled for callers waiting for room (backpressure).
    room: Condvar,
    /// Under a lock of its own: callers take a buffer before they push.
    spare: Mutex<Spare>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spare(&self) -> MutexGuard<'_, Spare> {
        self.spare.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Logs from any thread without blocking on I/O.
pub struct AuditWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    overflow: Overflow,
    dropped: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
    /// The log's redactor: records are redacted as their callers render them.
    redactor: Redactor,
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
            spare: Mutex::new(Spare::default()),
        });
        let redactor = log.redactor().clone();
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
            redactor,
        }
    }

    /// `body` rendered for the thread, into a buffer it wrote from before when there is one.
    fn render(&self, body: &Body<'_>) -> Rendered {
        let mut rendered = {
            let mut spare = self.shared.spare();
            match spare.buffers.pop() {
                Some(buffer) => {
                    spare.bytes -= buffer.bytes();
                    #[cfg(test)]
                    {
                        spare.reused += 1;
                    }
                    buffer
                }
                None => Rendered::default(),
            }
        };
        rendered.body.clear();
        write_body(&mut rendered.body, body, &self.redactor);
        rendered.session.clear();
        rendered.session.push_str(body.session);
        rendered
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
            if queue.has_room() {
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
        self.queue(&event.body())
    }

    /// Queues the record of a call, as [`AuditWriter::record`] of [`Event::call`] would,
    /// without copying `args` into an event.
    pub fn record_call(
        &self,
        session: &str,
        call_id: u64,
        tool: &str,
        args: &Value,
    ) -> Result<(), AuditError> {
        self.queue(&Body::call(session, call_id, tool, args))
    }

    /// Queues the record of an answer, as [`AuditWriter::record`] of [`Event::answer`] would,
    /// without copying `envelope` into an event.
    pub fn record_answer(
        &self,
        session: &str,
        call_id: u64,
        tool: &str,
        envelope: &Envelope,
    ) -> Result<(), AuditError> {
        self.queue(&Body::answer(session, call_id, tool, envelope))
    }

    fn queue(&self, body: &Body<'_>) -> Result<(), AuditError> {
        self.check_failed()?;
        let wait = self.overflow == Overflow::Backpressure;
        let dropped = || {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            Err(AuditError::Dropped)
        };
        // Dropping sheds load: a full queue drops the record before it is rendered (the push
        // still checks, as room may go meanwhile).
        if !wait {
            let queue = self.shared.lock();
            if !queue.has_room() && !queue.closed {
                drop(queue);
                return dropped();
            }
        }
        match self.push(Message::Record(self.render(body)), false, wait)? {
            Some(()) => Ok(()),
            None => dropped(),
        }
    }

    /// Writes `event` and makes it durable (an fsync for files) before it returns, whatever
    /// the overflow mode and the sink's durability option: for security records, which must be
    /// on disk before the answer that reports them. Waits for room in the queue even in
    /// [`Overflow::Drop`] mode: a security record is never dropped.
    pub fn record_durable(&self, event: Event) -> Result<(), AuditError> {
        self.check_failed()?;
        let (done, wait) = sync_channel(1);
        self.push(
            Message::Durable(self.render(&event.body()), done),
            true,
            true,
        )?;
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
        let left: Vec<Message> = {
            let mut queue = self.0.lock();
            queue.closed = true;
            queue.messages.drain(..).collect()
        };
        self.0.room.notify_all();
        // Left only when the thread ended by a panic (a sink's): a flush or durable record
        // still queued then fails instead of waiting for an answer that never comes.
        drop(left);
    }
}

/// The next messages to write, at most [`MAX_BATCH`]; empty once closed and drained. Right
/// after a batch (`lookout`) the thread stays awake (not idle) for [`GATHER`] and takes what
/// came by then: while records keep coming it wakes once per [`GATHER`], and the callers never
/// wake it. With nothing by then, it sleeps until a message wakes it, and gathers for up to
/// [`GATHER`] more. Something urgent, closing or a half-full queue ends either wait at once.
fn next_batch(shared: &Shared, lookout: bool) -> Vec<Message> {
    let waiting = |q: &mut Queue| !q.urgent && !q.closed && q.messages.len() * 2 < q.capacity;
    let mut queue = shared.lock();
    if lookout {
        queue = shared
            .work
            .wait_timeout_while(queue, GATHER, waiting)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    if queue.messages.is_empty() {
        while queue.messages.is_empty() && !queue.closed {
            queue.idle = true;
            queue = shared.work.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
        queue.idle = false;
        queue = shared
            .work
            .wait_timeout_while(queue, GATHER, waiting)
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

/// Keeps buffers written from for callers to reuse, while they fit in [`SPARE_BYTES`]; the rest
/// are freed here.
fn hand_back(shared: &Shared, written: Vec<Rendered>) {
    let mut left = Vec::new();
    {
        let mut spare = shared.spare();
        for buffer in written {
            let size = buffer.bytes();
            if size <= SPARE_BUFFER_BYTES && spare.bytes + size <= SPARE_BYTES {
                spare.bytes += size;
                spare.buffers.push(buffer);
            } else {
                left.push(buffer);
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
    let mut lookout = false;
    loop {
        let batch = next_batch(shared, lookout);
        lookout = true;
        if batch.is_empty() {
            break;
        }
        let mut written = Vec::new();
        for message in batch {
            match message {
                Message::Record(record) => {
                    let lost = dropped.swap(0, Ordering::Relaxed);
                    if lost > 0
                        && let Err(e) = log.append(&Event::incident(
                            &record.session,
                            RecordKind::Dropped,
                            json!({"count": lost}),
                        ))
                    {
                        fail(e);
                    }
                    if let Err(e) = log.append_body(&record.body) {
                        fail(e);
                    }
                    written.push(record);
                }
                Message::Durable(record, done) => {
                    let result = log
                        .append_body(&record.body)
                        .and_then(|()| log.sync())
                        .map_err(|e| e.to_string());
                    written.push(record);
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
                    hand_back(shared, std::mem::take(&mut written));
                    let _ = done.send(result);
                }
            }
        }
        if let Err(e) = log.flush() {
            fail(e);
        }
        hand_back(shared, written);
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

    /// The buffers kept for reuse after a flush: (how many, their capacity as counted).
    fn spare(writer: &AuditWriter) -> (usize, usize) {
        let spare = writer.shared.spare();
        let counted: usize = spare.buffers.iter().map(Rendered::bytes).sum();
        assert_eq!(counted, spare.bytes, "the count follows the buffers");
        assert!(
            spare
                .buffers
                .iter()
                .all(|b| b.bytes() <= SPARE_BUFFER_BYTES)
        );
        (spare.buffers.len(), spare.bytes)
    }

    fn memory_writer(sink: &MemorySink, redactor: Redactor) -> AuditWriter {
        let log = AuditLog::new(Box::new(sink.clone()), ChainHead::genesis(), redactor);
        AuditWriter::spawn(log, 4096, Overflow::Backpressure)
    }

    /// Buffers written from are kept for the next records within SPARE_BYTES, whatever the
    /// records' sizes; small records pushed one by one reuse them; and every record still
    /// reaches the sink, chained, in order.
    #[test]
    fn buffers_are_reused_within_a_bound() {
        let sink = MemorySink::new();
        let writer = memory_writer(&sink, Redactor::default());
        let record_text = |ids: std::ops::Range<u64>, bytes: usize| {
            let text = "x".repeat(bytes);
            for i in ids {
                writer
                    .record(Event::call("s", i, "object.rename", json!({"name": text})))
                    .unwrap();
            }
            writer.flush().unwrap();
        };
        // 64 records of ~30 KB, more than SPARE_BYTES together, then 4 of ~100 KB, more than
        // a kept buffer may hold.
        record_text(0..64, 30_000);
        let (buffers, bytes) = spare(&writer);
        assert!(bytes <= SPARE_BYTES, "{bytes} bytes kept");
        assert!((1..=SPARE_BYTES / 30_000).contains(&buffers), "{buffers}");
        record_text(64..68, 100_000);
        assert!(spare(&writer).1 <= SPARE_BYTES);
        // Small records, one by one with a flush each: a flush returns once the buffers written
        // from before it are back, so each record reuses one.
        let reused_before = writer.shared.spare().reused;
        for i in 68..168 {
            writer
                .record(Event::call("s", i, "object.info", json!({"name": "Cube"})))
                .unwrap();
            writer.flush().unwrap();
            assert!(spare(&writer).1 <= SPARE_BYTES);
        }
        let reused = writer.shared.spare().reused - reused_before;
        assert_eq!(reused, 100, "small records rendered into a kept buffer");
        drop(writer);
        let report = verify_reader(&sink.bytes()[..], ChainHead::genesis(), "m").unwrap();
        assert!(report.is_intact(), "{report:?}");
        assert_eq!(report.records, 168);
    }

    /// Records rendered on the callers' threads are what `AuditLog::append` writes for the same
    /// events (redaction included), whatever buffer they reuse: every field but the record's
    /// time, and so its hash, is equal.
    #[test]
    fn rendered_records_match_appended_ones() {
        let redactor = Redactor::new(
            &vibe_contract::AuditPolicy::default(),
            Some("/sandbox".into()),
        );
        let envelope = vibe_errors::Envelope::Ok(
            json!({"name": "Cube", "location": [0.5, -0.0, 1e-7, 3.0], "é": "\u{1F600}\n", "_meta": {"determinism": "deterministic"}}),
        );
        let events = vec![
            Event::call(
                "s",
                1,
                "python.exec",
                json!({"code": "print(1)", "Token": "hunter2"}),
            ),
            Event::answer("s", 1, "python.exec", &envelope),
            Event::call(
                "s",
                2,
                "file.save",
                json!({"path": "/sandbox/a/b.blend", "nested": [{"API_KEY": 1}]}),
            ),
            Event::call("s", 3, "object.rename", json!({"name": "x".repeat(70_000)})),
            Event::call("s", 4, "object.info", json!({"name": "Cube"})),
            Event::incident(
                "s",
                RecordKind::Security,
                json!({"event": "sandbox", "password": "p"}),
            ),
        ];
        let through_writer = MemorySink::new();
        let writer = memory_writer(&through_writer, redactor.clone());
        for event in &events {
            writer.record(event.clone()).unwrap();
        }
        writer.record_durable(events[0].clone()).unwrap();
        drop(writer);
        let appended = MemorySink::new();
        let mut log = AuditLog::new(Box::new(appended.clone()), ChainHead::genesis(), redactor);
        for event in events.iter().chain(&events[..1]) {
            log.append(event).unwrap();
        }
        let fields = |bytes: Vec<u8>| -> Vec<serde_json::Value> {
            bytes
                .split(|b| *b == b'\n')
                .filter(|line| !line.is_empty())
                .map(|line| {
                    let mut record: serde_json::Value = serde_json::from_slice(line).unwrap();
                    let map = record.as_object_mut().unwrap();
                    for key in ["time", "hash", "prev"] {
                        assert!(map.remove(key).is_some(), "{key}");
                    }
                    record
                })
                .collect()
        };
        let (written, expected) = (fields(through_writer.bytes()), fields(appended.bytes()));
        assert_eq!(written.len(), 7);
        assert_eq!(written, expected);
        let text = String::from_utf8(through_writer.bytes()).unwrap();
        assert!(!text.contains("hunter2") && !text.contains("print(1)"));
        assert!(
            text.contains("\"a/b.blend\""),
            "paths relative to the sandbox"
        );
    }

    /// A sink that panics ends the thread: a flush queued while it wrote the record it panicked
    /// on fails instead of waiting forever, and so does every later call.
    #[test]
    fn a_flush_fails_when_the_thread_dies() {
        struct Panicking;
        impl crate::sink::AuditSink for Panicking {
            fn write_line(&mut self, _: &[u8]) -> std::io::Result<()> {
                // Long enough for the flush below to be queued behind this batch.
                std::thread::sleep(Duration::from_millis(300));
                panic!("the sink broke");
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let log = AuditLog::new(
            Box::new(Panicking),
            ChainHead::genesis(),
            Redactor::default(),
        );
        let writer = Arc::new(AuditWriter::spawn(log, 16, Overflow::Backpressure));
        let (done, answered) = sync_channel(1);
        let flushing = Arc::clone(&writer);
        std::thread::spawn(move || {
            let _ = flushing.record(Event::call("s", 1, "object.info", json!({})));
            std::thread::sleep(Duration::from_millis(50)); // the thread takes the record alone
            let _ = done.send(flushing.flush());
        });
        let flushed = answered
            .recv_timeout(Duration::from_secs(20))
            .expect("flush answered, not left waiting");
        assert!(flushed.is_err(), "{flushed:?}");
        assert!(writer.flush().is_err());
        assert!(
            writer
                .record(Event::call("s", 2, "object.info", json!({})))
                .is_err()
        );
    }
}
