//! Negotiation laws (proptest) and one golden refusal per refusal rule.

mod common;

use std::collections::BTreeSet;

use common::*;
use proptest::prelude::*;
use serde_json::json;
use vibe_contract::*;

/// A registry whose tools span several Blender ranges, to exercise exclusion by version.
fn ranged_registries() -> Registries {
    let base = default_registries().unwrap();
    let core = &base.pack("core").unwrap().tools;
    let mut yaml: serde_json::Value = serde_norway::from_str(&core.to_yaml()).unwrap();
    let ranges = [
        ("3.4.0", None),
        ("4.0.0", None),
        ("3.0.0", Some("3.6.99")),
        ("4.2.0", Some("4.5.0")),
        ("5.0.0", None),
    ];
    for (i, tool) in yaml["tools"].as_array_mut().unwrap().iter_mut().enumerate() {
        let (min, max) = ranges[i % ranges.len()];
        tool["requires"]["blender_min"] = json!(min);
        if let Some(max) = max {
            tool["requires"]["blender_max"] = json!(max);
        }
    }
    yaml["version"] = json!("1.1.0");
    let tools = ToolRegistry::from_json_str(&yaml.to_string()).unwrap();
    Registries::new(tools, None)
}

fn subset_of(items: &'static [&'static str]) -> impl Strategy<Value = BTreeSet<String>> {
    prop::collection::vec(any::<bool>(), items.len()).prop_map(move |mask| {
        items
            .iter()
            .zip(mask)
            .filter(|(_, keep)| *keep)
            .map(|(s, _)| s.to_string())
            .collect()
    })
}

const FLAGS: &[&str] = &[
    "audit",
    "cancellation",
    "macros",
    "pipelining",
    "transactions",
    "ui",
    "telepathy",
];
const CAPS: &[&str] = &ALL_CAPS;

fn limits() -> impl Strategy<Value = Limits> {
    (1u32..40, 1u32..64, 1u64..(64 << 20)).prop_map(|(cap, conc, payload)| Limits {
        tool_surface_cap: cap,
        max_concurrent_calls: conc,
        max_payload_bytes: payload,
    })
}

fn constraints() -> impl Strategy<Value = Constraints> {
    (
        1u64..60_000,
        1u64..1_000_000,
        1u32..8,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(ms, long_ms, levels, log_only, ro)| Constraints {
            time_per_tool_ms: ms,
            time_file_ms: long_ms,
            time_render_ms: long_ms / 2 + 1,
            sanity: SanityLimits {
                max_subdivision_levels: levels,
                ..SanityLimits::default()
            },
            code_gate: if log_only {
                CodeGateMode::LogOnly
            } else {
                CodeGateMode::Enforcing
            },
            read_only: ro,
            ..Constraints::default()
        })
}

fn proposal() -> impl Strategy<Value = HostProposal> {
    (
        subset_of(CAPS),
        subset_of(FLAGS),
        subset_of(FLAGS),
        prop::option::of(limits()),
        prop::option::of(constraints()),
        prop::option::of(prop::collection::btree_set(0usize..31, 1..10)),
    )
        .prop_map(|(caps, required, optional, limits, constraints, tools)| {
            let mut host = host(&[]);
            host.capabilities = caps;
            // Keep some proposals free of required flags, so that not every case refuses.
            host.required_flags = required
                .into_iter()
                .filter(|f| f != "telepathy")
                .take(2)
                .collect();
            host.optional_flags = optional;
            let names: Vec<String> = default_registries()
                .unwrap()
                .tools
                .names()
                .map(String::from)
                .collect();
            let mut p = HostProposal::new("session-1", host);
            p.limits = limits;
            p.constraints = constraints;
            p.tools = tools.map(|idx| idx.into_iter().map(|i| names[i].clone()).collect());
            p
        })
}

