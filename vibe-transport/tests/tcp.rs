//! The TCP backend against the in-process Rust fake kernel over loopback.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use vibe_errors::{ErrorCode, Reason};
use vibe_transport::serve::{ServeOptions, serve_mock};
use vibe_transport::{
    Call, Fault, FaultPlan, Frame, MockBlender, TcpOptions, TcpTransport, Transport, TransportError,
};

#[path = "support/calls.rs"]
mod calls;
use calls::call;

/// Slack allowed past a deadline for scheduling on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1_200);

async fn spawn_kernel(mock: MockBlender, options: ServeOptions) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mock = Arc::new(Mutex::new(mock));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (r, w) = stream.into_split();
            let _ = serve_mock(r, w, Arc::clone(&mock), options.clone()).await;
        }
    });
    addr
}

/// A transport connected to a fake kernel over `mock`.
async fn connected(mock: MockBlender) -> TcpTransport {
    let addr = spawn_kernel(mock, ServeOptions::default()).await;
    TcpTransport::connect(options(addr)).await.unwrap()
}

fn options(addr: std::net::SocketAddr) -> TcpOptions {
    let mut options = TcpOptions::new(addr);
    options.handshake.deadline = Duration::from_millis(800);
    options.backoff_base = Duration::from_millis(10);
    options
}

#[tokio::test]
async fn handshake_calls_and_sealed_snapshots() {
    let t = connected(MockBlender::new()).await;
    assert_eq!(t.hello().blender.version.to_string(), "5.0.1");
    let info = call(&t, "object.info", json!({"name": "Cube"}), 2000)
        .await
        .unwrap();
    assert_eq!(info.result().unwrap()["type"], "MESH");
    let snap = call(&t, "scene.snapshot", json!({}), 2000).await.unwrap();
    assert!(
        vibe_transport::snapshot::content_fingerprint(snap.result().unwrap())
            .unwrap()
            .starts_with("blake3:")
    );
    let missing = call(&t, "object.info", json!({"name": "Nope"}), 2000)
        .await
        .unwrap();
    assert_eq!(missing.error().unwrap().code, ErrorCode::NotFound);
    t.close().await.unwrap();
    assert!(matches!(
        call(&t, "kernel.status", json!({}), 500).await,
        Err(TransportError::Closed(_))
    ));
}

