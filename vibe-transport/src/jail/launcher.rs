//! The `vibe-jail` launcher: runs inside bubblewrap's namespaces, confines itself (rlimits,
//! Landlock, seccomp) and then executes the kernel's program, which inherits every layer.
//!
//! ```text
//! vibe-jail --read DIR... --write DIR... --memory-mib N --exec-filter FILE [--best-effort] -- PROGRAM ARGS...
//! ```
//!
//! It writes the no-`execve` seccomp program to `FILE` for the kernel to install, and tells the
//! kernel what holds through `VIBE_CONFINEMENT` (JSON). Without `--best-effort` any layer that
//! cannot be applied in full is an error and nothing is executed.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

use super::seccomp;
use super::{CONFINEMENT_ENV, EXEC_FILTER_ENV};

/// The Landlock ABI whose rights the jail asks for (filesystem, TCP, scopes).
pub const LANDLOCK_ABI: ABI = ABI::V6;

/// The launcher's parsed command line.
#[derive(Debug, Default)]
pub struct LaunchPlan {
    /// Folders the kernel may read and execute from.
    pub read: Vec<PathBuf>,
    /// Folders the kernel may write.
    pub write: Vec<PathBuf>,
    /// The address-space ceiling in MiB.
    pub memory_mib: u64,
    /// Where to write the no-`execve` program for the kernel.
    pub exec_filter: Option<PathBuf>,
    /// Start with what holds instead of failing.
    pub best_effort: bool,
    /// The program and its arguments.
    pub command: Vec<OsString>,
}

