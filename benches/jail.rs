//! Live bench (reported, not asserted): what the jail costs, measured beside an unjailed kernel
//! in the same run (bpy 5.0.1, headless, stdio).
//!
//! ```text
//! cargo build --release -p vibe-transport --features jail --bin vibe-jail
//! VIBE_BPY_PYTHON=/path/to/venv/bin/python cargo bench --bench jail
//! ```
//!
//! * `jail/spawn/{unjailed,jailed}`: from building the kernel's [`StdioOptions`] to a ready hello
//!   (the jailed one includes its private folders, bubblewrap and the `vibe-jail` launcher). Each
//!   kernel is closed outside the measurement.
//! * `jail/object_info_1000/{unjailed,jailed}` and `jail/snapshot_1000/{unjailed,jailed}`: one
//!   `object.info` and one `scene.snapshot` round trip on a 1,003-object scene (the factory's 3
//!   objects and 1,000 empties, 999 built with one `python.exec` and one with `object.create`;
//!   the unjailed kernel runs with the operator's `VIBE_ALLOW_UNCONFINED_CODE=1` opt-in so both
//!   scenes are built the same way).
//! * `jail/kill_and_restore_1000/supervised_jailed`: a [`SupervisedKernel`] over jailed kernels
//!   runs `time.sleep(1e6)` with a 500 ms deadline. The figure is the time from the call to its
//!   `timeout` answer **minus the deadline**: what a caller waits past the deadline while the
//!   bridge kills the kernel's process group, starts a fresh jailed kernel, configures it, checks
//!   the checkpoint's hash, copies it into the kernel's private folder, loads it and replays the
//!   one journaled `object.create`. The scene's fingerprint after the bench is checked against
//!   the one before.
//! * Baselines, same scene, same `.blend`: `jail/spawn_and_restore_1000/unjailed` (a plain
//!   unjailed kernel: spawn, configure, load the `.blend`) and `.../jailed` (the same with a jailed
//!   kernel, no supervisor). supervised / unjailed says what jail and supervisor add together;
//!   supervised / jailed says what the supervisor alone adds.
//!
//! After each part, the same measurements run again in interleaved rounds (unjailed, jailed,
//! the order rotating every round), so a shared machine's changing load falls on both kinds alike;
//! criterion measures one figure after the other. At the end a summary prints the median of each
//! figure, from the criterion runs and from the interleaved rounds, with the jailed / unjailed
//! and supervised / plain ratios.
//!
//! The `vibe-jail` launcher is found beside the bench binary's folder (`target/release/vibe-jail`)
//! or through `VIBE_JAIL_LAUNCHER`; build it first (above). Without `VIBE_BPY_PYTHON` it says it
//! skipped and measures nothing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use vibe::transport::jail::Jail;
use vibe::transport::{
    SessionConfig, StdioOptions, StdioTransport, SupervisedKernel, Transport, kernel_factory,
};

/// Empties added to the factory scene (which has 3 objects).
const OBJECTS: usize = 1_000;
/// Deadline of the runaway call the supervisor kills.
const RUNAWAY_DEADLINE: Duration = Duration::from_millis(500);
/// Deadline of every other call.
const DEADLINE: Duration = Duration::from_secs(120);

mod support;
use support::{Figures, bpy_python, runtime};
#[path = "support/jailed.rs"]
mod shared;
use shared::{call, jailed, new_group, slow_figures, spawn, temp, total_of};
#[path = "../vibe-transport/tests/support/session.rs"]
mod session;
use session::code_session;

/// [`OBJECTS`] empties: all but the last through one `python.exec` (kept through the code
/// boundary's `settle` where there is one), the last through a typed `object.create`: under a
/// [`SupervisedKernel`] the last good state is then a checkpoint plus one journaled call.
async fn populate(t: &impl Transport) {
    let code = format!(
        "import bpy\ncoll = bpy.data.collections['Collection']\nfor i in range({}):\n    \
         coll.objects.link(bpy.data.objects.new('E%04d' % i, None))\n",
        OBJECTS - 1
    );
    let answer = call(t, "python.exec", json!({ "code": code }), DEADLINE).await;
    assert!(answer.is_ok(), "{answer:?}");
    // Under a code boundary the session waits for the bridge's decision on the code's scene.
    if let Some(boundary) = t.code_boundary() {
        boundary.settle(true).await.unwrap();
    }
    let last = json!({"name": format!("E{:04}", OBJECTS - 1), "type": "EMPTY"});
    let answer = call(t, "object.create", last, DEADLINE).await;
    assert!(answer.is_ok(), "{answer:?}");
}

