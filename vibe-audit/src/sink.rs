//! Where sealed records go: the object-safe [`AuditSink`], and the in-memory sink.

use std::io;
use std::sync::{Arc, Mutex};

/// A destination for sealed record lines. Object-safe: embedders may write their own (a socket,
/// a database), and the log takes a `Box<dyn AuditSink>`.
pub trait AuditSink: Send {
    /// Writes one sealed record line, newline included.
    fn write_line(&mut self, line: &[u8]) -> io::Result<()>;

    /// Ends a batch: makes what was written as durable as the sink promises.
    fn flush(&mut self) -> io::Result<()>;

    /// Makes what was written durable now, whatever the sink's usual promise (security records
    /// before the answer that reports them). By default the same as `flush`.
    fn sync(&mut self) -> io::Result<()> {
        self.flush()
    }

    /// Whether the sink wants to rotate before a line of `next_len` bytes.
    fn rotate_due(&self, _next_len: usize) -> bool {
        false
    }

    /// Starts a new file (or segment); returns a name for the one that was closed.
    fn rotate(&mut self) -> io::Result<Option<String>> {
        Ok(None)
    }
}

/// Keeps lines in memory; clones share the same lines (for tests and embedders that ship
/// records elsewhere).
#[derive(Clone, Debug, Default)]
pub struct MemorySink {
    lines: Arc<Mutex<Vec<u8>>>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> MemorySink {
        MemorySink::default()
    }

    /// Everything written so far, as JSONL bytes.
    pub fn bytes(&self) -> Vec<u8> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl AuditSink for MemorySink {
    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(line);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
