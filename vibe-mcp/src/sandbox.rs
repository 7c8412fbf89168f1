//! The sandbox folder: where the agent may write (renders, saved files), one per user by
//! default, private to that user.
//!
//! The default is `$XDG_DATA_HOME/vibe/sandbox`, or `~/.local/share/vibe/sandbox` when
//! `XDG_DATA_HOME` is unset or not absolute (the XDG rule), or `%LOCALAPPDATA%\vibe\sandbox`
//! on a system without `HOME`. A missing folder is created with mode 0700 (its missing parents
//! too). An existing folder is checked on Unix:
//!
//! * owned by another user, or writable by group or others: **refused**. Someone else could
//!   plant files or links there that the agent would then read, open or overwrite.
//! * readable by group or others: **served, with a warning** on stderr (other users could see
//!   the renders and saved files); `chmod 700` the folder to silence it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Why the sandbox cannot be used.
#[derive(Debug)]
pub struct SandboxError(pub String);

impl std::fmt::Display for SandboxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The per-user default sandbox, from the environment `var` reads.
pub fn default_sandbox(var: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, SandboxError> {
    let absolute = |name: &str| {
        var(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    let data = absolute("XDG_DATA_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".local").join("share")))
        .or_else(|| absolute("LOCALAPPDATA"))
        .ok_or_else(|| {
            SandboxError(
                "no per-user data folder (XDG_DATA_HOME, HOME or LOCALAPPDATA): name one with --sandbox"
                    .into(),
            )
        })?;
    Ok(data.join("vibe").join("sandbox"))
}

/// Makes `dir` ready to serve: creates it private (0700) when missing, or checks the one that
/// exists. Returns the warnings to print.
pub fn prepare(dir: &Path) -> Result<Vec<String>, SandboxError> {
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            create_private(dir)
                .map_err(|e| SandboxError(format!("cannot create the sandbox {shown}: {e}")))?;
            Ok(Vec::new())
        }
        Err(e) => Err(SandboxError(format!("the sandbox {shown}: {e}"))),
        Ok(meta) if !meta.is_dir() => {
            Err(SandboxError(format!("the sandbox {shown} is not a folder")))
        }
        Ok(meta) => check_existing(dir, &meta),
    }
}

#[cfg(unix)]
fn create_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // The umask may have taken bits away, never added them; set the folder's own mode exactly.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(not(unix))]
fn create_private(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn check_existing(dir: &Path, meta: &std::fs::Metadata) -> Result<Vec<String>, SandboxError> {
    use std::os::unix::fs::MetadataExt;
    let shown = dir.display();
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(SandboxError(format!(
            "the sandbox {shown} belongs to user {}, not to this user ({me}): use a folder of your own",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(SandboxError(format!(
            "the sandbox {shown} is writable by other users (mode {mode:o}): `chmod 700` it or pick another folder"
        )));
    }
    if mode & 0o077 != 0 {
        return Ok(vec![format!(
            "the sandbox {shown} is readable by other users (mode {mode:o}); `chmod 700` it to keep renders and files private"
        )]);
    }
    Ok(Vec::new())
}

#[cfg(not(unix))]
fn check_existing(_dir: &Path, _meta: &std::fs::Metadata) -> Result<Vec<String>, SandboxError> {
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| OsString::from(value))
        }
    }

    #[test]
    fn the_default_follows_xdg_then_home() {
        assert_eq!(
            default_sandbox(env(&[("XDG_DATA_HOME", "/data"), ("HOME", "/home/u")])).unwrap(),
            PathBuf::from("/data/vibe/sandbox")
        );
        // A relative XDG_DATA_HOME is ignored, as the XDG rule says.
        assert_eq!(
            default_sandbox(env(&[("XDG_DATA_HOME", "data"), ("HOME", "/home/u")])).unwrap(),
            PathBuf::from("/home/u/.local/share/vibe/sandbox")
        );
        assert!(
            default_sandbox(env(&[]))
                .unwrap_err()
                .0
                .contains("--sandbox")
        );
    }

    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[cfg(unix)]
    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_missing_sandbox_is_created_private_with_its_parents() {
        let temp = tempfile::tempdir().unwrap();
        let data = temp.path().join("data");
        let dir = default_sandbox(env(&[("XDG_DATA_HOME", data.to_str().unwrap())])).unwrap();
        assert_eq!(prepare(&dir).unwrap(), Vec::<String>::new());
        assert!(dir.is_dir());
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&data.join("vibe")), 0o700);
        // Prepared again: the same folder, nothing to say.
        assert!(prepare(&dir).unwrap().is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn an_existing_sandbox_open_to_others_is_refused_or_warned_about() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("sandbox");
        std::fs::create_dir(&dir).unwrap();
        set_mode(&dir, 0o755);
        let warnings = prepare(&dir).unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("readable by other users (mode 755)"),
            "{warnings:?}"
        );
        // Its mode is the user's to change, not the server's.
        assert_eq!(mode(&dir), 0o755);
        for open in [0o775, 0o777, 0o702] {
            set_mode(&dir, open);
            let refused = prepare(&dir).unwrap_err().0;
            assert!(refused.contains("writable by other users"), "{refused}");
        }
        set_mode(&dir, 0o700);
        assert!(prepare(&dir).unwrap().is_empty());
    }

    #[test]
    fn a_file_is_not_a_sandbox() {
        let temp = tempfile::tempdir().unwrap();
        let file = temp.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(prepare(&file).unwrap_err().0.contains("not a folder"));
    }
}
