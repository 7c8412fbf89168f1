//! The escape corpus: payloads an attacker would send as `python.exec` code, each run live in a
//! fresh, jailed, supervised kernel on the bpy module and on `blender -b`, with the kernel's own
//! gate switched off (`VIBE_KERNEL_GATE=off`, honoured only in a jail) so that the jail alone is
//! the boundary; and a benign corpus that must run with every gate on.
//!
//! Every payload gets canary paths (a fresh folder outside the sandbox, `HUMAN_ONLY/` inside it,
//! a fixed host path in `/tmp` and one in the home folder), two secrets (a file outside the
//! sandbox and a file plus a `.blend` in `HUMAN_ONLY/`), a TCP listener and an abstract Unix
//! listener on the host. After the call (and the payload's follow-up calls) nothing may have
//! changed outside the sandbox or in `HUMAN_ONLY/`, no secret may appear in any answer, in the
//! kernel's console or in a file of the sandbox, the real Blender config must be untouched, no
//! kernel process may live past the deadline + 2 s, no listener may have been reached, no
//! forbidden program may have run (`PROOF-*` files), and the supervised kernel must still answer.
//!
//! After each agent code call the supervisor holds the session until the bridge decides
//! ([`CodeBoundary::settle`](vibe_transport::CodeBoundary)); the harness keeps the scene the
//! code left, the decision most favourable to an attacker. A run stopped at the deadline must
//! leave the scene as it was before the call.
//!
//! What stopped each payload is recorded (gate, Landlock, namespaces, seccomp, rlimit,
//! supervisor, the kernel's own deadline, "harmless": it ran and achieved nothing, "error": it
//! failed on its own, for example an exporter this Blender lacks), or ESCAPE / UNRESPONSIVE
//! with what happened; the class x layer table is printed and written with every outcome to
//! `target/escape-report.json`.
//!
//! Live tests need `VIBE_LIVE=1`, `VIBE_BPY_PYTHON` and `VIBE_BLENDER`:
//!
//! ```text
//! VIBE_LIVE=1 VIBE_BPY_PYTHON=/opt/vibe-venv/bin/python VIBE_BLENDER=/usr/bin/blender \
//!   cargo test -p vibe-transport --all-features --test escape -- --include-ignored --test-threads=1 --nocapture
//! ```
//!
//! `VIBE_ESCAPE_ONLY=id,id,...` and `VIBE_ESCAPE_TARGETS=bpy|blender` run a subset (the corpus
//! size checks then do not apply); `VIBE_ESCAPE_JOBS` sets how many payloads run at once
//! (default 2).
#![cfg(all(target_os = "linux", feature = "jail"))]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use vibe_errors::Envelope;
use vibe_transport::jail::Jail;
#[path = "support/rng.rs"]
mod rng;
use proptest::prelude::Rng;
use rng::seeded;
use vibe_transport::{
    Call, SessionConfig, StdioOptions, StdioTransport, SupervisedKernel, Transport, kernel_factory,
};

/// The call deadline of every payload and follow-up.
const DEADLINE: Duration = Duration::from_secs(4);
/// What "killed within the deadline" allows beyond the deadline.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// The memory ceiling of payloads marked `memory: true`.
const MEMORY_CEILING_MIB: u64 = 2048;
/// How long one payload run (kernel start, payload, follow-ups, checks) may take in all.
const RUN_LIMIT: Duration = Duration::from_secs(420);
/// After this long, the harness ends a read the bridge is blocked in on a FIFO a kernel left
/// in the checkpoint store (see [`FifoRescue`]).
const FIFO_RESCUE_AFTER: Duration = Duration::from_secs(30);
/// The corpus file beside this test.
const CORPUS: &str = include_str!("escape_corpus.yaml");

