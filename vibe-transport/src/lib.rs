//! # vibe-transport: reaching Blender
//!
//! The `Transport` trait, wire protocol v1 and its backends (in-memory mock Blender, TCP, stdio
//! child process), and the Python kernel that runs inside Blender, land here.
