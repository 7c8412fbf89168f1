//! The contract's `temp_storage_mib`: what the session may keep in its sandbox.
//!
//! A check, not an OS bound (jailed kernels have the OS bounds of the jail; the bytes on a
//! shared disk are counted here). What counts: the sandbox and the kernel's own folders the
//! transport names ([`Transport::storage_folders`](vibe_transport::Transport::storage_folders):
//! a jailed kernel's private folder with its transaction snapshots, a supervisor's
//! checkpoints). Before a call that may write files (a tool that requires `file.write` or runs
//! agent code, from the registry), they are measured and a call that finds them at or past the
//! ceiling is refused; after the call, a total past the ceiling fails the call and every file
//! the call made or grew in the sandbox is removed, so nothing half-written is left (the
//! kernel's folders are the kernel's to clean: a failed call's snapshot goes with it).
//! The answer's `details.scene` says what became of the scene: `unchanged` (file tools),
//! `rolled_back` (agent code over a transport with a code boundary: the code lock's stage,
//! which runs after this one, restores the state before a failed call) or `kept` (agent code
//! in the filter mode, whose kernel committed its changes).
//!
//! Measuring walks the sandbox without following links; a sandbox of more than
//! [`MAX_SANDBOX_ENTRIES`] entries is refused rather than walked without end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use async_trait::async_trait;
use serde_json::json;
use vibe_contract::{CAP_CODE_EXEC, CAP_FILE_WRITE};
use vibe_errors::{Envelope, ErrorBody, ErrorCode};

use crate::phase::{CallContext, Phase, Stage};
use crate::session::Session;

/// The most entries (files and folders) a sandbox may hold for its size to be measured.
pub const MAX_SANDBOX_ENTRIES: usize = 100_000;

const MIB: u64 = 1024 * 1024;

/// The files of a sandbox: path -> (size in bytes, modification time).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxListing {
    files: BTreeMap<PathBuf, (u64, Option<SystemTime>)>,
}

impl SandboxListing {
    /// Lists `root` without following links (a link counts by its own size).
    pub fn of(root: &Path) -> Result<SandboxListing, String> {
        let mut files = BTreeMap::new();
        let mut folders = vec![root.to_path_buf()];
        let mut entries = 0usize;
        while let Some(folder) = folders.pop() {
            let listed = std::fs::read_dir(&folder)
                .map_err(|e| format!("the sandbox could not be read: {e}"))?;
            for entry in listed.flatten() {
                entries += 1;
                if entries > MAX_SANDBOX_ENTRIES {
                    return Err(format!(
                        "the sandbox holds more than {MAX_SANDBOX_ENTRIES} entries (MAX_SANDBOX_ENTRIES)"
                    ));
                }
                let Ok(meta) = entry.path().symlink_metadata() else {
                    continue; // gone while listed
                };
                if meta.is_dir() {
                    folders.push(entry.path());
                } else {
                    files.insert(entry.path(), (meta.len(), meta.modified().ok()));
                }
            }
        }
        Ok(SandboxListing { files })
    }

    /// The bytes of every file.
    pub fn bytes(&self) -> u64 {
        self.files.values().map(|(len, _)| len).sum()
    }

    /// The files of `self` that are not in `before` or changed since (size or time).
    pub fn written_since(&self, before: &SandboxListing) -> Vec<PathBuf> {
        self.files
            .iter()
            .filter(|(path, now)| before.files.get(*path) != Some(now))
            .map(|(path, _)| path.clone())
            .collect()
    }
}

/// The bytes in the kernel's own folders (a folder that cannot be listed counts nothing: it is
/// the kernel's, and the sandbox is still measured).
fn kernel_bytes(session: &Session) -> u64 {
    session
        .transport
        .storage_folders()
        .iter()
        .filter_map(|folder| SandboxListing::of(folder).ok())
        .map(|listing| listing.bytes())
        .sum()
}

fn writes_files(call: &CallContext) -> bool {
    call.spec().is_some_and(|spec| {
        let needs = &spec.requires.capabilities;
        needs.contains(CAP_FILE_WRITE) || needs.contains(CAP_CODE_EXEC)
    })
}