async fn fingerprint(t: &impl Transport) -> Value {
    let snapshot = call(t, "scene.snapshot", json!({}), DEADLINE).await;
    serde_json::json!(
        vibe_transport::snapshot::content_fingerprint(snapshot.result().unwrap()).unwrap()
    )
}

fn unjailed(python: &Path) -> StdioOptions {
    StdioOptions::bpy_python(python)
        .unwrap()
        .env("VIBE_ALLOW_UNCONFINED_CODE", "1")
}

/// The two kinds of kernel compared.
#[derive(Clone, Copy)]
enum Kind {
    Unjailed,
    Jailed,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Unjailed => "unjailed",
            Kind::Jailed => "jailed",
        }
    }
}

/// What every measurement needs.
struct Bench {
    rt: tokio::runtime::Runtime,
    python: PathBuf,
    jail: Jail,
    sandbox_free: tempfile::TempDir,
    sandbox_jail: tempfile::TempDir,
    /// The 1,003-object scene as a `.blend` (in the jail's sandbox, so both kinds can read it).
    blend: PathBuf,
    figures: Figures,
}

impl Bench {
    /// Options for a kernel of `kind`; `code` adds the operator's opt-in to an unjailed one.
    fn options(&self, kind: Kind, code: bool) -> StdioOptions {
        match kind {
            Kind::Unjailed if code => unjailed(&self.python),
            Kind::Unjailed => StdioOptions::bpy_python(&self.python).unwrap(),
            Kind::Jailed => jailed(&self.python, &self.jail),
        }
    }

    fn session(&self, kind: Kind) -> SessionConfig {
        let sandbox = match kind {
            Kind::Unjailed => &self.sandbox_free,
            Kind::Jailed => &self.sandbox_jail,
        };
        code_session("bench-jail", sandbox.path(), DEADLINE)
    }

    /// From building the options to a ready hello; the kernel is closed outside the figure.
    fn spawn_once(&self, kind: Kind) -> Duration {
        let started = Instant::now();
        let t = self.rt.block_on(spawn(self.options(kind, false)));
        let took = started.elapsed();
        self.rt.block_on(t.close()).unwrap();
        took
    }

    /// `n` round trips of `tool`, one after the other.
    fn calls(&self, t: &StdioTransport, tool: &str, params: &Value, n: u64) -> Duration {
        total_of(n, || {
            let answer = self.rt.block_on(call(t, tool, params.clone(), DEADLINE));
            assert!(answer.is_ok(), "{answer:?}");
        })
    }

    /// One runaway call under the supervisor: time past the deadline until its `timeout`.
    fn runaway(&self, supervised: &SupervisedKernel) -> Duration {
        let started = Instant::now();
        let answer = self.rt.block_on(call(
            supervised,
            "python.exec",
            json!({"code": "import time\ntime.sleep(1e6)"}),
            RUNAWAY_DEADLINE,
        ));
        let took = started.elapsed().saturating_sub(RUNAWAY_DEADLINE);
        let error = answer.error().expect("the runaway call must time out");
        assert_eq!(error.code.as_str(), "timeout", "{error:?}");
        assert_eq!(error.details["kernel"], "replaced", "{error:?}");
        took
    }

