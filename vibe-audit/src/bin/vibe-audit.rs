//! Verify and tail Vibe audit logs.
//!
//! ```text
//! vibe-audit verify FILE...      # rotated files first (oldest first), the live file last
//! vibe-audit tail FILE [-n N]    # the last N records (default 10), one line each
//! vibe-audit demo-append FILE N  # append N synthetic records (load and crash drills)
//! ```
//!
//! `verify` exits 0 when the chain is intact, 1 at the first broken link (named by file and
//! line), 2 on usage or I/O errors.

use std::io::{Read, Seek, SeekFrom};
use std::process::ExitCode;

use vibe_audit::{AuditLog, AuditWriter, Event, FileOptions, Overflow, Redactor, verify_files};

fn usage() -> ExitCode {
    eprintln!(
        "usage: vibe-audit verify FILE... | vibe-audit tail FILE [-n N] | vibe-audit demo-append FILE N"
    );
    ExitCode::from(2)
}

fn verify(files: &[String]) -> ExitCode {
    if files.is_empty() {
        return usage();
    }
    match verify_files(files) {
        Ok(report) => match report.first_break {
            None => {
                println!(
                    "intact: {} records, head seq {} {}",
                    report.records, report.head.seq, report.head.hash
                );
                ExitCode::SUCCESS
            }
            Some(b) => {
                println!(
                    "BROKEN at {} line {}: {} ({} records verified before it)",
                    b.file, b.line, b.reason, report.records
                );
                ExitCode::from(1)
            }
        },
        Err(e) => {
            eprintln!("vibe-audit: {e}");
            ExitCode::from(2)
        }
    }
}

/// The last `n` lines of a file, read from its end in chunks.
fn last_lines(path: &str, n: usize) -> std::io::Result<Vec<String>> {
    const CHUNK: u64 = 64 * 1024;
    let mut file = std::fs::File::open(path)?;
    let mut start = file.metadata()?.len();
    let mut buffer = Vec::new();
    while start > 0 && buffer.iter().filter(|&&b| b == b'\n').count() <= n {
        let from = start.saturating_sub(CHUNK);
        let mut chunk = vec![0; (start - from) as usize];
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&buffer);
        buffer = chunk;
        start = from;
    }
    let text = String::from_utf8_lossy(&buffer);
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    Ok(lines[lines.len().saturating_sub(n)..].to_vec())
}

/// Appends `count` synthetic call / answer records, flushing per batch: a load generator, and
/// what the crash-recovery test kills mid-append.
fn demo_append(args: &[String]) -> ExitCode {
    let (Some(path), Some(count)) = (
        args.first(),
        args.get(1).and_then(|c| c.parse::<u64>().ok()),
    ) else {
        return usage();
    };
    let log = match AuditLog::open_file(path, FileOptions::default(), Redactor::default()) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("vibe-audit: {e}");
            return ExitCode::from(2);
        }
    };
    let writer = AuditWriter::spawn(log, 1024, Overflow::Backpressure);
    for i in 0..count {
        let params = serde_json::json!({"name": format!("Object.{i}"), "location": [i, 0, 0]});
        if writer
            .record(Event::call("demo", i, "object.move", params))
            .is_err()
        {
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

fn tail(args: &[String]) -> ExitCode {
    let Some(path) = args.first() else {
        return usage();
    };
    let n = match args.iter().position(|a| a == "-n") {
        Some(i) => match args.get(i + 1).and_then(|v| v.parse().ok()) {
            Some(n) => n,
            None => return usage(),
        },
        None => 10,
    };
    match last_lines(path, n) {
        Ok(lines) => {
            for line in lines {
                let record: serde_json::Value = match serde_json::from_str(&line) {
                    Ok(v) => v,
                    Err(_) => {
                        println!("(unreadable) {line}");
                        continue;
                    }
                };
                let outcome = match record.get("envelope") {
                    Some(e) if e["ok"] == true => "ok".to_owned(),
                    Some(e) if e["ok"] == false => format!(
                        "{} {}",
                        e["error"]["code"].as_str().unwrap_or("?"),
                        e["error"]["message"].as_str().unwrap_or("")
                    ),
                    _ => record
                        .get("detail")
                        .filter(|d| !d.is_null())
                        .map(|d| d.to_string())
                        .unwrap_or_default(),
                };
                println!(
                    "{:>6} {} {:<9} {:<28} {}",
                    record["seq"],
                    record["time"].as_str().unwrap_or(""),
                    record["kind"].as_str().unwrap_or(""),
                    record["tool"].as_str().unwrap_or("-"),
                    outcome
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vibe-audit: {path}: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("verify") => verify(&args[1..]),
        Some("tail") => tail(&args[1..]),
        Some("demo-append") => demo_append(&args[1..]),
        _ => usage(),
    }
}
