//! The Python kernel that runs inside Blender, shipped inside this crate.
//!
//! The kernel is plain Python (standard library only) in `kernel/` beside this crate. A binary
//! built from the crate carries it ([`KERNEL_FILES`]) and writes it out ([`write_kernel`]) to
//! start a Blender without any other file. It runs three ways:
//!
//! * `blender -b --factory-startup --python run_kernel.py -- --stdio` ([`StdioOptions::blender`]);
//! * `python run_kernel.py --stdio` with the bpy module ([`StdioOptions::bpy_python`]);
//! * as a GUI add-on listening on 127.0.0.1:9833 — build the installable zip with
//!   `python3 -m zipfile -c vibe_kernel.zip vibe-transport/kernel/vibe_kernel` and install it
//!   with Edit > Preferences > Add-ons > Install (or `blender --addons vibe_kernel`).
//!
//! Over TCP add `--tcp 127.0.0.1:PORT --token-file FILE` instead of `--stdio`.
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
//! `VIBE_BPY_PYTHON=... cargo bench --bench live_kernel` (bpy 5.0.1 headless over stdio, 2-core
//! machine; reported, not asserted): `object.info` on a 1000-object scene ~114 us per call
//! sequentially and ~67 us per call with 100 in flight (~15k calls/s), beside ~31 us for the
//! same handler called in-process in Blender (an identity cache spares the ~20 us scan of
//! `scene.objects` per lookup; it is emptied on every load, undo and `python.exec`); a
//! `scene.snapshot` of 2503 objects (~820 KB with the bridge's indices and fingerprints) ~210 ms,
//! beside ~190 ms in-process (the kernel's own JSON building dominates); `transaction.begin` +
//! `rollback` ~7 ms at 3 objects, ~18 ms at 503, ~62 ms at 1503 (save a copy, reopen it).

use std::path::{Path, PathBuf};

use crate::stdio::StdioOptions;

/// The kernel's files, by path relative to the kernel folder.
pub const KERNEL_FILES: [(&str, &str); 12] = [
    ("run_kernel.py", include_str!("../kernel/run_kernel.py")),
    (
        "vibe_kernel/__init__.py",
        include_str!("../kernel/vibe_kernel/__init__.py"),
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
        "vibe_kernel/envelope.py",
        include_str!("../kernel/vibe_kernel/envelope.py"),
    ),
    (
        "vibe_kernel/files.py",
        include_str!("../kernel/vibe_kernel/files.py"),
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
        "vibe_kernel/snapshot.py",
        include_str!("../kernel/vibe_kernel/snapshot.py"),
    ),
    (
        "vibe_kernel/state.py",
        include_str!("../kernel/vibe_kernel/state.py"),
    ),
    (
        "vibe_kernel/tools.py",
        include_str!("../kernel/vibe_kernel/tools.py"),
    ),
    (
        "vibe_kernel/wire.py",
        include_str!("../kernel/vibe_kernel/wire.py"),
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
