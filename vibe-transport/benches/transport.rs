//! Transport benches, each beside a baseline measured in the same run.
//!
//! * `mock/call_round_trip` vs `mock/baseline_in_process`: a `object.info` call through
//!   `MockTransport` against the same operation on the `MockBlender` directly.
//! * `tcp/small_call` vs `tcp/baseline_raw_echo`: one `kernel.status` call over loopback TCP to
//!   the Rust fake kernel, against a raw tokio loopback peer that does the same server work per
//!   request (parse the frame, run the tool on a MockBlender, write the result frame) for the
//!   same request bytes. Target ratio <= 1.3.
//! * `tcp/pipelined_1000`: 1000 small calls in flight at once; target >= 100k calls/s.
//! * `frame/decode_parse_8mib` vs `frame/baseline_from_slice_8mib`: decoding and parsing an
//!   8 MiB result frame, against `serde_json::from_slice` of the same envelope bytes. Target >= 70%
//!   of the baseline's throughput.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use std::hint::black_box;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Decoder;
use vibe_errors::Envelope;
use vibe_transport::serve::{ServeOptions, serve_mock};
use vibe_transport::{
    Call, Frame, LineCodec, MockBlender, MockTransport, TcpOptions, TcpTransport, Transport,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn mock(c: &mut Criterion) {
    let rt = runtime();
    let transport = MockTransport::new(MockBlender::new());
    let mut direct = MockBlender::new();
    let params = json!({"name": "Cube"});
    let mut group = c.benchmark_group("mock");
    group.bench_function("call_round_trip", |b| {
        b.iter(|| {
            rt.block_on(transport.call(Call::new(
                "object.info",
                params.clone(),
                Duration::from_secs(5),
            )))
            .unwrap()
        })
    });
    group.bench_function("baseline_in_process", |b| {
        b.iter(|| direct.execute("object.info", black_box(&params)))
    });
    group.finish();
}

async fn fake_kernel() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mock = Arc::new(Mutex::new(MockBlender::new()));
        while let Ok((stream, _)) = listener.accept().await {
            stream.set_nodelay(true).unwrap();
            let (r, w) = stream.into_split();
            let _ = serve_mock(r, w, Arc::clone(&mock), ServeOptions::default()).await;
        }
    });
    addr
}

/// The baseline's server: a raw loopback peer doing the fake kernel's work per request (parse
/// the frame, run the tool on a MockBlender, write the result frame) without the protocol
/// machinery on the client side.
async fn echo_server(request_len: usize) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).unwrap();
        let mut mock = MockBlender::new();
        let mut buf = vec![0u8; request_len];
        while stream.read_exact(&mut buf).await.is_ok() {
            let Ok(Frame::Call {
                id, tool, params, ..
            }) = Frame::parse(&buf[..buf.len() - 1])
            else {
                break;
            };
            let envelope = mock.execute(&tool, &params);
            if stream
                .write_all(&Frame::Result { id, envelope }.to_line())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    addr
}

fn tcp(c: &mut Criterion) {
    let rt = runtime();
    let (transport, mut raw, request, response) = rt.block_on(async {
        let addr = fake_kernel().await;
        let mut options = TcpOptions::new(addr);
        options.handshake.max_concurrent_calls = 1024;
        let transport = TcpTransport::connect(options).await.unwrap();
        // The same bytes a small call puts on the wire, and its answer.
        let request = Frame::Call {
            id: 1,
            tool: "kernel.status".into(),
            params: json!({}),
            deadline_ms: 5000,
        }
        .to_line();
        let answer = transport
            .call(Call::new(
                "kernel.status",
                json!({}),
                Duration::from_secs(5),
            ))
            .await
            .unwrap();
        let response = Frame::Result {
            id: 1,
            envelope: answer,
        }
        .to_line();
        let echo = echo_server(request.len()).await;
        let raw = TcpStream::connect(echo).await.unwrap();
        raw.set_nodelay(true).unwrap();
        let raw = tokio::io::BufReader::new(raw);
        (transport, raw, request, response)
    });
    let mut group = c.benchmark_group("tcp");
    group.bench_function("small_call", |b| {
        b.iter(|| {
            rt.block_on(transport.call(Call::new(
                "kernel.status",
                json!({}),
                Duration::from_secs(5),
            )))
            .unwrap()
        })
    });
    let mut line = Vec::with_capacity(response.len());
    group.bench_function("baseline_raw_echo", |b| {
        b.iter(|| {
            rt.block_on(async {
                raw.get_mut().write_all(&request).await.unwrap();
                line.clear();
                raw.read_until(b'\n', &mut line).await.unwrap();
                assert_eq!(
                    line.len(),
                    response.len(),
                    "the same answer as the fake kernel's"
                );
            })
        })
    });
    group.throughput(Throughput::Elements(1000));
    group.bench_function("pipelined_1000", |b| {
        b.iter(|| {
            rt.block_on(async {
                let calls = (0..1000).map(|_| {
                    transport.call(Call::new(
                        "kernel.status",
                        json!({}),
                        Duration::from_secs(10),
                    ))
                });
                for answer in futures::future::join_all(calls).await {
                    answer.unwrap();
                }
            })
        })
    });
    group.finish();
}

fn big_frame(c: &mut Criterion) {
    // About 8 MiB of objects, as a large snapshot would be.
    let objects: Vec<serde_json::Value> = (0..40_000)
        .map(|i| json!({"name": format!("Object.{i:05}"), "type": "MESH", "location": [i as f64 * 0.5, 1.25, -3.0], "collections": ["Collection"], "materials": ["Material"], "data": {"vertices": 8, "edges": 12, "polygons": 6}, "note": "x".repeat(40)}))
        .collect();
    let envelope = Envelope::ok(json!({"objects": objects}));
    let envelope_bytes = serde_json::to_vec(&envelope).unwrap();
    let line = Frame::Result { id: 1, envelope }.to_line();
    let mut group = c.benchmark_group("frame");
    group.throughput(Throughput::Bytes(line.len() as u64));
    group.sample_size(10);
    group.bench_function("decode_parse_8mib", |b| {
        b.iter(|| {
            let mut codec = LineCodec::default();
            let mut buffer = BytesMut::from(&line[..]);
            let frame = codec.decode(&mut buffer).unwrap().unwrap();
            Frame::parse(&frame).unwrap()
        })
    });
    group.bench_function("baseline_from_slice_8mib", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&envelope_bytes)).unwrap())
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = mock, tcp, big_frame
}
criterion_main!(benches);
