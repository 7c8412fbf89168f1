//! The agreed contract as MCP `tools/list` entries: every agreed tool, and every agreed macro
//! as a tool of its own (`macro_` and its name).

use serde_json::{Value, json};

use crate::macro_registry::MacroSpec;
use crate::negotiate::Agreement;
use crate::tool_registry::{ToolRegistry, ToolSpec};

/// The prefix of a macro's MCP tool name (`macro_build_and_place`): registry tool names have a
/// dot, so their MCP names (`object_move`) never start with it.
pub const MCP_MACRO_PREFIX: &str = "macro_";

/// The MCP `outputSchema` of an answer whose `result` is `result`: the error model v1
/// envelope, as every `structuredContent` is.
pub fn envelope_output_schema(result: &Value) -> Value {
    json!({
        "type": "object",
        "required": ["ok"],
        "properties": {
            "ok": {"type": "boolean"},
            "result": result,
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
    })
}

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
            "outputSchema": envelope_output_schema(&self.outputs),
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

impl MacroSpec {
    /// The MCP name of the macro: [`MCP_MACRO_PREFIX`] and its name.
    pub fn mcp_name(&self) -> String {
        format!("{MCP_MACRO_PREFIX}{}", self.macro_name)
    }

    /// The macro as an MCP `tools/list` entry. Its outputSchema is the envelope whose `result`
    /// names the macro, its version and each step's result; its hints come from its steps'
    /// tools in `tools` (read-only if every step is, destructive if any step is).
    pub fn to_mcp_tool(&self, tools: &ToolRegistry) -> Value {
        let step_tools: Vec<&ToolSpec> = self
            .steps
            .iter()
            .filter_map(|step| tools.get(&step.tool))
            .collect();
        let result = json!({
            "type": "object",
            "required": ["macro", "version", "steps"],
            "properties": {
                "macro": {"type": "string"},
                "version": {"type": "string"},
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["step", "tool", "result"],
                        "properties": {
                            "step": {"type": "integer"},
                            "tool": {"type": "string"},
                            "result": {"type": "object"},
                        },
                    },
                },
            },
        });
        json!({
            "name": self.mcp_name(),
            "title": format!("macro {}", self.macro_name),
            "description": self.summary,
            "inputSchema": self.inputs,
            "outputSchema": envelope_output_schema(&result),
            "annotations": {
                "title": format!("macro {}", self.macro_name),
                "readOnlyHint": step_tools.iter().all(|t| t.hints.read_only),
                "destructiveHint": step_tools.iter().any(|t| t.hints.destructive),
                "idempotentHint": false,
                "openWorldHint": false,
            },
        })
    }
}

impl Agreement {
    /// Every agreed tool as an MCP `tools/list` entry, in registry order, then every agreed
    /// macro (see [`Agreement::mcp_macros`]).
    pub fn mcp_tools(&self) -> Vec<Value> {
        let mut listed: Vec<Value> = self
            .tools
            .tools()
            .iter()
            .map(|tool| tool.to_mcp_tool())
            .collect();
        listed.extend(self.mcp_macros());
        listed
    }

    /// Every agreed macro as an MCP `tools/list` entry, in registry order.
    pub fn mcp_macros(&self) -> Vec<Value> {
        self.macros
            .iter()
            .flat_map(|macros| macros.macros())
            .map(|spec| spec.to_mcp_tool(&self.tools))
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

    /// The agreed macro of an MCP tool name (`macro_ground_plane` -> `ground_plane`).
    pub fn macro_for_mcp_name(&self, mcp_name: &str) -> Option<&MacroSpec> {
        let name = mcp_name.strip_prefix(MCP_MACRO_PREFIX)?;
        self.macros.as_ref()?.get(name)
    }
}