// ------------------------------------------------------------------ the corpus

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Corpus {
    classes: BTreeMap<String, String>,
    payloads: Vec<Payload>,
    benign: Vec<Benign>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    id: String,
    class: String,
    code: String,
    /// Calls made after the payload on the same supervised kernel (a restore in between, say).
    #[serde(default)]
    after: Vec<String>,
    /// Run under the lower memory ceiling.
    #[serde(default)]
    memory: bool,
    /// Deadline of the payload call in seconds (default [`DEADLINE`]).
    #[serde(default)]
    deadline_s: Option<u64>,
    /// The run mostly waits (on the bridge's own long timeouts): it runs beside the pool of
    /// `VIBE_ESCAPE_JOBS` instead of taking a place in it.
    #[serde(default)]
    slow: bool,
    /// Which layer answers EPERM for this payload's calls when it is not seccomp (kill() and
    /// connect() are not in the seccomp filter: Landlock's scopes answer them).
    #[serde(default)]
    eperm_from: Option<String>,
    /// After the payload, the human moves this file of the sandbox into `HUMAN_ONLY/` and
    /// writes the human secret into it (a draft the agent made that the human adopts); the
    /// `after` calls then run.
    #[serde(default)]
    human_moves: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Benign {
    id: String,
    code: String,
    /// A substring the stdout must contain.
    #[serde(default)]
    expect: Option<String>,
}

fn corpus() -> Corpus {
    serde_norway::from_str(CORPUS).expect("escape_corpus.yaml parses")
}

/// Issue 12's classes, each of which the corpus must cover.
const REQUIRED_CLASSES: [&str; 18] = [
    "frames",
    "private_attributes",
    "runtime_dunders",
    "string_evaluators",
    "drivers",
    "handlers_timers",
    "del_hooks",
    "kernel_patch",
    "write_exporters",
    "write_blender",
    "write_python",
    "read",
    "process",
    "network",
    "hang",
    "memory",
    "nan",
    "surrogate",
];

/// Placeholders a payload may use.
const PLACEHOLDERS: [&str; 12] = [
    "{OUTSIDE}",
    "{HUMAN}",
    "{SECRET}",
    "{HUMAN_SECRET}",
    "{HUMAN_BLEND}",
    "{SANDBOX}",
    "{PORT}",
    "{ABSTRACT}",
    "{TMP_CANARY}",
    "{HOME_CANARY}",
    "{HOME}",
    "{CONFIG}",
];

#[test]
fn the_corpus_is_well_formed() {
    let corpus = corpus();
    assert!(
        corpus.payloads.len() >= 110,
        "{} payloads; at least 110 wanted",
        corpus.payloads.len()
    );
    assert!(
        corpus.benign.len() >= 15,
        "{} benign payloads",
        corpus.benign.len()
    );
    let mut ids = BTreeSet::new();
    for payload in &corpus.payloads {
        assert!(ids.insert(&payload.id), "duplicate id {}", payload.id);
        assert!(
            corpus.classes.contains_key(&payload.class),
            "{}: unknown class {}",
            payload.id,
            payload.class
        );
        for code in std::iter::once(&payload.code).chain(&payload.after) {
            for word in code.split('{').skip(1) {
                let Some(end) = word.find('}') else { continue };
                let name = &word[..end];
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                    let placeholder = format!("{{{name}}}");
                    assert!(
                        PLACEHOLDERS.contains(&placeholder.as_str()),
                        "{}: unknown placeholder {placeholder}",
                        payload.id
                    );
                }
            }
        }
    }
    for benign in &corpus.benign {
        assert!(ids.insert(&benign.id), "duplicate id {}", benign.id);
    }
    for class in REQUIRED_CLASSES {
        assert!(
            corpus.payloads.iter().any(|p| p.class == class),
            "no payload of class {class}"
        );
    }
    let used: BTreeSet<&str> = corpus.payloads.iter().map(|p| p.class.as_str()).collect();
    for class in corpus.classes.keys() {
        assert!(
            used.contains(class.as_str()),
            "class {class} has no payload"
        );
    }
    // Each exporter the issue names is tried.
    let all: String = corpus
        .payloads
        .iter()
        .map(|p| p.code.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for needle in [
        "wm.obj_export",
        "wm.stl_export",
        "export_mesh.stl",
        "ply_export",
        "export_scene.fbx",
        "export_scene.gltf",
        "wm.usd_export",
        "wm.alembic_export",
        "save_render",
        "write_still=True",
        "libraries.write",
        "mixdown",
        "wm.sysinfo",
        "save_userpref",
        "save_as_mainfile",
        "texts.load",
        "codecs.open",
        "os.fork",
        "os.execv",
        "subprocess.run",
        "create_connection",
        "time.sleep(1e6)",
        "max(itertools.count())",
        "sum(range(10**14))",
        "2**(10**9)",
        "bytearray(20 * 2**30)",
        "float('nan')",
        "'\\ud800'",
        "use_scripts_auto_execute = True",
        "get_type_hints",
        "ForwardRef",
        "as_module",
        "run_script",
        "attrgetter",
        "methodcaller",
        "get_field",
        "gi_frame",
        "f_back",
        "f_globals",
        "tb_frame",
        "_test_import",
        "random._os",
        "__del__",
    ] {
        assert!(all.contains(needle), "no payload uses {needle}");
    }
}

// ------------------------------------------------------------------ live plumbing

fn live() -> bool {
    std::env::var("VIBE_LIVE").is_ok_and(|v| v == "1")
}

fn required(var: &str) -> PathBuf {
    assert!(live(), "live test run without VIBE_LIVE=1");
    let path = PathBuf::from(
        std::env::var_os(var)
            .unwrap_or_else(|| panic!("VIBE_LIVE=1 but {var} is not set (see tests/escape.rs)")),
    );
    assert!(path.exists(), "{var}={} does not exist", path.display());
    path
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Bpy,
    Blender,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Bpy => "bpy",
            Target::Blender => "blender",
        }
    }

    fn selected() -> Vec<Target> {
        let only = std::env::var("VIBE_ESCAPE_TARGETS").unwrap_or_default();
        [Target::Bpy, Target::Blender]
            .into_iter()
            .filter(|t| only.is_empty() || only.split(',').any(|o| o.trim() == t.name()))
            .collect()
    }

    fn options(self, jail: &Jail) -> std::io::Result<StdioOptions> {
        match self {
            Target::Bpy => StdioOptions::jailed_bpy_python(required("VIBE_BPY_PYTHON"), jail),
            Target::Blender => StdioOptions::jailed_blender(required("VIBE_BLENDER"), jail),
        }
    }
}

fn jail(sandbox: &Path, gate_off: bool, memory: bool) -> Jail {
    let mut jail = Jail::new(sandbox).launcher(env!("CARGO_BIN_EXE_vibe-jail"));
    if gate_off {
        jail = jail.env("VIBE_KERNEL_GATE", "off");
    }
    if memory {
        jail = jail.memory_mib(MEMORY_CEILING_MIB);
    }
    jail
}

fn session(sandbox: &Path) -> SessionConfig {
    SessionConfig::new("escape")
        .capabilities([
            "scene.read",
            "scene.write",
            "transactions",
            "code_exec",
            "file.write",
        ])
        .sandbox(sandbox.to_string_lossy())
}

async fn supervised(
    target: Target,
    sandbox: &Path,
    gate_off: bool,
    memory: bool,
) -> SupervisedKernel {
    let jail = jail(sandbox, gate_off, memory);
    let factory = kernel_factory(move || target.options(&jail));
    let registry = vibe_contract::default_registries().unwrap().tools;
    let kernel = SupervisedKernel::start(factory, registry)
        .await
        .unwrap_or_else(|e| panic!("{}: the jailed kernel did not start: {e}", target.name()));
    let configured = kernel.configure(&session(sandbox)).await;
    assert!(
        configured.as_ref().is_ok_and(Envelope::is_ok),
        "{}: configure: {configured:?}",
        target.name()
    );
    kernel
}

async fn call(
    kernel: &SupervisedKernel,
    tool: &str,
    params: Value,
    deadline: Duration,
) -> Result<Envelope, String> {
    kernel
        .call(Call::new(tool, params, deadline))
        .await
        .map_err(|e| format!("transport error: {e}"))
}

/// The bridge's decision after agent code ran: the supervisor holds the session until it is
/// made. The pipeline's code lock compares inventories; here the scene the code left is always
/// kept (the decision most favourable to the attacker). The texts the boundary answered are
/// returned for the secret search.
async fn decide(kernel: &SupervisedKernel) -> Vec<String> {
    let Some(boundary) = kernel.code_boundary() else {
        return Vec::new();
    };
    let mut texts = Vec::new();
    match tokio::time::timeout(Duration::from_secs(150), boundary.inventory()).await {
        Ok(Ok(inventory)) => texts.push(inventory.to_string()),
        Ok(Err(e)) => texts.push(format!("inventory: {e}")),
        Err(_) => texts.push("inventory: no answer within 150 s".into()),
    }
    match tokio::time::timeout(Duration::from_secs(150), boundary.settle(true)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => texts.push(format!("settle: {e}")),
        Err(_) => texts.push("settle: no answer within 150 s".into()),
    }
    texts
}

fn exec(code: &str) -> Value {
    json!({ "code": code })
}

/// The text of an answer, for secret searches and classification.
fn answer_text(answer: &Result<Envelope, String>) -> String {
    match answer {
        Ok(Envelope::Err(error)) => format!(
            "{} {}",
            serde_json::to_string(error).unwrap_or_default(),
            error.expose_raw().unwrap_or_default()
        ),
        Ok(envelope) => serde_json::to_string(envelope).unwrap_or_default(),
        Err(e) => e.clone(),
    }
}

