//! The Python kernel that runs inside Blender, shipped inside this crate.
//!
//! The kernel is plain Python (standard library only) in `kernel/` beside this crate. A binary
//! built from the crate carries it ([`KERNEL_FILES`]) and writes it out ([`write_kernel`]) to
//! start a Blender without any other file. It runs three ways:
//!
//! * `blender -b --factory-startup --python run_kernel.py -- --stdio` ([`StdioOptions::blender`]);
//! * `python run_kernel.py --stdio` with the bpy module ([`StdioOptions::bpy_python`]);
//! * as a GUI add-on listening on 127.0.0.1:9833 (see below).
//!
//! Over TCP add `--tcp 127.0.0.1:PORT --token-file FILE` instead of `--stdio`.
//!
//! ## The GUI add-on (a Blender extension)
//!
//! `python3 vibe-transport/kernel/build_extension.py dist/` (standard library only) builds
//! `dist/vibe_kernel-<version>.zip`: one `vibe_kernel/` folder, no tests or caches, entries
//! sorted with fixed timestamps, so the same source gives the same bytes. Blender 4.2 and later
//! install it as an extension (Edit > Preferences > Get Extensions > Install from Disk; its
//! `blender_manifest.toml` declares the network and files permissions), Blender 3.4 to 4.1 as a
//! legacy add-on (Edit > Preferences > Add-ons > Install; `bl_info`). The add-on's preferences
//! hold its port, bind address and token; `VIBE_PORT`, `VIBE_BIND` and `VIBE_TOKEN` override
//! them, and without a token one is generated into a file only this user can read (its path is
//! printed, the token never is). A bind address other than loopback is refused unless an
//! explicit token of at least 16 characters is set, and then it is warned about on the console
//! and in the preferences. Changes apply when the add-on is enabled again.
//!
//! ## Transactions
//!
//! Headless, a transaction is a snapshot of the file: `begin` saves a copy to a temporary
//! `.blend` (with fake users on unused data-blocks, so nothing is lost), `rollback` reopens it;
//! every `python.exec` takes the same snapshot, so a failed or interrupted run is rolled back.
//! In the GUI add-on nothing is reopened: every agent change is one undo step named after the
//! tool and its object (`Vibe: object.move Cube`, so Ctrl+Z takes it back), `begin` marks the
//! undo history, and `rollback` steps back to the mark, keeping the person's file, its path
//! and their history before `begin`. If the person changed the scene since `begin`, rollback
//! is refused (`rule: human_edits`, naming what changed) unless `force` is given.
//!
//! ## Live figures
//!
//! `VIBE_BPY_PYTHON=... cargo bench --bench live_kernel`, measured 2026-11-24 on a 2-core Linux
//! VM (Firecracker) with bpy 5.0.1 headless over stdio, five runs (the third after the audit
//! and code-gate changes of that day, the last two after the snapshot-sealing and startup-heap
//! changes); each figure beside baselines of the same run (the bench prints the ratios;
//! reported, not asserted):
//!
//! * `object.info` costs the same at 1,000, 2,000 and 4,000 objects: ~11 us in-process,
//!   12.8-13.2 us with the kernel's JSON work (the call frame's line decoded, the answer
//!   encoded; a scene index answers collection membership and names, instead of Blender's
//!   per-object scans: it was 54 / 90 / 164 us before). A result is encoded once: `ok` keeps the
//!   text its JSON-safety check encoded (`envelope.Checked`), and the answer is written around
//!   it with the id's own text (the JSON encoder cost ~0.65 us per answer; it was 14 us with JSON).
//!   Through the transport 21.0-22.4 us: 1.59-1.74x the handler with JSON (it was 23.5-25 us,
//!   1.68-1.77x), 1.18-1.28x the machine's floor plus the handler. The floor (the same Python
//!   answering a ready line over pipes, no Blender, both sides polling before they sleep) is
//!   4.6 us; the bridge against a kernel that answers at once is 8.7 us, so the bridge's own
//!   share is ~4 us, of which parsing the answer into an [`Envelope`](vibe_errors::Envelope)
//!   is 1-1.5 us (serde_json's `Value`). The kernel runs a quick lone call straight from its
//!   loop. It was ~130-145 us on 2026-11-23: the kernel read frames on a thread of its own and handed
//!   each to the main thread, and both sides slept between frames; waking a sleeping CPU of this
//!   VM costs ~30-60 us. The stdio kernel now reads on its main thread and both sides poll
//!   briefly before they sleep (PROTOCOL.md §5).
//! * Batched (100 calls in one frame): 16.3-16.8 us per call (it was 17-18), 1.26-1.32x the
//!   handler with JSON. The same 100 calls made at once without a batch: ~18 us per call.
//! * Through the pipeline with the audit writer on a file: 25.7-27.5 us (it was 29-31), 1.18-1.28x
//!   the transport; the audit writer adds 9-21% (it was 14-43%; 10-12% in the third run, where
//!   rendering a call's two records cost its caller ~0.3 us less, 9-18% in the last two). Callers
//!   render their records (redacted as they are written, straight from the call's arguments and its
//!   envelope, no copy) and the writer's thread only chains and writes them, waking once per burst:
//!   its CPU per second of calls fell from ~145 to ~55 ms, which on two cores is taken from the
//!   caller or from Blender.
//! * `object.move`: ~21 us in-process, ~24 us with JSON, 37-39 us through the transport (it was
//!   41-42), 43-45 us through the pipeline.
//! * `scene.snapshot`, last two runs: 12-13 / 25-26 / 52-53 ms in-process with JSON at 1k /
//!   2k / 4k objects (linear; it was quadratic), 13-14 / 27-28 / 57-60 ms through the
//!   transport: 4k is 2.06-2.14x 2k. Through the pipeline with audit 16 / 33-34 / 70-73 ms (it
//!   was 22-23 / 47-49 / 110-112): the pipeline's return stage seals the snapshot (its
//!   fingerprints and indices) over the parts where they lie, where it fingerprinted copies of
//!   every object and of the whole snapshot; sealing 4k objects takes ~8 ms. The transport's
//!   figures fell in the same runs (4k: 69-71 -> 57-60 ms), beside the headless kernel's frozen
//!   startup heap (a snapshot allocates enough to set off Python's full collections); the two
//!   were not measured apart. The transport does not seal.
//! * `python.exec` of `print(1)` outside a transaction at 1,000 objects: 0.17-0.18 ms through
//!   the transport (it was 24 ms): code the kernel proves read-only needed no rollback point.
//!   Since 2026-11-24 (after these runs) that holds only while no agent code that may write has
//!   run in the kernel's process: what such code leaves on a module runs when later code reads
//!   it. The bench fills its scenes with agent code, so its next runs time this call with a
//!   rollback point. Code that writes, and any code after it, saves a rollback point and takes the
//!   lock's inventories: ~18 ms at 1,000 objects, in-process. Through the pipeline 0.18-0.23 ms,
//!   1.02-1.36x the transport (last three runs; it was 0.38-0.60 ms): the bridge's code gate parses
//!   on a stack segment of the caller's thread, where handing each parse to a thread of its own and
//!   back cost 130-170 us beside a kernel answering agent code (thread wake-ups on a busy 2-vCPU
//!   VM), 10x the parse.
//! * `transaction.begin` + `rollback` saves a copy and reopens it: it grows with the scene.