fn ceiling(session: &Session) -> u64 {
    session.agreement.contract.constraints.temp_storage_mib
}

fn refusal(message: String, limit_mib: u64, used: u64) -> ErrorBody {
    ErrorBody::new(ErrorCode::ContractViolation, message)
        .with_rule(vibe_errors::Rule::TempStorageMib)
        .with_detail("limit", limit_mib)
        .with_detail("used_bytes", used)
        .with_detail("recovery", json!("ask_human"))
}

/// Phase 3: a call that may write files starts only below the ceiling.
#[derive(Debug, Default)]
pub struct TempStorageBefore;

#[async_trait]
impl Stage for TempStorageBefore {
    fn phase(&self) -> Phase {
        Phase::Plan
    }
    fn name(&self) -> &'static str {
        "temp_storage"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        let Some(sandbox) = &session.sandbox else {
            return Ok(());
        };
        if !writes_files(call) {
            return Ok(());
        }
        let limit = ceiling(session);
        let listing = SandboxListing::of(sandbox.root())
            .map_err(|why| refusal(why, limit, 0).with_detail("entries", MAX_SANDBOX_ENTRIES))?;
        let used = listing.bytes() + kernel_bytes(session);
        if used >= limit.saturating_mul(MIB) {
            return Err(refusal(
                format!(
                    "the sandbox and the kernel's folders hold {:.1} MiB, at or past the session's temporary \
                     storage of {limit} MiB (temp_storage_mib): {} may not write more; remove files or ask for more",
                    used as f64 / MIB as f64,
                    call.tool
                ),
                limit,
                used,
            ));
        }
        call.sandbox_before = Some(listing);
        Ok(())
    }
}

/// Phase 5: a call that left the sandbox past the ceiling fails, without what it wrote.
#[derive(Debug, Default)]
pub struct TempStorageAfter;

#[async_trait]
impl Stage for TempStorageAfter {
    fn phase(&self) -> Phase {
        Phase::Verify
    }
    fn name(&self) -> &'static str {
        "temp_storage"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        let (Some(sandbox), Some(before)) = (&session.sandbox, call.sandbox_before.take()) else {
            return Ok(());
        };
        let limit = ceiling(session);
        let Ok(after) = SandboxListing::of(sandbox.root()) else {
            return Ok(()); // measured before; a sandbox that grew past the entry cap is refused next time
        };
        let used = after.bytes() + kernel_bytes(session);
        if used <= limit.saturating_mul(MIB) {
            return Ok(());
        }
        let written = after.written_since(&before);
        let mut removed = Vec::new();
        for path in &written {
            if std::fs::remove_file(path).is_ok() {
                let shown = path.strip_prefix(sandbox.root()).unwrap_or(path);
                removed.push(shown.to_string_lossy().into_owned());
            }
        }
        // What became of the scene: file tools do not change it; a failed call of agent code is
        // rolled back by the code lock's stage where the transport has a boundary.
        let scene = if !call
            .spec()
            .is_some_and(|s| s.requires.capabilities.contains(CAP_CODE_EXEC))
        {
            "unchanged"
        } else if session.transport.code_boundary().is_some() {
            "rolled_back"
        } else {
            "kept"
        };
        session.audit_incident(
            vibe_audit::RecordKind::Note,
            json!({"event": "temp_storage_mib", "tool": call.tool, "limit_mib": limit, "used_bytes": used, "removed": removed, "scene": scene}),
        );
        call.answer = Some(Envelope::Err(
            refusal(
                format!(
                    "{} left {:.1} MiB in the sandbox, past the session's temporary storage of {limit} MiB \
                     (temp_storage_mib); the {} file(s) it wrote were removed (scene: {scene})",
                    call.tool,
                    used as f64 / MIB as f64,
                    removed.len()
                ),
                limit,
                used,
            )
            .with_detail("removed", removed)
            .with_detail("scene", scene),
        ));
        Ok(())
    }
}
