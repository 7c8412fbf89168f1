//! What the jail's file system holds, and the bubblewrap arguments that build it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{HUMAN_ONLY, JAIL_KERNEL_DIR, JAIL_LAUNCHER_PATH};

/// Host files a dynamically linked program and Python need from `/etc`.
const ETC_FILES: [&str; 6] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/fonts",
];

/// The jail's own folders on the host: the kernel's files (read-only inside), the private
/// folder (the kernel's temp, home and Blender config; writable inside), and an empty folder
/// that covers `HUMAN_ONLY/`. Removed when the last holder drops it.
#[derive(Debug)]
pub struct JailDirs {
    /// The root of the jail's folders.
    pub root: PathBuf,
    /// The kernel's files.
    pub kernel: PathBuf,
    /// The kernel's private, writable folder.
    pub private: PathBuf,
    /// An empty folder, mounted read-only over `HUMAN_ONLY/`.
    pub empty: PathBuf,
}

impl JailDirs {
    /// Fresh folders under `root` (default: the system's temp folder), private to this user.
    pub fn create(root: Option<&Path>) -> std::io::Result<JailDirs> {
        let base = root.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let dir = base.join(format!(
            "vibe-jail-{}-{}",
            std::process::id(),
            crate::rng::unique_suffix()
        ));
        let dirs = JailDirs {
            kernel: dir.join("kernel"),
            private: dir.join("private"),
            empty: dir.join("empty"),
            root: dir,
        };
        for path in [&dirs.root, &dirs.kernel, &dirs.private, &dirs.empty] {
            std::fs::create_dir_all(path)?;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dirs.root, std::fs::Permissions::from_mode(0o700))?;
            std::fs::set_permissions(&dirs.empty, std::fs::Permissions::from_mode(0o555))?;
        }
        Ok(dirs)
    }
}

impl Drop for JailDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The canonical sandbox, created if needed, with its `HUMAN_ONLY/` folder present so the
/// cover always has a place (and agent code cannot create one for the human to use later).
pub fn prepare_sandbox(sandbox: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(sandbox)?;
    let sandbox = sandbox.canonicalize()?;
    let human = sandbox.join(HUMAN_ONLY);
    if !human.exists() {
        std::fs::create_dir(&human)?;
    }
    Ok(sandbox)
}

/// Every spelling of `HUMAN_ONLY` directly in the sandbox (case differs on some file systems).
fn human_only_folders(sandbox: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(sandbox) else {
        return vec![sandbox.join(HUMAN_ONLY)];
    };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .eq_ignore_ascii_case(HUMAN_ONLY)
        })
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| entry.path())
        .collect()
}

/// The folders a program needs to read: the installation it really is in (links resolved),
/// and for a Python virtual environment the environment and the base interpreter's prefix
/// (from `pyvenv.cfg`). Never `/`, nor `home` or a folder above it: those hold the user's own
/// files (keys, configuration); name a narrower folder with [`Jail::read_root`](super::Jail::read_root).
pub fn runtime_roots(program: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    // `<prefix>/bin/<program>` -> `<prefix>`; a binary not in a `bin` folder -> its folder.
    fn prefix_of(binary: &Path) -> Option<PathBuf> {
        let dir = binary.parent()?;
        let prefix = if dir.file_name().is_some_and(|n| n == "bin") {
            dir.parent().unwrap_or(dir)
        } else {
            dir
        };
        Some(prefix.to_path_buf())
    }
    let mut roots = Vec::new();
    if let Ok(real) = program.canonicalize() {
        roots.extend(prefix_of(&real));
    }
    if let Some(venv) = program.parent().and_then(Path::parent)
        && let Ok(config) = std::fs::read_to_string(venv.join("pyvenv.cfg"))
    {
        // The virtual environment itself (its site-packages hold bpy).
        roots.push(venv.to_path_buf());
        for line in config.lines() {
            if let Some((key, value)) = line.split_once('=')
                && key.trim() == "home"
            {
                roots.extend(prefix_of(&Path::new(value.trim()).join("python")));
            }
        }
    }
    let home = home.map(|h| h.canonicalize().unwrap_or_else(|_| h.to_path_buf()));
    let mut kept: Vec<PathBuf> = roots
        .into_iter()
        .map(|root| root.canonicalize().unwrap_or(root))
        .filter(|root| {
            root != Path::new("/")
                && root.is_dir()
                && home.as_ref().is_none_or(|home| !home.starts_with(root))
        })
        .collect();
    kept.sort();
    kept.dedup();
    kept
}