use std::path::{Path, PathBuf};

#[cfg(feature = "stdio")]
use crate::stdio::StdioOptions;

/// The kernel's tool table as it ships beside the kernel (`vibe_kernel/registry.json`): each
/// tool of `registry` with whether it changes the scene, the capabilities it needs and whether
/// its time class is quick (the stdio kernel watches the others for cancels). The
/// kernel builds its table from this file and refuses to start with a tool it does not list;
/// a test keeps the shipped file equal to this rendering of the default registry.
pub fn kernel_registry_json(registry: &vibe_contract::ToolRegistry) -> String {
    let tools: std::collections::BTreeMap<&str, serde_json::Value> = registry
        .tools()
        .iter()
        .map(|spec| {
            (
                spec.name.as_str(),
                serde_json::json!({
                    "mutates": spec.mutates(),
                    "capabilities": spec.requires.capabilities,
                    "quick": spec.time_class == vibe_contract::TimeClass::Quick,
                }),
            )
        })
        .collect();
    let table = serde_json::json!({
        "registry": registry.registry,
        "version": registry.version.to_string(),
        "tools": tools,
    });
    let mut text = serde_json::to_string_pretty(&table).unwrap_or_default();
    text.push('\n');
    text
}

/// The kernel's files, by path relative to the kernel folder.
pub const KERNEL_FILES: [(&str, &str); 38] = [
    ("run_kernel.py", include_str!("../kernel/run_kernel.py")),
    (
        "vibe_kernel/__init__.py",
        include_str!("../kernel/vibe_kernel/__init__.py"),
    ),
    (
        "vibe_kernel/addon_settings.py",
        include_str!("../kernel/vibe_kernel/addon_settings.py"),
    ),
    (
        "vibe_kernel/agent_code.py",
        include_str!("../kernel/vibe_kernel/agent_code.py"),
    ),
    (
        "vibe_kernel/app_handlers.py",
        include_str!("../kernel/vibe_kernel/app_handlers.py"),
    ),
    (
        "vibe_kernel/blender_manifest.toml",
        include_str!("../kernel/vibe_kernel/blender_manifest.toml"),
    ),
    (
        "vibe_kernel/channel.py",
        include_str!("../kernel/vibe_kernel/channel.py"),
    ),
    (
        "vibe_kernel/code_gate.py",
        include_str!("../kernel/vibe_kernel/code_gate.py"),
    ),
    (
        "vibe_kernel/code_policy.py",
        include_str!("../kernel/vibe_kernel/code_policy.py"),
    ),
    (
        "vibe_kernel/codeexec.py",
        include_str!("../kernel/vibe_kernel/codeexec.py"),
    ),
    (
        "vibe_kernel/confine.py",
        include_str!("../kernel/vibe_kernel/confine.py"),
    ),
    (
        "vibe_kernel/deadline.py",
        include_str!("../kernel/vibe_kernel/deadline.py"),
    ),
    (
        "vibe_kernel/envelope.py",
        include_str!("../kernel/vibe_kernel/envelope.py"),
    ),
    (
        "vibe_kernel/files.py",
        include_str!("../kernel/vibe_kernel/files.py"),
    ),
    (
        "vibe_kernel/gatekeeper.py",
        include_str!("../kernel/vibe_kernel/gatekeeper.py"),
    ),
    (
        "vibe_kernel/headless.py",
        include_str!("../kernel/vibe_kernel/headless.py"),
    ),
    (
        "vibe_kernel/index.py",
        include_str!("../kernel/vibe_kernel/index.py"),
    ),
    (
        "vibe_kernel/lock.py",
        include_str!("../kernel/vibe_kernel/lock.py"),
    ),
    (
        "vibe_kernel/materials.py",
        include_str!("../kernel/vibe_kernel/materials.py"),
    ),
    (
        "vibe_kernel/objects.py",
        include_str!("../kernel/vibe_kernel/objects.py"),
    ),
    (
        "vibe_kernel/preferences.py",
        include_str!("../kernel/vibe_kernel/preferences.py"),
    ),
    (
        "vibe_kernel/read_only.py",
        include_str!("../kernel/vibe_kernel/read_only.py"),
    ),
    (
        "vibe_kernel/reads.py",
        include_str!("../kernel/vibe_kernel/reads.py"),
    ),
    (
        "vibe_kernel/registry.json",
        include_str!("../kernel/vibe_kernel/registry.json"),
    ),
    (
        "vibe_kernel/snapshot.py",
        include_str!("../kernel/vibe_kernel/snapshot.py"),
    ),
    (
        "vibe_kernel/state.py",
        include_str!("../kernel/vibe_kernel/state.py"),
    ),
    (
        "vibe_kernel/stdio.py",
        include_str!("../kernel/vibe_kernel/stdio.py"),
    ),
    (
        "vibe_kernel/tcp.py",
        include_str!("../kernel/vibe_kernel/tcp.py"),
    ),
    (
        "vibe_kernel/tools.py",
        include_str!("../kernel/vibe_kernel/tools.py"),
    ),
    (
        "vibe_kernel/transactions.py",
        include_str!("../kernel/vibe_kernel/transactions.py"),
    ),
    (
        "vibe_kernel/wire.py",
        include_str!("../kernel/vibe_kernel/wire.py"),
    ),
    (
        "vibe_kernel/look.py",
        include_str!("../kernel/vibe_kernel/look.py"),
    ),
    (
        "vibe_kernel/animate.py",
        include_str!("../kernel/vibe_kernel/animate.py"),
    ),
    (
        "vibe_kernel/exchange.py",
        include_str!("../kernel/vibe_kernel/exchange.py"),
    ),
    (
        "vibe_kernel/import_refs.py",
        include_str!("../kernel/vibe_kernel/import_refs.py"),
    ),
    (
        "vibe_kernel/import_guard.py",
        include_str!("../kernel/vibe_kernel/import_guard.py"),
    ),
    (
        "vibe_kernel/module_views.py",
        include_str!("../kernel/vibe_kernel/module_views.py"),
    ),
    (
        "vibe_kernel/kernel_state.py",
        include_str!("../kernel/vibe_kernel/kernel_state.py"),
    ),
];

