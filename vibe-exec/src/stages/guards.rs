//! Phase 2: the contract check and the guards of seed 000. Every refusal here happens before
//! the transport is touched, and has no side effect.

use async_trait::async_trait;
use serde_json::Value;
use vibe_errors::{ErrorBody, ErrorCode, Reason, Rule};

use super::{PATH_ARGUMENTS, READ_PATH_ARGUMENTS};
use crate::phase::{CallContext, Phase, Stage};
use crate::sandbox::readable_file;
use crate::session::{Session, lock};
use vibe_contract::{EffectAction, TransactionRole};

/// Refuses every call while the circuit breaker is open (after a deadline was missed).
#[derive(Debug, Default)]
pub struct BreakerGuard;

#[async_trait]
impl Stage for BreakerGuard {
    fn phase(&self) -> Phase {
        Phase::Check
    }
    fn name(&self) -> &'static str {
        "breaker"
    }
    async fn run(&self, _call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        match session.breaker() {
            None => Ok(()),
            Some(why) => Err(ErrorBody::from_reason(Reason::Deadlock, format!("the circuit breaker is open ({why}); the session is invalid until a human resets it"))
                .with_detail("breaker", "open")),
        }
    }
}

/// The tool must be in the agreed registry (or the refusal says why not: excluded by Blender
/// version or capability). The payload limit is checked before anything else, in phase 1.
#[derive(Debug, Default)]
pub struct ContractCheck;

#[async_trait]
impl Stage for ContractCheck {
    fn phase(&self) -> Phase {
        Phase::Check
    }
    fn name(&self) -> &'static str {
        "contract"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        session.agreement.tool(&call.tool)?;
        call.spec = session.agreement.tools.get_shared(&call.tool);
        Ok(())
    }
}

/// Read-only mode (the `KILL_VIBE` kill switch, the contract, or switched on): every mutation
/// refused, reads served.
#[derive(Debug, Default)]
pub struct ReadOnlyGuard;

#[async_trait]
impl Stage for ReadOnlyGuard {
    fn phase(&self) -> Phase {
        Phase::Check
    }
    fn name(&self) -> &'static str {
        "read_only"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        if call.mutates() && session.is_read_only() {
            let why = session.read_only_reason().unwrap_or_default();
            return Err(ErrorBody::from_reason(
                Reason::ReadOnly,
                format!(
                    "read-only mode: {} is refused ({why}); reads still work",
                    call.tool
                ),
            )
            .with_detail("http_status", 403));
        }
        Ok(())
    }
}

/// While a file save is in flight, mutations wait for ready.
#[derive(Debug, Default)]
pub struct BusyGuard;

#[async_trait]
impl Stage for BusyGuard {
    fn phase(&self) -> Phase {
        Phase::Check
    }
    fn name(&self) -> &'static str {
        "busy"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        if call.mutates() && session.is_busy() {
            return Err(ErrorBody::from_reason(
                Reason::Busy,
                "Blender is saving a file; wait until kernel.status says ready",
            ));
        }
        Ok(())
    }
}

/// Transactions: one at a time per kernel, owned by the session that began it.
#[derive(Debug, Default)]
pub struct TransactionGuard;

fn misuse(rule: Rule, message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ContractViolation, message).with_rule(rule)
}

