//! Negotiation and fingerprinting, each beside a baseline measured in the same run.
//!
//! * `negotiate/default_registry` vs `negotiate/baseline_serialize_contract` (serde_json of the
//!   agreed contract: the cost of merely writing the result down). Target: negotiation <= 50 us.
//! * `fingerprint/canonical_blake3` vs `fingerprint/baseline_to_vec_blake3` over the default
//!   registry's JSON value. Target: canonical throughput >= 50% of the baseline's.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use vibe_contract::{
    BlenderProfile, BridgePolicy, Fingerprint, HostProfile, HostProposal, default_registries,
    negotiate,
};

fn setup() -> (HostProposal, BridgePolicy, BlenderProfile) {
    let caps: std::collections::BTreeSet<String> = [
        "scene.read",
        "scene.write",
        "transactions",
        "file.write",
        "render",
    ]
    .map(String::from)
    .into();
    let host = HostProfile {
        name: "bench".into(),
        version: "1".into(),
        capabilities: caps.clone(),
        ..HostProfile::default()
    };
    let blender = BlenderProfile {
        version: "5.0.1".parse().unwrap(),
        build_hash: None,
        platform: "linux".into(),
        background: true,
        features: caps,
        confinement: Default::default(),
    };
    (
        HostProposal::new("bench-session", host),
        BridgePolicy::default(),
        blender,
    )
}

fn negotiation(c: &mut Criterion) {
    let registries = default_registries().unwrap();
    let (proposal, policy, blender) = setup();
    let agreed = negotiate(&proposal, &policy, &blender, &registries)
        .unwrap()
        .contract;
    let mut group = c.benchmark_group("negotiate");
    group.bench_function("default_registry", |b| {
        b.iter(|| negotiate(black_box(&proposal), &policy, &blender, &registries).unwrap())
    });
    group.bench_function("baseline_serialize_contract", |b| {
        b.iter(|| serde_json::to_vec(black_box(&agreed)).unwrap())
    });
    group.finish();
}

fn fingerprinting(c: &mut Criterion) {
    let registries = default_registries().unwrap();
    let value = serde_json::to_value(registries.tools.as_ref()).unwrap();
    let bytes = serde_json::to_vec(&value).unwrap().len() as u64;
    let mut group = c.benchmark_group("fingerprint");
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("canonical_blake3", |b| {
        b.iter(|| Fingerprint::of_value(black_box(&value)))
    });
    group.bench_function("baseline_to_vec_blake3", |b| {
        b.iter(|| blake3::hash(&serde_json::to_vec(black_box(&value)).unwrap()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(2)).warm_up_time(std::time::Duration::from_millis(500));
    targets = negotiation, fingerprinting
}
criterion_main!(benches);