    /// A plain kernel of `kind`: spawn, configure, load the `.blend` (phases recorded under
    /// `prefix`); checked and closed outside the figure.
    fn spawn_restore(&self, kind: Kind, prefix: &str) -> Duration {
        let session = self.session(kind);
        let started = Instant::now();
        let (t, phases) = self.rt.block_on(async {
            let t = spawn(self.options(kind, false)).await;
            let spawned = started.elapsed();
            assert!(t.configure(&session).await.unwrap().is_ok());
            let configured = started.elapsed();
            let loaded = t
                .connection()
                .restore(&self.blend.to_string_lossy(), None, DEADLINE)
                .await;
            assert!(loaded.unwrap().is_ok());
            let restored = started.elapsed();
            (t, [spawned, configured - spawned, restored - configured])
        });
        let took = started.elapsed();
        for (phase, spent) in ["spawn", "configure", "load"].iter().zip(phases) {
            self.figures.record(&format!("{prefix}/{phase}"), spent, 1);
        }
        let last = json!({"name": format!("E{:04}", OBJECTS - 1)});
        let loaded = self.rt.block_on(call(&t, "object.info", last, DEADLINE));
        assert!(loaded.is_ok(), "the .blend did not load: {loaded:?}");
        self.rt.block_on(t.close()).unwrap();
        took
    }
}

fn live(c: &mut Criterion) {
    let Some(python) = bpy_python("jail") else {
        return;
    };
    let sandbox_jail = temp("jail-jailed");
    let bench = Bench {
        rt: runtime(),
        python,
        jail: Jail::new(sandbox_jail.path()),
        sandbox_free: temp("jail-unjailed"),
        blend: sandbox_jail
            .path()
            .canonicalize()
            .unwrap()
            .join("scene-1000.blend"),
        sandbox_jail,
        figures: Figures::default(),
    };
    let b = &bench;
    let kinds = [Kind::Unjailed, Kind::Jailed];

    // 1. Spawn to a ready hello.
    let mut group = new_group(c, "jail/spawn");
    slow_figures(&mut group, 5);
    for kind in kinds {
        b.figures
            .bench_each(&mut group, "spawn", kind.name(), || b.spawn_once(kind));
    }
    group.finish();
    b.figures.interleave(
        "spawn/",
        6,
        &[
            ("unjailed", &|| b.spawn_once(Kind::Unjailed)),
            ("jailed", &|| b.spawn_once(Kind::Jailed)),
        ],
    );

    // 2. Per call on a 1,003-object scene.
    let kernels = kinds.map(|kind| {
        let t = b.rt.block_on(spawn(b.options(kind, true)));
        assert!(
            b.rt.block_on(t.configure(&b.session(kind)))
                .unwrap()
                .is_ok()
        );
        b.rt.block_on(populate(&t));
        t
    });
    let bytes =
        b.rt.block_on(call(&kernels[1], "scene.snapshot", json!({}), DEADLINE))
            .to_json_string()
            .len();
    eprintln!("snapshot of {} objects: {bytes} bytes", OBJECTS + 3);
    let info = json!({"name": "E0500"});
    let snapshot = json!({});
    for (figure, tool, params, block, rounds) in [
        ("object_info_1000", "object.info", &info, 200, 10),
        ("snapshot_1000", "scene.snapshot", &snapshot, 3, 6),
    ] {
        let mut group = new_group(c, &format!("jail/{figure}"));
        for (kind, t) in kinds.iter().zip(&kernels) {
            b.figures.bench_each(&mut group, figure, kind.name(), || {
                b.calls(t, tool, params, 1)
            });
        }
        group.finish();
        let per_call = |t: &StdioTransport| b.calls(t, tool, params, block) / block as u32;
        b.figures.interleave(
            &format!("{figure}/"),
            rounds,
            &[
                ("unjailed", &|| per_call(&kernels[0])),
                ("jailed", &|| per_call(&kernels[1])),
            ],
        );
    }
    // The same scene as a .blend, for the restore baselines.
    let saved =
        b.rt.block_on(
            kernels[0]
                .connection()
                .checkpoint(&b.blend.to_string_lossy(), DEADLINE),
        )
        .unwrap();
    assert!(saved.is_ok(), "{saved:?}");
    for t in kernels {
        b.rt.block_on(t.close()).unwrap();
    }

    // 3. Kill and restore (supervised, jailed) beside spawn + restore baselines.
    let factory = {
        let python = b.python.clone();
        let jail = b.jail.clone();
        kernel_factory(move || StdioOptions::jailed_bpy_python(&python, &jail))
    };
    let registry = vibe::contract::default_registries().unwrap().tools;
    let supervised =
        b.rt.block_on(SupervisedKernel::start(factory, registry))
            .unwrap();
    let configured =
        b.rt.block_on(supervised.configure(&b.session(Kind::Jailed)));
    assert!(configured.unwrap().is_ok());
    // Agent code, then a typed call: the last good state is the 1,003-object scene.
    b.rt.block_on(populate(&supervised));
    let before = b.rt.block_on(fingerprint(&supervised));
    let mut group = new_group(c, "jail/kill_and_restore_1000");
    slow_figures(&mut group, 10);
    b.figures
        .bench_each(&mut group, "restore", "supervised_jailed", || {
            b.runaway(&supervised)
        });
    group.finish();
    let mut group = new_group(c, "jail/spawn_and_restore_1000");
    slow_figures(&mut group, 5);
    for kind in kinds {
        b.figures
            .bench_each(&mut group, "restore", kind.name(), || {
                b.spawn_restore(kind, &format!("phases/{}", kind.name()))
            });
    }
    group.finish();
    b.figures.interleave(
        "restore/",
        5,
        &[
            ("supervised_jailed", &|| b.runaway(&supervised)),
            ("unjailed", &|| {
                b.spawn_restore(Kind::Unjailed, "paired/phases/unjailed")
            }),
            ("jailed", &|| {
                b.spawn_restore(Kind::Jailed, "paired/phases/jailed")
            }),
        ],
    );
    let after = b.rt.block_on(fingerprint(&supervised));
    assert_eq!(before, after, "the supervisor restored a different scene");
    eprintln!(
        "supervisor: {} kernels replaced, scene fingerprint kept",
        supervised.replacements()
    );
    b.rt.block_on(supervised.close()).unwrap();
    summary(&b.figures);
}

