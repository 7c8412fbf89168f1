//! Shared set-up: a pipeline over MockBlender, with a transport that counts what reaches it
//! (one of the [`Hooked`] test transports).
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use vibe_contract::*;
use vibe_exec::{Pipeline, PipelineBuilder};
use vibe_transport::jail::Jail;
use vibe_transport::mock::{Object, ObjectData, ObjectType, Scene};
use vibe_transport::{
    Fault, FaultPlan, Hello, KernelFactory, MockBlender, MockTransport, StdioOptions,
    SupervisedKernel, Transport, kernel_factory,
};

#[path = "../../../vibe-audit/tests/support/mod.rs"]
mod audit;
mod hooked;
mod negotiated;
pub use audit::*;
pub use hooked::*;
pub use negotiated::*;

/// What [`Counting`] keeps: how many calls reached the kernel, and how they were sent: `[tool]`
/// for a call alone, `["batch:tool", ...]` for a batch.
#[derive(Default)]
pub struct Counts {
    pub calls: AtomicU64,
    pub sent: Mutex<Vec<Vec<String>>>,
}

/// Counts the calls that reach the kernel, and keeps how they were sent.
pub type Counting = Hooked<Counts>;

impl Counting {
    pub fn new(inner: MockTransport) -> Counting {
        Hooked::with_state(inner, Counts::default())
            .on_call(|t, call| {
                t.calls.fetch_add(1, Ordering::SeqCst);
                t.sent.lock().unwrap().push(vec![call.tool.clone()]);
                t.inner.call(call)
            })
            .on_batch(|t, calls| {
                Box::pin(async move {
                    let tools = calls.iter().map(|c| format!("batch:{}", c.tool)).collect();
                    t.sent.lock().unwrap().push(tools);
                    let mut answers = Vec::new();
                    for call in calls {
                        t.calls.fetch_add(1, Ordering::SeqCst);
                        answers.push(t.inner.call(call).await);
                    }
                    answers
                })
            })
    }
    pub fn count(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

impl<S> Hooked<S> {
    pub fn scene(&self) -> Scene {
        self.inner.mock().lock().unwrap().scene().clone()
    }
    pub fn mock(&self) -> Arc<Mutex<MockBlender>> {
        self.inner.mock()
    }
}

/// A person's rig in the scene, which the agent did not create.
pub fn with_armature(mut mock: MockBlender) -> MockBlender {
    let scene = mock.scene_mut();
    let uid = scene.next_uid;
    scene.next_uid += 1;
    scene.objects.insert(
        "Armature".into(),
        Object::new(
            uid,
            "Armature",
            ObjectType::Armature,
            ObjectData::Armature(24),
            "Collection",
        ),
    );
    mock
}

pub fn caps(list: &[&str]) -> std::collections::BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

pub fn agreement_for(
    hello: &Hello,
    session: &str,
    constraints: Option<Constraints>,
    extra_caps: &[&str],
) -> Agreement {
    let mut wanted = vec!["scene.read", "scene.write", "transactions"];
    wanted.extend_from_slice(extra_caps);
    let host = HostProfile {
        name: "test".into(),
        version: "1".into(),
        capabilities: caps(&wanted),
        ..HostProfile::default()
    };
    let mut proposal = HostProposal::new(session, host);
    proposal.constraints = constraints;
    let mut policy = BridgePolicy::default();
    policy
        .capabilities
        .extend(extra_caps.iter().map(|s| s.to_string()));
    let mut blender = hello.blender.clone();
    blender
        .features
        .extend(extra_caps.iter().map(|s| s.to_string()));
    negotiate(&proposal, &policy, &blender, &default_registries().unwrap()).unwrap()
}

pub struct Rig {
    pub transport: Arc<Counting>,
    pub pipeline: Pipeline,
}

pub fn builder(
    mock: MockBlender,
    constraints: Option<Constraints>,
    extra_caps: &[&str],
) -> (Arc<Counting>, PipelineBuilder) {
    let transport = Arc::new(Counting::new(MockTransport::new(mock)));
    let agreement = agreement_for(transport.hello(), "session-a", constraints, extra_caps);
    let dyn_transport: Arc<dyn Transport> = transport.clone();
    (transport, Pipeline::builder(agreement, dyn_transport))
}

/// A pipeline builder over any test transport, with the capabilities `builder` grants.
pub fn builder_over<T: Transport + 'static>(transport: Arc<T>) -> PipelineBuilder {
    let agreement = agreement_for(transport.hello(), "session-a", None, &[]);
    Pipeline::builder(agreement, transport)
}

pub async fn rig(mock: MockBlender) -> Rig {
    let (transport, builder) = builder(mock, None, &[]);
    Rig {
        transport,
        pipeline: builder.start().await.unwrap(),
    }
}

pub async fn rig_with(mock: MockBlender, faults: FaultPlan, time_per_tool_ms: u64) -> Rig {
    let constraints = Constraints {
        time_per_tool_ms,
        ..Constraints::default()
    };
    let (transport, builder) = builder(mock.with_faults(faults), Some(constraints), &[]);
    Rig {
        transport,
        pipeline: builder.start().await.unwrap(),
    }
}

/// A rig whose kernel hangs on the first call, with `time_per_tool_ms` per call.
pub async fn hung_rig(time_per_tool_ms: u64) -> Rig {
    rig_with(
        MockBlender::new(),
        FaultPlan::none().at(1, Fault::Hang),
        time_per_tool_ms,
    )
    .await
}

/// A pipeline over `transport` for session `session`, which asks for `file.write` under
/// `constraints`, with `sandbox` as its sandbox.
pub async fn file_pipeline(
    transport: Arc<dyn Transport>,
    session: &str,
    constraints: Constraints,
    sandbox: &std::path::Path,
) -> Pipeline {
    let agreement = agreement_for(
        transport.hello(),
        session,
        Some(constraints),
        &["file.write"],
    );
    Pipeline::builder(agreement, transport)
        .sandbox(vibe_exec::Sandbox::new(sandbox).unwrap())
        .start()
        .await
        .unwrap()
}

/// A MockBlender whose `python.exec` really runs the code, in the system's Python (without
/// bpy): real syntax and runtime errors, no Blender needed.
pub fn python_mock() -> MockBlender {
    MockBlender::new().with_code_handler(Box::new(|code, _scene| {
        let output = std::process::Command::new("python3")
            .arg("-c")
            .arg(code)
            .output()
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }))
}

/// The path in `var` for a live test, which runs only with `VIBE_LIVE=1`: a live test run
/// without it, or without a Blender, fails, it never passes quietly.
pub fn required(var: &str) -> PathBuf {
    assert!(
        std::env::var("VIBE_LIVE").is_ok_and(|v| v == "1"),
        "live test without VIBE_LIVE=1"
    );
    PathBuf::from(std::env::var_os(var).unwrap_or_else(|| {
        panic!("VIBE_LIVE=1 but {var} is not set: a missing Blender is a failure")
    }))
}

/// Jailed kernels in `jail`: bpy (`VIBE_BPY_PYTHON`) for the target `bpy`, Blender `-b`
/// (`VIBE_BLENDER`) for any other.
pub fn jailed_kernels(target: &str, jail: Jail) -> KernelFactory {
    if target == "bpy" {
        let python = required("VIBE_BPY_PYTHON");
        kernel_factory(move || StdioOptions::jailed_bpy_python(&python, &jail))
    } else {
        let blender = required("VIBE_BLENDER");
        kernel_factory(move || StdioOptions::jailed_blender(&blender, &jail))
    }
}

/// A pipeline over a jailed, supervised bpy kernel (`VIBE_BPY_PYTHON`) whose jail writes only
/// `sandbox`, asking for `capabilities` (code_exec is allowed by the bridge's policy) under
/// `constraints`; with `sandbox_guard`, the pipeline's sandbox is that folder too. A live test
/// run without `VIBE_LIVE=1` or a Blender fails, it never passes quietly.
pub async fn live_jailed_pipeline(
    what: &str,
    sandbox: &std::path::Path,
    capabilities: &[&str],
    constraints: Constraints,
    sandbox_guard: bool,
) -> (Pipeline, Arc<SupervisedKernel>) {
    assert!(
        std::env::var("VIBE_LIVE").is_ok_and(|v| v == "1"),
        "{what}: live test run without VIBE_LIVE=1"
    );
    let factory = jailed_kernels("bpy", Jail::new(sandbox));
    let transport = Arc::new(
        SupervisedKernel::start(factory, default_registries().unwrap().tools)
            .await
            .unwrap(),
    );
    let mut policy = BridgePolicy::default();
    policy.capabilities.insert(CAP_CODE_EXEC.into());
    let agreement = negotiated(
        "live",
        capabilities,
        Some(constraints),
        &policy,
        &transport.hello().blender,
    );
    let dyn_transport: Arc<dyn Transport> = transport.clone();
    let mut builder = Pipeline::builder(agreement, dyn_transport).code_gate();
    if sandbox_guard {
        builder = builder.sandbox(vibe_exec::Sandbox::new(sandbox).unwrap());
    }
    (builder.start().await.unwrap(), transport)
}

/// An audit writer over an in-memory sink, and the records it wrote so far (after a flush).
pub fn memory_audit() -> (
    Arc<vibe_audit::AuditWriter>,
    impl Fn() -> Vec<serde_json::Value>,
) {
    use vibe_audit::{MemorySink, Overflow};
    let sink = MemorySink::new();
    let writer = Arc::new(genesis_writer(sink.clone(), 256, Overflow::Backpressure));
    let records = move || {
        String::from_utf8(sink.bytes())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    (writer, records)
}
