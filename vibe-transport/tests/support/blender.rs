//! Blender running a script headless, as the live tests of both crates start it (the vibe-exec
//! tests include this file by path).

use std::path::Path;
use std::process::Command;

/// `blender -b` with factory settings running `script`; an error in the script fails Blender.
/// Arguments for the script follow a `--`.
pub fn headless_script(blender: &Path, script: &Path) -> Command {
    let mut command = Command::new(blender);
    command
        .args([
            "-b",
            "--factory-startup",
            "--python-exit-code",
            "1",
            "--python",
        ])
        .arg(script);
    command
}
