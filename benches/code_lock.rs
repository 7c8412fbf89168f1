//! Live bench (reported, not asserted): what the actuator lock for agent code costs, the
//! in-kernel check (a filter) beside the retire-and-verify boundary, in one run on bpy 5.0.1
//! (headless, stdio, every kernel jailed) with a 1,003-object scene (the factory's 3 objects
//! and 1,000 empties that the agent did not create).
//!
//! ```text
//! cargo build --release -p vibe-transport --features jail --bin vibe-jail
//! VIBE_BPY_PYTHON=/path/to/venv/bin/python cargo bench --bench code_lock
//! ```
//!
//! The scene is built once, by a kernel of its own under another session id (so none of its
//! objects counts as the agent's), saved as a `.blend` in the jail's sandbox and loaded once into
//! each kernel below. Every figure runs the same small agent code, [`CODE`] (a property edit of
//! the factory Cube, which the lock allows):
//!
//! * `code_lock/exec_1000/plain`: `python.exec` straight on a jailed [`StdioTransport`]: no
//!   pipeline, no supervisor, no boundary. This is the cheapest way to run code in the kernel,
//!   but it still holds the in-kernel check, because the kernel's `python.exec` always does: it
//!   saves the scene to a `.blend` before the run (its own rollback), reads an inventory of
//!   every object before and after, and compares them.
//! * `code_lock/exec_1000/floor`: `kernel.status` on the same kernel: one round trip through the
//!   transport and the kernel's dispatcher that does no work. `plain - floor` is what the
//!   kernel's `python.exec` adds to a round trip: the before-snapshot, the two inventories, the
//!   comparison, and running the code itself (there is no public way to run code without the
//!   check, so this is the closest figure to "the check's cost").
//! * `code_lock/exec_1000/in_kernel_check`: a [`Pipeline`] with `code_gate()` over
//!   `SupervisedKernel::in_kernel_check_only()` (filter mode): the bridge's stages and code
//!   gate, the kernel's `python.exec` (with its check), and the supervisor's last-good-state
//!   bookkeeping, which takes a checkpoint (save the scene, move it out of the kernel's reach,
//!   hash it) after every successful call that is not deterministic, agent code included. The
//!   speed issue's 3 ms target applies to this figure.
//! * `code_lock/exec_1000/in_kernel_unsupervised`: the same pipeline straight over the plain
//!   kernel (no supervisor), to tell the pipeline's share from the supervisor's checkpoint.
//! * `code_lock/exec_1000/retire_and_verify`: a [`Pipeline`] with `code_gate()` over a default
//!   [`SupervisedKernel`] (boundary mode): an inventory before the call, the kernel's
//!   `python.exec` (with its check), then the kernel is retired before the call answers (the
//!   scene it left is saved, moved out and hashed; the kernel is killed; a fresh jailed kernel is
//!   started and configured; the file is checked by hash, copied into its private folder and
//!   loaded with Python auto-execution off), an inventory is read on the fresh kernel, the
//!   bridge compares, and the scene is settled.
//!
//! What bounds the retire path, each timed on its own through the public APIs:
//!
//! * `code_lock/pieces_1000/inventory`: [`StdioTransport::inventory`] on the 1,003 objects (the
//!   boundary reads two per call);
//! * `code_lock/pieces_1000/checkpoint`: [`StdioTransport::checkpoint`], the scene saved to the
//!   kernel's private folder;
//! * `code_lock/pieces_1000/fresh_kernel`: a fresh jailed kernel from building its options to a
//!   loaded scene, recorded in phases: `spawn` (to a ready hello: private folders, bubblewrap,
//!   the launcher, Python and bpy), `configure`, `copy` (the `.blend` into its private folder)
//!   and `load` ([`StdioTransport::restore`]). Each kernel is closed outside the figure.
//!
//! After the criterion runs, every figure runs again in interleaved rounds (the order rotating
//! every round, so a shared machine's changing load falls on all of them alike; the cheap figures
//! as the mean of a short block per round). The summary prints the median of each figure, from
//! the criterion runs and from the interleaved rounds, as absolute time and as a ratio against
//! `plain`; the sum of the retire path's pieces beside its measured cost; and how many kernels
//! each supervisor replaced (one per call in boundary mode, none in filter mode).
//!
//! The `vibe-jail` launcher is found beside the bench binary's folder (`target/release/vibe-jail`)
//! or through `VIBE_JAIL_LAUNCHER`; build it first (above). Without `VIBE_BPY_PYTHON` it prints
//! SKIPPED and measures nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use vibe::contract::{BridgePolicy, CAP_CODE_EXEC, default_registries};
use vibe::errors::Envelope;
use vibe::exec::Pipeline;
use vibe::transport::jail::Jail;
use vibe::transport::{
    SessionConfig, StdioOptions, StdioTransport, SupervisedKernel, Transport, kernel_factory,
};

