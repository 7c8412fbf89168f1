//! Shared fixtures for the contract tests.
#![allow(dead_code)]

use std::collections::BTreeSet;

use vibe_contract::{BlenderProfile, HostProfile};

pub fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

pub const ALL_CAPS: [&str; 6] = [
    "scene.read",
    "scene.write",
    "transactions",
    "file.write",
    "render",
    "code_exec",
];

pub fn blender(version: &str, background: bool) -> BlenderProfile {
    BlenderProfile {
        version: version.parse().unwrap(),
        build_hash: Some("a1b2c3".into()),
        platform: "linux".into(),
        background,
        features: set(&ALL_CAPS),
        confinement: jailed(),
    }
}

/// The confinement of a kernel the bridge started in a jail.
pub fn jailed() -> vibe_contract::Confinement {
    vibe_contract::Confinement {
        filesystem: true,
        network: true,
        exec: true,
        memory_mib: Some(8_192),
        layers: vec![
            "namespaces".into(),
            "landlock".into(),
            "seccomp".into(),
            "rlimits".into(),
        ],
        unconfined_code_opt_in: false,
    }
}

pub fn host(caps: &[&str]) -> HostProfile {
    HostProfile {
        name: "test-host".into(),
        version: "1.0".into(),
        capabilities: set(caps),
        required_flags: BTreeSet::new(),
        optional_flags: set(&["macros", "transactions"]),
    }
}
