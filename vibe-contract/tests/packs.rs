//! Tool packs: what a host selects, what the cap allows, and the fingerprints the contract
//! records.

mod common;

use std::collections::BTreeSet;

use common::*;
use vibe_contract::*;

const EVERY_CAPABILITY: [&str; 7] = [
    "scene.read",
    "scene.write",
    "transactions",
    "file.read",
    "file.write",
    "render",
    "code_exec",
];

/// A proposal asking for every capability and for `packs`.
fn proposal(packs: Option<&[&str]>) -> HostProposal {
    let mut proposal = HostProposal::new("s-packs", host(&EVERY_CAPABILITY));
    proposal.packs = packs.map(set);
    proposal
}

/// Negotiates `proposal` with a Blender and a bridge that offer every capability.
fn negotiate_proposal(
    registries: &Registries,
    proposal: &HostProposal,
) -> Result<Agreement, Refusal> {
    let mut blender = blender("5.0.1", true);
    blender.features = set(&EVERY_CAPABILITY);
    let mut policy = BridgePolicy::default();
    policy.capabilities.insert(CAP_CODE_EXEC.to_owned());
    negotiate(proposal, &policy, &blender, registries)
}

fn negotiate_with(registries: &Registries, packs: Option<&[&str]>) -> Result<Agreement, Refusal> {
    negotiate_proposal(registries, &proposal(packs))
}

fn pack_tools(registries: &Registries, name: &str) -> BTreeSet<String> {
    let pack = registries.pack(name).unwrap();
    pack.tools.names().map(str::to_owned).collect()
}

fn agreed(agreement: &Agreement) -> BTreeSet<String> {
    agreement
        .contract
        .capabilities
        .tools
        .iter()
        .cloned()
        .collect()
}

#[test]
fn every_pack_fits_the_cap_and_no_tool_is_in_two() {
    let registries = default_registries().unwrap();
    let names: Vec<&str> = registries.packs.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["core", "organize", "io", "code", "look", "animate"]);
    let mut seen = BTreeSet::new();
    for pack in &registries.packs {
        assert!(pack.tools.tools().len() <= MAX_TOOLS, "{}", pack.name);
        for tool in pack.tools.names() {
            assert!(seen.insert(tool.to_owned()), "{tool} is in two packs");
            assert!(
                registries.tools.get(tool).is_some(),
                "{tool} not in the catalog"
            );
        }
    }
    assert_eq!(seen.len(), registries.tools.tools().len());
    // The catalog refuses a tool in two packs.
    let core = registries.pack("core").unwrap();
    let twice = [
        core.clone(),
        Pack::new("again", false, ToolRegistry::clone(&core.tools)),
    ];
    assert!(matches!(
        catalog("x", semver::Version::new(1, 0, 0), "", &twice),
        Err(RegistryError::DuplicateName { .. })
    ));
}

#[test]
fn a_host_that_names_no_packs_gets_the_default_ones() {
    let registries = default_registries().unwrap();
    let agreement = negotiate_with(&registries, None).unwrap();
    let defaults: BTreeSet<String> = registries
        .packs
        .iter()
        .filter(|p| p.default)
        .flat_map(|p| p.tools.names().map(str::to_owned))
        .collect();
    assert_eq!(agreed(&agreement), defaults);
    assert!(!agreed(&agreement).contains("keyframe.set"));
    let packs: Vec<&str> = agreement
        .contract
        .packs
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(packs, ["code", "core", "io", "organize"]);
}

#[test]
fn core_is_always_selected_and_each_pack_is_recorded_with_its_own_fingerprint() {
    let registries = default_registries().unwrap();
    let agreement = negotiate_with(&registries, Some(&["io"])).unwrap();
    let expected: BTreeSet<String> = pack_tools(&registries, "core")
        .union(&pack_tools(&registries, "io"))
        .cloned()
        .collect();
    assert_eq!(agreed(&agreement), expected);
    // A tool of a pack not selected answers why, naming the pack.
    let refusal = agreement.tool("python.exec").unwrap_err();
    assert_eq!(refusal.code.as_str(), "capability_missing");
    assert!(
        refusal.message.contains("\"code\" pack"),
        "{}",
        refusal.message
    );
    assert_eq!(agreement.contract.packs.len(), 2);
    for (name, reference) in &agreement.contract.packs {
        let pack = &registries.pack(name).unwrap().tools;
        assert_eq!(reference.name, pack.registry);
        assert_eq!(&reference.fingerprint, pack.fingerprint());
    }
    // The packs' fingerprints differ from each other and from the catalog's.
    let fingerprints: BTreeSet<String> = registries
        .packs
        .iter()
        .map(|p| p.tools.fingerprint().to_string())
        .chain([registries.tools.fingerprint().to_string()])
        .collect();
    assert_eq!(fingerprints.len(), registries.packs.len() + 1);
    // Negotiating the agreed contract again selects the same packs and gives the same contract.
    let again = HostProposal::from_contract(&agreement.contract);
    assert_eq!(again.packs, Some(set(&["core", "io"])));
    // Asking by name for a tool of a pack not selected is refused, naming the pack.
    let mut proposal = again.clone();
    proposal.tools = Some(set(&["object.move", "python.exec"]));
    let refusal = negotiate_proposal(&registries, &proposal).unwrap_err();
    assert_eq!(refusal.rule, RefusalRule::ToolUnavailable);
    assert!(
        refusal.error.message.contains("\"code\" pack"),
        "{}",
        refusal.error.message
    );
}

