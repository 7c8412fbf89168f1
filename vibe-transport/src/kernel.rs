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

use std::path::{Path, PathBuf};

use crate::stdio::StdioOptions;

/// The kernel's files, by path relative to the kernel folder.
pub const KERNEL_FILES: [(&str, &str); 7] = [
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
        "vibe_kernel/envelope.py",
        include_str!("../kernel/vibe_kernel/envelope.py"),
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

/// A fresh folder for the kernel under the system's temp folder, unique to this process.
fn kernel_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "vibe-kernel-{}-{}",
        std::process::id(),
        crate::rng::unique_suffix()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

impl StdioOptions {
    /// A headless Blender binary running the kernel over stdio, from its factory settings.
    pub fn blender(binary: impl Into<PathBuf>) -> std::io::Result<StdioOptions> {
        let script = write_kernel(&kernel_dir()?)?;
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
        let script = write_kernel(&kernel_dir()?)?;
        Ok(StdioOptions::new(python)
            .arg(script.into_os_string())
            .arg("--stdio")
            .arg("--factory"))
    }
}
