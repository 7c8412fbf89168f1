//! Quickstart: the error model every Vibe answer travels in.
//!
//! Run with `cargo run --example quickstart`.

use vibe::errors::{Envelope, ErrorBody, ErrorCode, taxonomy};

fn main() {
    println!("Vibe error model v1\n");

    let ok = Envelope::ok(serde_json::json!({"name": "Cube", "location": [0.0, 0.0, 1.0]}));
    println!("a success:  {}", ok.to_json_string());

    // Raw text as Blender prints it: the answer keeps the useful last line only.
    let raw = "Traceback (most recent call last):\n  File \"/home/ann/.config/blender/scripts/tool.py\", line 41, in execute\n    bpy.ops.object.modifier_apply(modifier=\"Subdivision\")\nRuntimeError: Operator bpy.ops.object.modifier_apply.poll() failed, context is incorrect";
    let failed = Envelope::from(ErrorBody::from_raw(ErrorCode::ExecutionFailed, raw));
    println!("a failure:  {}\n", failed.to_json_string());

    println!("every taxonomy reason, as an MCP tools/call result's isError and the envelope:");
    for row in taxonomy() {
        let envelope = Envelope::from(ErrorBody::from_reason(
            row.reason.clone(),
            format!("example of {}", row.reason),
        ));
        let mcp = envelope.to_mcp_tool_result();
        println!("  isError={} {}", mcp["isError"], envelope.to_json_string());
    }
}