/// Empties added to the factory scene (which has 3 objects).
const OBJECTS: usize = 1_000;
/// The agent code every figure runs: a property edit of an object the agent did not create.
const CODE: &str = "import bpy\nbpy.data.objects['Cube'].location.x += 0.001";
/// Deadline of every direct call.
const DEADLINE: Duration = Duration::from_secs(120);
/// The speed issue's target for the in-kernel path (trivial `python.exec`, 1k objects).
const TARGET_MS: f64 = 3.0;

mod support;
use support::{Figures, bpy_python, runtime};
#[path = "support/jailed.rs"]
mod shared;
use shared::{call, jailed, new_group, slow_figures, spawn, temp, total_of};
#[path = "../vibe-transport/tests/support/session.rs"]
mod session;
use session::code_session;
#[path = "../vibe-exec/tests/support/negotiated.rs"]
mod negotiated;
use negotiated::negotiated;

/// How many objects an inventory lists.
fn counted(inventory: &Envelope) -> usize {
    inventory.result().expect("inventory")["objects"]
        .as_array()
        .map_or(0, Vec::len)
}

/// A pipeline with the code gate over `transport`, `code_exec` granted (configures it).
async fn pipeline(transport: Arc<dyn Transport>, name: &str) -> Pipeline {
    let mut policy = BridgePolicy::default();
    policy.capabilities.insert(CAP_CODE_EXEC.into());
    let agreement = negotiated(
        name,
        &["scene.read", "scene.write", "transactions", CAP_CODE_EXEC],
        None,
        &policy,
        &transport.hello().blender,
    );
    Pipeline::builder(agreement, transport)
        .code_gate()
        .start()
        .await
        .unwrap()
}

/// What every measurement needs.
struct Bench {
    rt: tokio::runtime::Runtime,
    python: PathBuf,
    jail: Jail,
    /// The sandbox (its canonical path); removed with `_sandbox`.
    sandbox: PathBuf,
    _sandbox: tempfile::TempDir,
    /// The 1,003-object scene as a `.blend`, in the jail's sandbox.
    blend: PathBuf,
    figures: Figures,
}

impl Bench {
    fn options(&self) -> StdioOptions {
        jailed(&self.python, &self.jail)
    }

    fn session(&self, id: &str) -> SessionConfig {
        code_session(id, &self.sandbox, DEADLINE)
    }

    /// Builds the scene once, in a kernel of its own, and saves it to [`Bench::blend`].
    fn build_scene(&self) -> u64 {
        self.rt.block_on(async {
            let t = spawn(self.options()).await;
            assert!(
                t.configure(&self.session("bench-code-lock-build"))
                    .await
                    .unwrap()
                    .is_ok()
            );
            let code = format!(
                "import bpy\ncoll = bpy.data.collections['Collection']\nfor i in range({OBJECTS}):\n    \
                 coll.objects.link(bpy.data.objects.new('E%04d' % i, None))\n"
            );
            let made = call(&t, "python.exec", json!({ "code": code }), DEADLINE).await;
            assert!(made.is_ok(), "{made:?}");
            let inventory = t.connection().inventory(DEADLINE).await.unwrap();
            assert_eq!(counted(&inventory), OBJECTS + 3);
            let written = t.private_dir().unwrap().join("scene.blend");
            let saved = t
                .connection()
                .checkpoint(&written.to_string_lossy(), DEADLINE)
                .await
                .unwrap();
            assert!(saved.is_ok(), "{saved:?}");
            std::fs::copy(&written, &self.blend).unwrap();
            t.close().await.unwrap();
        });
        std::fs::metadata(&self.blend).unwrap().len()
    }