/// Writes the kernel into `dir` (created if needed) and returns the path of `run_kernel.py`.
pub fn write_kernel(dir: &Path) -> std::io::Result<PathBuf> {
    for (relative, text) in KERNEL_FILES {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text)?;
    }
    Ok(dir.join("run_kernel.py"))
}

/// The kernel's folder under the system's temp folder, named by a hash of its files: every
/// start of the same kernel uses the same folder (no litter), a changed kernel gets its own.
/// Written into a private folder first and moved into place, so a reader never sees half.
pub fn kernel_dir() -> std::io::Result<PathBuf> {
    let mut hasher = blake3::Hasher::new();
    for (relative, text) in KERNEL_FILES {
        hasher.update(relative.as_bytes());
        hasher.update(&[0]);
        hasher.update(text.as_bytes());
        hasher.update(&[0]);
    }
    let hash = hasher.finalize().to_hex();
    let base = private_base()?;
    let dir = base.join(format!("vibe-kernel-{}", &hash[..16]));
    if dir.join("run_kernel.py").is_file() {
        return Ok(dir);
    }
    let staging = base.join(format!(
        "vibe-kernel-staging-{}-{}",
        std::process::id(),
        crate::rng::unique_suffix()
    ));
    write_kernel(&staging)?;
    match std::fs::rename(&staging, &dir) {
        Ok(()) => Ok(dir),
        // Another process put the same kernel there first.
        Err(_) if dir.join("run_kernel.py").is_file() => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(dir)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

/// `<temp>/vibe-<uid>`: a folder only this user owns and can write, so that nobody else can
/// plant a kernel where this user's Blender would run it, or a link where a default file of
/// this user's will be written.
pub fn private_base() -> std::io::Result<PathBuf> {
    let uid = rustix::process::geteuid().as_raw();
    let base = std::env::temp_dir().join(format!("vibe-{uid}"));
    match std::fs::create_dir(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::symlink_metadata(&base)?;
        let private = meta.is_dir() && meta.uid() == uid;
        if private && meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700))?;
        }
        if !private {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{} is not a private folder of this user", base.display()),
            ));
        }
    }
    Ok(base)
}

