//! Audit benches, each beside plain serde_json + blake3 over the same records in the same run.
//!
//! * `append/*`: sealing and writing records (a discarding sink, a buffered file, and the two
//!   durable modes). Target: buffered append >= 1M records/s.
//! * `verify/chain` vs `verify/baseline_parse_hash` (on as many threads as the verifier
//!   uses). Target: verify >= 2M records/s.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use vibe_audit::*;

struct NullSink;

impl AuditSink for NullSink {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        black_box(line);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn event(i: u64) -> Event {
    Event::call(
        "session-1",
        i,
        "object.move",
        json!({"name": "Cube", "delta": [0.5, 0.0, 1.0]}),
    )
}

fn append(c: &mut Criterion) {
    // Removed when the bench ends, or if it fails.
    let dir = tempfile::Builder::new()
        .prefix("vibe-audit-bench-")
        .tempdir()
        .unwrap();
    let mut group = c.benchmark_group("append");
    const N: u64 = 1000;
    group.throughput(Throughput::Elements(N));
    let events: Vec<Event> = (0..N).map(event).collect();
    group.bench_function("sealed_discarding_sink", |b| {
        let mut log = AuditLog::new(
            Box::new(NullSink),
            ChainHead::genesis(),
            Redactor::default(),
        );
        b.iter(|| {
            for e in &events {
                log.append(e).unwrap();
            }
        })
    });
    group.bench_function("baseline_serde_json_blake3", |b| {
        b.iter(|| {
            for (i, e) in events.iter().enumerate() {
                let value = json!({"seq": i, "session": e.session, "kind": "call", "tool": e.tool, "call_id": e.call_id, "args": e.args});
                black_box(blake3::hash(&serde_json::to_vec(&value).unwrap()));
            }
        })
    });
    for (name, durability, batch) in [
        (
            "file_flush_per_batch",
            Durability::FlushPerBatch,
            N as usize,
        ),
        (
            "file_flush_per_record",
            Durability::FlushPerRecord,
            N as usize,
        ),
        (
            "file_fsync_per_batch_of_100",
            Durability::FsyncPerBatch,
            100,
        ),
    ] {
        let path = dir.path().join(format!("{name}.jsonl"));
        let _ = std::fs::remove_file(&path);
        let mut log = AuditLog::open_file(
            &path,
            {
                let mut options = FileOptions::default();
                options.durability = durability;
                options
            },
            Redactor::default(),
        )
        .unwrap();
        group.bench_function(name, |b| {
            b.iter(|| {
                for chunk in events.chunks(batch) {
                    for e in chunk {
                        log.append(e).unwrap();
                    }
                    log.flush().unwrap();
                }
            })
        });
    }
    group.finish();
}

fn verify(c: &mut Criterion) {
    const N: u64 = 10_000;
    let sink = MemorySink::new();
    let mut log = AuditLog::new(
        Box::new(sink.clone()),
        ChainHead::genesis(),
        Redactor::default(),
    );
    for i in 0..N {
        log.append(&event(i)).unwrap();
    }
    let bytes = sink.bytes();
    let mut group = c.benchmark_group("verify");
    group.throughput(Throughput::Elements(N));
    group.bench_function("chain", |b| {
        b.iter(|| {
            let report = verify_reader(&bytes[..], ChainHead::genesis(), "bench").unwrap();
            assert!(report.is_intact());
        })
    });
    // The baseline on as many threads as the verifier uses (`MAX_VERIFY_THREADS`, bounded by
    // the machine), each parsing and hashing its share of the lines.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_VERIFY_THREADS);
    let lines: Vec<&[u8]> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let per = lines.len().div_ceil(threads);
    group.bench_function("baseline_parse_hash", |b| {
        b.iter_batched(
            || (),
            |_| {
                std::thread::scope(|scope| {
                    for part in lines.chunks(per) {
                        scope.spawn(move || {
                            for line in part {
                                let value: serde_json::Value =
                                    serde_json::from_slice(line).unwrap();
                                black_box((value, blake3::hash(line)));
                            }
                        });
                    }
                });
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = append, verify
}
criterion_main!(benches);
