//! The MCP `tools/call` result shape, as plain JSON.
//!
//! MCP hosts receive an envelope as a `tools/call` result whose `structuredContent` is the
//! envelope, whose one text block carries the same JSON, and whose `isError` is `!ok`. Argument
//! errors are tool errors (a result with `isError: true`), not JSON-RPC errors, so the model sees
//! them and can correct itself. No MCP crate is needed for this.

use serde_json::{Value, json};

use crate::envelope::Envelope;

impl Envelope {
    /// The envelope as an MCP `tools/call` result.
    ///
    /// ```
    /// use vibe_errors::Envelope;
    /// let result = Envelope::ok(serde_json::json!({"name": "Cube"})).to_mcp_tool_result();
    /// assert_eq!(result["isError"], false);
    /// assert_eq!(result["structuredContent"]["result"]["name"], "Cube");
    /// ```
    pub fn to_mcp_tool_result(&self) -> Value {
        json!({
            "content": [{ "type": "text", "text": self.to_json_string() }],
            "structuredContent": self.to_value(),
            "isError": !self.is_ok(),
        })
    }
}
