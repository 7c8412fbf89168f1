//! The non-blocking writer: a bounded queue in front of a background thread that owns the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

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

enum Message {
    Record(Box<Event>),
    Flush(SyncSender<Result<(), String>>),
    Durable(Box<Event>, SyncSender<Result<(), String>>),
}

/// Logs from any thread without blocking on I/O.
pub struct AuditWriter {
    sender: Option<SyncSender<Message>>,
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

impl AuditWriter {
    /// Starts the background thread with a queue of `capacity` records.
    pub fn spawn(log: AuditLog, capacity: usize, overflow: Overflow) -> AuditWriter {
        let (sender, receiver) = sync_channel(capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(Mutex::new(None));
        let thread = {
            let (dropped, failed) = (Arc::clone(&dropped), Arc::clone(&failed));
            std::thread::Builder::new()
                .name("vibe-audit".into())
                .spawn(move || run(log, receiver, dropped, failed))
                .ok()
        };
        AuditWriter {
            sender: Some(sender),
            thread,
            overflow,
            dropped,
            failed,
        }
    }

    /// The queue, unless the writer failed or was closed.
    fn open_sender(&self) -> Result<&SyncSender<Message>, AuditError> {
        if let Some(error) = self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(AuditError::WriterFailed(error));
        }
        self.sender
            .as_ref()
            .ok_or_else(|| AuditError::WriterFailed("closed".into()))
    }

    /// Queues an event. With [`Overflow::Drop`] a full queue answers [`AuditError::Dropped`]
    /// (the drop is recorded); with backpressure the call waits for room.
    pub fn record(&self, event: Event) -> Result<(), AuditError> {
        let sender = self.open_sender()?;
        let message = Message::Record(Box::new(event));
        match self.overflow {
            Overflow::Backpressure => sender
                .send(message)
                .map_err(|_| AuditError::WriterFailed("the writer thread stopped".into())),
            Overflow::Drop => match sender.try_send(message) {
                Ok(()) => Ok(()),
                Err(TrySendError::Full(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    Err(AuditError::Dropped)
                }
                Err(TrySendError::Disconnected(_)) => {
                    Err(AuditError::WriterFailed("the writer thread stopped".into()))
                }
            },
        }
    }

    /// Writes `event` and makes it durable (an fsync for files) before it returns, whatever
    /// the overflow mode and the sink's durability option: for security records, which must be
    /// on disk before the answer that reports them. Waits for room in the queue even in
    /// [`Overflow::Drop`] mode: a security record is never dropped.
    pub fn record_durable(&self, event: Event) -> Result<(), AuditError> {
        let sender = self.open_sender()?;
        let (done, wait) = sync_channel(1);
        sender
            .send(Message::Durable(Box::new(event), done))
            .map_err(|_| AuditError::WriterFailed("the writer thread stopped".into()))?;
        wait.recv()
            .map_err(|_| AuditError::WriterFailed("the writer thread stopped".into()))?
            .map_err(AuditError::WriterFailed)
    }

    /// Waits until everything queued so far is written and flushed.
    pub fn flush(&self) -> Result<(), AuditError> {
        let sender = self
            .sender
            .as_ref()
            .ok_or_else(|| AuditError::WriterFailed("closed".into()))?;
        let (done, wait) = sync_channel(1);
        sender
            .send(Message::Flush(done))
            .map_err(|_| AuditError::WriterFailed("the writer thread stopped".into()))?;
        wait.recv()
            .map_err(|_| AuditError::WriterFailed("the writer thread stopped".into()))?
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
        self.sender.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    mut log: AuditLog,
    receiver: Receiver<Message>,
    dropped: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
) {
    let fail = |error: AuditError| {
        *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
    };
    while let Ok(first) = receiver.recv() {
        let mut next = Some(first);
        let mut written = 0;
        while let Some(message) = next.take() {
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
                    written += 1;
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
                    written += 1;
                }
                Message::Flush(done) => {
                    let result = log.flush().map_err(|e| e.to_string());
                    if let Err(e) = &result {
                        fail(AuditError::WriterFailed(e.clone()));
                    }
                    let _ = done.send(result);
                }
            }
            if written < MAX_BATCH {
                next = receiver.try_recv().ok();
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