#[async_trait]
impl Stage for TransactionGuard {
    fn phase(&self) -> Phase {
        Phase::Check
    }
    fn name(&self) -> &'static str {
        "transaction"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        let me = session.session_id();
        let holder = session.kernel_lock.holder();
        let mine = holder.as_deref() == Some(me);
        match call.transaction_role() {
            Some(TransactionRole::Begin) => match holder {
                Some(h) if h == me => Err(misuse(
                    Rule::TransactionOpen,
                    "a transaction is already open; transactions do not nest".into(),
                )),
                Some(h) => Err(misuse(
                    Rule::TransactionOfAnotherSession,
                    format!("session {h} has a transaction open on this Blender"),
                )),
                None => Ok(()),
            },
            Some(TransactionRole::Commit | TransactionRole::Rollback) if !mine => match holder {
                Some(h) => Err(misuse(
                    Rule::TransactionOfAnotherSession,
                    format!("the open transaction belongs to session {h}"),
                )),
                None => Err(misuse(
                    Rule::NoTransaction,
                    format!("{} without an open transaction", call.tool),
                )),
            },
            _ if call.mutates() && holder.is_some() && !mine => Err(misuse(
                Rule::TransactionOfAnotherSession,
                format!(
                    "session {} has a transaction open on this Blender; a change now would be rolled back with it",
                    holder.unwrap_or_default()
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// Paths stay in the sandbox and out of `HUMAN_ONLY/`.
#[derive(Debug, Default)]
pub struct SandboxGuard;

#[async_trait]
impl Stage for SandboxGuard {
    fn phase(&self) -> Phase {
        Phase::Check
    }
    fn name(&self) -> &'static str {
        "sandbox"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        for key in PATH_ARGUMENTS {
            let Some(path) = call.params.get(key).and_then(Value::as_str) else {
                continue;
            };
            let refusal = |why: String| {
                session.strike("sandbox");
                ErrorBody::from_reason(Reason::Sandbox, format!("{key} {path:?} refused: {why}"))
                    .with_detail("field", key)
            };
            let Some(sandbox) = &session.sandbox else {
                return Err(refusal(
                    "this session has no sandbox folder, so it may not write files".into(),
                ));
            };
            sandbox.resolve(path).map_err(|v| refusal(v.0))?;
        }
        for key in READ_PATH_ARGUMENTS {
            let Some(file) = call.params.get(key).and_then(Value::as_str) else {
                continue;
            };
            readable_file(file, &session.project_roots, session.sandbox.as_ref()).map_err(|v| {
                session.strike("sandbox");
                ErrorBody::from_reason(Reason::Sandbox, format!("file {file:?} refused: {}", v.0))
                    .with_detail("field", key)
            })?;
        }
        Ok(())
    }
}

/// Sanity limits from the contract, checked on the arguments (the polygon budget is checked in
/// the plan phase, where the object's size is known).
#[derive(Debug, Default)]
pub struct SanityGuard;

#[async_trait]
impl Stage for SanityGuard {
    fn phase(&self) -> Phase {
        Phase::Check
    }
    fn name(&self) -> &'static str {
        "sanity"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        if !call.has_check(vibe_contract::BridgeCheck::Sanity) {
            return Ok(());
        }
        let limits = &session.agreement.contract.constraints.sanity;
        for (field, max) in [
            ("levels", u64::from(limits.max_subdivision_levels)),
            ("count", u64::from(limits.max_array_count)),
            ("segments", u64::from(limits.max_bevel_segments)),
        ] {
            if let Some(value) = call.params.get(field).and_then(Value::as_u64)
                && value > max
            {
                return Err(ErrorBody::from_reason(
                    Reason::SanityLimit,
                    format!("{field} {value} exceeds the sanity limit of {max}"),
                )
                .with_detail("field", field)
                .with_detail("limit", max));
            }
        }
        Ok(())
    }
}

/// Seed 000's actuator lock: the agent may remove, rename or unlink only the data-blocks it
/// created in this session. Which tool does what to which data-block is declared in the
/// registry (`effects`); property edits stay allowed.
#[derive(Debug, Default)]
pub struct ActuatorLock;

#[async_trait]
impl Stage for ActuatorLock {
    fn phase(&self) -> Phase {
        Phase::Check
    }
    fn name(&self) -> &'static str {
        "actuator_lock"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        let Some(spec) = call.spec() else {
            return Ok(());
        };
        for effect in &spec.effects {
            let (Some(kind), Some(param)) = (effect.kind, effect.param.as_deref()) else {
                continue;
            };
            if !effect.action.is_protected() || !effect.applies(&call.params, &spec.inputs) {
                continue;
            }
            let name = effect.target(&call.params).unwrap_or_default();
            let owner = effect.owner_of(&call.params);
            if lock(&session.created).owns(kind, owner, name) {
                continue;
            }
            // Objects are deleted; a modifier is removed from its object.
            let what = match (effect.action, owner) {
                (EffectAction::Remove, None) => "delete",
                (action, _) => action.as_str(),
            };
            let whose = owner.map(|o| format!(" of {o:?}")).unwrap_or_default();
            session.audit_incident(
                vibe_audit::RecordKind::Security,
                serde_json::json!({"event": "actuator_lock", "tool": call.tool, "kind": kind.as_str(), "name": name, "object": owner, "rule": effect.action.as_str()}),
            );
            return Err(ErrorBody::from_reason(
                Reason::ActuatorLock,
                format!(
                    "security block: cannot {what} {} {name:?}{whose}, which the agent did not create in this session",
                    kind.as_str()
                ),
            )
            .with_detail("field", param)
            .with_rule(Rule::parse(effect.action.as_str()))
            .with_detail("kind", kind.as_str())
            .with_detail("name", name)
            .with_detail("object", owner.unwrap_or(name)));
        }
        Ok(())
    }
}

/// `python.exec` runs only through a code gate; without one installed it is refused.
#[derive(Debug, Default)]
pub struct CodeGateGuard;

#[async_trait]
impl Stage for CodeGateGuard {
    fn phase(&self) -> Phase {
        Phase::Check
    }
    fn name(&self) -> &'static str {
        "code_gate"
    }
    async fn run(&self, call: &mut CallContext, _session: &Session) -> Result<(), ErrorBody> {
        if call.runs_code() {
            return Err(ErrorBody::new(
                ErrorCode::ContractViolation,
                format!(
                    "{} is refused: no code gate is installed in this pipeline",
                    call.tool
                ),
            )
            .with_rule(vibe_errors::Rule::NoCodeGate));
        }
        Ok(())
    }
}
