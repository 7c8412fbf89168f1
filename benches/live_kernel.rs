//! Live bench (reported, not asserted): the live path against Blender itself, in one run on
//! bpy 5.0.1 (headless, stdio, unjailed kernels with the operator's opt-in to agent code), on scenes of 1,000, 2,000 and 4,000 objects
//! (the factory's 3 and empties).
//!
//! ```text
//! VIBE_BPY_PYTHON=/path/to/venv/bin/python cargo bench --bench live_kernel
//! ```
//!
//! Per scene size `N`, each tool is timed four ways (group `live/N`):
//!
//! * `in_process/<tool>` and `in_process_json/<tool>`: the baseline, inside criterion: the
//!   kernel's own handler called in a loop in a Blender of its own with the same scene
//!   (`vibe-transport/kernel/tests/bench_in_process.py`, timed there and reported through
//!   `iter_custom`), without and with the kernel's JSON work per call: decoding the call
//!   frame's line and encoding the answer as the wire's result frame;
//! * `transport/<tool>`: one round trip through [`StdioTransport`];
//! * `pipeline/<tool>`: through a [`Pipeline`] with an [`AuditWriter`] on a file (every stage,
//!   the audit records), and `pipeline_no_audit/object.info` without the writer;
//! * `.../object.info_batched`: 100 `object.info` calls as one batch
//!   ([`Transport::call_batch`], [`Pipeline::call_batch`]), per call (throughput 100);
//!   `transport/object.info_concurrent`: the same 100 calls made at once, each on its own
//!   (pipelined frames, as an MCP host's concurrent requests arrive), per call.
//!
//! `live/raw_pipe/round_trip` is the floor of any round trip on the machine: the same Python
//! without Blender answering a request line with a ready answer line over pipes.
//! `live/raw_pipe/bridge` is the same answer through the whole [`StdioTransport`] (a kernel
//! that says hello and answers each call at once): the bridge's own share of a call.
//!
//! The tools: `object.info` (of `E0500`), `object.move` (of the Cube), `scene.snapshot`, and
//! `python.exec` outside a transaction, in a kernel where code that writes ran (it filled the
//! scene): of `print(1)` (proven read-only and reaching nothing earlier code could leave
//! behind: no rollback point), of a read of `bpy.data` (`python.exec_read`: read-only, but
//! Blender's data leads to what earlier code could leave, so it takes the rollback point), and of
//! code that may write (`python.exec_write`: the rollback point, the actuator lock's inventories
//! and the kernel state check). After the criterion runs, a summary prints
//! each ratio the speed targets name, from the medians of this run. Without `VIBE_BPY_PYTHON`
//! it prints SKIPPED and measures nothing.

#[path = "support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use support::{Figures, bpy_python, runtime};
use vibe::audit::{AuditLog, AuditWriter, FileOptions, FileSink, Overflow, Redactor};
use vibe::contract::{
    BridgePolicy, CAP_CODE_EXEC, HostProfile, HostProposal, default_registries, negotiate,
};
use vibe::exec::Pipeline;
use vibe::transport::{BUSY_POLL, Call, SessionConfig, StdioOptions, StdioTransport, Transport};

const SIZES: [usize; 3] = [1000, 2000, 4000];
const BATCH: usize = 100;
const CAPABILITIES: [&str; 4] = ["scene.read", "scene.write", "transactions", "code_exec"];
const DEADLINE: Duration = Duration::from_secs(120);

/// The tools timed, as (label, tool, params).
fn tools() -> [(&'static str, &'static str, Value); 6] {
    [
        ("object.info", "object.info", json!({"name": "E0500"})),
        (
            "object.move",
            "object.move",
            json!({"name": "Cube", "delta": [1e-4, 0, 0]}),
        ),
        ("scene.snapshot", "scene.snapshot", json!({})),
        ("python.exec", "python.exec", json!({"code": "print(1)"})),
        (
            "python.exec_read",
            "python.exec",
            json!({"code": "import bpy\nprint(len(bpy.data.objects))"}),
        ),
        (
            "python.exec_write",
            "python.exec",
            json!({"code": "x = []\nx.append(1)"}),
        ),
    ]
}

/// Starts `command` (`what`) with its stdin and stdout piped: the child, its input, its output.
fn piped(command: &mut Command, what: &str) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect(what);
    let input = child.stdin.take().unwrap();
    let output = BufReader::new(child.stdout.take().unwrap());
    (child, input, output)
}

