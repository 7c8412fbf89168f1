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
//! `VIBE_BPY_PYTHON=... cargo bench --bench live_kernel`, measured 2026-11-25 on a 2-core Linux
//! VM (Firecracker) with bpy 5.0.1 headless over stdio, four runs (the fourth after callers
//! began reading their own answers; the third run's 4,000-object group left out: another
//! Blender competed for the CPU); each figure beside baselines of the same run (the bench
//! prints the ratios; reported, not asserted). The README's speed section has the full table.
//!
//! * `object.info` costs the same at 1,000, 2,000 and 4,000 objects (4k / 1k: 0.99-1.07x):
//!   8.6-9.5 us in-process, 10.5-11.4 us with the kernel's JSON work (the call frame's line
//!   decoded, the answer encoded) on a scene made by agent code, as the bench's kernels make
//!   theirs. A scene index answers collection membership and names instead of Blender's
//!   per-object scans (it was 54 / 90 / 164 us before), and a result is encoded once (`ok`
//!   keeps the text its JSON-safety check encoded, `envelope.Checked`). Through the transport
//!   18.0-19.6 us: 1.69-1.85x the handler with JSON, ~1.25x the machine's floor plus the
//!   handler. The floor (the same Python answering a ready line over pipes, no Blender, both
//!   sides polling before they sleep) is 4.0-5.1 us; the bridge against a kernel that answers
//!   at once is 8.4-9.4 us, so the bridge's own share is 3.6-4.5 us, of which parsing the answer
//!   into an [`Envelope`](vibe_errors::Envelope) is 1-1.5 us (serde_json's `Value`). A caller
//!   waiting for its answer reads the stream itself, one scheduler round fewer per call. The
//!   kernel runs a quick lone call straight from its loop, reading on its main thread; both
//!   sides poll briefly before they sleep (PROTOCOL.md §5): waking a sleeping CPU of this VM
//!   costs ~30-60 us.
//! * Batched (100 calls in one frame): 14.2-15.1 us per call, 1.31-1.40x the handler with JSON.
//!   In-process, a batch's calls cost what lone calls do once the startup heap is frozen (a
//!   batch allocates enough to set off Python's collections often). The same 100 calls made at
//!   once without a batch: 15.4-16.9 us per call.
//! * Through the pipeline with the audit writer on a file: 22.7-24.8 us, 1.19-1.36x the
//!   transport; the audit writer adds 9-24%. Callers render their records (redacted as they
//!   are written) and the writer's thread only chains and writes them, waking once per burst.
//!   Measured apart (2026-11-25, 200,000 calls' records): ~0.9 us of CPU per call for the
//!   caller's two records and ~1.7 us for the writer's thread, most of it blake3, on two cores
//!   the kernel and the caller keep busy while they poll.
//! * `object.move`: 19.4-20.9 us with JSON, 29.0-31.9 us through the transport, 33.9-37.4 us
//!   through the pipeline.
//! * `scene.snapshot`: 11.3-16.3 / 27.4-31.9 / 51.8-67.0 ms in-process with JSON at 1k / 2k /
//!   4k objects (linear), 12.5-16.6 / 28.8-34.1 / 59.9-64.0 ms through the transport (4k / 2k:
//!   1.87-2.08x), 15.0-20.7 / 34.5-40.5 / 67.6-84 ms through the pipeline, whose return stage
//!   seals the snapshot (its fingerprints and indices) over the parts where they lie.
//! * `python.exec` outside a transaction, in a kernel where code that writes ran (the bench's
//!   scenes are made by agent code): `print(1)` 0.17-0.21 ms through the transport, with no
//!   rollback point (code proven read-only that imports nothing but `math` and `mathutils`
//!   reaches nothing earlier code could leave behind); a read of `bpy.data` 20.3-27.5 ms at
//!   1,000 objects and code that may write 18.4-24.7 ms (third and fourth runs): a `.blend`
//!   rollback point, the actuator lock's inventories before and after, and the kernel state
//!   check (~2,700 classes and ~4,400 functions compared; the ~1,500 containers those classes
//!   hold, compared since these runs, add ~3 ms), all growing with the scene (~30-40
//!   ms at 2,000). Through the pipeline `print(1)` is 1.06-1.41x the transport: the bridge's
//!   code gate parses on a stack segment of the caller's thread.
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