#[tokio::test]
async fn the_token_is_required_and_checked() {
    let mut serve = ServeOptions::default();
    serve.token = Some("s3cret".into());
    let addr = spawn_kernel(MockBlender::new(), serve).await;
    let ok = TcpTransport::connect(options(addr).with_token("s3cret"))
        .await
        .unwrap();
    assert!(
        call(&ok, "kernel.status", json!({}), 1000)
            .await
            .unwrap()
            .is_ok()
    );
    ok.close().await.unwrap();
    match TcpTransport::connect(options(addr).with_token("guess")).await {
        Err(TransportError::Auth(m)) => assert!(m.contains("authentication failed"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        TcpTransport::connect(options(addr)).await,
        Err(TransportError::Auth(_))
    ));
}

#[tokio::test]
async fn a_silent_listener_is_not_a_vibe_kernel_within_the_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Like the blender-mcp add-on on 9876: accepts, then waits for a command without a word.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let started = Instant::now();
    match TcpTransport::connect(options(addr)).await {
        Err(TransportError::NotAVibeKernel(m)) => assert!(m.contains("no hello"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_millis(800) + SLACK);
}

#[tokio::test]
async fn another_protocol_is_recognised_from_its_first_line() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream
                .write_all(b"{\"status\": \"success\", \"result\": {}}\n")
                .await;
        }
    });
    match TcpTransport::connect(options(addr)).await {
        Err(TransportError::NotAVibeKernel(m)) => assert!(m.contains("not a vibe hello"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn pipelined_answers_are_matched_by_id() {
    let mut mock = MockBlender::new();
    for i in 0..40 {
        mock.execute(
            "object.create",
            &json!({"name": format!("E{i}"), "type": "EMPTY"}),
        );
    }
    let addr = spawn_kernel(mock, ServeOptions::default()).await;
    let mut o = options(addr);
    o.handshake.max_concurrent_calls = 16;
    let t = TcpTransport::connect(o).await.unwrap();
    let calls = (0..40).map(|i| {
        let t = &t;
        async move {
            (
                i,
                call(t, "object.info", json!({"name": format!("E{i}")}), 5000)
                    .await
                    .unwrap(),
            )
        }
    });
    for (i, answer) in futures::future::join_all(calls).await {
        assert_eq!(answer.result().unwrap()["name"], format!("E{i}"));
    }
}

#[tokio::test]
async fn the_concurrency_bound_queue_counts_against_the_deadline() {
    let addr = spawn_kernel(
        MockBlender::new().with_faults(FaultPlan::none().at(1, Fault::Hang)),
        ServeOptions::default(),
    )
    .await;
    let mut o = options(addr);
    o.handshake.max_concurrent_calls = 1;
    let t = TcpTransport::connect(o).await.unwrap();
    let started = Instant::now();
    let (hung, queued) = tokio::join!(call(&t, "kernel.status", json!({}), 600), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        call(&t, "kernel.status", json!({}), 200).await
    });
    assert!(matches!(hung, Err(TransportError::Deadline(_))));
    // It never got a slot, so it was never sent: not a deadlock of Blender's.
    let queued = queued.unwrap_err();
    assert!(
        matches!(queued, TransportError::QueueTimeout(_)),
        "{queued:?}"
    );
    assert!(!queued.may_have_run());
    assert!(started.elapsed() < Duration::from_millis(600) + SLACK);
    // The permit is free again once the hung call gave up.
    assert!(
        call(&t, "kernel.status", json!({}), 1000)
            .await
            .unwrap()
            .is_ok()
    );
}

#[tokio::test]
async fn fault_raise_is_an_execution_failure_with_rollback() {
    let t = connected(MockBlender::new().with_faults(FaultPlan::none().at(1, Fault::Raise))).await;
    let answer = call(&t, "mesh.create_cube", json!({"name": "Box"}), 1000)
        .await
        .unwrap();
    let error = answer.error().unwrap();
    assert_eq!(error.reason(), Some(Reason::MutationFailed));
    assert_eq!(error.details["rolled_back"], true);
    let missing = call(&t, "object.info", json!({"name": "Box"}), 1000)
        .await
        .unwrap();
    assert_eq!(missing.error().unwrap().code, ErrorCode::NotFound);
}

#[tokio::test]
async fn fault_hang_times_out_at_the_deadline_and_the_session_goes_on() {
    let t = connected(MockBlender::new().with_faults(FaultPlan::none().at(1, Fault::Hang))).await;
    let started = Instant::now();
    let error = call(&t, "kernel.status", json!({}), 300).await.unwrap_err();
    assert!(matches!(error, TransportError::Deadline(_)));
    assert!(started.elapsed() < Duration::from_millis(300) + SLACK);
    assert_eq!(error.to_error_body().reason(), Some(Reason::Deadlock));
    assert!(
        call(&t, "kernel.status", json!({}), 1000)
            .await
            .unwrap()
            .is_ok()
    );
}

#[tokio::test]
async fn fault_drop_fails_the_call_in_flight_and_new_calls_reconnect() {
    let t = connected(MockBlender::new().with_faults(FaultPlan::none().at(1, Fault::Drop))).await;
    let started = Instant::now();
    let error = call(&t, "mesh.create_cube", json!({"name": "Box"}), 1000)
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::ConnectionLost(_)),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(1000) + SLACK);
    assert_eq!(error.to_error_body().details["may_have_run"], true);
    // It did run: the answer was lost, not the work. It is not resent.
    let info = call(&t, "object.info", json!({"name": "Box"}), 2000)
        .await
        .unwrap();
    assert!(info.is_ok());
}

