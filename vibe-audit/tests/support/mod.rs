//! What the audit tests share, and the vibe-exec tests with them (they include this file by
//! path): a log and a writer over a chain from genesis, and a sink whose lines become durable
//! only on `sync`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use vibe_audit::{AuditLog, AuditSink, AuditWriter, ChainHead, Overflow, Redactor};

/// A log over `sink`, its chain from genesis, nothing redacted but the defaults.
pub fn genesis_log(sink: impl AuditSink + 'static) -> AuditLog {
    AuditLog::new(Box::new(sink), ChainHead::genesis(), Redactor::default())
}

/// A writer on its own thread over [`genesis_log`]`(sink)`, holding up to `capacity` records
/// in its queue (and past that: `overflow`).
pub fn genesis_writer(
    sink: impl AuditSink + 'static,
    capacity: usize,
    overflow: Overflow,
) -> AuditWriter {
    AuditWriter::spawn(genesis_log(sink), capacity, overflow)
}

/// A sink whose lines become durable only on `sync` (as a file's do only on fsync), each line
/// taking `pause` to write (so a small queue overflows).
pub struct Staged {
    pending: Vec<u8>,
    durable: Arc<Mutex<Vec<u8>>>,
    pause: Duration,
}

impl Staged {
    /// The sink, and its durable side.
    pub fn new(pause: Duration) -> (Staged, Arc<Mutex<Vec<u8>>>) {
        let durable = Arc::new(Mutex::new(Vec::new()));
        let sink = Staged {
            pending: Vec::new(),
            durable: Arc::clone(&durable),
            pause,
        };
        (sink, durable)
    }
}

impl AuditSink for Staged {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        std::thread::sleep(self.pause);
        self.pending.extend_from_slice(line);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(()) // handed on, not durable
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.durable.lock().unwrap().append(&mut self.pending);
        Ok(())
    }
}