/// Everything the bubblewrap command line needs.
pub struct Plan<'a> {
    pub dirs: &'a JailDirs,
    pub sandbox: &'a Path,
    pub read_roots: &'a [PathBuf],
    pub launcher: &'a Path,
    pub memory_mib: u64,
    pub best_effort: bool,
}

impl Plan<'_> {
    /// `bwrap ... -- vibe-jail ... --` (the kernel's program follows).
    pub fn bwrap_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = [
            "--unshare-user",
            "--unshare-all",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
            args.extend(items.iter().map(|item| item.as_ref().to_os_string()));
        };
        // Merged-/usr systems link these into /usr; others have real folders.
        for top in ["/bin", "/sbin", "/lib", "/lib32", "/lib64"] {
            let path = Path::new(top);
            match std::fs::read_link(path) {
                Ok(target) => push(&[&"--symlink", &target, &top]),
                Err(_) if path.is_dir() => push(&[&"--ro-bind", &top, &top]),
                Err(_) => {}
            }
        }
        for file in ETC_FILES {
            push(&[&"--ro-bind-try", &file, &file]);
        }
        push(&[&"--proc", &"/proc", &"--dev", &"/dev"]);
        for root in self.read_roots {
            if !root.starts_with("/usr") {
                push(&[&"--ro-bind", root, root]);
            }
        }
        // A project root may hold the human's HUMAN_ONLY/ too: covered like the sandbox's.
        for root in self.read_roots.iter().filter(|r| !r.starts_with("/usr")) {
            for human in human_only_folders(root).into_iter().filter(|h| h.is_dir()) {
                push(&[&"--ro-bind", &self.dirs.empty, &human]);
            }
        }
        push(&[
            &"--ro-bind",
            &self.dirs.kernel,
            &JAIL_KERNEL_DIR,
            &"--ro-bind",
            &self.launcher,
            &JAIL_LAUNCHER_PATH,
            &"--bind",
            &self.dirs.private,
            &self.dirs.private,
            &"--bind",
            &self.sandbox,
            &self.sandbox,
        ]);
        for human in human_only_folders(self.sandbox) {
            push(&[&"--ro-bind", &self.dirs.empty, &human]);
        }
        push(&[&"--remount-ro", &"/", &"--chdir", &self.dirs.private]);
        push(&[&"--", &JAIL_LAUNCHER_PATH]);
        for root in self.launcher_reads() {
            push(&[&"--read", &root]);
        }
        push(&[
            &"--write",
            &self.sandbox,
            &"--write",
            &self.dirs.private,
            &"--memory-mib",
            &self.memory_mib.to_string(),
            &"--exec-filter",
            &self.dirs.private.join("exec-filter.bpf"),
        ]);
        if self.best_effort {
            push(&[&"--best-effort"]);
        }
        push(&[&"--"]);
        args
    }

    /// What Landlock lets the kernel read (and execute).
    fn launcher_reads(&self) -> Vec<PathBuf> {
        let mut reads: Vec<PathBuf> = ["/usr", "/proc", "/dev", JAIL_KERNEL_DIR]
            .into_iter()
            .map(PathBuf::from)
            .chain(ETC_FILES.iter().map(PathBuf::from))
            .filter(|p| p.exists() || p.starts_with("/run/vibe"))
            .collect();
        reads.extend(self.read_roots.iter().cloned());
        for top in ["/bin", "/sbin", "/lib", "/lib32", "/lib64"] {
            if Path::new(top).is_dir() && std::fs::read_link(top).is_err() {
                reads.push(PathBuf::from(top));
            }
        }
        reads
    }

    /// The kernel's whole environment: nothing of the bridge's own.
    pub fn environment(&self) -> Vec<(OsString, OsString)> {
        let private = &self.dirs.private;
        vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("HOME".into(), private.join("home").into()),
            ("TMPDIR".into(), private.clone().into()),
            ("XDG_CACHE_HOME".into(), private.join("cache").into()),
            ("XDG_CONFIG_HOME".into(), private.join("config").into()),
            (
                "BLENDER_USER_CONFIG".into(),
                private.join("blender/config").into(),
            ),
            (
                "BLENDER_USER_SCRIPTS".into(),
                private.join("blender/scripts").into(),
            ),
            (
                "BLENDER_USER_DATAFILES".into(),
                private.join("blender/datafiles").into(),
            ),
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ]
    }
}