#[tokio::test]
async fn fault_malformed_frame_halts_the_session() {
    let t =
        connected(MockBlender::new().with_faults(FaultPlan::none().at(1, Fault::Malformed))).await;
    let error = call(&t, "kernel.status", json!({}), 1000)
        .await
        .unwrap_err();
    assert!(matches!(error, TransportError::Protocol(_)), "{error:?}");
    assert!(error.halts_session());
    assert_eq!(error.to_error_body().code, ErrorCode::ContractViolation);
    assert!(matches!(
        call(&t, "kernel.status", json!({}), 500).await,
        Err(TransportError::Protocol(_))
    ));
}

#[tokio::test]
async fn fault_slow_drip_is_cut_at_the_deadline() {
    let plan = FaultPlan::none()
        .at(
            1,
            Fault::SlowDrip {
                bytes: 4,
                every_ms: 20,
            },
        )
        .at(
            2,
            Fault::SlowDrip {
                bytes: 4096,
                every_ms: 5,
            },
        );
    let t = connected(MockBlender::new().with_faults(plan)).await;
    let started = Instant::now();
    assert!(matches!(
        call(&t, "object.info", json!({"name": "Cube"}), 300).await,
        Err(TransportError::Deadline(_))
    ));
    assert!(started.elapsed() < Duration::from_millis(300) + SLACK);
    // The next call's answer queues behind the rest of the dripping one; give it the time.
    let answer = call(&t, "object.info", json!({"name": "Cube"}), 10_000)
        .await
        .unwrap();
    assert_eq!(answer.result().unwrap()["name"], "Cube");
}

#[tokio::test]
async fn fault_outside_rename_is_identity_drift() {
    let plan = FaultPlan::none().at(
        2,
        Fault::Rename {
            from: "Cube".into(),
            to: "Hero".into(),
        },
    );
    let t = connected(MockBlender::new().with_faults(plan)).await;
    assert!(
        call(&t, "object.info", json!({"name": "Cube"}), 1000)
            .await
            .unwrap()
            .is_ok()
    );
    let drift = call(&t, "object.info", json!({"name": "Cube"}), 1000)
        .await
        .unwrap();
    assert_eq!(drift.error().unwrap().details["current_name"], "Hero");
}

async fn rogue_kernel(after_hello: Vec<u8>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let hello = Frame::Hello(Box::new(MockBlender::new().hello()));
        stream.write_all(&hello.to_line()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        stream.write_all(&after_hello).await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    });
    addr
}

#[tokio::test]
async fn an_answer_for_an_unknown_id_halts_the_session() {
    let line = Frame::Result {
        id: 999,
        envelope: vibe_errors::Envelope::ok(json!({})),
    }
    .to_line();
    let t = TcpTransport::connect(options(rogue_kernel(line).await))
        .await
        .unwrap();
    let error = call(&t, "kernel.status", json!({}), 1000)
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::Protocol(ref m) if m.contains("never sent")),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_oversized_frame_halts_the_session() {
    let t = {
        let mut o = options(rogue_kernel(vec![b'x'; 4096]).await);
        o.handshake.max_frame_bytes = 1024;
        TcpTransport::connect(o).await.unwrap()
    };
    let error = call(&t, "kernel.status", json!({}), 1000)
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::Protocol(ref m) if m.contains("1024")),
        "{error:?}"
    );
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let started = Instant::now();
    assert!(matches!(
        TcpTransport::connect(options(addr)).await,
        Err(TransportError::Connect(_))
    ));
    assert!(started.elapsed() < Duration::from_secs(2) + SLACK);
}

/// A kernel task that can be stopped, as a Blender that quits.
async fn stoppable_kernel(listener: TcpListener, mock: MockBlender) -> tokio::task::JoinHandle<()> {
    let mock = Arc::new(Mutex::new(mock));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (r, w) = stream.into_split();
            let _ = serve_mock(r, w, Arc::clone(&mock), ServeOptions::default()).await;
        }
    })
}

