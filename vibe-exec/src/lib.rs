//! # vibe-exec: the execution pipeline
//!
//! The six phases of a tool call, the guards, macros, transactions and the code gate land here.