fn policy() -> impl Strategy<Value = BridgePolicy> {
    (subset_of(CAPS), subset_of(FLAGS), limits(), constraints()).prop_map(
        |(caps, flags, limits, constraints)| BridgePolicy {
            capabilities: caps,
            feature_flags: flags,
            limits,
            constraints,
            ..BridgePolicy::default()
        },
    )
}

fn profile() -> impl Strategy<Value = BlenderProfile> {
    (
        prop::sample::select(vec!["3.4.1", "3.6.5", "4.2.3", "4.5.0", "5.0.1", "2.93.0"]),
        any::<bool>(),
        subset_of(CAPS),
    )
        .prop_map(|(v, bg, features)| {
            let mut b = blender(v, bg);
            b.features = features;
            b
        })
}

fn registries() -> impl Strategy<Value = Registries> {
    prop_oneof![
        Just(default_registries().unwrap()),
        Just(ranged_registries())
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn negotiation_is_deterministic(p in proposal(), pol in policy(), b in profile(), r in registries()) {
        let first = negotiate(&p, &pol, &b, &r).map(|a| a.contract);
        let second = negotiate(&p, &pol, &b, &r).map(|a| a.contract);
        prop_assert_eq!(first, second);
    }

    #[test]
    fn agreed_flags_and_capabilities_are_subsets_of_both_sides(p in proposal(), pol in policy(), b in profile(), r in registries()) {
        if let Ok(agreement) = negotiate(&p, &pol, &b, &r) {
            let caps = &agreement.contract.capabilities;
            let wanted: BTreeSet<String> = p.host_profile.required_flags.union(&p.host_profile.optional_flags).cloned().collect();
            prop_assert!(caps.feature_flags.is_subset(&wanted));
            prop_assert!(caps.feature_flags.is_subset(&pol.feature_flags));
            prop_assert!(caps.granted.is_subset(&p.host_profile.capabilities));
            prop_assert!(caps.granted.is_subset(&pol.capabilities));
            prop_assert!(caps.granted.is_subset(&b.features));
            prop_assert!(p.host_profile.required_flags.is_subset(&caps.feature_flags));
            // Every agreed tool fits this Blender and the granted capabilities.
            for tool in agreement.tools.tools() {
                prop_assert!(b.version.within(tool.requires.blender_min, tool.requires.blender_max));
                prop_assert!(tool.requires.capabilities.is_subset(&caps.granted));
            }
            prop_assert!(agreement.tools.tools().len() <= agreement.contract.limits.tool_surface_cap as usize);
        }
    }

    #[test]
    fn agreed_limits_never_exceed_either_side(p in proposal(), pol in policy(), b in profile(), r in registries()) {
        if let Ok(agreement) = negotiate(&p, &pol, &b, &r) {
            let agreed = &agreement.contract.limits;
            let host = p.limits.clone().unwrap_or_else(|| pol.limits.clone());
            for (a, h, q) in [
                (u64::from(agreed.tool_surface_cap), u64::from(host.tool_surface_cap), u64::from(pol.limits.tool_surface_cap)),
                (u64::from(agreed.max_concurrent_calls), u64::from(host.max_concurrent_calls), u64::from(pol.limits.max_concurrent_calls)),
                (agreed.max_payload_bytes, host.max_payload_bytes, pol.limits.max_payload_bytes),
            ] {
                prop_assert!(a <= h && a <= q);
            }
            prop_assert!(agreed.tool_surface_cap <= 35);
            let c = &agreement.contract.constraints;
            let hc = p.constraints.clone().unwrap_or_else(|| pol.constraints.clone());
            prop_assert!(c.time_per_tool_ms <= hc.time_per_tool_ms && c.time_per_tool_ms <= pol.constraints.time_per_tool_ms);
            prop_assert!(c.time_file_ms <= hc.time_file_ms && c.time_file_ms <= pol.constraints.time_file_ms);
            prop_assert!(c.time_render_ms <= hc.time_render_ms && c.time_render_ms <= pol.constraints.time_render_ms);
            prop_assert!(c.sanity.max_subdivision_levels <= hc.sanity.max_subdivision_levels.min(pol.constraints.sanity.max_subdivision_levels));
            prop_assert!(c.code_gate >= hc.code_gate && c.code_gate >= pol.constraints.code_gate);
            prop_assert!(c.read_only >= hc.read_only && c.read_only >= pol.constraints.read_only);
        }
    }

    #[test]
    fn negotiating_an_agreed_contract_again_changes_nothing(p in proposal(), pol in policy(), b in profile(), r in registries()) {
        if let Ok(agreement) = negotiate(&p, &pol, &b, &r) {
            let again = negotiate(&HostProposal::from_contract(&agreement.contract), &pol, &b, &r).unwrap();
            prop_assert_eq!(&again.contract, &agreement.contract);
            prop_assert!(again.contract.fingerprint_is_valid());
        }
    }

    #[test]
    fn excluded_tools_answer_with_their_code(p in proposal(), b in profile()) {
        let r = ranged_registries();
        let pol = BridgePolicy::default();
        if let Ok(agreement) = negotiate(&p, &pol, &b, &r) {
            for excluded in &agreement.contract.excluded_tools {
                let err = agreement.tool(&excluded.name).unwrap_err();
                prop_assert_eq!(&err.code, &excluded.code);
            }
        }
    }
}

fn default_setup() -> (HostProposal, BridgePolicy, BlenderProfile, Registries) {
    let host = host(&["scene.read", "scene.write", "transactions"]);
    (
        HostProposal::new("session-1", host),
        BridgePolicy::default(),
        blender("5.0.1", true),
        default_registries().unwrap(),
    )
}

fn refusal_cases() -> Vec<(RefusalRule, Refusal)> {
    let mut cases = Vec::new();
    let run = |p: &HostProposal, pol: &BridgePolicy, b: &BlenderProfile, r: &Registries| {
        negotiate(p, pol, b, r).unwrap_err()
    };
    let (p, pol, b, r) = default_setup();

    let mut x = p.clone();
    x.contract_version = semver::Version::new(2, 0, 0);
    cases.push((RefusalRule::ContractVersion, run(&x, &pol, &b, &r)));

    let mut x = p.clone();
    x.session_id = "bad id with spaces".into();
    cases.push((RefusalRule::SessionId, run(&x, &pol, &b, &r)));

    let mut x = p.clone();
    x.tool_registry_ref = Some(RegistryRef {
        name: "blender-core".into(),
        version: semver::Version::new(1, 0, 0),
        fingerprint: Fingerprint::of_value(&json!("tampered")),
    });
    cases.push((RefusalRule::ToolRegistryMismatch, run(&x, &pol, &b, &r)));

    let mut x = p.clone();
    x.macro_registry_ref = Some(RegistryRef {
        name: "blender-core-macros".into(),
        version: semver::Version::new(9, 0, 0),
        fingerprint: Fingerprint::of_value(&json!("other")),
    });
    cases.push((RefusalRule::MacroRegistryMismatch, run(&x, &pol, &b, &r)));

    let mut x = p.clone();
    x.limits = Some(Limits {
        max_concurrent_calls: 0,
        ..Limits::default()
    });
    cases.push((RefusalRule::InvalidLimit, run(&x, &pol, &b, &r)));

    let mut x = p.clone();
    x.host_profile.required_flags = set(&["ui"]);
    cases.push((RefusalRule::RequiredFlagUnavailable, run(&x, &pol, &b, &r)));

    let mut x = p.clone();
    x.tools = Some(set(&["object.move", "object.explode"]));
    cases.push((RefusalRule::UnknownTool, run(&x, &pol, &b, &r)));

    let mut x = p.clone();
    x.tools = Some(set(&["object.move", "python.exec"]));
    cases.push((RefusalRule::ToolUnavailable, run(&x, &pol, &b, &r)));

    cases.push((
        RefusalRule::NoTools,
        run(&p, &pol, &blender("2.93.0", true), &r),
    ));

    let mut x = p.clone();
    x.packs = Some(set(&["io", "sculpt"]));
    cases.push((RefusalRule::UnknownPack, run(&x, &pol, &b, &r)));

    let mut x = p.clone();
    x.limits = Some(Limits {
        tool_surface_cap: 5,
        ..Limits::default()
    });
    cases.push((RefusalRule::ToolSurfaceExceeded, run(&x, &pol, &b, &r)));
    cases
}

#[test]
fn golden_refusal_per_rule() {
    let cases = refusal_cases();
    let covered: BTreeSet<&str> = cases.iter().map(|(rule, _)| rule.as_str()).collect();
    let all: BTreeSet<&str> = RefusalRule::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(covered, all, "every refusal rule needs a golden case");
    for (rule, refusal) in cases {
        assert_eq!(refusal.rule, rule);
        let envelope = refusal.envelope().to_value();
        assert_eq!(envelope["error"]["code"], "contract_violation");
        assert_eq!(envelope["error"]["details"]["rule"], rule.as_str());
        for key in ["field", "proposed", "allowed"] {
            assert!(
                envelope["error"]["details"].get(key).is_some(),
                "{}: {key}",
                rule.as_str()
            );
        }
        let mut text = serde_json::to_string_pretty(&envelope).unwrap();
        text.push('\n');
        let path = format!(
            "{}/tests/golden/refusals/{}.json",
            env!("CARGO_MANIFEST_DIR"),
            rule.as_str()
        );
        if std::env::var_os("VIBE_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|_| panic!("{path}: run with VIBE_BLESS=1"));
        assert_eq!(expected, text, "{path} is stale; run with VIBE_BLESS=1");
    }
}

#[test]
fn compatibility_matrix_admits_declared_versions() {
    let (mut p, mut pol, b, r) = default_setup();
    p.contract_version = semver::Version::new(1, 1, 0);
    assert_eq!(
        negotiate(&p, &pol, &b, &r).unwrap_err().rule,
        RefusalRule::ContractVersion
    );
    pol.compatible_versions.push(semver::Version::new(1, 1, 0));
    assert_eq!(
        negotiate(&p, &pol, &b, &r)
            .unwrap()
            .contract
            .contract_version,
        semver::Version::new(1, 1, 0)
    );
}

#[test]
fn default_negotiation_and_mcp_rendering() {
    let (p, pol, b, r) = default_setup();
    let agreement = negotiate(&p, &pol, &b, &r).unwrap();
    let contract = &agreement.contract;
    assert!(contract.ui_optional);
    assert_eq!(
        contract.capabilities.granted,
        set(&["scene.read", "scene.write", "transactions"])
    );
    let excluded: BTreeSet<&str> = contract
        .excluded_tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        excluded,
        // The look and animate packs are not default packs: their tools are left out until a host selects them.
        [
            "animation.read",
            "camera.set",
            "file.export",
            "file.import",
            "file.open",
            "file.save",
            "keyframe.set",
            "light.set",
            "object.aim",
            "python.exec",
            "render.still",
            "timeline.set",
            "world.set"
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(
        contract.capabilities.macros,
        vec![
            "build_and_place",
            "ground_plane",
            "smooth_object",
            "inspect"
        ]
    );
    let tools = agreement.mcp_tools();
    assert_eq!(
        tools.len(),
        agreement.tools.tools().len() + contract.capabilities.macros.len()
    );
    // Macros are tools too, named apart from every registry tool, and found by that name.
    let ground = tools
        .iter()
        .find(|t| t["name"] == "macro_ground_plane")
        .unwrap();
    assert_eq!(ground["inputSchema"]["required"], json!(["name"]));
    assert_eq!(
        ground["outputSchema"]["properties"]["result"]["required"],
        json!(["macro", "version", "steps"])
    );
    assert_eq!(ground["annotations"]["readOnlyHint"], false);
    assert_eq!(
        agreement
            .macro_for_mcp_name("macro_ground_plane")
            .unwrap()
            .macro_name,
        "ground_plane"
    );
    assert!(agreement.macro_for_mcp_name("ground_plane").is_none());
    assert!(agreement.tool_for_mcp_name("macro_ground_plane").is_none());
    let delete = tools.iter().find(|t| t["name"] == "object_delete").unwrap();
    assert_eq!(delete["annotations"]["destructiveHint"], true);
    assert_eq!(delete["inputSchema"]["additionalProperties"], false);
    assert_eq!(
        agreement.tool_for_mcp_name("object_move").unwrap().name,
        "object.move"
    );
    // Tools the host left out are contract violations, not capability errors.
    let mut narrow = p.clone();
    narrow.tools = Some(set(&["object.info"]));
    let narrow = negotiate(&narrow, &pol, &b, &r).unwrap();
    assert_eq!(
        narrow.tool("object.move").unwrap_err().code.as_str(),
        "contract_violation"
    );
    // A tampered contract no longer matches its fingerprint.
    let mut tampered = contract.clone();
    tampered.limits.max_concurrent_calls += 1;
    assert!(!tampered.fingerprint_is_valid());
}

/// Seed 001: UI use is opt-in. A tool that declares `requires.ui` is left out of a session that
/// did not negotiate the `ui` flag, and of any session on a headless Blender; asking for it by
/// name is refused with the reason.
#[test]
fn a_ui_tool_needs_the_ui_flag_and_a_window() {
    let base = default_registries().unwrap();
    let core = &base.pack("core").unwrap().tools;
    let mut yaml: serde_json::Value = serde_norway::from_str(&core.to_yaml()).unwrap();
    let tools = yaml["tools"].as_array_mut().unwrap();
    let ui_tool = tools
        .iter_mut()
        .find(|t| t["name"] == "scene.snapshot")
        .unwrap();
    ui_tool["requires"]["ui"] = json!(true);
    yaml["version"] = json!("1.2.0");
    let registries = Registries::new(
        ToolRegistry::from_json_str(&yaml.to_string()).unwrap(),
        None,
    );
    let agreed = |flags: &[&str], background: bool| {
        let mut h = host(&["scene.read", "scene.write", "transactions"]);
        h.optional_flags = flags.iter().map(|f| f.to_string()).collect();
        let proposal = HostProposal::new("ui", h);
        negotiate(
            &proposal,
            &BridgePolicy::default(),
            &blender("4.5.0", background),
            &registries,
        )
    };
    let has = |a: &Agreement| {
        a.contract
            .capabilities
            .tools
            .iter()
            .any(|t| t == "scene.snapshot")
    };
    // Without the flag, or headless: left out, with the reason.
    for (flags, background, why) in [
        (&[][..], false, "did not negotiate"),
        (&["ui"][..], true, "headless"),
    ] {
        let agreement = agreed(flags, background).unwrap();
        assert!(!has(&agreement));
        let error = agreement.tool("scene.snapshot").unwrap_err();
        assert_eq!(error.code, vibe_errors::ErrorCode::CapabilityMissing);
        assert!(error.message.contains(why), "{}", error.message);
    }
    // With the flag on a Blender with a window: there.
    assert!(has(&agreed(&["ui"], false).unwrap()));
    // Asked for by name without the flag: refused, saying why.
    let mut h = host(&["scene.read"]);
    h.optional_flags.clear();
    let mut proposal = HostProposal::new("ui", h);
    proposal.tools = Some(["scene.snapshot".to_string()].into());
    let refusal = negotiate(
        &proposal,
        &BridgePolicy::default(),
        &blender("4.5.0", false),
        &registries,
    )
    .unwrap_err();
    assert!(
        refusal.to_string().contains("uses Blender's UI"),
        "{refusal}"
    );
    // The default registry declares no UI tool, so its fingerprint is unchanged by the field.
    assert!(base.tools.tools().iter().all(|t| !t.requires.ui));
}