#[test]
fn an_unknown_pack_is_refused_naming_the_packs_there_are() {
    let registries = default_registries().unwrap();
    let refusal = negotiate_with(&registries, Some(&["io", "sculpt"])).unwrap_err();
    assert_eq!(refusal.rule, RefusalRule::UnknownPack);
    let details = &refusal.envelope().to_value()["error"]["details"];
    assert_eq!(details["proposed"], "sculpt");
    assert_eq!(
        details["allowed"],
        serde_json::json!(["core", "organize", "io", "code", "look", "animate"])
    );
}

#[test]
fn the_look_pack_is_selected_by_name() {
    let registries = default_registries().unwrap();
    let look = pack_tools(&registries, "look");
    assert_eq!(
        look,
        set(&["camera.set", "light.set", "object.aim", "world.set"])
    );
    let agreement = negotiate_with(&registries, Some(&["look"])).unwrap();
    let expected: BTreeSet<String> = pack_tools(&registries, "core")
        .union(&look)
        .cloned()
        .collect();
    assert_eq!(agreed(&agreement), expected);
    // Beside io and code it still fits the cap.
    let beside = negotiate_with(&registries, Some(&["io", "code", "look"])).unwrap();
    let wanted: BTreeSet<String> = ["core", "io", "code", "look"]
        .iter()
        .flat_map(|p| pack_tools(&registries, p))
        .collect();
    assert!(wanted.len() <= MAX_TOOLS);
    assert_eq!(agreed(&beside), wanted);
}

#[test]
fn the_animate_pack_is_off_by_default_and_three_tools_when_named() {
    let registries = default_registries().unwrap();
    let animate = pack_tools(&registries, "animate");
    assert_eq!(
        animate,
        set(&["animation.read", "keyframe.set", "timeline.set"])
    );
    let agreement = negotiate_with(&registries, Some(&["animate"])).unwrap();
    let expected: BTreeSet<String> = pack_tools(&registries, "core")
        .union(&animate)
        .cloned()
        .collect();
    assert_eq!(agreed(&agreement), expected);
    // What a scene builder needs together fits the cap exactly: core, look, animate and io.
    let builder = negotiate_with(&registries, Some(&["look", "animate", "io"])).unwrap();
    let wanted: BTreeSet<String> = ["core", "look", "animate", "io"]
        .iter()
        .flat_map(|p| pack_tools(&registries, p))
        .collect();
    assert_eq!(agreed(&builder), wanted);
    assert!(wanted.len() <= MAX_TOOLS);
}

/// A pack set larger than the cap, made from the shipped core pack's tools: the packs of the
/// default registries all fit together, so the cap's refusal needs packs that do not.
fn split_registries() -> Registries {
    let base = default_registries().unwrap();
    let core = &base.pack("core").unwrap().tools;
    let tools: Vec<ToolSpec> = core.tools().iter().map(|t| ToolSpec::clone(t)).collect();
    let (first, second) = tools.split_at(20);
    let mut renamed: Vec<ToolSpec> = second.to_vec();
    // The second pack: the core tools past the first 20, and its own copies of those 20 under
    // other names: 20 + (core - 20) + 20 > 35.
    for (i, tool) in first.iter().enumerate() {
        let mut copy = tool.clone();
        copy.name = format!("extra.tool_{i}");
        copy.effects.clear();
        renamed.push(copy);
    }
    let core =
        ToolRegistry::new("t-core", semver::Version::new(1, 0, 0), "", first.to_vec()).unwrap();
    let more = ToolRegistry::new("t-more", semver::Version::new(1, 0, 0), "", renamed).unwrap();
    let packs = vec![
        Pack::new("core", true, core),
        Pack::new("more", false, more),
    ];
    let all = catalog("t", semver::Version::new(1, 0, 0), "", &packs).unwrap();
    Registries::with_packs(all, None, packs)
}

#[test]
fn a_selection_over_the_cap_is_refused_naming_each_pack_and_its_count() {
    let registries = split_registries();
    let core = default_registries()
        .unwrap()
        .pack("core")
        .unwrap()
        .tools
        .tools()
        .len();
    assert_eq!(
        agreed(&negotiate_with(&registries, None).unwrap()).len(),
        20
    );
    let refusal = negotiate_with(&registries, Some(&["more"])).unwrap_err();
    assert_eq!(refusal.rule, RefusalRule::ToolSurfaceExceeded);
    let envelope = refusal.envelope().to_value();
    assert_eq!(envelope["error"]["code"], "contract_violation");
    assert_eq!(envelope["error"]["details"]["proposed"], core + 20);
    assert_eq!(envelope["error"]["details"]["allowed"], 35);
    let message = envelope["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("core 20, more {core}")),
        "{message}"
    );
    // Asking for fewer tools by name brings the selection under the cap.
    let mut proposal = proposal(Some(&["more"]));
    proposal.tools = Some(
        registries
            .tools
            .names()
            .take(30)
            .map(str::to_owned)
            .collect(),
    );
    let agreement = negotiate_proposal(&registries, &proposal).unwrap();
    assert_eq!(agreement.contract.capabilities.tools.len(), 30);
}