    /// Loads the scene into `t` and checks that it holds every object.
    fn load_scene(&self, t: &StdioTransport) {
        self.rt.block_on(async {
            let loaded = t
                .connection()
                .restore(&self.blend.to_string_lossy(), None, DEADLINE)
                .await
                .unwrap();
            assert!(loaded.is_ok(), "{loaded:?}");
            assert_eq!(
                counted(&t.connection().inventory(DEADLINE).await.unwrap()),
                OBJECTS + 3
            );
        });
    }

    /// `n` calls of `tool` straight on `t`; the mean.
    fn direct(&self, t: &StdioTransport, tool: &str, params: &Value, n: u32) -> Duration {
        total_of(n.into(), || {
            let answer = self.rt.block_on(call(t, tool, params.clone(), DEADLINE));
            assert!(answer.is_ok(), "{tool}: {answer:?}");
        }) / n
    }

    /// `n` runs of [`CODE`] through `p`; the mean.
    fn through(&self, p: &Pipeline, n: u32) -> Duration {
        total_of(n.into(), || {
            let answer = self
                .rt
                .block_on(p.call("python.exec", json!({ "code": CODE })));
            assert!(answer.is_ok(), "{answer:?}");
        }) / n
    }

    /// `n` inventories of `t`; the mean.
    fn inventory(&self, t: &StdioTransport, n: u32) -> Duration {
        total_of(n.into(), || {
            let answer = self
                .rt
                .block_on(t.connection().inventory(DEADLINE))
                .unwrap();
            assert!(answer.is_ok(), "{answer:?}");
        }) / n
    }

    /// `n` checkpoints of `t` into its private folder; the mean (files removed outside it).
    fn checkpoint(&self, t: &StdioTransport, n: u32) -> Duration {
        let path = t.private_dir().unwrap().join("bench-save.blend");
        let mut took = Duration::ZERO;
        for _ in 0..n {
            let started = Instant::now();
            let answer = self
                .rt
                .block_on(t.connection().checkpoint(&path.to_string_lossy(), DEADLINE))
                .unwrap();
            took += started.elapsed();
            assert!(answer.is_ok(), "{answer:?}");
            std::fs::remove_file(&path).unwrap();
        }
        took / n
    }

    /// A fresh jailed kernel: spawn, configure, copy the `.blend` in, load it (phases recorded
    /// under `prefix`); checked and closed outside the figure.
    fn fresh(&self, prefix: &str) -> Duration {
        let session = self.session("bench-code-lock-fresh");
        let started = Instant::now();
        let (t, phases) = self.rt.block_on(async {
            let t = spawn(self.options()).await;
            let spawned = started.elapsed();
            assert!(t.configure(&session).await.unwrap().is_ok());
            let configured = started.elapsed();
            let target = t.private_dir().unwrap().join("restore.blend");
            std::fs::copy(&self.blend, &target).unwrap();
            let copied = started.elapsed();
            let loaded = t
                .connection()
                .restore(&target.to_string_lossy(), None, DEADLINE)
                .await;
            assert!(loaded.unwrap().is_ok());
            let restored = started.elapsed();
            let _ = std::fs::remove_file(&target);
            (
                t,
                [
                    spawned,
                    configured - spawned,
                    copied - configured,
                    restored - copied,
                ],
            )
        });
        let took = started.elapsed();
        for (phase, spent) in ["spawn", "configure", "copy", "load"].iter().zip(phases) {
            self.figures.record(&format!("{prefix}/{phase}"), spent, 1);
        }
        let inventory = self
            .rt
            .block_on(t.connection().inventory(DEADLINE))
            .unwrap();
        assert_eq!(counted(&inventory), OBJECTS + 3, "the .blend did not load");
        self.rt.block_on(t.close()).unwrap();
        took
    }
}