/// Medians of every figure and the ratios that answer the question: first from the criterion
/// runs (each figure measured after the other), then from the interleaved rounds (robust to a
/// machine whose load changes during the run).
fn summary(figures: &Figures) {
    let ms = |name: &str| figures.median(name).map(|d| d.as_secs_f64() * 1e3);
    eprintln!("\n== jail bench summary (medians, ms; {OBJECTS} empties + 3 factory objects) ==");
    for (title, root) in [
        ("criterion runs, one figure after the other", ""),
        ("interleaved rounds", "paired/"),
    ] {
        eprintln!("-- {title}");
        for figure in ["spawn", "object_info_1000", "snapshot_1000", "restore"] {
            let (Some(free), Some(boxed)) = (
                ms(&format!("{root}{figure}/unjailed")),
                ms(&format!("{root}{figure}/jailed")),
            ) else {
                continue;
            };
            let label = if figure == "restore" {
                "spawn_and_restore"
            } else {
                figure
            };
            eprintln!(
                "{label:<18} unjailed {free:>9.3}   jailed {boxed:>9.3}   jailed/unjailed {:.2}x",
                boxed / free
            );
        }
        let Some(supervised) = ms(&format!("{root}restore/supervised_jailed")) else {
            continue;
        };
        eprintln!(
            "kill_and_restore   supervised jailed {supervised:.1} past the {} ms deadline",
            RUNAWAY_DEADLINE.as_millis()
        );
        for kind in ["unjailed", "jailed"] {
            let Some(base) = ms(&format!("{root}restore/{kind}")) else {
                continue;
            };
            let phase = |p: &str| ms(&format!("{root}phases/{kind}/{p}")).unwrap_or(f64::NAN);
            eprintln!(
                "  / plain {kind} spawn + restore {base:.1} (spawn {:.1}, configure {:.1}, \
                 load {:.1}): {:.2}x",
                phase("spawn"),
                phase("configure"),
                phase("load"),
                supervised / base
            );
        }
    }
}

criterion_group!(benches, live);
criterion_main!(benches);
