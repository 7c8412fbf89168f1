//! # vibe-audit: the tamper-evident audit log
//!
//! Hash-chained JSONL records of every call, answer and security event land here.
