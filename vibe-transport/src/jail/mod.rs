//! Confined headless kernels (Linux): the operating system, not the code gate, is the boundary
//! around agent code.
//!
//! A [`Jail`] turns the [`StdioOptions`] of a headless kernel (the bpy module or `blender -b`)
//! into a confined start. Four layers, each from a well-kept mechanism, each stopping something
//! the others do not:
//!
//! | layer | mechanism | stops |
//! |---|---|---|
//! | namespaces | bubblewrap (`bwrap`): user, mount, pid, net, ipc, uts, cgroup; all capabilities dropped; a new session | every path but Blender's install, the Python runtime, the kernel, the sandbox and a private folder is absent; `HUMAN_ONLY/` is covered by an empty read-only folder (a Landlock rule cannot exclude a subfolder of a writable folder, a mount can); the network namespace has no interface but an unconfigured loopback; no process outside is visible or signalable; the terminal cannot be injected into |
//! | Landlock (ABI 6 wanted, ABI 7 here) | the `landlock` crate, applied by the `vibe-jail` launcher inside the namespaces | reads and execution outside the read roots, writes outside the sandbox and the private folder, TCP bind and connect, abstract Unix sockets and signals to processes outside the domain; it also holds if a mount were ever undone |
//! | seccomp | `seccompiler` filters: one applied by the launcher, one (no `execve`) installed by the kernel before it reads its first frame | new processes (fork, vfork, clone without `CLONE_THREAD`), program execution, sockets other than `AF_UNIX`, ptrace, mounts, namespaces, kernel modules, BPF, perf, io_uring, userfaultfd, keyrings |
//! | rlimits | `setrlimit` in the launcher | address space above the contract's memory ceiling (`RLIMIT_AS`), core dumps |
//!
//! Blender gets a private config, scripts and cache folder inside the private folder, so
//! `wm.save_userpref` and thumbnails never reach the user's real configuration. The kernel starts
//! with a minimal environment (see [`StdioOptions`]): the bridge's own variables (an MCP host's
//! API keys) never reach agent code.
//!
//! ## Where a layer is missing
//!
//! By default every layer is required: `bwrap` missing, user namespaces off, a kernel without
//! Landlock ABI 6 or without seccomp makes [`StdioTransport::spawn`](crate::StdioTransport::spawn)
//! fail with the launcher's own words. With [`Jail::best_effort`] the kernel starts with what
//! holds and its hello says exactly which axes are confined
//! ([`Confinement`](vibe_contract::Confinement)); negotiation then grants `code_exec` only when
//! every axis holds, so a weaker jail is never silent.
//!
//! ## Cost
//!
//! `VIBE_BPY_PYTHON=... cargo bench --bench jail` (bpy 5.0.1, 2-core machine, 2026-11-22;
//! jailed against unjailed in the same run, interleaved rounds): spawn to a ready hello ~516 ms
//! against ~488 ms (1.06x); `object.info` on a 1,000-object scene ~101 us against ~98 us
//! (1.03x); `scene.snapshot` of it ~64 ms either way (0.99x). Kill-and-restore on that scene
//! answers ~630 ms past the deadline, 1.05x a plain kernel start plus loading the same
//! `.blend` (~600 ms): the supervisor adds some 30-50 ms to what a restart costs anyway.
//!
//! The launcher is the `vibe-jail` binary of this crate (feature `jail`). It is found through
//! [`Jail::launcher`], the `VIBE_JAIL_LAUNCHER` environment variable, beside the running
//! executable (or one folder up, for examples and tests), or on `PATH`.

#[cfg(target_os = "linux")]
pub mod launcher;
mod layout;
#[cfg(target_os = "linux")]
pub mod seccomp;

use std::path::{Path, PathBuf};

pub use layout::{JailDirs, runtime_roots};

use crate::stdio::StdioOptions;

/// The launcher's binary name.
pub const LAUNCHER_NAME: &str = "vibe-jail";
/// Environment variable naming the launcher binary.
pub const LAUNCHER_ENV: &str = "VIBE_JAIL_LAUNCHER";
/// Environment variable through which the launcher tells the kernel its confinement (JSON).
pub const CONFINEMENT_ENV: &str = "VIBE_CONFINEMENT";
/// Environment variable naming the seccomp program (raw BPF) the kernel installs before it
/// reads its first frame: no `execve` from then on.
pub const EXEC_FILTER_ENV: &str = "VIBE_EXEC_FILTER";
/// The folder name inside a sandbox that agent code can neither read nor write.
pub const HUMAN_ONLY: &str = "HUMAN_ONLY";
/// Where the kernel's files appear inside the jail.
pub const JAIL_KERNEL_DIR: &str = "/run/vibe/kernel";
/// Where the launcher appears inside the jail.
pub const JAIL_LAUNCHER_PATH: &str = "/run/vibe/vibe-jail";

/// How a headless kernel is confined. Build one, then hand it to
/// [`StdioOptions::jailed_bpy_python`] or [`StdioOptions::jailed_blender`].
#[derive(Clone, Debug)]
pub struct Jail {
    sandbox: PathBuf,
    memory_mib: u64,
    launcher: Option<PathBuf>,
    bwrap: PathBuf,
    read_roots: Vec<PathBuf>,
    best_effort: bool,
    state_root: Option<PathBuf>,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

impl Jail {
    /// A jail whose only writable place (besides its private folder) is `sandbox`, with the
    /// contract's default memory ceiling (8 GiB).
    pub fn new(sandbox: impl Into<PathBuf>) -> Jail {
        Jail {
            sandbox: sandbox.into(),
            memory_mib: vibe_contract::Constraints::default().max_memory_mib,
            launcher: None,
            bwrap: PathBuf::from("bwrap"),
            read_roots: Vec::new(),
            best_effort: false,
            state_root: None,
            env: Vec::new(),
        }
    }