/// The in-process baseline: a Blender of its own running the kernel's handlers in a loop.
struct InProcess {
    _child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl InProcess {
    fn start(python: &Path) -> InProcess {
        let (_child, input, output) = piped(
            Command::new(python)
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/vibe-transport/kernel/tests/bench_in_process.py"
                ))
                .stderr(Stdio::null()),
            "the in-process baseline starts",
        );
        InProcess {
            _child,
            input,
            output,
        }
    }

    fn ask(&mut self, request: Value) -> Value {
        writeln!(self.input, "{request}").unwrap();
        self.input.flush().unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.output.read_line(&mut line).unwrap() > 0,
                "baseline ended"
            );
            if let Some(answer) = line.strip_prefix("@@") {
                return serde_json::from_str(answer).unwrap();
            }
        }
    }

    fn time(&mut self, tool: &str, params: &Value, iters: u64, with_json: bool) -> Duration {
        let answer = self.ask(json!({"op": "time", "tool": tool, "params": params,
                                     "iters": iters, "json": with_json}));
        Duration::from_nanos(answer["ns"].as_u64().unwrap())
    }
}

/// The floor of a round trip on this machine: the same interpreter without Blender, answering
/// each request line (parsed as JSON, as the kernel does) with a ready answer line of the size
/// of `object.info`'s, over the same kind of pipes, waiting as the bridge and the kernel do:
/// each side polls for its input (the kernel's idle spin, the bridge's [`BUSY_POLL`]) before it
/// sleeps. No tool runs: the in-process figures are the work a call adds on top.
struct RawPipe {
    _child: Child,
    input: ChildStdin,
    output: ChildStdout,
    buffer: Vec<u8>,
}

/// A Python line server without Blender that waits for input as the kernel does (it polls for
/// 1 ms before it sleeps): `prelude` runs first, then `answer` for each request line, parsed as
/// JSON into `frame`.
fn echo_script(prelude: &str, answer: &str) -> String {
    format!(
        "import json, os, select, sys, time\n{prelude}\npoller = select.poll()\npoller.register(0, select.POLLIN)\nbuffer = b''\nwhile True:\n    until = time.monotonic() + 0.001\n    while not poller.poll(0) and time.monotonic() < until:\n        pass\n    data = os.read(0, 65536)\n    if not data:\n        break\n    buffer += data\n    while b'\\n' in buffer:\n        line, _, buffer = buffer.partition(b'\\n')\n        frame = json.loads(line)\n        {answer}\n"
    )
}

impl RawPipe {
    fn start(python: &Path, answer: &str) -> RawPipe {
        let mut child = Command::new(python)
            .arg("-c")
            .arg(echo_script(
                "answer = sys.argv[1].encode() + b'\\n'",
                "os.write(1, answer)",
            ))
            .arg(answer)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the raw pipe baseline starts");
        let input = child.stdin.take().unwrap();
        let output = child.stdout.take().unwrap();
        let flags = rustix::fs::fcntl_getfl(&output).unwrap();
        rustix::fs::fcntl_setfl(&output, flags | rustix::fs::OFlags::NONBLOCK).unwrap();
        RawPipe {
            _child: child,
            input,
            output,
            buffer: Vec::new(),
        }
    }

    fn round_trip(&mut self, request: &[u8]) {
        self.input.write_all(request).unwrap();
        self.input.flush().unwrap();
        let until = Instant::now() + BUSY_POLL;
        let mut chunk = [0u8; 65536];
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                self.buffer.drain(..=end);
                return;
            }
            match rustix::io::read(&self.output, &mut chunk) {
                Ok(0) => panic!("raw pipe ended"),
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(rustix::io::Errno::AGAIN) if Instant::now() < until => {}
                Err(rustix::io::Errno::AGAIN) => {
                    let mut fds = [rustix::event::PollFd::new(
                        &self.output,
                        rustix::event::PollFlags::IN,
                    )];
                    rustix::event::poll(&mut fds, None).unwrap();
                }
                Err(e) => panic!("raw pipe: {e}"),
            }
        }
    }
}

/// A kernel that answers at once: the same interpreter without Blender, saying `hello` (argv 1)
/// and answering each call with a ready envelope (argv 2) under the call's id, waiting for input
/// as the real kernel does. Driven by the real [`StdioTransport`], it gives the bridge's own
/// cost over the raw pipe: framing, ids, dispatch and the runtime.
fn echo_kernel() -> String {
    echo_script(
        "os.write(1, sys.argv[1].encode() + b'\\n')\nenvelope = sys.argv[2].encode()",
        "if frame.get('type') == 'call': os.write(1, b'{\"type\":\"result\",\"id\":%d,\"envelope\":%s}\\n' % (frame['id'], envelope))",
    )
}

