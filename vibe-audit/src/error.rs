//! Audit errors.

/// Why the audit log could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// Reading or writing failed.
    #[error("audit i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The log's last record does not verify; appending would bless a tampered log.
    #[error("audit log is corrupt at line {line}: {reason}")]
    Corrupt {
        /// 1-based line, 0 when found by the tail scan.
        line: u64,
        /// What is wrong.
        reason: String,
    },
    /// The background writer stopped after an error.
    #[error("the audit writer stopped: {0}")]
    WriterFailed(String),
    /// Another writer (in this process or another) holds the log: two writers would fork the
    /// chain.
    #[error(
        "the audit log {path} is held by another writer (lock file {path}.lock); one log, one writer"
    )]
    Locked {
        /// The log's path.
        path: String,
    },
    /// The queue was full and the policy is to drop; the drop will be recorded.
    #[error("the audit queue is full; the record was dropped and the drop will be recorded")]
    Dropped,
}
