//! MCP resources: the scene and Blender's errors, for hosts that attach context without a tool
//! call. Each is read through the pipeline with an agreed read tool (validated, guarded and
//! audited like any call), and is listed only when the contract agreed that tool.

use serde_json::json;
use vibe::contract::Agreement;
use vibe::exec::Pipeline;

/// The URI of the scene snapshot.
pub const SNAPSHOT_URI: &str = "vibe://scene/snapshot";
/// The URI of Blender's recent errors.
pub const ERRORS_URI: &str = "vibe://blender/errors";

/// One resource and the read tool behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SceneResource {
    /// Its URI.
    pub uri: &'static str,
    /// A short name.
    pub name: &'static str,
    /// What it holds.
    pub description: &'static str,
    /// The registry tool that reads it (called with no arguments).
    pub tool: String,
}

/// The resources this contract can serve.
pub fn scene_resources(agreement: &Agreement) -> Vec<SceneResource> {
    let mut resources = Vec::new();
    // The registry marks the tool that answers the canonical scene (hints.snapshot).
    if let Some(tool) = agreement.tool_where(|t| t.hints.snapshot) {
        resources.push(SceneResource {
            uri: SNAPSHOT_URI,
            name: "scene snapshot",
            description: "The whole scene as canonical data (objects, collections, materials, indices) and its fingerprint, as the envelope of the snapshot tool.",
            tool: tool.to_owned(),
        });
    }
    if agreement.tools.get("blender.errors").is_some() {
        resources.push(SceneResource {
            uri: ERRORS_URI,
            name: "Blender errors",
            description: "Blender's recent console errors and warnings, oldest first, as the envelope of blender.errors.",
            tool: "blender.errors".to_owned(),
        });
    }
    resources
}

/// The resource's text: the envelope its tool answered, as JSON (a failed read is an envelope
/// too, which says why).
pub async fn read(pipeline: &Pipeline, resource: &SceneResource) -> String {
    let envelope = pipeline.call(&resource.tool, json!({})).await;
    serde_json::to_string(&envelope.to_value()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vibe::{Target, connect};

    #[tokio::test(flavor = "current_thread")]
    async fn both_resources_read_through_their_tools_on_the_mock() {
        let pipeline = connect(Target::mock()).start().await.unwrap();
        let resources = scene_resources(&pipeline.session().agreement);
        let uris: Vec<&str> = resources.iter().map(|r| r.uri).collect();
        assert_eq!(uris, [SNAPSHOT_URI, ERRORS_URI]);
        let snapshot: serde_json::Value =
            serde_json::from_str(&read(&pipeline, &resources[0]).await).unwrap();
        assert_eq!(snapshot["ok"], true);
        assert!(
            snapshot["result"]["objects"]
                .as_array()
                .unwrap()
                .iter()
                .any(|o| o["name"] == "Cube"),
            "{snapshot}"
        );
        let errors: serde_json::Value =
            serde_json::from_str(&read(&pipeline, &resources[1]).await).unwrap();
        assert_eq!(errors["ok"], true);
        assert!(errors["result"]["errors"].is_array(), "{errors}");
        pipeline.close().await.unwrap();
    }

    #[test]
    fn a_resource_whose_tool_was_not_agreed_is_not_listed() {
        use vibe::contract::{
            BridgePolicy, HostProfile, HostProposal, default_registries, negotiate,
        };
        let host = HostProfile {
            capabilities: ["scene.read".to_owned()].into(),
            ..HostProfile::default()
        };
        let mut proposal = HostProposal::new("resources-1", host);
        let blender = vibe::transport::MockBlender::new().hello().blender;
        let registries = default_registries().unwrap();
        let agree = |proposal: &HostProposal| {
            negotiate(proposal, &BridgePolicy::default(), &blender, &registries).unwrap()
        };
        proposal.tools = Some(["object.info".to_owned()].into());
        assert!(scene_resources(&agree(&proposal)).is_empty());
        proposal.tools = Some(["blender.errors".to_owned()].into());
        let only_errors = scene_resources(&agree(&proposal));
        assert_eq!(
            only_errors.iter().map(|r| r.uri).collect::<Vec<_>>(),
            [ERRORS_URI]
        );
    }
}