#[cfg(feature = "stdio")]
impl StdioOptions {
    /// A headless Blender binary running the kernel over stdio, from its factory settings.
    pub fn blender(binary: impl Into<PathBuf>) -> std::io::Result<StdioOptions> {
        let script = kernel_dir()?.join("run_kernel.py");
        Ok(StdioOptions::new(binary)
            .arg("-b")
            .arg("--factory-startup")
            .arg("--python-exit-code")
            .arg("1")
            .arg("--python")
            .arg(script.into_os_string())
            .arg("--")
            .arg("--stdio"))
    }

    /// A Python with the bpy module running the kernel over stdio, from the factory scene.
    pub fn bpy_python(python: impl Into<PathBuf>) -> std::io::Result<StdioOptions> {
        let script = kernel_dir()?.join("run_kernel.py");
        Ok(StdioOptions::new(python)
            .arg(script.into_os_string())
            .arg("--stdio")
            .arg("--factory"))
    }
}

#[cfg(test)]
mod tests {
    use super::KERNEL_FILES;

    /// Every file in the kernel's folder is one a binary of this crate writes out, and the
    /// other way round: the add-on's zip (`build_extension.py`, which leaves out caches and
    /// hidden files) and `write_kernel` hold the same kernel.
    #[test]
    fn every_file_of_the_kernel_folder_is_listed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernel/vibe_kernel");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let name = entry.file_name().into_string().ok()?;
                let shipped = entry.file_type().ok()?.is_file()
                    && !name.starts_with('.')
                    && !name.ends_with(".pyc")
                    && !name.ends_with('~');
                shipped.then(|| format!("vibe_kernel/{name}"))
            })
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = KERNEL_FILES
            .iter()
            .map(|(path, _)| path.to_string())
            .filter(|path| path.starts_with("vibe_kernel/"))
            .collect();
        listed.sort();
        assert_eq!(listed, on_disk);
    }
}
