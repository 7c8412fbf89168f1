//! Restart resume, crash recovery, tamper detection, redaction, writer policies and rotation.

use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;
use vibe_audit::*;
use vibe_contract::AuditPolicy;

mod support;
use support::{Staged, genesis_log, genesis_writer};

/// A folder of the test's own, removed when the test ends (pass or fail).
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("vibe-audit-{name}-"))
        .tempdir()
        .unwrap()
}

/// A log file in a folder of the test's own: the folder (removed when the test ends) and the
/// file's path.
fn log_file(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = temp_dir(name);
    let path = dir.path().join(DEFAULT_LOG);
    (dir, path)
}

/// The log at `path`, opened (or resumed) with the default options.
fn open(path: &Path) -> AuditLog {
    AuditLog::open_file(path, FileOptions::default(), Redactor::default()).unwrap()
}

fn append_calls(log: &mut AuditLog, from: u64, n: u64) {
    for i in from..from + n {
        log.append(&Event::call(
            "s-1",
            i,
            "object.move",
            json!({"name": format!("O{i}"), "delta": [i, 0, 0]}),
        ))
        .unwrap();
    }
    log.flush().unwrap();
}

#[test]
fn the_chain_survives_restarts() {
    let (_dir, path) = log_file("restart");
    let mut log = open(&path);
    append_calls(&mut log, 0, 10);
    let head = log.head().clone();
    drop(log);
    let mut log = open(&path);
    assert_eq!(log.head(), &head, "resumed from the last record");
    append_calls(&mut log, 10, 10);
    drop(log);
    let report = verify_files(&[&path]).unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 20);
    assert_eq!(report.head.seq, 20);
}

#[test]
fn a_torn_tail_is_cut_saved_and_recorded() {
    let (dir, path) = log_file("torn");
    let mut log = open(&path);
    append_calls(&mut log, 0, 5);
    drop(log);
    // What a crash mid-append leaves: half a record, no newline.
    let torn = b"{\"seq\":6,\"time\":\"2026-11-21T00:00:00.000Z\",\"session\":\"s-1\",\"kind\":\"call\",\"tool\":\"obj";
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(torn);
    std::fs::write(&path, &bytes).unwrap();
    assert!(!verify_files(&[&path]).unwrap().is_intact());

    let mut log = open(&path);
    assert_eq!(log.head().seq, 6, "the recovery itself is record 6");
    append_calls(&mut log, 5, 2);
    drop(log);
    let report = verify_files(&[&path]).unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 8);
    let text = std::fs::read_to_string(&path).unwrap();
    let recovered: serde_json::Value = serde_json::from_str(text.lines().nth(5).unwrap()).unwrap();
    assert_eq!(recovered["kind"], "recovered");
    assert_eq!(recovered["detail"]["torn_bytes"], torn.len());
    assert_eq!(
        std::fs::read(dir.path().join(format!("{DEFAULT_LOG}.torn-6"))).unwrap(),
        torn
    );
}

#[test]
fn killing_a_writer_mid_append_loses_no_earlier_record() {
    let (_dir, path) = log_file("kill");
    for round in 0..3 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_vibe-audit"))
            .args(["demo-append", path.to_str().unwrap(), "100000000"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300 + 100 * round));
        child.kill().unwrap();
        child.wait().unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        let log = open(&path);
        let head = log.head().clone();
        drop(log);
        let report = verify_files(&[&path]).unwrap();
        assert!(report.is_intact(), "round {round}: {report:?}");
        assert_eq!(report.head, head);
        assert!(report.records > 0 && std::fs::metadata(&path).unwrap().len() <= before + 2048);
    }
}

#[test]
fn a_tampered_last_record_is_refused_on_open() {
    let (_dir, path) = log_file("tampered");
    let mut log = open(&path);
    append_calls(&mut log, 0, 3);
    drop(log);
    let text = std::fs::read_to_string(&path).unwrap().replace("O2", "O9");
    std::fs::write(&path, text).unwrap();
    assert!(matches!(
        AuditLog::open_file(&path, FileOptions::default(), Redactor::default()),
        Err(AuditError::Corrupt { .. })
    ));
}

fn memory_log(n: u64) -> Vec<u8> {
    let sink = MemorySink::new();
    let mut log = genesis_log(sink.clone());
    for i in 0..n {
        let envelope = vibe_errors::Envelope::ok(json!({"i": i}));
        log.append(&Event::answer("s", i, "object.info", &envelope))
            .unwrap();
    }
    sink.bytes()
}

fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn broken(bytes: &[u8]) -> bool {
    !verify_reader(bytes, ChainHead::genesis(), "m")
        .unwrap()
        .is_intact()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_single_byte_change_is_detected(n in 1u64..8, pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = memory_log(n);
        let i = pos.index(bytes.len());
        prop_assume!(bytes[i] != byte);
        bytes[i] = byte;
        prop_assert!(broken(&bytes));
    }

    #[test]
    fn removed_inserted_and_reordered_records_are_detected(n in 3u64..10, a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>()) {
        let original = lines(&memory_log(n));
        let (i, j) = (a.index(original.len()), b.index(original.len()));
        // Removing any record but the last.
        let mut removed = original.clone();
        removed.remove(i.min(original.len() - 2));
        prop_assert!(broken(&removed.concat()));
        // Inserting a copy of any record anywhere.
        let mut inserted = original.clone();
        inserted.insert(j, original[i].clone());
        prop_assert!(broken(&inserted.concat()));
        // Swapping two different records.
        prop_assume!(i != j);
        let mut swapped = original.clone();
        swapped.swap(i, j);
        prop_assert!(broken(&swapped.concat()));
    }
}

#[test]
fn a_cut_tail_is_detected_against_an_anchored_head() {
    let (_dir, path) = log_file("anchor");
    let mut log = open(&path);
    append_calls(&mut log, 0, 4);
    let anchored = log.head().clone();
    drop(log);
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, kept).unwrap();
    assert!(
        verify_files(&[&path]).unwrap().is_intact(),
        "the chain alone cannot see a cut tail"
    );
    assert!(!verify_anchored(&[&path], &anchored).unwrap().is_intact());
}

#[test]
fn redaction_follows_the_audit_policy() {
    let sandbox = PathBuf::from("/home/ann/vibe-sandbox");
    let redactor = Redactor::new(&AuditPolicy::default(), Some(sandbox.clone()));
    let args = json!({"code": "import bpy\nprint(1)", "token": "hunter2", "path": "/home/ann/vibe-sandbox/renders/a.png", "nested": {"path": "/etc/passwd", "password": "x"}});
    let out = redactor.redact(&args);
    assert_eq!(out["code"]["bytes"], 19);
    assert!(
        out["code"]["blake3"]
            .as_str()
            .unwrap()
            .starts_with("blake3:")
    );
    assert_eq!(out["token"], "[redacted]");
    assert_eq!(out["path"], "renders/a.png");
    assert_eq!(out["nested"]["path"], "<outside sandbox>/passwd");
    assert_eq!(out["nested"]["password"], "[redacted]");
    let keep = Redactor::new(
        &AuditPolicy {
            keep_code: true,
            keep_paths: true,
            ..AuditPolicy::default()
        },
        Some(sandbox),
    );
    let kept = keep.redact(&args);
    assert_eq!(kept["code"], args["code"]);
    assert_eq!(kept["path"], args["path"]);
    assert_eq!(kept["token"], "[redacted]", "secrets are never kept");
    // Escapes through `..` are judged after normalizing.
    assert_eq!(
        redactor.relative("/home/ann/vibe-sandbox/../secrets/key"),
        "<outside sandbox>/key"
    );
}

struct SlowSink(MemorySink);

