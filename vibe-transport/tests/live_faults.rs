//! A random 200-call sequence with faults on bpy 5.0.1, beside MockBlender: every answer that
//! is not a fault's must equal the mock's, and the final scene fingerprint must equal the
//! mock's. The faults are real: the kernel process is sent SIGKILL between calls and while a
//! call runs, and calls pass their deadline (a kernel stuck in a loop); the supervised kernel
//! kills, replaces and restores. The mock gets only the calls that took effect live.
//!
//! Opt-in like `live.rs`: `VIBE_LIVE=1` and `VIBE_BPY_PYTHON`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use vibe_transport::conformance::normalize;
use vibe_transport::snapshot::content_fingerprint;
use vibe_transport::{
    Call, MockBlender, MockTransport, SessionConfig, StdioOptions, SupervisedKernel, Transport,
    kernel_factory,
};

mod support;
use proptest::prelude::Rng;
use support::rng::{TestRng, seeded};
use support::{live, required};

const CALLS: usize = 200;
const DEADLINE: Duration = Duration::from_secs(60);

/// One step of the sequence: a call, or a fault applied to the live kernel.
#[derive(Debug, Clone)]
enum Step {
    Call(&'static str, Value),
    /// SIGKILL the kernel between calls.
    KillIdle,
    /// SIGKILL the kernel while this call runs.
    KillDuring(&'static str, Value),
    /// A call that cannot finish within its (short) deadline.
    Stall,
}

const NAMES: [&str; 6] = ["A", "B", "C", "Cube", "Light", "Gone"];
const COLLECTIONS: [&str; 3] = ["Collection", "Props", "Set"];
const MATERIALS: [&str; 3] = ["Wood", "Steel", "Material"];

fn pick<'a>(rng: &mut TestRng, items: &[&'a str]) -> &'a str {
    items[(rng.next_u64() % items.len() as u64) as usize]
}

fn coord(rng: &mut TestRng) -> f64 {
    ((rng.next_u64() % 41) as f64 - 20.0) / 4.0
}

/// A random call over the registry's scene tools, valid or not (wrong names, taken names,
/// transactions out of order): refusals must agree too.
fn random_call(rng: &mut TestRng) -> (&'static str, Value) {
    let name = pick(rng, &NAMES);
    match rng.next_u64() % 16 {
        0 | 1 => {
            let (kind, extra) = match rng.next_u64() % 3 {
                0 => (
                    "MESH",
                    json!({"primitive": pick(rng, &["cube", "plane", "uv_sphere"])}),
                ),
                1 => ("EMPTY", json!({})),
                _ => ("LIGHT", json!({"light_type": "POINT"})),
            };
            let mut params = json!({"type": kind, "name": name,
                "location": [coord(rng), coord(rng), coord(rng)]});
            params
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            ("object.create", params)
        }
        2 => ("object.delete", json!({"name": name})),
        3 => (
            "object.move",
            json!({"name": name, "delta": [coord(rng), coord(rng), 0.0]}),
        ),
        4 => (
            "object.rename",
            json!({"name": name, "new_name": pick(rng, &NAMES)}),
        ),
        5 => (
            "scene.create_collection",
            json!({"name": pick(rng, &COLLECTIONS)}),
        ),
        6 => (
            "object.assign_collection",
            json!({"name": name, "collection": pick(rng, &COLLECTIONS),
                   "mode": pick(rng, &["link", "move"])}),
        ),
        7 => (
            "material.ensure_principled",
            json!({"name": pick(rng, &MATERIALS),
                   "base_color": [coord(rng).abs() / 5.0, 0.5, 0.25, 1.0]}),
        ),
        8 => (
            "mesh.assign_material",
            json!({"name": name, "material": pick(rng, &MATERIALS)}),
        ),
        9 => (
            "modifier.add",
            json!({"name": name, "modifier_type": pick(rng, &["BEVEL", "SUBSURF", "ARRAY"]),
                   "levels": 1, "count": 2, "segments": 2, "width": 0.05}),
        ),
        10 => (
            "modifier.remove",
            json!({"name": name, "modifier": pick(rng, &["Bevel", "Subdivision", "Array"])}),
        ),
        11 => (
            "object.set_parent",
            json!({"name": name, "parent": pick(rng, &NAMES)}),
        ),
        12 => ("transaction.begin", json!({})),
        13 => ("transaction.commit", json!({})),
        14 => ("transaction.rollback", json!({})),
        _ => ("object.info", json!({"name": name})),
    }
}

fn sequence(seed: u64) -> Vec<Step> {
    let mut rng = seeded(seed);
    (0..CALLS)
        .map(|_| match rng.next_u64() % 100 {
            0..=2 => Step::KillIdle,
            3..=5 => {
                let (tool, params) = random_call(&mut rng);
                Step::KillDuring(tool, params)
            }
            6 => Step::Stall,
            _ => {
                let (tool, params) = random_call(&mut rng);
                Step::Call(tool, params)
            }
        })
        .collect()
}

fn session() -> SessionConfig {
    SessionConfig::new("faults")
        .capabilities(["scene.read", "scene.write", "transactions"])
        .time_per_tool_ms(DEADLINE.as_millis() as u64)
}

fn sigkill(pid: Option<u32>) {
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
}

/// Whether a live answer is a fault's (the call did not take effect), not the tool's.
fn fault_answer(envelope: &vibe_errors::Envelope) -> bool {
    match envelope {
        vibe_errors::Envelope::Err(error) => error.details.get("kernel").is_some(),
        vibe_errors::Envelope::Ok(_) => false,
    }
}

async fn fingerprint(t: &dyn Transport) -> String {
    let answer = t
        .call(Call::new("scene.snapshot", json!({}), DEADLINE))
        .await
        .unwrap();
    content_fingerprint(answer.result().expect("a snapshot"))
        .expect("a fingerprint")
        .to_owned()
}