/// Criterion figure `name` in `group`, on the scene of `size` objects: each iteration runs
/// `once` (`calls` calls), and the time per call goes to `figures` as `size/name`.
fn bench_calls(
    group: &mut BenchmarkGroup<'_, WallTime>,
    figures: &Figures,
    size: usize,
    name: &str,
    calls: u64,
    mut once: impl FnMut(),
) {
    let key = format!("{size}/{name}");
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                once();
            }
            let took = start.elapsed();
            figures.record(&key, took, iters * calls);
            took
        })
    });
}

/// Grows a kernel's scene to `to` objects (the factory's 3 plus empties `E0000`...).
async fn populate(call: impl AsyncFn(&str, Value) -> Result<(), String>, from: usize, to: usize) {
    let code = format!(
        "import bpy\ncoll = bpy.data.collections['Collection']\nfor i in range({}, {}):\n    coll.objects.link(bpy.data.objects.new('E%04d' % i, None))\n",
        from.saturating_sub(3),
        to - 3
    );
    if let Err(answer) = call("python.exec", json!({"code": code})).await {
        panic!("populating the scene failed: {answer}");
    }
}

async fn kernel(python: &Path) -> Arc<StdioTransport> {
    Arc::new(
        // Unjailed, so that every figure is Blender and the bridge, not the jail; agent code in
        // an unjailed kernel needs the operator's opt-in.
        StdioTransport::spawn(
            StdioOptions::bpy_python(python)
                .unwrap()
                .env("VIBE_ALLOW_UNCONFINED_CODE", "1"),
        )
        .await
        .unwrap(),
    )
}

async fn pipeline(python: &Path, audit: Option<Arc<AuditWriter>>) -> Pipeline {
    let transport: Arc<dyn Transport> = kernel(python).await;
    let host = HostProfile {
        name: "bench".into(),
        version: "1".into(),
        capabilities: CAPABILITIES.map(String::from).into(),
        ..HostProfile::default()
    };
    let mut policy = BridgePolicy::default();
    policy.capabilities.insert(CAP_CODE_EXEC.into());
    let agreement = negotiate(
        &HostProposal::new("bench", host),
        &policy,
        &transport.hello().blender,
        &default_registries().unwrap(),
    )
    .unwrap();
    let mut builder = Pipeline::builder(agreement, transport).code_gate();
    if let Some(audit) = audit {
        builder = builder.audit(audit);
    }
    builder.start().await.unwrap()
}