fn live(c: &mut Criterion) {
    let Some(python) = bpy_python("code_lock") else {
        return;
    };
    let temp_sandbox = temp("code-lock-sandbox");
    let sandbox = temp_sandbox.path().canonicalize().unwrap();
    let bench = Bench {
        rt: runtime(),
        python,
        jail: Jail::new(&sandbox),
        blend: sandbox.join("scene-1000.blend"),
        sandbox,
        _sandbox: temp_sandbox,
        figures: Figures::default(),
    };
    let b = &bench;
    let bytes = b.build_scene();
    eprintln!(
        "scene: {} objects, .blend of {:.1} MiB",
        OBJECTS + 3,
        bytes as f64 / (1024.0 * 1024.0)
    );

    // The kernels, each loaded once with the scene.
    let plain = Arc::new(b.rt.block_on(spawn(b.options())));
    b.load_scene(&plain);
    let unsupervised = b.rt.block_on(pipeline(plain.clone(), "bench-unsupervised"));
    let registry = default_registries().unwrap().tools;
    let supervised = |boundary: bool, spare: bool| {
        let factory = {
            let python = b.python.clone();
            let jail = b.jail.clone();
            kernel_factory(move || StdioOptions::jailed_bpy_python(&python, &jail))
        };
        let kernel =
            b.rt.block_on(SupervisedKernel::start(factory, registry.clone()))
                .unwrap();
        let kernel = if spare {
            b.rt.block_on(kernel.with_warm_spare())
        } else {
            kernel
        };
        let kernel = Arc::new(if boundary {
            kernel
        } else {
            kernel.in_kernel_check_only()
        });
        b.load_scene(&kernel.current());
        let name = match (boundary, spare) {
            (true, true) => "bench-boundary-spare",
            (true, false) => "bench-boundary",
            (false, _) => "bench-filter",
        };
        let p = b.rt.block_on(pipeline(kernel.clone(), name));
        assert_eq!(kernel.code_boundary().is_some(), boundary);
        (kernel, p)
    };
    let (filter_kernel, filter) = supervised(false, false);
    let (boundary_kernel, boundary) = supervised(true, false);
    let (spare_kernel, spare) = supervised(true, true);

    let code = json!({ "code": CODE });
    let status = json!({});
    let plain_exec = || b.direct(&plain, "python.exec", &code, 1);
    let floor = || b.direct(&plain, "kernel.status", &status, 1);
    let in_kernel = || b.through(&filter, 1);
    let in_kernel_unsupervised = || b.through(&unsupervised, 1);
    let retire = || b.through(&boundary, 1);

    // 1. The three paths side by side (plus the floor and the unsupervised pipeline).
    let mut group = new_group(c, "code_lock/exec_1000");
    b.figures
        .bench_each(&mut group, "exec", "plain", plain_exec);
    b.figures.bench_each(&mut group, "exec", "floor", floor);
    b.figures
        .bench_each(&mut group, "exec", "in_kernel_check", in_kernel);
    b.figures.bench_each(
        &mut group,
        "exec",
        "in_kernel_unsupervised",
        in_kernel_unsupervised,
    );
    slow_figures(&mut group, 10);
    b.figures
        .bench_each(&mut group, "exec", "retire_and_verify", retire);
    group.finish();

    // 2. The retire path's pieces.
    let mut group = new_group(c, "code_lock/pieces_1000");
    b.figures
        .bench_each(&mut group, "pieces", "inventory", || b.inventory(&plain, 1));
    b.figures
        .bench_each(&mut group, "pieces", "checkpoint", || {
            b.checkpoint(&plain, 1)
        });
    slow_figures(&mut group, 10);
    b.figures
        .bench_each(&mut group, "pieces", "fresh_kernel", || b.fresh("phases"));
    group.finish();

    // 3. Interleaved rounds of everything.
    b.figures.interleave(
        "",
        8,
        &[
            ("exec/plain", &|| b.direct(&plain, "python.exec", &code, 5)),
            ("exec/floor", &|| {
                b.direct(&plain, "kernel.status", &status, 50)
            }),
            ("exec/in_kernel_check", &|| b.through(&filter, 5)),
            ("exec/in_kernel_unsupervised", &|| {
                b.through(&unsupervised, 5)
            }),
            ("exec/retire_and_verify", &retire),
            ("pieces/inventory", &|| b.inventory(&plain, 5)),
            ("pieces/checkpoint", &|| b.checkpoint(&plain, 5)),
            ("pieces/fresh_kernel", &|| b.fresh("paired/phases")),
        ],
    );

    // 4. The boundary with a warm spare, as an agent uses it: a pause between calls (not timed)
    // lets the spare start, so a call waits for no Blender start.
    let mut with_spare: Vec<f64> = (0..8)
        .map(|_| {
            // On the bench's runtime, so the spare's start goes on meanwhile.
            b.rt.block_on(async { tokio::time::sleep(Duration::from_millis(1_500)).await });
            b.through(&spare, 1).as_secs_f64() * 1e3
        })
        .collect();
    with_spare.sort_by(f64::total_cmp);
    eprintln!(
        "3b. retire-and-verify with a warm spare (1.5 s between calls, 8 calls): median {:.1} ms",
        with_spare[with_spare.len() / 2]
    );
    let _ = &spare_kernel;

    // Every kernel still holds the whole scene; the boundary replaced one kernel per call.
    for t in [
        &*plain,
        &*filter_kernel.current(),
        &*boundary_kernel.current(),
    ] {
        let inventory = b.rt.block_on(t.connection().inventory(DEADLINE)).unwrap();
        assert_eq!(counted(&inventory), OBJECTS + 3);
    }
    let replaced = [filter_kernel.replacements(), boundary_kernel.replacements()];
    assert_eq!(replaced[0], 0, "filter mode replaced a kernel");
    b.rt.block_on(filter_kernel.close()).unwrap();
    b.rt.block_on(boundary_kernel.close()).unwrap();
    b.rt.block_on(plain.close()).unwrap();
    summary(&b.figures, replaced);
}

