//! The audit log: chains events into sealed records and hands them to a sink.

use serde_json::json;

use crate::error::AuditError;
use crate::file::{ChainHead, FileOptions, FileSink, Recovery};
use crate::record::{Event, RecordKind, rfc3339, seal_body, write_body};
use crate::redact::Redactor;
use crate::sink::AuditSink;

/// A hash-chained log over any sink. Single-writer: wrap it in [`crate::AuditWriter`] to log
/// from many threads without blocking them.
pub struct AuditLog {
    sink: Box<dyn AuditSink>,
    head: ChainHead,
    redactor: Redactor,
    buffer: Vec<u8>,
    /// The event part of the record being appended (see [`AuditLog::append`]).
    body: Vec<u8>,
    clock: Clock,
}

/// Formats the time once per millisecond rather than once per record.
#[derive(Default)]
struct Clock {
    millis: u128,
    text: String,
}

impl Clock {
    fn now(&mut self) -> String {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        if since.as_millis() != self.millis || self.text.is_empty() {
            self.millis = since.as_millis();
            self.text = rfc3339(since.as_secs() as i64, since.subsec_millis());
        }
        self.text.clone()
    }
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// A log continuing from `head` on `sink`.
    pub fn new(sink: Box<dyn AuditSink>, head: ChainHead, redactor: Redactor) -> AuditLog {
        AuditLog {
            sink,
            head,
            redactor,
            buffer: Vec::with_capacity(4096),
            body: Vec::with_capacity(4096),
            clock: Clock::default(),
        }
    }

    /// Opens a file log, resuming its chain; a torn tail found on open is recorded as a
    /// `recovered` record before anything else.
    pub fn open_file(
        path: impl AsRef<std::path::Path>,
        options: FileOptions,
        redactor: Redactor,
    ) -> Result<AuditLog, AuditError> {
        let (sink, head, recovery) = FileSink::open(path, options)?;
        let mut log = AuditLog::new(Box::new(sink), head, redactor);
        if let Some(Recovery {
            torn_bytes,
            torn_hash,
            saved_to,
        }) = recovery
        {
            log.append(&Event::incident(
                "vibe-audit",
                RecordKind::Recovered,
                json!({"torn_bytes": torn_bytes, "torn_hash": torn_hash, "saved_to": saved_to.display().to_string()}),
            ))?;
            log.flush()?;
        }
        Ok(log)
    }

    /// Where the chain stands.
    pub fn head(&self) -> &ChainHead {
        &self.head
    }

    /// Redacts, seals and writes one event; returns the new head.
    pub fn append(&mut self, event: &Event) -> Result<&ChainHead, AuditError> {
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        write_body(&mut body, &event.body(), &self.redactor);
        let appended = self.append_body(&body);
        self.body = body;
        appended?;
        Ok(&self.head)
    }

    /// The redactor events are rendered with (the writer renders on its callers' threads).
    pub(crate) fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Seals and writes one event's part of a record line, rendered (redacted) by [`write_body`].
    pub(crate) fn append_body(&mut self, body: &[u8]) -> Result<(), AuditError> {
        let time = self.clock.now();
        let mut hash = self.seal(&time, body);
        if self.sink.rotate_due(self.buffer.len()) {
            self.rotate(&time)?;
            // The record follows the rotation record now, so it is sealed again.
            hash = self.seal(&time, body);
        }
        self.commit(hash)
    }

    /// Seals an event's rendered part as the next record into the buffer; returns its hash.
    fn seal(&mut self, time: &str, body: &[u8]) -> String {
        self.buffer.clear();
        seal_body(
            &mut self.buffer,
            self.head.seq + 1,
            time,
            &self.head.hash,
            body,
        )
    }

    fn commit(&mut self, hash: String) -> Result<(), AuditError> {
        self.sink.write_line(&self.buffer)?;
        self.head = ChainHead {
            seq: self.head.seq + 1,
            hash,
        };
        Ok(())
    }

    fn rotate(&mut self, time: &str) -> Result<(), AuditError> {
        let previous = self.sink.rotate()?;
        let event = Event::incident(
            "vibe-audit",
            RecordKind::Rotated,
            json!({"previous_file": previous, "previous_seq": self.head.seq, "previous_hash": self.head.hash}),
        );
        let mut body = Vec::new();
        write_body(&mut body, &event.body(), &self.redactor);
        let hash = self.seal(time, &body);
        self.commit(hash)
    }

    /// Ends a batch on the sink (durability as the sink promises).
    pub fn flush(&mut self) -> Result<(), AuditError> {
        self.sink.flush()?;
        Ok(())
    }

    /// Makes every record appended so far durable now (an fsync for files), whatever the
    /// sink's durability option.
    pub fn sync(&mut self) -> Result<(), AuditError> {
        self.sink.sync()?;
        Ok(())
    }
}