/// Connects with `options` to a kernel that then quits, makes a `Box`, and is replaced by a
/// new instance of the same Blender on the same port; returns the transport, the new kernel
/// and the error of the first call that meets the new instance.
async fn restart_behind(
    options: impl Fn(std::net::SocketAddr) -> TcpOptions,
) -> (TcpTransport, tokio::task::JoinHandle<()>, TransportError) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let first = stoppable_kernel(listener, MockBlender::new()).await;
    let t = TcpTransport::connect(options(addr)).await.unwrap();
    let made = call(&t, "mesh.create_cube", json!({"name": "Box"}), 1000)
        .await
        .unwrap();
    assert!(made.is_ok());
    // Blender quits and a new one (the same version, a new instance) listens on the port.
    first.abort();
    let _ = first.await;
    let listener = TcpListener::bind(addr).await.unwrap();
    let second = stoppable_kernel(listener, MockBlender::new()).await;
    // A call raced with the old connection's end may still find it open (ConnectionLost);
    // the first one that reconnects meets the new instance.
    let mut error = call(&t, "object.info", json!({"name": "Box"}), 2000)
        .await
        .unwrap_err();
    if matches!(error, TransportError::ConnectionLost(_)) {
        error = call(&t, "object.info", json!({"name": "Box"}), 2000)
            .await
            .unwrap_err();
    }
    (t, second, error)
}

#[tokio::test]
async fn a_restarted_blender_on_the_same_port_is_a_lost_session_not_the_old_one() {
    let (t, _second, error) = restart_behind(options).await;
    assert!(
        matches!(error, TransportError::KernelRestarted { .. }),
        "{error:?}"
    );
    let body = error.to_error_body();
    assert_eq!(body.code, ErrorCode::InternalError);
    assert_eq!(body.details["transport"], "kernel_restarted");
    assert!(body.message.contains("restarted"), "{}", body.message);
    // It stays lost: the session does not quietly continue on the new scene.
    let again = call(&t, "object.list", json!({}), 2000).await.unwrap_err();
    assert!(
        matches!(again, TransportError::KernelRestarted { .. }),
        "{again:?}"
    );
}

#[tokio::test]
async fn an_embedder_may_adopt_a_restarted_blender_as_a_fresh_session() {
    let (t, _second, error) = restart_behind(|addr| options(addr).adopting_restarts()).await;
    // The call that finds the restart still says so: the old scene is gone.
    assert!(
        matches!(error, TransportError::KernelRestarted { .. }),
        "{error:?}"
    );
    // Then the session goes on, fresh, on the new Blender: its factory scene, no Box.
    let gone = call(&t, "object.info", json!({"name": "Box"}), 2000)
        .await
        .unwrap();
    assert_eq!(gone.error().unwrap().code, ErrorCode::NotFound);
    let cube = call(&t, "object.info", json!({"name": "Cube"}), 2000)
        .await
        .unwrap();
    assert!(cube.is_ok());
}

#[tokio::test]
async fn a_batch_runs_in_order_and_each_call_is_answered() {
    let t = connected(MockBlender::new()).await;
    // More calls than one frame carries (two frames), moves and reads interleaved: each read
    // sees every move before it and none after.
    let count = vibe_transport::MAX_BATCH_CALLS + 44;
    let mut calls: Vec<Call> = (0..count)
        .map(|i| {
            let (tool, params) = if i % 3 == 0 {
                ("object.move", json!({"name": "Cube", "delta": [1, 0, 0]}))
            } else {
                ("object.info", json!({"name": "Cube"}))
            };
            Call::new(tool, params, Duration::from_secs(10))
        })
        .collect();
    calls.push(Call::new(
        "scene.snapshot",
        json!({}),
        Duration::from_secs(10),
    ));
    let answers = t.call_batch(calls).await;
    assert_eq!(answers.len(), count + 1);
    for (i, answer) in answers.iter().take(count).enumerate() {
        let moves_so_far = (i / 3 + 1) as f64;
        let x = answer.as_ref().unwrap().result().unwrap()["location"][0]
            .as_f64()
            .unwrap();
        assert_eq!(x, moves_so_far, "call {i}");
    }
    // A snapshot comes back as the kernel's canonical data (the bridge's return phase seals
    // it), with the Cube where the last move left it.
    let snapshot = answers[count].as_ref().unwrap().result().unwrap().clone();
    assert!(snapshot.get("fingerprint").is_none(), "{snapshot}");
    let cube = snapshot["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "Cube")
        .unwrap();
    assert_eq!(cube["location"][0], json!(count.div_ceil(3) as f64));
}
