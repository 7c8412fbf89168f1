//! # vibe: drive a real Blender safely on behalf of an AI agent
//!
//! This umbrella crate re-exports the Vibe crates under one roof and hosts the workspace's
//! examples, benches and cross-crate tests. Embedders usually depend on the individual crates:
//!
//! | crate | re-exported as | what it is |
//! |---|---|---|
//! | `vibe-errors` | [`errors`] | error model v1: the envelope, codes, failure taxonomy |
//! | `vibe-contract` | [`contract`] | the session contract, registries, fingerprints, negotiation |
//! | `vibe-transport` | [`transport`] | the Transport trait, wire protocol v1, mock / TCP / stdio |
//! | `vibe-exec` | [`exec`] | the six-phase pipeline, guards, macros, transactions |
//! | `vibe-audit` | [`audit`] | the hash-chained audit log |
//!
//! Start with `cargo run --example quickstart`.

pub use vibe_audit as audit;
pub use vibe_contract as contract;
pub use vibe_errors as errors;
pub use vibe_exec as exec;
pub use vibe_transport as transport;