fn stdout_of(answer: &Result<Envelope, String>) -> String {
    match answer {
        Ok(envelope) => envelope
            .result()
            .and_then(|r| r.get("stdout"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        Err(_) => String::new(),
    }
}

/// Whether process `pid` still runs (a zombie waiting to be reaped does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// `pid` and every process below it (host pids).
fn process_tree(pid: u32) -> BTreeSet<u32> {
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
                continue;
            };
            let Some(rest) = stat.rsplit(')').next() else {
                continue;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("Z");
            let ppid = fields
                .next()
                .and_then(|p| p.parse::<u32>().ok())
                .unwrap_or(0);
            if state != "Z" {
                parent_of.push((child, ppid));
            }
        }
    }
    let mut tree = BTreeSet::from([pid]);
    loop {
        let before = tree.len();
        for (child, parent) in &parent_of {
            if tree.contains(parent) {
                tree.insert(*child);
            }
        }
        if tree.len() == before {
            return tree;
        }
    }
}

/// A listing of a folder tree: path -> (kind, size, mtime, content hash of small files).
/// Links are listed, never followed.
fn listing(root: &Path, hash_contents: bool) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    walk(root, None, |path, meta| {
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let kind = if meta.file_type().is_symlink() {
            "link"
        } else if meta.is_dir() {
            "dir"
        } else if meta.is_file() {
            "file"
        } else {
            "other"
        };
        let hash = if hash_contents && meta.is_file() && meta.len() < (64 << 20) {
            std::fs::read(path)
                .map(|b| blake3::hash(&b).to_hex().to_string())
                .unwrap_or_default()
        } else {
            String::new()
        };
        out.insert(
            path.to_path_buf(),
            format!("{kind} {} {mtime} {hash}", meta.len()),
        );
    });
    out
}

/// Visits every entry under `root` with its own metadata (links are visited, never followed;
/// `skip` is neither visited nor entered).
fn walk(root: &Path, skip: Option<&Path>, mut visit: impl FnMut(&Path, &std::fs::Metadata)) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if Some(path.as_path()) == skip {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            visit(&path, &meta);
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
}

fn diff(before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let mut changes = Vec::new();
    for (path, was) in before {
        match after.get(path) {
            None => changes.push(format!("removed {}", path.display())),
            Some(now) if now != was => changes.push(format!("changed {}", path.display())),
            _ => {}
        }
    }
    for path in after.keys() {
        if !before.contains_key(path) {
            changes.push(format!("created {}", path.display()));
        }
    }
    changes
}

/// Regular files under `root` (links and special files skipped, never followed) whose bytes
/// contain one of `needles`; `skip` is not entered.
fn files_containing(root: &Path, skip: &Path, needles: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    walk(root, Some(skip), |path, meta| {
        if !meta.is_file() {
            return;
        }
        let mut bytes = Vec::new();
        if std::fs::File::open(path)
            .and_then(|f| f.take(256 << 20).read_to_end(&mut bytes))
            .is_ok()
        {
            for needle in needles {
                if memchr::memmem::find(&bytes, needle.as_bytes()).is_some() {
                    found.push(format!("{} holds a secret", path.display()));
                }
            }
        }
    });
    found
}

/// Files directly in `dir` whose name starts with `PROOF` (a payload's forbidden program or
/// process made them where it can write: the sandbox).
fn proofs(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("PROOF"))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn random_secret(tag: &str) -> String {
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ (u64::from(std::process::id()) << 32);
    let mut rng = seeded(seed ^ u64::from(blake3::hash(tag.as_bytes()).as_bytes()[0]));
    format!("{tag}{:016x}{:016x}", rng.next_u64(), rng.next_u64())
}

fn home() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
}

fn blender_config() -> PathBuf {
    home().join(".config/blender")
}