fn live(c: &mut Criterion) {
    let Some(python) = bpy_python("live_kernel") else {
        return;
    };
    let rt = runtime();
    let mut baseline = InProcess::start(&python);
    let transport = rt.block_on(kernel(&python));
    let session = SessionConfig::new("bench")
        .capabilities(CAPABILITIES)
        .time_per_tool_ms(120_000);
    rt.block_on(transport.configure(&session)).unwrap();
    let audit_dir = tempfile::tempdir().unwrap();
    let (sink, head, _) =
        FileSink::open(audit_dir.path().join("audit.jsonl"), FileOptions::default()).unwrap();
    let audit = Arc::new(AuditWriter::spawn(
        AuditLog::new(Box::new(sink), head, Redactor::default()),
        4096,
        Overflow::Backpressure,
    ));
    let audited = rt.block_on(pipeline(&python, Some(Arc::clone(&audit))));
    let unaudited = rt.block_on(pipeline(&python, None));
    let figures = Figures::default();
    let info_answer = rt
        .block_on(transport.call(Call::new("object.info", json!({"name": "Cube"}), DEADLINE)))
        .unwrap();
    let answer_line = json!({"type": "result", "id": 1, "envelope": info_answer}).to_string();
    let mut raw = RawPipe::start(&python, &answer_line);
    let request = format!(
        "{}\n",
        json!({"type": "call", "id": 1, "tool": "object.info", "params": {"name": "E0500"}, "deadline_ms": 120000})
    );
    c.bench_function("live/raw_pipe/round_trip", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                raw.round_trip(request.as_bytes());
            }
            let took = start.elapsed();
            figures.record("raw_pipe", took, iters);
            took
        })
    });
    let mut hello = serde_json::to_value(transport.hello()).unwrap();
    hello["type"] = json!("hello");
    let echo = rt
        .block_on(StdioTransport::spawn(
            StdioOptions::new(&python)
                .arg("-c")
                .arg(echo_kernel())
                .arg(hello.to_string())
                .arg(serde_json::to_string(&info_answer).unwrap()),
        ))
        .expect("the echo kernel starts");
    let info = json!({"name": "E0500"});
    c.bench_function("live/raw_pipe/bridge", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let call = Call::new("object.info", info.clone(), DEADLINE);
                assert!(rt.block_on(echo.call(call)).is_ok_and(|a| a.is_ok()));
            }
            let took = start.elapsed();
            figures.record("bridge", took, iters);
            took
        })
    });
    let transport_call = |tool: &str, params: Value| {
        let t = Arc::clone(&transport);
        let tool = tool.to_owned();
        async move {
            t.call(Call::new(tool, params, DEADLINE))
                .await
                .is_ok_and(|answer| answer.is_ok())
        }
    };
    let mut size = 3;
    for target in SIZES {
        baseline.ask(json!({"op": "populate", "to": target}));
        rt.block_on(async {
            populate(
                async |tool, params| {
                    let answer = transport
                        .call(Call::new(tool, params, DEADLINE))
                        .await
                        .map_err(|e| e.to_string())?;
                    answer.is_ok().then_some(()).ok_or(format!("{answer:?}"))
                },
                size,
                target,
            )
            .await;
            for p in [&audited, &unaudited] {
                populate(
                    async |tool, params| {
                        let answer = p.call(tool, params).await;
                        answer.is_ok().then_some(()).ok_or(format!("{answer:?}"))
                    },
                    size,
                    target,
                )
                .await;
            }
        });
        size = target;
        let mut group = c.benchmark_group(format!("live/{target}"));
        group
            .sample_size(20)
            .measurement_time(Duration::from_secs(2))
            .warm_up_time(Duration::from_millis(300));
        for (label, tool, params) in tools() {
            if tool == "scene.snapshot" {
                group.sample_size(10);
            }
            for with_json in [false, true] {
                let name = format!(
                    "{}/{label}",
                    if with_json {
                        "in_process_json"
                    } else {
                        "in_process"
                    }
                );
                group.bench_function(&name, |b| {
                    b.iter_custom(|iters| {
                        let took = baseline.time(tool, &params, iters, with_json);
                        figures.record(&format!("{target}/{name}"), took, iters);
                        took
                    })
                });
            }
            let name = format!("transport/{label}");
            bench_calls(&mut group, &figures, target, &name, 1, || {
                assert!(rt.block_on(transport_call(tool, params.clone())));
            });
            let name = format!("pipeline/{label}");
            bench_calls(&mut group, &figures, target, &name, 1, || {
                assert!(rt.block_on(audited.call(tool, params.clone())).is_ok());
            });
            group.sample_size(20);
        }
        let info = json!({"name": "E0500"});
        let name = "pipeline_no_audit/object.info";
        bench_calls(&mut group, &figures, target, name, 1, || {
            assert!(
                rt.block_on(unaudited.call("object.info", info.clone()))
                    .is_ok()
            );
        });
        group.throughput(Throughput::Elements(BATCH as u64));
        let name = "transport/object.info_batched";
        bench_calls(&mut group, &figures, target, name, BATCH as u64, || {
            let calls = (0..BATCH)
                .map(|_| Call::new("object.info", info.clone(), DEADLINE))
                .collect();
            let answers = rt.block_on(transport.call_batch(calls));
            assert!(answers.iter().all(|a| a.as_ref().is_ok_and(|e| e.is_ok())));
        });
        // The same 100 calls made at once, each on its own (as an MCP host's concurrent
        // requests reach the pipeline): pipelined frames, no batch.
        let name = "transport/object.info_concurrent";
        bench_calls(&mut group, &figures, target, name, BATCH as u64, || {
            let calls = (0..BATCH).map(|_| transport_call("object.info", info.clone()));
            let answers = rt.block_on(futures::future::join_all(calls));
            assert!(answers.into_iter().all(|ok| ok));
        });
        let name = "pipeline/object.info_batched";
        bench_calls(&mut group, &figures, target, name, BATCH as u64, || {
            let calls = (0..BATCH)
                .map(|_| ("object.info".to_owned(), info.clone()))
                .collect();
            let answers = rt.block_on(audited.call_batch(calls));
            assert!(answers.iter().all(|a| a.is_ok()));
        });
        group.finish();
    }
    summary(&figures);
    rt.block_on(async {
        let _ = audited.close().await;
        let _ = unaudited.close().await;
        let _ = transport.close().await;
    });
}

