//! From options to a ready pipeline: the sandbox, the audit log, the kernel, negotiation.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vibe::audit::{AuditLog, AuditWriter, FileOptions, Overflow, Redactor};
use vibe::contract::{AuditPolicy, CAP_CODE_EXEC};
use vibe::exec::Pipeline;
use vibe::{ConnectError, Target, connect};

use crate::mock_delay::DelayedMock;
use crate::options::{Backend, Options};
use crate::sandbox;

/// The capabilities the server asks for; `--allow-code` adds `code_exec`.
pub const CAPABILITIES: [&str; 6] = [
    "scene.read",
    "scene.write",
    "transactions",
    "file.write",
    "file.read",
    "render",
];

/// Why the server did not start; printed on stderr, then the process exits with status 1.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

impl From<sandbox::SandboxError> for StartError {
    fn from(error: sandbox::SandboxError) -> StartError {
        StartError(error.0)
    }
}

/// A started session: the pipeline and where its files are.
pub struct Started {
    /// The ready pipeline.
    pub pipeline: Arc<Pipeline>,
    /// The sandbox folder.
    pub sandbox: PathBuf,
    /// The audit log.
    pub audit: PathBuf,
}

/// The audit log's default place: beside the sandbox (`<sandbox>.vibe_audit.jsonl`), one per
/// sandbox, and never inside it, where a jailed kernel could write.
pub fn default_audit(sandbox: &Path) -> PathBuf {
    let name = sandbox.file_name().unwrap_or_default().to_string_lossy();
    sandbox.with_file_name(format!("{name}.{}", vibe::audit::DEFAULT_LOG))
}

/// The refusal of a negotiation, as the server prints it: the contract's rule, its message and
/// what the contract allows.
pub fn refusal_message(refusal: &vibe::contract::Refusal) -> String {
    let allowed = refusal
        .error
        .details
        .get("allowed")
        .map(|allowed| format!(" (allowed: {allowed})"))
        .unwrap_or_default();
    format!(
        "the contract refused the session ({}): {}{allowed}",
        refusal.rule.as_str(),
        refusal.error.message
    )
}

fn target(options: &Options) -> Result<Target, StartError> {
    Ok(match &options.backend {
        Backend::Mock if options.mock_delays.is_empty() => Target::mock(),
        Backend::Mock => Target::transport(Arc::new(DelayedMock::new(
            options.mock_delays.iter().cloned(),
        ))),
        Backend::Blender(binary) => Target::blender(binary),
        Backend::BpyPython(python) => Target::bpy_python(python),
        Backend::Tcp { addr, token_file } => {
            let token = match token_file {
                Some(file) => std::fs::read_to_string(file)
                    .map_err(|e| {
                        StartError(format!(
                            "cannot read the token file {}: {e}",
                            file.display()
                        ))
                    })?
                    .trim()
                    .to_owned(),
                None => String::new(),
            };
            Target::tcp(*addr, token)
        }
    })
}

/// Prepares the sandbox and the audit log, starts or reaches the kernel and negotiates.
pub async fn start(options: &Options) -> Result<Started, StartError> {
    let sandbox_dir = match &options.sandbox {
        Some(dir) => dir.clone(),
        None => sandbox::default_sandbox(|name| std::env::var_os(name))?,
    };
    for warning in sandbox::prepare(&sandbox_dir)? {
        eprintln!("vibe-mcp: warning: {warning}");
    }
    let audit_path = options
        .audit
        .clone()
        .unwrap_or_else(|| default_audit(&sandbox_dir));
    let absolute = |path: &Path| {
        std::path::absolute(path)
            .map_err(|e| StartError(format!("cannot resolve {}: {e}", path.display())))
    };
    if absolute(&audit_path)?.starts_with(absolute(&sandbox_dir)?) {
        return Err(StartError(
            "the audit log must not be inside the sandbox, where agent code can write".into(),
        ));
    }
    // The host asks for the default audit policy, so the log's redaction is that policy's. One
    // writer per log: a second server on the same sandbox (and log) is refused here.
    let log = AuditLog::open_file(
        &audit_path,
        FileOptions::default(),
        Redactor::new(&AuditPolicy::default(), Some(sandbox_dir.clone())),
    )
    .map_err(|e| StartError(format!("the audit log {}: {e}", audit_path.display())))?;
    let audit = Arc::new(AuditWriter::spawn(log, 4096, Overflow::Backpressure));

    let mut capabilities = CAPABILITIES.to_vec();
    if options.allow_code {
        capabilities.push(CAP_CODE_EXEC);
    }
    let mut session = connect(target(options)?)
        .host("vibe-mcp")
        .capabilities(capabilities)
        .sandbox(&sandbox_dir)
        .audit(audit);
    if let Some(packs) = &options.packs {
        session = session.packs(packs.iter().cloned());
    }
    for root in &options.project_roots {
        session = session.project_root(root);
    }
    if !options.jail {
        session = session.unjailed();
    }
    let pipeline = session.start().await.map_err(|error| match error {
        ConnectError::Refused(refusal) => StartError(refusal_message(&refusal)),
        other => StartError(other.to_string()),
    })?;
    Ok(Started {
        pipeline: Arc::new(pipeline),
        sandbox: sandbox_dir,
        audit: audit_path,
    })
}

