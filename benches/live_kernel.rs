//! Live bench (reported, not asserted): a real Blender (bpy 5.0.1, headless, stdio) driven over
//! the wire, beside the kernel's own handlers called in-process on the same scenes
//! (`vibe-transport/kernel/tests/bench_in_process.py`, printed at the start).
//!
//! ```text
//! VIBE_BPY_PYTHON=/path/to/venv/bin/python cargo bench --bench live_kernel
//! ```
//!
//! * `live/object_info_1000_objects`: one `object.info` round trip on a 1000-object scene.
//! * `live/object_info_pipelined_100`: 100 of them in flight at once.
//! * `live/snapshot_2500_objects`: a `scene.snapshot` of a 2500-object scene (several hundred KB),
//!   including the bridge's sealing.
//! * `live/rollback_<n>_objects`: `transaction.begin` + `transaction.rollback` by scene size.
//!
//! Without `VIBE_BPY_PYTHON` it says it skipped and measures nothing.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use vibe::transport::{Call, SessionConfig, StdioOptions, StdioTransport, Transport};

fn call(
    rt: &tokio::runtime::Runtime,
    t: &StdioTransport,
    tool: &str,
    params: serde_json::Value,
) -> vibe::errors::Envelope {
    rt.block_on(t.call(Call::new(
        t.next_id(),
        tool,
        params,
        Duration::from_secs(120),
    )))
    .unwrap()
}

fn populate(rt: &tokio::runtime::Runtime, t: &StdioTransport, from: usize, to: usize) {
    let code = format!(
        "import bpy\ncoll = bpy.data.collections['Collection']\nfor i in range({from}, {to}):\n    coll.objects.link(bpy.data.objects.new('E%04d' % i, None))\n"
    );
    let answer = call(rt, t, "python.exec", json!({"code": code}));
    assert!(answer.is_ok(), "{answer:?}");
}

fn live(c: &mut Criterion) {
    let Some(python) = std::env::var_os("VIBE_BPY_PYTHON") else {
        eprintln!("SKIPPED live_kernel bench: set VIBE_BPY_PYTHON to a Python with bpy 5.0.1");
        return;
    };
    let baseline = std::process::Command::new(&python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/vibe-transport/kernel/tests/bench_in_process.py"
        ))
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .last()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default();
    eprintln!("in-process baseline (same kernel handlers, no wire): {baseline}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let t = Arc::new(
        rt.block_on(StdioTransport::spawn(
            StdioOptions::bpy_python(&python).unwrap(),
        ))
        .unwrap(),
    );
    let session = SessionConfig {
        session_id: "bench".into(),
        capabilities: ["scene.read", "scene.write", "transactions", "code_exec"]
            .map(String::from)
            .into(),
        sanity: Default::default(),
        sandbox: None,
        project_roots: Vec::new(),
        time_per_tool_ms: 120_000,
    };
    rt.block_on(t.configure(&session)).unwrap();
    let mut group = c.benchmark_group("live");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    let mut size = 0;
    for target in [0usize, 500, 1500] {
        populate(&rt, &t, size, target);
        size = target;
        group.bench_function(format!("rollback_{}_objects", target + 3), |b| {
            b.iter(|| {
                assert!(call(&rt, &t, "transaction.begin", json!({})).is_ok());
                assert!(call(&rt, &t, "transaction.rollback", json!({})).is_ok());
            })
        });
    }
    populate(&rt, &t, size, 1000);
    size = size.max(1000);
    group.bench_function("object_info_1000_objects", |b| {
        b.iter(|| call(&rt, &t, "object.info", json!({"name": "E0500"})))
    });
    group.throughput(Throughput::Elements(100));
    group.bench_function("object_info_pipelined_100", |b| {
        b.iter(|| {
            rt.block_on(async {
                let calls = (0..100).map(|i| {
                    t.call(Call::new(
                        t.next_id(),
                        "object.info",
                        json!({"name": format!("E{:04}", i * 7)}),
                        Duration::from_secs(60),
                    ))
                });
                for answer in futures::future::join_all(calls).await {
                    assert!(answer.unwrap().is_ok());
                }
            })
        })
    });
    populate(&rt, &t, size, 2500);
    let bytes = call(&rt, &t, "scene.snapshot", json!({}))
        .to_json_string()
        .len();
    eprintln!("snapshot of 2503 objects: {bytes} bytes");
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("snapshot_2500_objects", |b| {
        b.iter(|| call(&rt, &t, "scene.snapshot", json!({})))
    });
    group.finish();
    let _ = rt.block_on(t.close());
}

criterion_group!(benches, live);
criterion_main!(benches);
