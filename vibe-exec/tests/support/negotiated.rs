//! An agreement as a host and the bridge negotiate it over the default registries. The vibe-exec tests
//! reach it through `support`; the benches include this file alone, by path.

use vibe_contract::{
    Agreement, BlenderProfile, BridgePolicy, Constraints, HostProfile, HostProposal,
    default_registries, negotiate,
};

/// What host `name` (the session's id too), asking for `capabilities` under `constraints`,
/// agrees on with `blender` under the bridge's `policy`.
pub fn negotiated(
    name: &str,
    capabilities: &[&str],
    constraints: Option<Constraints>,
    policy: &BridgePolicy,
    blender: &BlenderProfile,
) -> Agreement {
    let host = HostProfile {
        name: name.into(),
        version: "1".into(),
        capabilities: capabilities.iter().map(|c| c.to_string()).collect(),
        ..HostProfile::default()
    };
    let mut proposal = HostProposal::new(name, host);
    proposal.constraints = constraints;
    negotiate(&proposal, policy, blender, &default_registries().unwrap()).unwrap()
}