/// What the server says on stderr about the session it serves: the Blender, the tools, and
/// whether agent code is offered and why not.
pub fn describe(options: &Options, pipeline: &Pipeline, listed: usize) -> Vec<String> {
    let agreement = &pipeline.session().agreement;
    let contract = &agreement.contract;
    let blender = &contract.blender_profile;
    let mut lines = vec![format!(
        "Blender {} ({}), packs {}, {} tools and {} macros as {listed} MCP tools, contract {}",
        blender.version,
        if blender.background {
            "headless"
        } else {
            "GUI"
        },
        contract
            .packs
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(","),
        agreement.tools.tools().len(),
        contract.capabilities.macros.len(),
        contract.fingerprints.contract
    )];
    // The tools that run agent code, whichever pack they are in.
    let code_tools: Vec<String> = vibe::contract::default_registries()
        .map(|registries| {
            registries
                .tools
                .tools()
                .iter()
                .filter(|t| t.requires.capabilities.contains(CAP_CODE_EXEC))
                .map(|t| t.name.clone())
                .collect()
        })
        .unwrap_or_default();
    for tool in code_tools {
        let offered = agreement.tools.get(&tool).is_some();
        let excluded = contract.excluded_tools.iter().find(|e| e.name == tool);
        lines.push(match (options.allow_code, offered, excluded) {
            (true, true, _) => format!(
                "{tool} offered (kernel confinement: {})",
                blender.confinement.summary()
            ),
            (true, false, Some(excluded)) => format!("agent code is not offered: {}", excluded.why),
            (true, false, None) => format!("{tool} is not offered"),
            (false, _, _) => format!("{tool} is not offered (start with --allow-code to offer it)"),
        });
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use vibe::contract::{
        BridgePolicy, HostProfile, HostProposal, Limits, default_registries, negotiate,
    };

    fn refusal(edit: impl Fn(&mut HostProposal)) -> vibe::contract::Refusal {
        let host = HostProfile {
            capabilities: CAPABILITIES.iter().map(|c| c.to_string()).collect(),
            ..HostProfile::default()
        };
        let mut proposal = HostProposal::new("start-1", host);
        edit(&mut proposal);
        let blender = vibe::transport::MockBlender::new().hello().blender;
        negotiate(
            &proposal,
            &BridgePolicy::default(),
            &blender,
            &default_registries().unwrap(),
        )
        .unwrap_err()
    }

    #[test]
    fn a_refusal_is_printed_with_its_rule_message_and_what_is_allowed() {
        let unknown = refusal(|p| p.packs = Some(["bogus".to_owned()].into()));
        let printed = refusal_message(&unknown);
        assert!(
            printed.starts_with(
                "the contract refused the session (unknown_pack): there is no tool pack \"bogus\" (allowed: ["
            ),
            "{printed}"
        );
        // Over the cap: a host cap of 3 stands in for a selection larger than 35 (the same rule).
        let over = refusal(|p| {
            p.limits = Some(Limits {
                tool_surface_cap: 3,
                ..Limits::default()
            })
        });
        let printed = refusal_message(&over);
        assert!(
            printed.starts_with("the contract refused the session (tool_surface_exceeded): ")
                && printed.contains("exceed the tool surface cap of 3; select fewer packs")
                && printed.ends_with("(allowed: 3)"),
            "{printed}"
        );
    }

    #[test]
    fn the_audit_log_lives_beside_the_sandbox() {
        assert_eq!(
            default_audit(Path::new("/data/vibe/sandbox")),
            PathBuf::from("/data/vibe/sandbox.vibe_audit.jsonl")
        );
    }
}