impl AuditSink for SlowSink {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        std::thread::sleep(Duration::from_millis(2));
        self.0.write_line(line)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn backpressure_keeps_everything_and_drop_records_the_loss() {
    let sink = MemorySink::new();
    let writer = genesis_writer(SlowSink(sink.clone()), 1, Overflow::Backpressure);
    for i in 0..20 {
        writer
            .record(Event::call("s", i, "kernel.status", json!({})))
            .unwrap();
    }
    writer.flush().unwrap();
    assert_eq!(
        verify_reader(&sink.bytes()[..], ChainHead::genesis(), "m")
            .unwrap()
            .records,
        20
    );
    drop(writer);

    let sink = MemorySink::new();
    let writer = genesis_writer(SlowSink(sink.clone()), 1, Overflow::Drop);
    let mut dropped = 0;
    for i in 0..50 {
        if let Err(AuditError::Dropped) =
            writer.record(Event::call("s", i, "kernel.status", json!({})))
        {
            dropped += 1;
        }
    }
    {
        let _guard = writer.flush_guard();
        if let Err(AuditError::Dropped) =
            writer.record(Event::call("s", 99, "kernel.status", json!({})))
        {
            dropped += 1;
        }
    }
    drop(writer);
    assert!(
        dropped > 0,
        "a queue of one behind a slow sink must overflow"
    );
    let bytes = sink.bytes();
    assert!(
        verify_reader(&bytes[..], ChainHead::genesis(), "m")
            .unwrap()
            .is_intact()
    );
    let recorded: u64 = String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["kind"] == "dropped")
        .map(|r| r["detail"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(recorded, dropped, "every drop is in the chain");
}

fn rotated_files(path: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = (1..)
        .map(|n| FileSink::rotated_name(path, n))
        .take_while(|p| p.exists())
        .collect();
    files.push(path.to_path_buf());
    files
}

#[test]
fn rotation_continues_the_chain_across_files() {
    let (_dir, path) = log_file("rotate");
    let mut options = FileOptions::default();
    options.rotate_bytes = Some(4 * 1024);
    options.durability = Durability::FsyncPerBatch;
    let mut log = AuditLog::open_file(&path, options.clone(), Redactor::default()).unwrap();
    append_calls(&mut log, 0, 60);
    drop(log);
    let files = rotated_files(&path);
    assert!(files.len() >= 3, "{files:?}");
    let report = verify_files(&files).unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert!(report.records > 60);
    // Each file after the first starts with a `rotated` record naming the previous head.
    let second = std::fs::read_to_string(&files[1]).unwrap();
    let first: serde_json::Value = serde_json::from_str(second.lines().next().unwrap()).unwrap();
    assert_eq!(first["kind"], "rotated");
    // Reopening after rotation resumes from the live file.
    let mut log = AuditLog::open_file(&path, options, Redactor::default()).unwrap();
    append_calls(&mut log, 60, 5);
    drop(log);
    assert!(verify_files(&rotated_files(&path)).unwrap().is_intact());
    // The verifier names the file and line of a break.
    let mut broken = std::fs::read_to_string(&files[1]).unwrap();
    broken = broken.replacen("\"O", "\"X", 1);
    std::fs::write(&files[1], broken).unwrap();
    let report = verify_files(&rotated_files(&path)).unwrap();
    let b = report.first_break.unwrap();
    assert!(b.file.ends_with(".2") || b.file.ends_with(".1"), "{b:?}");
}

#[test]
fn a_second_writer_is_refused_instead_of_forking_the_chain() {
    let (_dir, path) = log_file("two-writers");
    let mut first = open(&path);
    append_calls(&mut first, 0, 3);
    let second = AuditLog::open_file(&path, FileOptions::default(), Redactor::default());
    assert!(
        matches!(second, Err(AuditError::Locked { .. })),
        "a second writer in the same process must be refused"
    );
    // Another process holding the lock (flock, as Rust's File::lock takes it) keeps us out too.
    drop(first);
    let mut holder = std::process::Command::new("python3")
        .arg("-c")
        .arg("import fcntl, sys, time\nf = open(sys.argv[1], 'a')\nfcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(30)")
        .arg(format!("{}.lock", path.display()))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "held");
    let blocked = AuditLog::open_file(&path, FileOptions::default(), Redactor::default());
    let _ = holder.kill();
    let _ = holder.wait();
    let Err(error) = blocked else {
        panic!("another process holds the log");
    };
    assert!(
        error.to_string().contains("held by another writer"),
        "{error}"
    );
    // Once the other writer is gone, the chain continues where it stood.
    let mut again = open(&path);
    append_calls(&mut again, 3, 2);
    drop(again);
    let report = verify_files(&[&path]).unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 5);
}

#[test]
fn a_security_record_is_durable_before_it_returns_and_never_dropped() {
    let (sink, durable) = Staged::new(Duration::from_millis(2));
    let writer = genesis_writer(sink, 1, Overflow::Drop);
    let mut dropped = 0;
    for i in 0..50 {
        if let Err(AuditError::Dropped) =
            writer.record(Event::call("s", i, "kernel.status", json!({})))
        {
            dropped += 1;
        }
    }
    assert!(
        dropped > 0,
        "the queue of one must be full when the security record comes"
    );
    writer
        .record_durable(Event::incident(
            "s",
            RecordKind::Security,
            json!({"event": "security_block"}),
        ))
        .unwrap();
    // Before anything else happens (no flush, the writer still running): it is durable.
    let text = String::from_utf8(durable.lock().unwrap().clone()).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["kind"], "security");
    assert_eq!(last["detail"]["event"], "security_block");
}

/// A record queued and never flushed still reaches the sink, in order, once the writer's
/// gathering window ([`GATHER`]) has passed: the writer wakes for it by itself.
#[test]
fn records_reach_the_sink_without_a_flush() {
    let sink = MemorySink::new();
    let writer = genesis_writer(sink.clone(), 4096, Overflow::Backpressure);
    for i in 0..3 {
        writer
            .record(Event::call("s", i, "kernel.status", json!({})))
            .unwrap();
    }
    let waited = std::time::Instant::now();
    let records = loop {
        let records = verify_reader(&sink.bytes()[..], ChainHead::genesis(), "m")
            .unwrap()
            .records;
        if records == 3 || waited.elapsed() > Duration::from_secs(10) {
            break records;
        }
        std::thread::sleep(GATHER);
    };
    assert_eq!(records, 3, "queued records were never written");
    drop(writer);
}
