//! # vibe: drive a real Blender safely on behalf of an AI agent
//!
//! This umbrella crate re-exports the Vibe crates under one roof and hosts the workspace's
//! examples, benches and cross-crate tests. Embedders usually depend on the individual crates.

pub use vibe_errors as errors;