/// The ratios the speed targets name, from this run's medians.
fn summary(figures: &Figures) {
    let us = |name: &str| figures.median(name).map(|d| d.as_secs_f64() * 1e6);
    let ratio = |what: &str, a: &str, b: &str, target: &str| match (us(a), us(b)) {
        (Some(a_us), Some(b_us)) => eprintln!(
            "{what}: {:.2}x ({a} {a_us:.1} us / {b} {b_us:.1} us; target {target})",
            a_us / b_us
        ),
        _ => eprintln!("{what}: not measured"),
    };
    eprintln!("\n== live_kernel summary (medians of this run)");
    for size in SIZES {
        for (label, _, _) in tools() {
            let cells: Vec<String> = ["in_process", "in_process_json", "transport", "pipeline"]
                .iter()
                .map(|way| match us(&format!("{size}/{way}/{label}")) {
                    Some(v) => format!("{way} {v:.1} us"),
                    None => format!("{way} -"),
                })
                .collect();
            eprintln!("{size} {label}: {}", cells.join(", "));
        }
    }
    ratio(
        "object.info, 4k vs 1k objects (transport)",
        "4000/transport/object.info",
        "1000/transport/object.info",
        "<= 1.2x",
    );
    ratio(
        "scene.snapshot, 4k vs 2k objects (transport)",
        "4000/transport/scene.snapshot",
        "2000/transport/scene.snapshot",
        "<= 2.3x",
    );
    if let Some(raw) = us("raw_pipe") {
        eprintln!("raw pipe round trip (no Blender, no tool): {raw:.1} us");
        if let Some(bridge) = us("bridge") {
            eprintln!(
                "the bridge against a kernel that answers at once: {bridge:.1} us ({:.1} us over the raw pipe)",
                bridge - raw
            );
        }
        for size in SIZES {
            if let (Some(t), Some(h)) = (
                us(&format!("{size}/transport/object.info")),
                us(&format!("{size}/in_process_json/object.info")),
            ) {
                eprintln!(
                    "{size}: object.info, transport vs raw pipe + in-process with JSON: {:.2}x ({t:.1} us / {:.1} us)",
                    t / (raw + h),
                    raw + h
                );
            }
        }
    }
    for size in SIZES {
        ratio(
            &format!("{size}: object.info, transport vs in-process with JSON"),
            &format!("{size}/transport/object.info"),
            &format!("{size}/in_process_json/object.info"),
            "<= 1.6x",
        );
        ratio(
            &format!("{size}: object.info batched per call, transport vs in-process with JSON"),
            &format!("{size}/transport/object.info_batched"),
            &format!("{size}/in_process_json/object.info"),
            "<= 1.15x",
        );
        ratio(
            &format!(
                "{size}: object.info, 100 at once, per call, transport vs in-process with JSON"
            ),
            &format!("{size}/transport/object.info_concurrent"),
            &format!("{size}/in_process_json/object.info"),
            "no target: concurrent requests, unbatched",
        );
        ratio(
            &format!("{size}: object.info, pipeline with audit vs transport"),
            &format!("{size}/pipeline/object.info"),
            &format!("{size}/transport/object.info"),
            "<= 1.3x",
        );
        ratio(
            &format!("{size}: object.info, pipeline with audit vs without"),
            &format!("{size}/pipeline/object.info"),
            &format!("{size}/pipeline_no_audit/object.info"),
            "audit < 10% of the call: <= 1.10x",
        );
    }
    for (label, what) in [
        ("python.exec", "print(1)"),
        (
            "python.exec_read",
            "a read of bpy.data (rollback point, lock, state check)",
        ),
        (
            "python.exec_write",
            "code that may write (rollback point, lock, state check)",
        ),
    ] {
        if let Some(exec) = us(&format!("1000/transport/{label}")) {
            eprintln!(
                "1000: python.exec {what} outside a transaction, after code that writes, transport: {:.2} ms \
                 (target < 3 ms for trivial code)",
                exec / 1000.0
            );
        }
    }
}

criterion_group!(benches, live);
criterion_main!(benches);