async fn run_seed(python: &std::path::Path, seed: u64) -> BTreeMap<&'static str, u64> {
    let python = python.to_path_buf();
    let factory = kernel_factory(move || StdioOptions::bpy_python(&python));
    let registry = vibe_contract::default_registries().unwrap().tools;
    let live = SupervisedKernel::start(factory, registry).await.unwrap();
    live.configure(&session()).await.unwrap();
    let mock = MockTransport::new(MockBlender::new());
    mock.configure(&session()).await.unwrap();
    let mut counts = BTreeMap::new();
    for (i, step) in sequence(seed).into_iter().enumerate() {
        // The kill of a KillDuring step: awaited before the next step, so it lands during its
        // own call or right after it (a loaded machine may delay it), never in a later one.
        let mut kill = None;
        let (tool, params, short) = match step {
            Step::KillIdle => {
                sigkill(live.current().pid());
                *counts.entry("killed between calls").or_default() += 1;
                continue;
            }
            Step::Stall => {
                // A deadline no Blender call can meet: the call passes it (the kernel is killed
                // and the state before the call restored), or, rarely, answers just in time.
                let params = json!({"type": "MESH", "primitive": "uv_sphere", "name": "Late"});
                ("object.create", params, Some(Duration::from_millis(1)))
            }
            Step::KillDuring(tool, params) => {
                let pid = live.current().pid();
                kill = Some(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    sigkill(pid);
                }));
                *counts.entry("killed during a call").or_default() += 1;
                (tool, params, None)
            }
            Step::Call(tool, params) => (tool, params, None),
        };
        let deadline = short.unwrap_or(DEADLINE);
        let answer = live
            .call(Call::new(tool, params.clone(), deadline))
            .await
            .unwrap_or_else(|e| panic!("seed {seed} step {i} {tool}: transport error {e}"));
        if let Some(kill) = kill {
            kill.await.unwrap();
        }
        if fault_answer(&answer) {
            *counts
                .entry("answered as a fault (did not take effect)")
                .or_default() += 1;
            continue;
        }
        let want = mock
            .call(Call::new(tool, params.clone(), DEADLINE))
            .await
            .unwrap();
        assert_eq!(
            normalize(&answer),
            normalize(&want),
            "seed {seed} step {i}: {tool} {params} differs from MockBlender"
        );
        let outcome = if answer.is_ok() {
            "ok"
        } else {
            "refused alike"
        };
        *counts.entry(outcome).or_default() += 1;
    }
    assert_eq!(
        fingerprint(&live).await,
        fingerprint(&mock).await,
        "seed {seed}: the live scene differs from MockBlender's after {CALLS} steps"
    );
    *counts.entry("kernels replaced").or_default() += live.replacements();
    live.close().await.unwrap();
    counts
}

#[tokio::test]
#[ignore = "needs VIBE_LIVE"]
async fn live_random_calls_with_faults_end_where_the_mock_does() {
    live("bpy 5.0.1, 200 random calls with kills and deadlines");
    let python = required("VIBE_BPY_PYTHON");
    for seed in [7, 2026, 90210] {
        let counts = run_seed(&python, seed).await;
        println!("seed {seed}: {counts:?}");
        assert!(counts.get("ok").copied().unwrap_or(0) > 50, "{counts:?}");
        assert!(
            counts.get("kernels replaced").copied().unwrap_or(0) > 0,
            "{counts:?}"
        );
    }
}

/// A cancel of a call queued behind a render is answered by the kernel at once (the call never
/// starts), so the supervisor has no call to kill the kernel for: the render goes on and
/// finishes, and no kernel is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn live_a_cancel_of_a_call_queued_behind_a_render_spares_the_render() {
    live("a cancel of a queued call on a supervised bpy kernel");
    let python = required("VIBE_BPY_PYTHON");
    let factory = kernel_factory(move || StdioOptions::bpy_python(&python));
    let registry = vibe_contract::default_registries().unwrap().tools;
    let kernel = std::sync::Arc::new(SupervisedKernel::start(factory, registry).await.unwrap());
    let sandbox = tempfile::tempdir().unwrap();
    let session = SessionConfig::new("queued-cancel")
        .capabilities(["scene.read", "scene.write", "file.write", "render"])
        .sandbox(sandbox.path().canonicalize().unwrap().to_string_lossy())
        .time_per_tool_ms(DEADLINE.as_millis() as u64);
    assert!(kernel.configure(&session).await.unwrap().is_ok());

    let rendering = std::sync::Arc::clone(&kernel);
    let render = tokio::spawn(async move {
        let params = json!({"path": "queued.png", "width": 640, "height": 480, "samples": 64});
        rendering
            .call(Call::new("render.still", params, DEADLINE))
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let token = vibe_transport::CancellationToken::new();
    let read = Call::new("scene.telemetry", json!({}), DEADLINE).cancelled_by(token.clone());
    let started = std::time::Instant::now();
    let (read, ()) = tokio::join!(kernel.call(read), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        token.cancel();
    });
    let read = read.unwrap();
    let error = read
        .error()
        .expect("the queued read is answered as cancelled");
    assert_eq!(
        error.details["cancelled"],
        true,
        "{}",
        read.to_json_string()
    );
    assert_eq!(
        error.details["partial_effects"],
        "none: the call never started"
    );
    assert!(
        started.elapsed() < vibe_transport::CANCEL_GRACE,
        "answered after {:?}",
        started.elapsed()
    );
    let render = render.await.unwrap().unwrap();
    assert!(render.is_ok(), "{}", render.to_json_string());
    assert_eq!(kernel.replacements(), 0);
    kernel.close().await.unwrap();
}