impl LaunchPlan {
    /// Parses `vibe-jail`'s arguments (without the program name).
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<LaunchPlan, String> {
        let mut plan = LaunchPlan::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
            match arg.to_str() {
                Some("--read") => plan.read.push(value("--read")?.into()),
                Some("--write") => plan.write.push(value("--write")?.into()),
                Some("--memory-mib") => {
                    let text = value("--memory-mib")?;
                    plan.memory_mib = text
                        .to_str()
                        .and_then(|t| t.parse().ok())
                        .filter(|mib| *mib > 0)
                        .ok_or("--memory-mib needs a positive whole number")?;
                }
                Some("--exec-filter") => plan.exec_filter = Some(value("--exec-filter")?.into()),
                Some("--best-effort") => plan.best_effort = true,
                Some("--") => {
                    plan.command = args.collect();
                    break;
                }
                _ => return Err(format!("unknown argument {arg:?}")),
            }
        }
        if plan.command.is_empty() {
            return Err("no program to run after --".into());
        }
        if plan.memory_mib == 0 {
            return Err("--memory-mib is required".into());
        }
        Ok(plan)
    }

    /// Confines this process and executes the program; returns only on failure.
    pub fn run(self) -> String {
        let mut layers = vec!["namespaces".to_owned()];
        let mut confinement = serde_json::json!({
            "filesystem": false, "network": false, "exec": false, "layers": [],
        });
        match self.limit_memory() {
            Ok(()) => {
                layers.push("rlimits".into());
                confinement["memory_mib"] = self.memory_mib.into();
            }
            Err(e) if self.best_effort => eprintln!("vibe-jail: no memory ceiling: {e}"),
            Err(e) => return format!("the memory ceiling could not be set: {e}"),
        }
        if let Err(e) = self.write_exec_filter() {
            return format!("the exec filter could not be written: {e}");
        }
        match self.landlock() {
            Ok((status, abi)) => {
                let full = status == RulesetStatus::FullyEnforced;
                if !full && !self.best_effort {
                    return format!("Landlock is not fully enforced here ({status:?})");
                }
                if status != RulesetStatus::NotEnforced {
                    layers.push(format!("landlock-abi-{abi}"));
                }
                // The mount namespace alone already hides every other path; Landlock is the
                // second wall. Either holding counts only when both do, unless best effort.
                confinement["filesystem"] = (full || self.best_effort).into();
                confinement["network"] = true.into();
            }
            Err(e) if self.best_effort => {
                eprintln!("vibe-jail: Landlock unavailable: {e}");
                confinement["filesystem"] = true.into();
                confinement["network"] = true.into();
            }
            Err(e) => return format!("Landlock could not be applied: {e}"),
        }
        match self.seccomp() {
            Ok(()) => {
                layers.push("seccomp".into());
                // The kernel confirms `exec` once it installed the no-execve program.
                confinement["exec"] = "pending".into();
            }
            Err(e) if self.best_effort => eprintln!("vibe-jail: no seccomp filter: {e}"),
            Err(e) => return format!("the seccomp filter could not be applied: {e}"),
        }
        confinement["layers"] = layers.into();
        if let Err(e) = close_inherited_descriptors() {
            return format!("inherited descriptors could not be closed: {e}");
        }
        let mut command = std::process::Command::new(&self.command[0]);
        command
            .args(&self.command[1..])
            .env(CONFINEMENT_ENV, confinement.to_string());
        if let Some(path) = &self.exec_filter {
            command.env(EXEC_FILTER_ENV, path);
        }
        let error = command.exec();
        format!("could not execute {:?}: {error}", self.command[0])
    }

    fn limit_memory(&self) -> Result<(), String> {
        use rustix::process::{Resource, Rlimit, setrlimit};
        let bytes = self.memory_mib.saturating_mul(1024 * 1024);
        let limit = Rlimit {
            current: Some(bytes),
            maximum: Some(bytes),
        };
        setrlimit(Resource::As, limit).map_err(|e| format!("RLIMIT_AS: {e}"))?;
        let none = Rlimit {
            current: Some(0),
            maximum: Some(0),
        };
        setrlimit(Resource::Core, none).map_err(|e| format!("RLIMIT_CORE: {e}"))
    }

    fn write_exec_filter(&self) -> Result<(), String> {
        let Some(path) = &self.exec_filter else {
            return Ok(());
        };
        let program = seccomp::exec_filter().map_err(|e| e.to_string())?;
        std::fs::write(path, seccomp::to_bytes(&program)).map_err(|e| e.to_string())
    }

    fn landlock(&self) -> Result<(RulesetStatus, i32), landlock::RulesetError> {
        let abi = LANDLOCK_ABI;
        let level = if self.best_effort {
            CompatLevel::BestEffort
        } else {
            CompatLevel::HardRequirement
        };
        let status = Ruleset::default()
            .set_compatibility(level)
            .handle_access(AccessFs::from_all(abi))?
            .handle_access(AccessNet::from_all(abi))?
            .scope(Scope::from_all(abi))?
            .create()?
            .add_rules(path_beneath_rules(&self.read, AccessFs::from_read(abi)))?
            .add_rules(path_beneath_rules(
                ["/dev/null", "/dev/zero", "/dev/full"],
                AccessFs::from_file(abi),
            ))?
            .add_rules(path_beneath_rules(&self.write, AccessFs::from_all(abi)))?
            .restrict_self()?;
        Ok((status.ruleset, abi as i32))
    }

    fn seccomp(&self) -> Result<(), String> {
        for program in [seccomp::confinement_filter(), seccomp::clone3_filter()] {
            let program = program.map_err(|e| e.to_string())?;
            seccompiler::apply_filter(&program).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// Marks every descriptor above stderr close-on-exec, so that nothing the bridge (or whatever
/// started the bridge) had open reaches the kernel: neither bubblewrap nor `execve` closes them.
#[allow(unsafe_code)]
fn close_inherited_descriptors() -> std::io::Result<()> {
    // SAFETY: close_range(2) with CLOSE_RANGE_CLOEXEC takes plain integers, touches no memory of
    // this process, and only sets a flag on descriptors; std has no safe form of it.
    let result = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
