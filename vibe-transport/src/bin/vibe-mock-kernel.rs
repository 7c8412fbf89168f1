//! A vibe kernel backed by MockBlender, over stdio or TCP: lets a bridge (or an MCP server) be
//! exercised end to end without Blender.
//!
//! ```text
//! vibe-mock-kernel --stdio [--banner]
//! vibe-mock-kernel --tcp 127.0.0.1:9833 [--token-file FILE]
//! ```

use std::sync::{Arc, Mutex};

use vibe_transport::MockBlender;
use vibe_transport::serve::{ServeOptions, serve_mock};

fn usage() -> ! {
    eprintln!("usage: vibe-mock-kernel (--stdio [--banner] | --tcp ADDR [--token-file FILE])");
    std::process::exit(2)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mock = Arc::new(Mutex::new(MockBlender::new()));
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
