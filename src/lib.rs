//! # vibe: drive a real Blender safely on behalf of an AI agent
//!
//! One screen from nothing to an answer from Blender: [`connect`] to a [`Target`], name what
//! the agent may do, start, call.
//!
//! ```
//! use serde_json::json;
//! use vibe::{Target, connect};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), vibe::ConnectError> {
//! // Target::bpy_python("venv/bin/python"), Target::blender("/usr/bin/blender") or
//! // Target::tcp(addr, token) for a real one; the mock needs no Blender.
//! let blender = connect(Target::mock())
//!     .capabilities(["scene.read", "scene.write", "transactions"])
//!     .start()
//!     .await?;
//! let answer = blender.call("object.move", json!({"name": "Cube", "delta": [0, 0, 1]})).await;
//! assert_eq!(answer.result().unwrap()["location"], json!([0.0, 0.0, 1.0]));
//! // The person's Cube may be moved, not deleted: the actuator lock says so.
//! let refused = blender.call("object.delete", json!({"name": "Cube"})).await;
//! assert_eq!(refused.error().unwrap().details["reason"], "actuator_lock");
//! blender.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! A headless Blender ([`Target::bpy_python`], [`Target::blender`]) is started in the jail and
//! supervised (a call past its deadline kills it and a fresh one is restored); the GUI add-on is
//! reached over loopback TCP with its token. Every call goes through the six-phase pipeline
//! ([`exec::Pipeline`]): the schema, the contract, the guards, the kernel, the checks after.
//!
//! This umbrella crate also re-exports the Vibe crates under one roof and hosts the workspace's
//! examples, benches and cross-crate tests:
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

mod connect;

pub use connect::{Connect, ConnectError, Target, connect};
pub use vibe_audit as audit;
pub use vibe_contract as contract;
pub use vibe_errors as errors;
pub use vibe_exec as exec;
pub use vibe_transport as transport;
