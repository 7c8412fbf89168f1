//! Execution history: every attempt's outcome, bounded in memory, exportable as JSONL.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How many records a history keeps by default; older ones are dropped (and counted).
pub const DEFAULT_HISTORY_CAPACITY: usize = 1_000;

/// One execution (an iteration of the fast retry loop, retries folded in).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// Sequence number in this history.
    pub id: u64,
    /// When it finished (RFC 3339, UTC).
    pub timestamp: String,
    /// What the agent was asked to do.
    pub request: String,
    /// The final code (the successful one, or the last attempt).
    pub code: String,
    /// The final answer.
    pub envelope: Value,
    /// How many fast retries it took.
    pub retry_count: u32,
    /// Short summaries of the errors the retries fixed.
    pub error_summaries: Vec<String>,
    /// Wall time, in milliseconds.
    pub duration_ms: f64,
    /// Whether it succeeded.
    pub success: bool,
}

/// A bounded, thread-safe execution history.
#[derive(Debug)]
pub struct ExecutionHistory {
    records: Mutex<VecDeque<ExecutionRecord>>,
    capacity: usize,
    next_id: Mutex<u64>,
    evicted: Mutex<u64>,
}

impl Default for ExecutionHistory {
    fn default() -> Self {
        ExecutionHistory::new(DEFAULT_HISTORY_CAPACITY)
    }
}

impl ExecutionHistory {
    /// A history keeping at most `capacity` records.
    pub fn new(capacity: usize) -> ExecutionHistory {
        ExecutionHistory {
            records: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            next_id: Mutex::new(1),
            evicted: Mutex::new(0),
        }
    }

    /// Records an execution; its `id` is assigned here.
    pub fn record(&self, mut record: ExecutionRecord) -> u64 {
        let mut next = crate::session::lock(&self.next_id);
        record.id = *next;
        *next += 1;
        let mut records = crate::session::lock(&self.records);
        if records.len() == self.capacity {
            records.pop_front();
            *crate::session::lock(&self.evicted) += 1;
        }
        records.push_back(record);
        *next - 1
    }

    /// The `n` most recent records, newest last.
    pub fn recent(&self, n: usize) -> Vec<ExecutionRecord> {
        let records = crate::session::lock(&self.records);
        records
            .iter()
            .skip(records.len().saturating_sub(n))
            .cloned()
            .collect()
    }

    /// Every failed record still held.
    pub fn failures(&self) -> Vec<ExecutionRecord> {
        crate::session::lock(&self.records)
            .iter()
            .filter(|r| !r.success)
            .cloned()
            .collect()
    }

    /// How many records were dropped to stay within capacity.
    pub fn evicted(&self) -> u64 {
        *crate::session::lock(&self.evicted)
    }

    /// Writes every record held as JSONL.
    pub fn export(&self, path: &Path) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for record in crate::session::lock(&self.records).iter() {
            serde_json::to_writer(&mut out, record)?;
            out.write_all(b"\n")?;
        }
        out.flush()
    }
}
