//! A vibe kernel backed by MockBlender, over stdio or TCP: lets a bridge (or an MCP server) be
//! exercised end to end without Blender.
//!
//! ```text
//! vibe-mock-kernel --stdio [--banner] [--fault N:KIND]...
//! vibe-mock-kernel --tcp 127.0.0.1:9833 --token-file FILE [--fault N:KIND]...
//! ```
//!
//! `--fault 3:hang` injects a fault at the third call; kinds: raise, hang, drop, malformed.

use std::sync::{Arc, Mutex};

use vibe_transport::serve::{ServeOptions, serve_mock};
use vibe_transport::{Fault, FaultPlan, MockBlender};

fn usage() -> ! {
    eprintln!(
        "usage: vibe-mock-kernel (--stdio [--banner] | --tcp ADDR [--token-file FILE]) [--fault N:raise|hang|drop|malformed]..."
    );
    std::process::exit(2)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut plan = FaultPlan::none();
    for (i, arg) in args.iter().enumerate() {
        if arg != "--fault" {
            continue;
        }
        let spec = args.get(i + 1).unwrap_or_else(|| usage());
        let (n, kind) = spec.split_once(':').unwrap_or_else(|| usage());
        let n: u64 = n.parse().unwrap_or_else(|_| usage());
        let fault = match kind {
            "raise" => Fault::Raise,
            "hang" => Fault::Hang,
            "drop" => Fault::Drop,
            "malformed" => Fault::Malformed,
            _ => usage(),
        };
        plan = plan.at(n, fault);
    }
    let mock = Arc::new(Mutex::new(MockBlender::new().with_faults(plan)));
    let mut options = ServeOptions::default();
    if args.iter().any(|a| a == "--banner") {
        // What Blender prints before the kernel starts.
        options.banner = vec![
            "Blender 5.0.1 (hash mock built 2025-11-18)".into(),
            "Read prefs: mock".into(),
        ];
    }
    if let Some(i) = args.iter().position(|a| a == "--token-file") {
        let path = args.get(i + 1).unwrap_or_else(|| usage());
        options.token = Some(std::fs::read_to_string(path)?.trim().to_owned());
    }
    match args.first().map(String::as_str) {
        Some("--stdio") => serve_mock(tokio::io::stdin(), tokio::io::stdout(), mock, options).await,
        Some("--tcp") => {
            let addr = args.get(1).unwrap_or_else(|| usage());
            if options.token.is_none() {
                eprintln!(
                    "vibe-mock-kernel: TCP needs --token-file (a kernel always demands a token over TCP)"
                );
                std::process::exit(2);
            }
            let listener = tokio::net::TcpListener::bind(addr).await?;
            eprintln!("vibe-mock-kernel listening on {}", listener.local_addr()?);
            loop {
                let (stream, _) = listener.accept().await?;
                stream.set_nodelay(true)?;
                let (reader, writer) = stream.into_split();
                serve_mock(reader, writer, Arc::clone(&mock), options.clone()).await?;
            }
        }
        _ => usage(),
    }
}