    /// The memory ceiling (the contract's `max_memory_mib`).
    pub fn memory_mib(mut self, mib: u64) -> Jail {
        self.memory_mib = mib.max(1);
        self
    }

    /// The `vibe-jail` launcher binary.
    pub fn launcher(mut self, path: impl Into<PathBuf>) -> Jail {
        self.launcher = Some(path.into());
        self
    }

    /// The bubblewrap binary (default `bwrap` on `PATH`).
    pub fn bwrap(mut self, path: impl Into<PathBuf>) -> Jail {
        self.bwrap = path.into();
        self
    }

    /// Another folder the kernel may read: a project root the session opens files from
    /// (`PipelineBuilder::project_root` in `vibe-exec`), or a Blender installed outside `/usr`
    /// that the jail does not find from the program's path. A `HUMAN_ONLY/` folder directly in
    /// it is covered by an empty one, as in the sandbox.
    pub fn read_root(mut self, path: impl Into<PathBuf>) -> Jail {
        self.read_roots.push(path.into());
        self
    }

    /// An environment variable the kernel gets (its environment is otherwise only what Blender
    /// needs). `VIBE_KERNEL_GATE=off` switches the kernel's own code gate off, honoured only in a
    /// jail: tests use it to show that the jail holds without any gate.
    pub fn env(
        mut self,
        key: impl Into<std::ffi::OsString>,
        value: impl Into<std::ffi::OsString>,
    ) -> Jail {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Start with the layers that hold instead of failing; the hello says which.
    pub fn best_effort(mut self) -> Jail {
        self.best_effort = true;
        self
    }

    /// Where the jail's private folders are made (default: the system's temp folder).
    pub fn state_root(mut self, path: impl Into<PathBuf>) -> Jail {
        self.state_root = Some(path.into());
        self
    }

    /// The sandbox folder.
    pub fn sandbox(&self) -> &Path {
        &self.sandbox
    }

    /// The memory ceiling in MiB.
    pub fn memory(&self) -> u64 {
        self.memory_mib
    }

    fn find_launcher(&self) -> std::io::Result<PathBuf> {
        if let Some(path) = &self.launcher {
            return Ok(path.clone());
        }
        if let Some(path) = std::env::var_os(LAUNCHER_ENV) {
            return Ok(PathBuf::from(path));
        }
        let exe = std::env::current_exe()?;
        let beside = exe.parent().map(Path::to_path_buf);
        let candidates = beside
            .iter()
            .flat_map(|dir| [dir.join(LAUNCHER_NAME), dir.join("..").join(LAUNCHER_NAME)])
            .chain(
                std::env::var_os("PATH")
                    .iter()
                    .flat_map(std::env::split_paths)
                    .map(|dir| dir.join(LAUNCHER_NAME))
                    .collect::<Vec<_>>(),
            );
        for candidate in candidates {
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "the {LAUNCHER_NAME} launcher was not found (set {LAUNCHER_ENV}, call \
                 Jail::launcher, or install it: cargo install vibe-transport --features jail \
                 --bin {LAUNCHER_NAME})"
            ),
        ))
    }

    /// The options that start `program` (with `args` after the kernel script) inside the jail.
    fn wrap(
        &self,
        program: &Path,
        lead_args: &[&str],
        tail_args: &[&str],
    ) -> std::io::Result<StdioOptions> {
        let launcher = self.find_launcher()?;
        let dirs = JailDirs::create(self.state_root.as_deref())?;
        crate::kernel::write_kernel(&dirs.kernel)?;
        let sandbox = layout::prepare_sandbox(&self.sandbox)?;
        let program = which(program)?;
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut read_roots = layout::runtime_roots(&program, home.as_deref());
        read_roots.extend(self.read_roots.iter().cloned());
        let plan = layout::Plan {
            dirs: &dirs,
            sandbox: &sandbox,
            read_roots: &read_roots,
            launcher: &launcher,
            memory_mib: self.memory_mib,
            best_effort: self.best_effort,
        };
        let mut options = StdioOptions::new(&self.bwrap);
        options.args = plan.bwrap_args();
        options.args.push(program.clone().into_os_string());
        options.args.extend(lead_args.iter().map(Into::into));
        options
            .args
            .push(Path::new(JAIL_KERNEL_DIR).join("run_kernel.py").into());
        options.args.extend(tail_args.iter().map(Into::into));
        options.env = plan.environment();
        options.env.extend(self.env.iter().cloned());
        options.jail_dirs = Some(std::sync::Arc::new(dirs));
        Ok(options)
    }
}

impl StdioOptions {
    /// A Python with the bpy module running the kernel over stdio inside `jail`.
    pub fn jailed_bpy_python(
        python: impl AsRef<Path>,
        jail: &Jail,
    ) -> std::io::Result<StdioOptions> {
        jail.wrap(python.as_ref(), &["-I"], &["--stdio", "--factory"])
    }

    /// A headless Blender binary running the kernel over stdio inside `jail`.
    pub fn jailed_blender(binary: impl AsRef<Path>, jail: &Jail) -> std::io::Result<StdioOptions> {
        jail.wrap(
            binary.as_ref(),
            &[
                "-b",
                "--factory-startup",
                "--disable-autoexec",
                "--python-exit-code",
                "1",
                "--python",
            ],
            &["--", "--stdio"],
        )
    }
}

/// `program` as an absolute path (looked up on `PATH` when it has no folder).
fn which(program: &Path) -> std::io::Result<PathBuf> {
    if program.components().count() > 1 {
        return std::path::absolute(program);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not on PATH", program.display()),
            )
        })
}
