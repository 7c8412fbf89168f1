//! The full pipeline over MockBlender beside the bare mock call, in the same run.
//!
//! * `pipeline/object_info` vs `pipeline/baseline_bare_mock_call`: the same `object.info` call
//!   through all six phases, and straight through `MockTransport`. Targets: overhead ratio
//!   <= 3, and >= 300k calls/s on one core (a current-thread runtime).
//! * `pipeline/object_info_audited`: the same call through a pipeline with an audit writer
//!   (records sealed and hashed on the writer's thread, into a sink that drops them).
//! * `pipeline/object_move` vs `pipeline/baseline_bare_mock_move`: a mutation, which also passes
//!   the read-only, busy, transaction and sandbox guards.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use vibe_audit::{AuditLog, AuditSink, AuditWriter, ChainHead, Overflow, Redactor};
use vibe_contract::BridgePolicy;
use vibe_exec::Pipeline;
use vibe_transport::{Call, MockBlender, MockTransport, Transport};

#[path = "../tests/support/negotiated.rs"]
mod negotiated;
use negotiated::negotiated;

/// A sink that drops what it is given.
struct NullSink;

impl AuditSink for NullSink {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        std::hint::black_box(line);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let transport = Arc::new(MockTransport::new(MockBlender::new()));
    let agreement = negotiated(
        "bench",
        &["scene.read", "scene.write", "transactions"],
        None,
        &BridgePolicy::default(),
        &transport.hello().blender,
    );
    let dyn_transport: Arc<dyn Transport> = transport.clone();
    let pipeline = rt
        .block_on(Pipeline::builder(agreement.clone(), Arc::clone(&dyn_transport)).start())
        .unwrap();
    // The same pipeline with the audit writer every real session has: records sealed and
    // hashed on its thread, written to a sink that drops them (no disk in the figure).
    let audit = Arc::new(AuditWriter::spawn(
        AuditLog::new(
            Box::new(NullSink),
            ChainHead::genesis(),
            Redactor::default(),
        ),
        4096,
        Overflow::Backpressure,
    ));
    let audited = rt
        .block_on(
            Pipeline::builder(agreement, dyn_transport)
                .audit(audit)
                .start(),
        )
        .unwrap();
    let info = json!({"name": "Cube"});
    let mv = json!({"name": "Cube", "location": [1.0, 2.0, 3.0]});
    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Elements(1));
    group.bench_function("object_info", |b| {
        b.iter(|| rt.block_on(pipeline.call("object.info", info.clone())))
    });
    group.bench_function("object_info_audited", |b| {
        b.iter(|| rt.block_on(audited.call("object.info", info.clone())))
    });
    // The same call straight through the mock transport.
    let bare = |tool: &str, params: &serde_json::Value| {
        let call = Call::new(tool, params.clone(), Duration::from_secs(15));
        rt.block_on(transport.call(call)).unwrap()
    };
    group.bench_function("baseline_bare_mock_call", |b| {
        b.iter(|| bare("object.info", &info))
    });
    group.bench_function("object_move", |b| {
        b.iter(|| rt.block_on(pipeline.call("object.move", mv.clone())))
    });
    group.bench_function("baseline_bare_mock_move", |b| {
        b.iter(|| bare("object.move", &mv))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = bench
}
criterion_main!(benches);