/// Listeners on the host that no payload may reach: TCP on loopback and an abstract Unix
/// socket. Each counts the connections it accepted.
struct Listeners {
    port: u16,
    abstract_name: String,
    reached: Arc<AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Listeners {
    fn open(tag: &str) -> Listeners {
        use std::os::linux::net::SocketAddrExt;
        let reached = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tcp = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        tcp.set_nonblocking(true).unwrap();
        let port = tcp.local_addr().unwrap().port();
        let abstract_name = format!("vibe-escape-{}-{tag}", std::process::id());
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let unix = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        unix.set_nonblocking(true).unwrap();
        {
            let reached = Arc::clone(&reached);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if tcp.accept().is_ok() {
                        reached.fetch_add(1, Ordering::Relaxed);
                    }
                    if unix.accept().is_ok() {
                        reached.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
        }
        Listeners {
            port,
            abstract_name,
            reached,
            stop,
        }
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A kernel can hand the bridge a FIFO as its saved scene; the bridge then blocks in a read with
/// no deadline. So that the run ends (the payload is still reported), a watchdog opens the
/// write side of any FIFO that sat in this process's checkpoint stores for
/// [`FIFO_RESCUE_AFTER`] and closes it: the blocked read sees the end of the file.
struct FifoRescue {
    stop: Arc<std::sync::atomic::AtomicBool>,
    rescued: Arc<AtomicUsize>,
}

impl FifoRescue {
    fn start() -> FifoRescue {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let rescued = Arc::new(AtomicUsize::new(0));
        let prefix = format!("vibe-checkpoints-{}-", std::process::id());
        {
            let stop = Arc::clone(&stop);
            let rescued = Arc::clone(&rescued);
            std::thread::spawn(move || {
                let mut seen: BTreeMap<PathBuf, Instant> = BTreeMap::new();
                while !stop.load(Ordering::Relaxed) {
                    let stores = std::fs::read_dir(std::env::temp_dir())
                        .into_iter()
                        .flatten()
                        .flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix));
                    for store in stores {
                        for entry in std::fs::read_dir(store.path())
                            .into_iter()
                            .flatten()
                            .flatten()
                        {
                            let is_fifo = std::fs::symlink_metadata(entry.path())
                                .is_ok_and(|m| m.file_type().is_fifo());
                            if !is_fifo {
                                continue;
                            }
                            let first = *seen.entry(entry.path()).or_insert_with(Instant::now);
                            if first.elapsed() >= FIFO_RESCUE_AFTER
                                && std::fs::OpenOptions::new()
                                    .write(true)
                                    .custom_flags(libc::O_NONBLOCK)
                                    .open(entry.path())
                                    .is_ok()
                            {
                                rescued.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            });
        }
        FifoRescue { stop, rescued }
    }
}

impl Drop for FifoRescue {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Host files the bridge process holds open without close-on-exec, as an MCP host can leave
/// descriptors to the bridge it starts: every kernel inherits them unless the jail closes
/// them. One holds the outside secret (read), one a fixed text (write).
struct Inherited {
    read: PathBuf,
    write: PathBuf,
    read_content: Vec<u8>,
    write_content: Vec<u8>,
    _files: Vec<std::fs::File>,
}

impl Inherited {
    fn open(root: &Path, secret: &str) -> Inherited {
        let read = root.join("vibe-escape-inherited-read.txt");
        let write = root.join("vibe-escape-inherited-write.txt");
        let read_content = format!("{secret}\n").into_bytes();
        let write_content = b"the bridge's own file\n".to_vec();
        std::fs::write(&read, &read_content).unwrap();
        std::fs::write(&write, &write_content).unwrap();
        let files = [&read, &write]
            .into_iter()
            .map(|path| {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .unwrap();
                rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty()).unwrap();
                file
            })
            .collect();
        Inherited {
            read,
            write,
            read_content,
            write_content,
            _files: files,
        }
    }

    /// What changed in the two files.
    fn changes(&self) -> Vec<String> {
        let mut changes = Vec::new();
        for (path, content) in [
            (&self.read, &self.read_content),
            (&self.write, &self.write_content),
        ] {
            let now = std::fs::read(path).unwrap_or_default();
            if &now != content {
                changes.push(format!(
                    "ESCAPE write outside the sandbox through an inherited descriptor: {} now holds {:?}",
                    path.display(),
                    String::from_utf8_lossy(&now)
                ));
            }
        }
        changes
    }
}

/// Secrets and templates shared by a run.
struct Run {
    secret: String,
    human_secret: String,
    /// Per target: a `.blend` whose only object is named after the human secret.
    human_blend: BTreeMap<Target, Vec<u8>>,
    root: PathBuf,
    counter: AtomicU64,
    gate_off: BTreeMap<Target, bool>,
}

/// The folders of one payload run.
struct Stage {
    root: PathBuf,
    sandbox: PathBuf,
    human: PathBuf,
    outside: PathBuf,
    tmp_canary: PathBuf,
    home_canary: PathBuf,
    fake_token: PathBuf,
}

impl Stage {
    fn create(run: &Run, target: Target, id: &str) -> Stage {
        let n = run.counter.fetch_add(1, Ordering::Relaxed);
        let root = run
            .root
            .join(format!("{}-{n}-{}", target.name(), sanitize_id(id)));
        let sandbox = root.join("sandbox");
        let outside = root.join("outside");
        std::fs::create_dir_all(&sandbox).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let sandbox = sandbox.canonicalize().unwrap();
        let human = sandbox.join("HUMAN_ONLY");
        std::fs::create_dir_all(&human).unwrap();
        std::fs::write(outside.join("secret.txt"), format!("{}\n", run.secret)).unwrap();
        std::fs::write(outside.join("victim.txt"), "the human's own file\n").unwrap();
        std::fs::write(human.join("secret.txt"), format!("{}\n", run.human_secret)).unwrap();
        if let Some(blend) = run.human_blend.get(&target) {
            std::fs::write(human.join("project.blend"), blend).unwrap();
        }
        let tag = format!("{}-{n}", std::process::id());
        let fake_token = PathBuf::from(format!("/tmp/vibe-kernel-token-escape-{tag}"));
        std::fs::write(&fake_token, format!("{}\n", run.secret)).unwrap();
        Stage {
            tmp_canary: PathBuf::from(format!("/tmp/vibe-escape-canary-{tag}")),
            home_canary: home().join(format!("vibe-escape-canary-{tag}")),
            root: root.canonicalize().unwrap(),
            sandbox,
            human,
            outside: outside.canonicalize().unwrap(),
            fake_token,
        }
    }

    fn fill(&self, code: &str, listeners: &Listeners) -> String {
        code.replace("{OUTSIDE}", &self.outside.to_string_lossy())
            .replace("{HUMAN}", &self.human.to_string_lossy())
            .replace(
                "{SECRET}",
                &self.outside.join("secret.txt").to_string_lossy(),
            )
            .replace(
                "{HUMAN_SECRET}",
                &self.human.join("secret.txt").to_string_lossy(),
            )
            .replace(
                "{HUMAN_BLEND}",
                &self.human.join("project.blend").to_string_lossy(),
            )
            .replace("{SANDBOX}", &self.sandbox.to_string_lossy())
            .replace("{PORT}", &listeners.port.to_string())
            .replace("{ABSTRACT}", &listeners.abstract_name)
            .replace("{TMP_CANARY}", &self.tmp_canary.to_string_lossy())
            .replace("{HOME_CANARY}", &self.home_canary.to_string_lossy())
            .replace("{HOME}", &home().to_string_lossy())
            .replace("{CONFIG}", &blender_config().to_string_lossy())
    }

    fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(&self.root);
        let _ = std::fs::remove_file(&self.fake_token);
        let _ = std::fs::remove_file(&self.tmp_canary);
        let _ = std::fs::remove_dir_all(&self.tmp_canary);
        let _ = std::fs::remove_file(&self.home_canary);
        let _ = std::fs::remove_dir_all(&self.home_canary);
    }
}

fn sanitize_id(id: &str) -> String {
    id.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

// ------------------------------------------------------------------ outcomes

/// What one payload run came to.
#[derive(Debug, Clone, serde::Serialize)]
struct Outcome {
    id: String,
    class: String,
    target: &'static str,
    /// The layer that stopped it (or "harmless", "error": it failed on its own and achieved
    /// nothing), or "ESCAPE" / "UNRESPONSIVE".
    layer: String,
    /// Why that layer: the marker found.
    evidence: String,
    /// What went wrong: every escape or failed check.
    failures: Vec<String>,
    /// The payload answer, shortened.
    answer: String,
    /// When the kernel that ran the payload had no process left, from the start of the call
    /// (for runs whose kernel was killed or retired).
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_ended_ms: Option<u128>,
    /// The console lines the payload caused (with `VIBE_ESCAPE_VERBOSE` only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    console: Vec<String>,
    millis: u128,
}

/// The layer a failed or finished payload points at, from its answer and the console lines it
/// caused. The answer wins over the console; within each, the first marker in this order.
fn classify(answer: &Result<Envelope, String>, console: &[String]) -> (String, String) {
    if let Ok(Envelope::Err(error)) = answer {
        if error.details.get("reason").and_then(Value::as_str) == Some("security_block") {
            let rule = error
                .details
                .get("rule")
                .and_then(Value::as_str)
                .unwrap_or("?");
            return ("gate".into(), format!("rule {rule}"));
        }
        if error.code.as_str() == "timeout" {
            if error.details.get("kernel").and_then(Value::as_str) == Some("replaced") {
                return (
                    "supervisor".into(),
                    "killed at the deadline, kernel replaced".into(),
                );
            }
            return (
                "kernel-deadline".into(),
                "interrupted by the kernel's watchdog".into(),
            );
        }
        if error.message.contains("could not be retired") {
            // The kernel that ran the code failed the bridge's intake of the scene it left (a
            // link, a FIFO, a crash while saving): the supervisor restored the state before.
            return (
                "supervisor".into(),
                format!(
                    "retiring refused, state restored: {}",
                    shorten(&error.message, 160)
                ),
            );
        }
    }
    let message = match answer {
        Ok(Envelope::Err(error)) => error.message.clone(),
        Ok(Envelope::Ok(_)) => stdout_of(answer),
        Err(e) => e.clone(),
    };
    if let Some(found) = marker(&message) {
        return found;
    }
    let tail = console.join("\n");
    if let Some((layer, evidence)) = marker(&tail) {
        return (layer, format!("{evidence} (console)"));
    }
    match answer {
        Ok(Envelope::Ok(_)) => ("harmless".into(), "ran; nothing reached".into()),
        Ok(Envelope::Err(error)) => ("error".into(), shorten(&error.message, 160)),
        Err(e) => ("error".into(), shorten(e, 160)),
    }
}

fn marker(text: &str) -> Option<(String, String)> {
    const MARKERS: [(&str, &str); 16] = [
        ("MemoryError", "rlimit"),
        ("Cannot allocate memory", "rlimit"),
        ("[Errno 12]", "rlimit"),
        ("Operation not permitted", "seccomp"),
        ("[Errno 1]", "seccomp"),
        ("Function not implemented", "seccomp"),
        ("Permission denied", "landlock"),
        ("[Errno 13]", "landlock"),
        ("Read-only file system", "namespaces"),
        ("[Errno 30]", "namespaces"),
        ("No such file or directory", "namespaces"),
        ("[Errno 2]", "namespaces"),
        ("Device or resource busy", "namespaces"),
        ("[Errno 16]", "namespaces"),
        ("Network is unreachable", "namespaces"),
        ("Connection refused", "namespaces"),
    ];
    // Blender's own words for a file it could not open or write, without the errno: every path
    // the corpus writes to is absent from the jail's mount view or mounted read-only.
    const BLENDER: [&str; 14] = [
        "Error creating file",
        "Could not create directory",
        "Cannot open file",
        "cannot open file",
        "could not be saved",
        "cannot save",
        "Could not open",
        "could not open",
        "couldn't be written",
        "failed to open blend file",
        "Cannot read file",
        "Saving preferences failed",
        "Unable to open",
        "Could not use default cache directory",
    ];
    if let Some((needle, layer)) = MARKERS.iter().find(|(needle, _)| text.contains(needle)) {
        return Some(((*layer).to_owned(), (*needle).to_owned()));
    }
    BLENDER
        .iter()
        .find(|needle| text.contains(*needle))
        .map(|needle| {
            (
                "namespaces".to_owned(),
                format!("Blender: \"{needle}\" (the path is absent or read-only in the jail)"),
            )
        })
}

fn shorten(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        text.to_owned()
    } else {
        format!("{}...", text.chars().take(n).collect::<String>())
    }
}

/// Runs one payload in a fresh supervised kernel and checks everything it may not do.
async fn run_payload(run: Arc<Run>, target: Target, payload: Payload) -> Outcome {
    let started = Instant::now();
    let stage = Stage::create(&run, target, &payload.id);
    let listeners = Listeners::open(&format!("{}-{}", target.name(), sanitize_id(&payload.id)));
    let gate_off = run.gate_off.get(&target).copied().unwrap_or(false);
    let config_before = listing(&blender_config(), false);
    let outside_before = listing(&stage.outside, true);
    let mut human_before = listing(&stage.human, true);
    let secrets = [run.secret.as_str(), run.human_secret.as_str()];
    let mut failures = Vec::new();
    let mut texts = Vec::new();

    let kernel = supervised(target, &stage.sandbox, gate_off, payload.memory).await;
    let first = kernel.current();
    let pid = first.pid().expect("a kernel pid");
    let tree = process_tree(pid);
    let console_mark = first.console().len();
    let deadline = payload.deadline_s.map_or(DEADLINE, Duration::from_secs);
    // The scene before the payload: a run that was killed or interrupted must come back to it.
    let before = call(
        &kernel,
        "scene.snapshot",
        json!({}),
        Duration::from_secs(30),
    )
    .await;
    let fingerprint_before = before
        .as_ref()
        .ok()
        .and_then(Envelope::result)
        .and_then(vibe_transport::snapshot::content_fingerprint);

    // The payload, with a watch on the processes it started from.
    let code = stage.fill(&payload.code, &listeners);
    let call_started = Instant::now();
    // When did the kernel's last process end? Watched from a thread of its own, so that nothing
    // the bridge blocks on delays the measurement.
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    {
        let tree = tree.clone();
        let watching = Arc::clone(&watching);
        std::thread::spawn(move || {
            while watching.load(Ordering::Relaxed) {
                if tree.iter().all(|p| !alive(*p)) {
                    let _ = ended_tx.send(call_started.elapsed());
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
    }
    let answer = call(&kernel, "python.exec", exec(&code), deadline).await;
    let call_took = call_started.elapsed();
    let mut kernel_ended = None;
    texts.push(answer_text(&answer));
    let replaced = !Arc::ptr_eq(&first, &kernel.current());
    if replaced || answer.is_err() {
        // The old kernel must be gone by deadline + grace (a retired kernel is killed at once).
        let budget = (deadline + KILL_GRACE + Duration::from_millis(500))
            .saturating_sub(call_started.elapsed());
        match tokio::time::timeout(budget, ended_rx).await {
            Ok(Ok(dead_after)) if dead_after > deadline + KILL_GRACE => {
                kernel_ended = Some(dead_after.as_millis());
                failures.push(format!(
                    "ESCAPE process: the old kernel lived {dead_after:?}, past deadline + {KILL_GRACE:?}"
                ));
            }
            Ok(Ok(dead_after)) => kernel_ended = Some(dead_after.as_millis()),
            _ => {
                let survivors: Vec<u32> = tree.iter().copied().filter(|p| alive(*p)).collect();
                failures.push(format!(
                    "ESCAPE process: kernel processes {survivors:?} still alive {:?} after the call \
                     began (deadline {deadline:?})",
                    call_started.elapsed()
                ));
            }
        }
    } else {
        if call_took > deadline + KILL_GRACE {
            failures.push(format!(
                "HANG: the call answered after {call_took:?} (deadline {deadline:?}) and its kernel was never killed"
            ));
        }
        let now = process_tree(pid);
        let new: Vec<u32> = now.difference(&tree).copied().collect();
        if !new.is_empty() {
            failures.push(format!(
                "ESCAPE process: new processes {new:?} in the kernel's tree"
            ));
        }
    }
    watching.store(false, Ordering::Relaxed);
    texts.extend(decide(&kernel).await);
    let payload_console: Vec<String> = first.console().into_iter().skip(console_mark).collect();
    let (mut layer, mut evidence) = classify(&answer, &payload_console);
    if let Some(from) = &payload.eperm_from
        && layer == "seccomp"
        && evidence.contains("Operation not permitted")
    {
        layer = from.clone();
        evidence = format!("{evidence} (EPERM from {from}, not seccomp)");
    }

    if let Some(name) = &payload.human_moves {
        let taken = stage.human.join(name);
        if std::fs::rename(stage.sandbox.join(name), &taken).is_ok() {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&taken)
                .unwrap();
            writeln!(file, "the human's notes: {}", run.human_secret).unwrap();
        }
        human_before = listing(&stage.human, true);
    }

    // Follow-up calls on the same supervised kernel.
    let mut after_answers = Vec::new();
    for step in &payload.after {
        let step_kernel = kernel.current();
        let mark = step_kernel.console().len();
        let answer = call(
            &kernel,
            "python.exec",
            exec(&stage.fill(step, &listeners)),
            deadline,
        )
        .await;
        texts.push(answer_text(&answer));
        texts.extend(decide(&kernel).await);
        let console: Vec<String> = step_kernel.console().into_iter().skip(mark).collect();
        texts.extend(console.iter().cloned());
        after_answers.push(shorten(&answer_text(&answer), 300));
    }

    // Does the kernel still answer?
    let status = call(&kernel, "kernel.status", json!({}), Duration::from_secs(20)).await;
    texts.push(answer_text(&status));
    let snapshot = call(
        &kernel,
        "scene.snapshot",
        json!({}),
        Duration::from_secs(30),
    )
    .await;
    texts.push(answer_text(&snapshot));
    if matches!(layer.as_str(), "supervisor" | "kernel-deadline") && payload.after.is_empty() {
        let after = snapshot
            .as_ref()
            .ok()
            .and_then(Envelope::result)
            .and_then(vibe_transport::snapshot::content_fingerprint);
        if after.is_none() || after != fingerprint_before {
            failures.push(format!(
                "RESTORE: after the {layer} stopped the payload the scene is {after:?}, not the \
                 scene before the call {fingerprint_before:?}"
            ));
        }
    }
    let answers =
        status.as_ref().is_ok_and(Envelope::is_ok) || snapshot.as_ref().is_ok_and(Envelope::is_ok);
    if !answers {
        failures.push(format!(
            "UNRESPONSIVE: kernel.status: {}; scene.snapshot: {}",
            shorten(&answer_text(&status), 200),
            shorten(&answer_text(&snapshot), 200)
        ));
    }
    texts.extend(first.console());
    texts.extend(kernel.current().console());
    let last = kernel.current();
    let last_pid = last.pid();
    let _ = tokio::time::timeout(Duration::from_secs(15), kernel.close()).await;
    drop(kernel);
    drop(last);
    drop(first);
    // Every process of every kernel of this run ends with the supervisor.
    let ended = Instant::now();
    let mut leftovers: Vec<u32> = tree
        .iter()
        .copied()
        .chain(last_pid)
        .filter(|p| alive(*p))
        .collect();
    while !leftovers.is_empty() && ended.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        leftovers.retain(|p| alive(*p));
    }
    if !leftovers.is_empty() {
        failures.push(format!(
            "ESCAPE process: {leftovers:?} alive 10 s after the kernel was closed"
        ));
    }

    // What must not have happened.
    for text in &texts {
        for secret in secrets {
            if text.contains(secret) {
                let which = if secret == run.secret {
                    "outside"
                } else {
                    "HUMAN_ONLY"
                };
                failures.push(format!(
                    "ESCAPE read: the {which} secret came back: {}",
                    shorten(text, 400)
                ));
            }
        }
    }
    failures.extend(
        files_containing(&stage.sandbox, &stage.human, &secrets)
            .into_iter()
            .map(|f| format!("ESCAPE read: {f}")),
    );
    for change in diff(&outside_before, &listing(&stage.outside, true)) {
        failures.push(format!("ESCAPE write outside the sandbox: {change}"));
    }
    for change in diff(&human_before, &listing(&stage.human, true)) {
        failures.push(format!("ESCAPE write into HUMAN_ONLY: {change}"));
    }
    for path in [&stage.tmp_canary, &stage.home_canary] {
        if std::fs::symlink_metadata(path).is_ok() {
            failures.push(format!(
                "ESCAPE write outside the sandbox: {} exists",
                path.display()
            ));
        }
    }
    for change in diff(&config_before, &listing(&blender_config(), false)) {
        failures.push(format!("ESCAPE write to the real Blender config: {change}"));
    }
    for proof in proofs(&stage.sandbox) {
        failures.push(format!(
            "ESCAPE process: {proof} made (a forbidden program or process ran)"
        ));
    }
    let reached = listeners.reached.load(Ordering::Relaxed);
    if reached > 0 {
        failures.push(format!(
            "ESCAPE network: {reached} connection(s) reached the host listeners"
        ));
    }
    drop(listeners);
    stage.cleanup();

    if failures
        .iter()
        .any(|f| f.starts_with("ESCAPE") || f.starts_with("HANG"))
    {
        layer = "ESCAPE".into();
        evidence = failures.join("; ");
    } else if !failures.is_empty() {
        layer = "UNRESPONSIVE".into();
        evidence = failures.join("; ");
    }
    let keep = if std::env::var_os("VIBE_ESCAPE_VERBOSE").is_some() {
        usize::MAX
    } else {
        600
    };
    let mut answer_summary = shorten(&answer_text(&answer), keep);
    if !after_answers.is_empty() {
        answer_summary = format!("{answer_summary} | after: {}", after_answers.join(" | "));
    }
    Outcome {
        id: payload.id,
        class: payload.class,
        target: target.name(),
        layer,
        evidence,
        failures,
        answer: answer_summary,
        kernel_ended_ms: kernel_ended,
        console: if keep == usize::MAX {
            payload_console
        } else {
            Vec::new()
        },
        millis: started.elapsed().as_millis(),
    }
}

/// Whether `VIBE_KERNEL_GATE=off` is honoured on `target`: `import os` is refused by any gate.
async fn probe_gate_off(target: Target, root: &Path) -> bool {
    let sandbox = root.join(format!("probe-{}", target.name()));
    std::fs::create_dir_all(&sandbox).unwrap();
    let sandbox = sandbox.canonicalize().unwrap();
    let kernel = supervised(target, &sandbox, true, false).await;
    let answer = call(
        &kernel,
        "python.exec",
        exec("import os\nprint(os.sep)"),
        DEADLINE,
    )
    .await;
    let _ = decide(&kernel).await;
    let _ = kernel.close().await;
    let _ = std::fs::remove_dir_all(&sandbox);
    let off = stdout_of(&answer).trim() == "/";
    println!(
        "{}: kernel gate {} ({})",
        target.name(),
        if off {
            "OFF: the jail alone is the boundary"
        } else {
            "ON: VIBE_KERNEL_GATE=off is not honoured"
        },
        shorten(&answer_text(&answer), 200)
    );
    off
}

/// A `.blend` made on `target` whose only new object is named `name` (the human's project).
async fn human_project(target: Target, root: &Path, name: &str) -> Vec<u8> {
    let sandbox = root.join(format!("project-{}", target.name()));
    std::fs::create_dir_all(&sandbox).unwrap();
    let sandbox = sandbox.canonicalize().unwrap();
    let jail = jail(&sandbox, false, false);
    let transport = StdioTransport::spawn(target.options(&jail).unwrap())
        .await
        .unwrap();
    let configured = transport.configure(&session(&sandbox)).await.unwrap();
    assert!(configured.is_ok(), "{configured:?}");
    let code = format!(
        "import bpy\nob = bpy.data.objects.new('{name}', None)\nbpy.context.scene.collection.objects.link(ob)"
    );
    let made = transport
        .call(Call::new(
            "python.exec",
            exec(&code),
            Duration::from_secs(30),
        ))
        .await
        .unwrap();
    assert!(made.is_ok(), "{made:?}");
    let path = sandbox.join("project.blend");
    let saved = transport
        .connection()
        .checkpoint(&path.to_string_lossy(), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(saved.is_ok(), "{saved:?}");
    let bytes = std::fs::read(&path).unwrap();
    let _ = transport.close().await;
    let _ = std::fs::remove_dir_all(&sandbox);
    assert!(memchr::memmem::find(&bytes, name.as_bytes()).is_some());
    bytes
}

fn report_path() -> PathBuf {
    // target/<profile>/deps/escape-<hash> -> target/
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("escape-report.json")
}

fn selected_ids() -> Option<BTreeSet<String>> {
    std::env::var("VIBE_ESCAPE_ONLY")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.split(',').map(|id| id.trim().to_owned()).collect())
}

fn table(outcomes: &[Outcome]) -> (BTreeMap<String, BTreeMap<String, usize>>, String) {
    let mut counts: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut layers = BTreeSet::new();
    for outcome in outcomes {
        *counts
            .entry(outcome.class.clone())
            .or_default()
            .entry(outcome.layer.clone())
            .or_default() += 1;
        layers.insert(outcome.layer.clone());
    }
    let layers: Vec<String> = layers.into_iter().collect();
    let mut text = format!("{:<20}", "class \\ layer");
    for layer in &layers {
        text.push_str(&format!(" {:>15}", layer));
    }
    text.push('\n');
    let mut totals = vec![0usize; layers.len()];
    for (class, row) in &counts {
        text.push_str(&format!("{class:<20}"));
        for (i, layer) in layers.iter().enumerate() {
            let n = row.get(layer).copied().unwrap_or(0);
            totals[i] += n;
            text.push_str(&format!(
                " {:>15}",
                if n == 0 {
                    "-".to_owned()
                } else {
                    n.to_string()
                }
            ));
        }
        text.push('\n');
    }
    text.push_str(&format!("{:<20}", "total"));
    for n in totals {
        text.push_str(&format!(" {n:>15}"));
    }
    text.push('\n');
    (counts, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs VIBE_LIVE"]
async fn live_escape_corpus_on_both_targets() {
    let _ = (required("VIBE_BPY_PYTHON"), required("VIBE_BLENDER"));
    let began = Instant::now();
    let rescue = FifoRescue::start();
    let corpus = corpus();
    let only = selected_ids();
    let targets = Target::selected();
    let root = std::env::temp_dir().join(format!("vibe-escape-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let _root_gone = RemoveOnDrop(root.clone());
    std::fs::create_dir_all(&root).unwrap();
    let human_secret = random_secret("HSECRET");
    let mut gate_off = BTreeMap::new();
    let mut human_blend = BTreeMap::new();
    for target in &targets {
        gate_off.insert(*target, probe_gate_off(*target, &root).await);
        human_blend.insert(*target, human_project(*target, &root, &human_secret).await);
    }
    let secret = random_secret("VSECRET");
    let inherited = Inherited::open(&root, &secret);
    let run = Arc::new(Run {
        secret,
        human_secret,
        human_blend,
        root: root.clone(),
        counter: AtomicU64::new(0),
        gate_off: gate_off.clone(),
    });
    let payloads: Vec<Payload> = corpus
        .payloads
        .iter()
        .filter(|p| only.as_ref().is_none_or(|ids| ids.contains(&p.id)))
        .cloned()
        .collect();
    let jobs: usize = std::env::var("VIBE_ESCAPE_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .unwrap_or(2)
        .max(1);
    let work: Vec<(Target, Payload)> = targets
        .iter()
        .flat_map(|t| payloads.iter().map(move |p| (*t, p.clone())))
        .collect();
    let total = work.len();
    let done = Arc::new(AtomicUsize::new(0));
    let (slow, work): (Vec<_>, Vec<_>) = work.into_iter().partition(|(_, p)| p.slow);
    let one = |(target, payload): (Target, Payload)| {
        let run = Arc::clone(&run);
        let done = Arc::clone(&done);
        async move {
            let failed = |layer: &str, why: String| Outcome {
                id: payload.id.clone(),
                class: payload.class.clone(),
                target: target.name(),
                layer: layer.into(),
                evidence: why.clone(),
                failures: vec![why],
                answer: String::new(),
                kernel_ended_ms: None,
                console: Vec::new(),
                millis: 0,
            };
            // Each run gets a runtime on threads of its own: a bridge blocked in one run (a
            // FIFO read, say) cannot delay another run's deadlines or measurements.
            let (tx, rx) = tokio::sync::oneshot::channel();
            {
                let payload = payload.clone();
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all()
                        .build()
                        .expect("a runtime for the run");
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        runtime.block_on(run_payload(run, target, payload))
                    }));
                    let _ = tx.send(outcome.map_err(|panic| {
                        panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                            .unwrap_or_default()
                    }));
                    runtime.shutdown_timeout(Duration::from_secs(5));
                });
            }
            let outcome = match tokio::time::timeout(RUN_LIMIT, rx).await {
                Ok(Ok(Ok(outcome))) => outcome,
                Ok(Ok(Err(panic))) => {
                    failed("HARNESS", format!("HARNESS: the run panicked: {panic}"))
                }
                Ok(Err(_)) => failed(
                    "HARNESS",
                    "HARNESS: the run's thread ended without an outcome".into(),
                ),
                Err(_) => failed(
                    "ESCAPE",
                    format!("HANG: the run did not finish within {RUN_LIMIT:?}"),
                ),
            };
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            println!(
                "[{n:>3}/{total}] {:<7} {:<40} {:<15} {:>6} ms  {}",
                outcome.target,
                outcome.id,
                outcome.layer,
                outcome.millis,
                shorten(&outcome.evidence, 160)
            );
            outcome
        }
    };
    let beside = futures::future::join_all(slow.into_iter().map(one));
    let pool = futures::stream::iter(work)
        .map(one)
        .buffer_unordered(jobs)
        .collect::<Vec<Outcome>>();
    let (mut outcomes, slow_outcomes) = futures::join!(pool, beside);
    outcomes.extend(slow_outcomes);
    outcomes.sort_by(|a, b| (a.target, &a.class, &a.id).cmp(&(b.target, &b.class, &b.id)));
    let elapsed = began.elapsed();

    let mut per_target = BTreeMap::new();
    let mut text = String::new();
    for target in &targets {
        let mine: Vec<Outcome> = outcomes
            .iter()
            .filter(|o| o.target == target.name())
            .cloned()
            .collect();
        let (counts, rendered) = table(&mine);
        text.push_str(&format!(
            "\n== {} (kernel gate {}) ==\n{rendered}",
            target.name(),
            if gate_off[target] { "off" } else { "on" }
        ));
        per_target.insert(target.name(), counts);
    }
    let (both, rendered) = table(&outcomes);
    text.push_str(&format!("\n== both targets ==\n{rendered}"));
    println!("{text}");
    println!(
        "{} payload runs ({} payloads x {} targets) in {:.1} s, {jobs} at a time",
        outcomes.len(),
        payloads.len(),
        targets.len(),
        elapsed.as_secs_f64()
    );
    let inherited_changes = inherited.changes();
    drop(inherited);
    for change in &inherited_changes {
        println!("{change}");
    }
    let rescued = rescue.rescued.load(Ordering::Relaxed);
    drop(rescue);
    if rescued > 0 {
        println!("the harness ended {rescued} bridge read(s) blocked on a FIFO from a kernel");
    }
    let failing: Vec<&Outcome> = outcomes.iter().filter(|o| !o.failures.is_empty()).collect();
    for outcome in &failing {
        println!(
            "FAILED {} on {}: {}",
            outcome.id,
            outcome.target,
            outcome.failures.join("; ")
        );
        println!("       answer: {}", outcome.answer);
    }
    let report = json!({
        "run_seconds": elapsed.as_secs_f64(),
        "jobs": jobs,
        "deadline_ms": DEADLINE.as_millis() as u64,
        "fifo_reads_ended_by_the_harness": rescued,
        "inherited_descriptor_writes": inherited_changes,
        "kernel_gate_off": gate_off.iter().map(|(t, off)| (t.name(), *off)).collect::<BTreeMap<_, _>>(),
        "subset": only.is_some(),
        "counts": { "by_target": per_target, "both": both },
        "table": text,
        "failures": failing.iter().map(|o| json!({"id": o.id, "target": o.target, "failures": o.failures, "answer": o.answer})).collect::<Vec<_>>(),
        "payloads": outcomes,
    });
    let path = report_path();
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!("report: {}", path.display());
    let _ = std::fs::remove_dir_all(&root);

    if only.is_none() {
        assert!(payloads.len() >= 110, "the whole corpus ran");
        for target in &targets {
            assert!(
                gate_off[target],
                "{}: VIBE_KERNEL_GATE=off was not honoured, so the corpus tested the gate, not the jail",
                target.name()
            );
        }
    }
    assert_eq!(outcomes.len(), total);
    assert!(inherited_changes.is_empty(), "{inherited_changes:?}");
    assert!(
        failing.is_empty(),
        "{} payload run(s) escaped or left the kernel unable to answer:\n{}",
        failing.len(),
        failing
            .iter()
            .map(|o| format!("  {} on {}: {}", o.id, o.target, o.failures.join("; ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VIBE_LIVE"]
async fn live_benign_corpus_runs_on_both_targets_with_the_gates_on() {
    let _ = (required("VIBE_BPY_PYTHON"), required("VIBE_BLENDER"));
    let corpus = corpus();
    let root = std::env::temp_dir().join(format!("vibe-escape-benign-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let _root_gone = RemoveOnDrop(root.clone());
    let mut failures = Vec::new();
    for target in Target::selected() {
        let sandbox = root.join(target.name());
        std::fs::create_dir_all(&sandbox).unwrap();
        let sandbox = sandbox.canonicalize().unwrap();
        let kernel = supervised(target, &sandbox, false, false).await;
        for benign in &corpus.benign {
            let answer = call(
                &kernel,
                "python.exec",
                exec(&benign.code),
                Duration::from_secs(15),
            )
            .await;
            let decided = decide(&kernel).await;
            let stdout = stdout_of(&answer);
            let ok = answer.as_ref().is_ok_and(Envelope::is_ok)
                && !decided
                    .iter()
                    .any(|t| t.starts_with("inventory:") || t.starts_with("settle:"))
                && benign
                    .expect
                    .as_ref()
                    .is_none_or(|e| stdout.contains(e.as_str()));
            println!(
                "{:<7} {:<28} {}",
                target.name(),
                benign.id,
                if ok {
                    "ok".to_owned()
                } else {
                    format!(
                        "FAILED {} {}",
                        shorten(&answer_text(&answer), 300),
                        decided.join(" ")
                    )
                }
            );
            if !ok {
                failures.push(format!(
                    "{} on {}: {}",
                    benign.id,
                    target.name(),
                    answer_text(&answer)
                ));
            }
        }
        let _ = kernel.close().await;
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(
        failures.is_empty(),
        "benign code failed:\n{}",
        failures.join("\n")
    );
}

/// Removes a test's folder when the test ends, passed or failed.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
