//! What the benches of jailed kernels share (`jail`, `code_lock`): a sandbox, kernels, calls,
//! criterion groups, and figures measured in criterion's runs and again in interleaved rounds.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode};
use serde_json::Value;
use vibe::errors::Envelope;
use vibe::transport::jail::Jail;
use vibe::transport::{Call, StdioOptions, StdioTransport, Transport};

use crate::support::Figures;

/// A fresh folder `vibe-bench-<name>-...` in the system's temp folder, removed when dropped.
pub fn temp(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("vibe-bench-{name}-"))
        .tempdir()
        .unwrap()
}

/// `tool` with `params` through `t`, answered within `deadline`.
pub async fn call(t: &impl Transport, tool: &str, params: Value, deadline: Duration) -> Envelope {
    t.call(Call::new(tool, params, deadline)).await.unwrap()
}

/// Options for a bpy kernel in `jail`.
pub fn jailed(python: &Path, jail: &Jail) -> StdioOptions {
    StdioOptions::jailed_bpy_python(python, jail).unwrap_or_else(|e| {
        panic!(
            "{e}\nbuild the launcher first: cargo build --release -p vibe-transport --features \
             jail --bin vibe-jail (or set VIBE_JAIL_LAUNCHER)"
        )
    })
}

/// A kernel started from `options`, to a ready hello; a jailed one must report its jail.
pub async fn spawn(options: StdioOptions) -> StdioTransport {
    let jailed = options.is_jailed();
    let t = StdioTransport::spawn(options).await.unwrap();
    if jailed {
        let confinement = &t.hello().blender.confinement;
        assert!(
            confinement.is_jailed(),
            "the jail did not hold: {confinement:?}"
        );
    }
    t
}

/// How long `n` runs of `once`, one after the other, took in all.
pub fn total_of(n: u64, mut once: impl FnMut()) -> Duration {
    let started = Instant::now();
    for _ in 0..n {
        once();
    }
    started.elapsed()
}

/// A criterion group: 20 samples, after a 500 ms warm-up, over 3 s.
pub fn new_group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    group
}

/// `group` from here on measures slow figures: flat sampling, 10 samples, over `seconds`.
pub fn slow_figures(group: &mut BenchmarkGroup<'_, WallTime>, seconds: u64) {
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(seconds));
}

impl Figures {
    /// Criterion figure `name` in `group` from a measurement of one iteration, recorded as
    /// `figure/name`.
    pub fn bench_each(
        &self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        figure: &str,
        name: &str,
        once: impl Fn() -> Duration,
    ) {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let total = (0..iters).map(|_| once()).sum();
                self.record(&format!("{figure}/{name}"), total, iters);
                total
            })
        });
    }

    /// `rounds` rounds of every measurement in `each`, the order rotating each round, so the
    /// load of a shared machine falls on all of them alike; recorded as `paired/<prefix><name>`.
    pub fn interleave(&self, prefix: &str, rounds: usize, each: &[(&str, &dyn Fn() -> Duration)]) {
        for round in 0..rounds {
            for i in 0..each.len() {
                let (name, once) = each[(round + i) % each.len()];
                let took = once();
                self.record(&format!("paired/{prefix}{name}"), took, 1);
            }
        }
    }
}
