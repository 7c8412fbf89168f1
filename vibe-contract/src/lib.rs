//! # vibe-contract: the session contract v1
//!
//! The negotiated contract between an AI host and a Blender: which tools may be called, within
//! which limits, against which Blender. Types, registries, fingerprints and negotiation land here.