/// Medians of every figure, absolute and against `plain`, and what bounds the retire path:
/// first from the criterion runs, then from the interleaved rounds.
fn summary(figures: &Figures, replaced: [u64; 2]) {
    let ms = |name: &str| {
        figures
            .median(name)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    eprintln!(
        "\n== code_lock bench summary (medians, ms; {OBJECTS} empties + 3 factory objects; \
         code: {CODE:?}) =="
    );
    for (title, root) in [
        ("criterion runs, one figure after the other", ""),
        ("interleaved rounds", "paired/"),
    ] {
        eprintln!("-- {title}");
        let plain = ms(&format!("{root}exec/plain"));
        let floor = ms(&format!("{root}exec/floor"));
        let row = |label: &str, value: f64| {
            eprintln!("{label:<44} {value:>10.3}   {:>7.2}x plain", value / plain);
        };
        row("1. plain python.exec (transport only)", plain);
        row("   kernel.status (transport floor)", floor);
        row(
            "   plain - floor (kernel's python.exec work)",
            plain - floor,
        );
        let in_kernel = ms(&format!("{root}exec/in_kernel_check"));
        row("2. in-kernel check (pipeline, supervised)", in_kernel);
        row(
            "   in-kernel check (pipeline, unsupervised)",
            ms(&format!("{root}exec/in_kernel_unsupervised")),
        );
        eprintln!(
            "   the speed issue's target, {TARGET_MS} ms for the in-kernel path: {}",
            if in_kernel <= TARGET_MS {
                "met".to_owned()
            } else {
                format!("missed, {:.1}x over", in_kernel / TARGET_MS)
            }
        );
        let retire = ms(&format!("{root}exec/retire_and_verify"));
        row("3. retire-and-verify (pipeline, boundary)", retire);
        let inventory = ms(&format!("{root}pieces/inventory"));
        let checkpoint = ms(&format!("{root}pieces/checkpoint"));
        let phase = |p: &str| ms(&format!("{root}phases/{p}"));
        let (spawn, configure, copy, load) = (
            phase("spawn"),
            phase("configure"),
            phase("copy"),
            phase("load"),
        );
        eprintln!("   what bounds it (pieces timed on their own):");
        for (label, value) in [
            ("2 x inventory of 1,003 objects", 2.0 * inventory),
            ("checkpoint save", checkpoint),
            ("fresh jailed kernel: spawn to hello", spawn),
            ("fresh jailed kernel: configure", configure),
            ("copy of the .blend", copy),
            ("load (restore)", load),
        ] {
            eprintln!(
                "     {label:<40} {value:>10.3}   {:>5.1}% of retire",
                100.0 * value / retire
            );
        }
        let pieces = 2.0 * inventory + checkpoint + spawn + configure + copy + load;
        eprintln!(
            "     pieces + plain = {:.1} ms against {retire:.1} measured; {:.1} ms left for \
             the pipeline, the hashes, the move and the kill",
            pieces + plain,
            retire - pieces - plain
        );
        eprintln!(
            "   fresh_kernel (spawn + configure + copy + load, one figure): {:.1} ms",
            ms(&format!("{root}pieces/fresh_kernel"))
        );
    }
    eprintln!(
        "kernels replaced: filter mode {}, boundary mode {} (one per retire-and-verify call)",
        replaced[0], replaced[1]
    );
}

criterion_group!(benches, live);
criterion_main!(benches);
