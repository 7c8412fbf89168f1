//! `code_exec` follows the kernel's confinement: granted by a jailed kernel or an operator's
//! explicit opt-in, refused with the reason otherwise.

mod common;

use common::*;
use proptest::prelude::*;
use vibe_contract::*;

fn negotiate_code(confinement: Confinement) -> Agreement {
    let mut policy = BridgePolicy::default();
    policy.capabilities.insert(CAP_CODE_EXEC.into());
    let mut kernel = blender("5.0.1", true);
    kernel.confinement = confinement;
    let proposal = HostProposal::new(
        "s-code",
        host(&["scene.read", "scene.write", CAP_CODE_EXEC]),
    );
    negotiate(&proposal, &policy, &kernel, &default_registries().unwrap()).unwrap()
}

fn excluded_why(agreement: &Agreement) -> Option<String> {
    agreement
        .contract
        .excluded_tools
        .iter()
        .find(|e| e.name == "python.exec")
        .map(|e| e.why.clone())
}

#[test]
fn a_jailed_kernel_grants_code_exec() {
    let agreement = negotiate_code(jailed());
    assert!(
        agreement
            .contract
            .capabilities
            .granted
            .contains(CAP_CODE_EXEC)
    );
    assert!(agreement.tool("python.exec").is_ok());
}

#[test]
fn an_unconfined_kernel_refuses_code_exec_and_says_why() {
    let agreement = negotiate_code(Confinement::default());
    assert!(
        !agreement
            .contract
            .capabilities
            .granted
            .contains(CAP_CODE_EXEC)
    );
    let why = excluded_why(&agreement).expect("python.exec is excluded");
    assert!(why.contains("confined kernel"), "{why}");
    assert!(why.contains("filesystem, network, exec, memory"), "{why}");
    let refusal = agreement.tool("python.exec").unwrap_err();
    assert_eq!(refusal.code.as_str(), "capability_missing");
}

#[test]
fn a_partial_jail_is_not_enough_and_the_missing_axes_are_named() {
    let partial = Confinement {
        filesystem: true,
        network: true,
        ..Confinement::default()
    };
    assert_eq!(partial.summary(), "partial");
    let agreement = negotiate_code(partial);
    let why = excluded_why(&agreement).unwrap();
    assert!(
        why.contains("exec, memory") && !why.contains("filesystem"),
        "{why}"
    );
}

#[test]
fn the_operators_opt_in_grants_code_exec_without_a_jail() {
    let agreement = negotiate_code(Confinement {
        unconfined_code_opt_in: true,
        ..Confinement::default()
    });
    assert!(agreement.tool("python.exec").is_ok());
}

#[test]
fn a_hello_without_confinement_is_unconfined() {
    let profile: BlenderProfile = serde_json::from_value(serde_json::json!({
        "version": "5.0.1", "platform": "linux", "background": true, "features": ["code_exec"]
    }))
    .unwrap();
    assert_eq!(profile.confinement, Confinement::default());
    assert_eq!(profile.confinement.summary(), "none");
    assert!(profile.confinement.code_exec_refusal().is_some());
}

proptest! {
    /// Whatever the kernel reports, code_exec is granted only when every axis holds or the
    /// operator opted in (an independent statement of the rule).
    #[test]
    fn code_exec_needs_a_full_jail_or_an_opt_in(
        filesystem in any::<bool>(), network in any::<bool>(), exec in any::<bool>(),
        memory in proptest::option::of(1u64..65_536), opt_in in any::<bool>(),
    ) {
        let confinement = Confinement {
            filesystem, network, exec, memory_mib: memory, layers: vec![],
            unconfined_code_opt_in: opt_in,
        };
        let granted = negotiate_code(confinement)
            .contract.capabilities.granted.contains(CAP_CODE_EXEC);
        let expected = (filesystem && network && exec && memory.is_some()) || opt_in;
        prop_assert_eq!(granted, expected);
    }
}
