//! The agreed contract as MCP `tools/list` entries.

use serde_json::{Value, json};

use crate::negotiate::Agreement;
use crate::tool_registry::ToolSpec;

impl ToolSpec {
    /// The tool as an MCP `tools/list` entry: name (dots as underscores), description,
    /// inputSchema, outputSchema and annotations from the registry's hints.
    ///
    /// The outputSchema describes the `structuredContent` of every answer: the error model v1
    /// envelope, whose `result` is the registry's `outputs` for this tool.
    pub fn to_mcp_tool(&self) -> Value {
        json!({
            "name": self.mcp_name(),
            "title": self.name,
            "description": self.summary,
            "inputSchema": self.inputs,
            "outputSchema": {
                "type": "object",
                "required": ["ok"],
                "properties": {
                    "ok": {"type": "boolean"},
                    "result": self.outputs,
                    "error": {
                        "type": "object",
                        "required": ["code", "message", "details"],
                        "properties": {
                            "code": {"type": "string"},
                            "message": {"type": "string"},
                            "details": {"type": "object"},
                        },
                    },
                },
            },
            "annotations": {
                "title": self.name,
                "readOnlyHint": self.hints.read_only,
                "destructiveHint": self.hints.destructive,
                "idempotentHint": self.idempotent,
                "openWorldHint": false,
            },
        })
    }
}

impl Agreement {
    /// Every agreed tool as an MCP `tools/list` entry, in registry order.
    pub fn mcp_tools(&self) -> Vec<Value> {
        self.tools
            .tools()
            .iter()
            .map(|tool| tool.to_mcp_tool())
            .collect()
    }

    /// The registry name of an MCP tool name (`object_move` -> `object.move`).
    pub fn tool_for_mcp_name(&self, mcp_name: &str) -> Option<&ToolSpec> {
        self.tools
            .tools()
            .iter()
            .find(|tool| tool.mcp_name() == mcp_name)
            .map(AsRef::as_ref)
    }
}
