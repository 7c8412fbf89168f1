//! The code gate as a phase-2 stage, replacing the default `code_gate` guard.

use async_trait::async_trait;
use serde_json::json;
use vibe_contract::CodeGateMode;
use vibe_errors::{ErrorBody, ErrorCode, Reason};

use super::gate::{Verdict, check};
use crate::phase::{CallContext, Phase, Stage};
use crate::session::Session;

/// Checks `python.exec` code before it reaches Blender. The mode comes from the contract:
/// enforcing refuses (a security block, which turns the session read-only); log-only records
/// the findings in the audit log and lets the code run.
#[derive(Debug, Default)]
pub struct CodeGateStage;

#[async_trait]
impl Stage for CodeGateStage {
    fn phase(&self) -> Phase {
        Phase::Check
    }
    fn name(&self) -> &'static str {
        "code_gate"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        if !call.runs_code() {
            return Ok(());
        }
        let code = call.str_param("code").unwrap_or_default();
        match check(code) {
            Verdict::Clean => Ok(()),
            Verdict::Syntax(issue) => Err(ErrorBody::new(
                ErrorCode::InvalidArguments,
                format!(
                    "SyntaxError: {} (line {}, column {})",
                    issue.message, issue.line, issue.column
                ),
            )
            .with_detail("field", "code")
            .with_reason(Reason::Syntax)
            .with_detail("line", issue.line)
            .with_detail("column", issue.column)),
            Verdict::Violations(found) => {
                let listed: Vec<_> = found.iter().map(|v| json!({"rule": v.rule, "detail": v.detail, "line": v.line, "column": v.column})).collect();
                session.audit_incident(vibe_audit::RecordKind::Security, json!({"event": "code_gate", "mode": format!("{:?}", session.agreement.contract.constraints.code_gate), "violations": listed}));
                if session.agreement.contract.constraints.code_gate == CodeGateMode::LogOnly {
                    return Ok(());
                }
                let first = &found[0];
                Err(ErrorBody::from_reason(
                    Reason::SecurityBlock,
                    format!("security block: {first}"),
                )
                .with_detail("field", "code")
                .with_detail("rule", first.rule)
                .with_detail("violations", listed))
            }
        }
    }
}
