//! # vibe-audit: the tamper-evident audit log
//!
//! Every call, every answer and every security or terminal event becomes one hash-chained JSONL
//! record (`vibe_audit.jsonl` by default) that a human can trust after a failure:
//!
//! ```
//! use vibe_audit::{AuditLog, Event, MemorySink, Redactor, verify_reader, ChainHead};
//!
//! let sink = MemorySink::new();
//! let mut log = AuditLog::new(Box::new(sink.clone()), ChainHead::genesis(), Redactor::default());
//! log.append(&Event::call("s-1", 1, "python.exec", serde_json::json!({"code": "print(1)"}))).unwrap();
//! let answer = vibe_errors::Envelope::ok(serde_json::json!({"stdout": "1\n"}));
//! log.append(&Event::answer("s-1", 1, "python.exec", &answer)).unwrap();
//!
//! let bytes = sink.bytes();
//! let report = verify_reader(&bytes[..], ChainHead::genesis(), "memory").unwrap();
//! assert!(report.is_intact() && report.records == 2);
//! // Code is stored as a hash unless the contract's audit policy keeps it.
//! assert!(!String::from_utf8(bytes).unwrap().contains("print(1)"));
//! ```
//!
//! ## Design
//!
//! * **The chain.** A record's `hash` is blake3 over its canonical body (fixed field order,
//!   nested values as canonical JSON), which includes `prev` — the previous record's hash — and
//!   the answer's envelope. Any changed byte, removed, inserted or reordered record breaks it;
//!   [`verify_files`] names the first broken line. Cutting records off the end leaves a valid
//!   chain, so embedders that must detect that keep the head elsewhere ([`verify_anchored`]).
//! * **Survives restarts.** [`FileSink::open`] reads the log from its end (never the whole file)
//!   to resume the chain. A torn last line from a crash mid-append is cut off, saved beside the
//!   log (`<log>.torn-<seq>`), and recorded as a `recovered` record: earlier records are kept
//!   and the chain never forks. A last record that does not verify is refused.
//! * **Sinks.** [`AuditSink`] is object-safe: [`FileSink`], [`MemorySink`], or your own.
//!   [`AuditWriter`] puts a bounded queue and a background thread in front of a log, with an
//!   explicit [`Overflow`] choice: backpressure, or dropping (and recording the count as a
//!   `dropped` record). A caller renders its event (redacted, as the bytes of its part of the
//!   record line, where its values are still in the caller's cache) and pushes that onto the
//!   queue: the thread wakes once per burst (within [`GATHER`], 2 ms), not once per record, and
//!   seals and writes the records in their order; [`AuditWriter::flush`] and
//!   [`AuditWriter::record_durable`] do not wait for the burst. The buffers written from go back,
//!   within [`SPARE_BYTES`], for the callers' next records: walking and freeing the callers'
//!   values on the writer's thread (cache misses, the allocator's lock) was the audit's main
//!   cost on the live path. A call and its answer are rendered straight from the arguments
//!   and the envelope ([`AuditWriter::record_call`], [`AuditWriter::record_answer`]), redacted
//!   as they are written, with no copy into an [`Event`]. The bytes are the same as
//!   [`AuditLog::append`] writes for the event. Durability is per
//!   [`Durability`]; rotation by size continues the chain into the next file with a `rotated`
//!   record.
//! * **Redaction** ([`Redactor`], from the contract's `audit` policy): code bodies become
//!   `{blake3, bytes}` unless `keep_code`, secrets (`token`, `password`, ...) are never written,
//!   paths become sandbox-relative unless `keep_paths`.
//!
//! ## Performance and durability
//!
//! `cargo bench -p vibe-audit` (criterion, 2-core machine, records of ~330 bytes; each beside
//! plain `serde_json` + blake3 over the same records in the same run): sealing and appending,
//! measured 2026-11-24, ~1.73M records/s (baseline `to_vec` + blake3: ~1.46M/s; redaction is
//! applied as the record is written, in one pass, with no lowercase copy of any key); verifying, measured 2026-11-23,
//! ~1.76M records/s (lines split and hashed on up to `MAX_VERIFY_THREADS` threads, links checked
//! in order; baseline parse + hash on as many threads: ~0.64M/s).
//! Durable modes, to a file on this machine's disk, measured 2026-11-24: flush per batch of
//! 1000 ~760k records/s, flush per record ~510k/s, fsync per batch of 100 ~230k/s (fsync cost
//! depends entirely on the disk).
//!
//! The `vibe-audit` binary verifies and tails logs: `vibe-audit verify vibe_audit.jsonl`,
//! `vibe-audit tail vibe_audit.jsonl -n 20`.

mod error;
mod file;
mod log;
mod record;
mod redact;
mod sink;
mod verify;
mod writer;

pub use error::AuditError;
pub use file::{ChainHead, Durability, FileOptions, FileSink, Recovery};
pub use log::AuditLog;
pub use record::{Event, GENESIS, RecordKind, now_rfc3339};
pub use redact::{CODE_KEYS, PATH_KEYS, Redactor, SECRET_KEYS};
pub use sink::{AuditSink, MemorySink};
pub use verify::{Break, MAX_VERIFY_THREADS, Report, verify_anchored, verify_files, verify_reader};
pub use writer::{AuditWriter, FlushGuard, GATHER, MAX_BATCH, Overflow, SPARE_BYTES};

/// The default log file name.
pub const DEFAULT_LOG: &str = "vibe_audit.jsonl";
