//! The MCP side: `tools/list`, `tools/call` (tools and macros, with progress and
//! cancellation), `resources/list` and `resources/read`, over one pipeline.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use vibe::errors::{Envelope, ErrorBody, ErrorCode};
use vibe::exec::Pipeline;

use crate::progress::{PROGRESS_EVERY, Progress, is_long};
use crate::resources::{SceneResource, read, scene_resources};

/// What the server tells the model about itself at `initialize`.
const INSTRUCTIONS: &str = "Drives a real Blender through a negotiated contract. Every answer is {ok, result} or \
{ok:false, error:{code, message, details}}; details.recovery says what to do next. Call scene_telemetry to re-check \
the scene after a failure; object_audit_identity before changing anything you did not create; you may only delete \
objects you created. Tools named macro_* run several steps as one (all or nothing where they say so). The resources \
vibe://scene/snapshot and vibe://blender/errors hold the scene and Blender's recent errors.";

/// The server: the pipeline, and the agreed contract rendered once as MCP tools and resources.
pub struct VibeServer {
    pipeline: Arc<Pipeline>,
    tools: Vec<Tool>,
    resources: Vec<SceneResource>,
}

impl VibeServer {
    /// A server over `pipeline`: its agreed tools and macros become MCP tools.
    pub fn new(pipeline: Arc<Pipeline>) -> Result<VibeServer, serde_json::Error> {
        let agreement = &pipeline.session().agreement;
        let tools = agreement
            .mcp_tools()
            .into_iter()
            .map(serde_json::from_value)
            .collect::<Result<Vec<Tool>, _>>()?;
        let resources = scene_resources(agreement);
        Ok(VibeServer {
            pipeline,
            tools,
            resources,
        })
    }

    /// How many MCP tools (agreed tools and macros) the server lists.
    pub fn tool_count(&self) -> usize {
        self.tools.len()
    }

    /// Runs a registry tool: cancellable by the client, with progress for the long ones.
    async fn run_tool(
        &self,
        tool: &str,
        params: Value,
        context: &RequestContext<RoleServer>,
    ) -> Envelope {
        let pipeline = &self.pipeline;
        let class = pipeline
            .session()
            .agreement
            .tools
            .get(tool)
            .map(|spec| spec.time_class)
            .unwrap_or_default();
        let mut progress = match context.meta.get_progress_token() {
            Some(token) if is_long(class) => Some(Progress::new(
                context.peer.clone(),
                token,
                tool,
                pipeline.deadline_for(tool),
            )),
            _ => None,
        };
        if let Some(progress) = &mut progress {
            progress.start().await;
        }
        // MCP cancellation (notifications/cancelled) is the pipeline's cancel: a call not yet
        // sent never runs, the kernel stops one it runs, or its supervisor kills and restores.
        let id = pipeline.next_call_id();
        let call = pipeline.call_with_id(id, tool, params);
        tokio::pin!(call);
        let mut ticks = tokio::time::interval(PROGRESS_EVERY);
        ticks.tick().await; // the first tick is immediate: `start` covered it
        let mut cancelled = false;
        let envelope = loop {
            tokio::select! {
                envelope = &mut call => break envelope,
                () = context.ct.cancelled(), if !cancelled => {
                    cancelled = true;
                    pipeline.cancel(id).await;
                }
                _ = ticks.tick(), if progress.is_some() && !cancelled => {
                    if let Some(progress) = &mut progress {
                        progress.tick().await;
                    }
                }
            }
        };
        if let (Some(progress), false) = (&mut progress, cancelled) {
            progress.finish().await;
        }
        envelope
    }
}

impl ServerHandler for VibeServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        let mut info = ServerConfig::new(capabilities);
        if let Ok(implementation) = serde_json::from_value(
            json!({"name": "vibe-blender", "version": env!("CARGO_PKG_VERSION")}),
        ) {
            info.server_info = implementation;
        }
        info.instructions = Some(INSTRUCTIONS.into());
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let params = Value::Object(request.arguments.unwrap_or_default());
        let agreement = &self.pipeline.session().agreement;
        let envelope = if let Some(spec) = agreement.tool_for_mcp_name(&request.name) {
            let tool = spec.name.clone();
            self.run_tool(&tool, params, &context).await
        } else if let Some(spec) = agreement.macro_for_mcp_name(&request.name) {
            // A macro's steps are each a quick call; it is not cancelled half-way, so that a
            // transactional macro always commits or rolls back as a whole.
            let name = spec.macro_name.clone();
            self.pipeline.run_macro(&name, params).await
        } else {
            // An unknown tool is a tool error too: the model sees it and can pick another.
            Envelope::Err(
                ErrorBody::new(
                    ErrorCode::ContractViolation,
                    format!("tool {:?} is not in the agreed contract", request.name),
                )
                .with_rule(vibe::errors::Rule::ToolNotAgreed),
            )
        };
        let result: CallToolResult = serde_json::from_value(envelope.to_mcp_tool_result())
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let listed = self
            .resources
            .iter()
            .map(|r| {
                Resource::new(r.uri, r.name)
                    .with_description(r.description)
                    .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(listed))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let Some(resource) = self.resources.iter().find(|r| r.uri == request.uri) else {
            let known: Vec<&str> = self.resources.iter().map(|r| r.uri).collect();
            return Err(McpError::resource_not_found(
                format!("no resource {:?} (this server has {known:?})", request.uri),
                None,
            ));
        };
        let text = read(&self.pipeline, resource).await;
        let contents =
            ResourceContents::text(text, resource.uri).with_mime_type("application/json");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}
