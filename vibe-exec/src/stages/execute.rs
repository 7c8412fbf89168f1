//! Phase 4: the call through the transport, and what the session learns from the answer.

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use serde_json::{Value, json};
use vibe_contract::{EffectAction, TransactionRole};
use vibe_errors::{Envelope, ErrorBody, ErrorCode, META_KEY, Reason};
use vibe_transport::{Call, TransportError};

use crate::phase::{CallContext, Phase, Stage};
use crate::session::{MAX_REDISCOVERY, ReadError, Session, lock};

/// Sends the call; maps transport failures to envelopes; opens the breaker on a missed
/// deadline; re-discovers a known target the kernel reports missing (at most
/// [`MAX_REDISCOVERY`] times); retries an idempotent call once after a dropped connection;
/// keeps the session's records (created objects, busy state, transaction owner) in step.
#[derive(Debug, Default)]
pub struct ExecuteStage;

/// Sends the call (the transport numbers it; its cancel token goes with it).
async fn send(call: &mut CallContext, session: &Session) -> Result<Envelope, TransportError> {
    call.transport_calls += 1;
    let sent = Call::new(call.tool.clone(), call.params.clone(), call.deadline)
        .cancelled_by(call.cancel.clone());
    // The first send of a batched call joins its batch; a repeat goes alone.
    match call.batch.take() {
        Some(window) => window.send(session, sent).await,
        None => session.transport.call(sent).await,
    }
}

fn transport_failure(call: &CallContext, session: &Session, error: &TransportError) -> ErrorBody {
    if call.cancel.is_cancelled() {
        let partial = if error.may_have_run() {
            "unknown: the kernel may have started the call"
        } else {
            "none: the call never started"
        };
        return ErrorBody::new(ErrorCode::Timeout, format!("{} was cancelled", call.tool))
            .with_detail("cancelled", true)
            .with_detail("partial_effects", partial);
    }
    match error {
        TransportError::Deadline(_) => {
            session.open_breaker(format!(
                "{} passed its deadline of {:?}",
                call.tool, call.deadline
            ));
            error.to_error_body().with_detail("cancelled", false)
        }
        TransportError::KernelRestarted { .. } => {
            // The scene, its transaction and what the agent made in it are gone with the old
            // kernel: nothing of the session's records may outlive them.
            session.kernel_lock.set(None);
            session.busy.store(0, Ordering::SeqCst);
            lock(&session.created).clear();
            session.audit_incident(
                vibe_audit::RecordKind::Security,
                json!({"event": "kernel_restarted", "tool": call.tool, "error": error.to_string()}),
            );
            error.to_error_body()
        }
        e if e.halts_session() => {
            session.open_breaker(format!("protocol violation: {e}"));
            error.to_error_body()
        }
        _ => error.to_error_body(),
    }
}

impl ExecuteStage {
    async fn execute(
        &self,
        call: &mut CallContext,
        session: &Session,
    ) -> Result<Envelope, ErrorBody> {
        if call.cancel.is_cancelled() {
            return Err(
                ErrorBody::new(ErrorCode::Timeout, format!("{} was cancelled", call.tool))
                    .with_detail("cancelled", true)
                    .with_detail("partial_effects", "none: the call never started"),
            );
        }
        let idempotent = call.spec().is_some_and(|s| s.idempotent);
        let mut answer = send(call, session).await;
        let mut repeated = false;
        if idempotent
            && !call.cancel.is_cancelled()
            && answer.as_ref().is_err_and(TransportError::lost_in_flight)
        {
            // Safe to repeat: the tool declares that repeating converges.
            answer = send(call, session).await;
            repeated = true;
        }
        let mut envelope = answer.map_err(|e| {
            let body = transport_failure(call, session, &e);
            if repeated {
                // The first attempt may have applied before its connection dropped.
                body.with_detail("may_have_run", true)
                    .with_detail("repeated_after", "connection_lost")
            } else {
                body
            }
        })?;
        if repeated && let Envelope::Err(error) = envelope {
            // The first attempt may have applied before its connection dropped.
            return Err(error
                .with_detail("may_have_run", true)
                .with_detail("repeated_after", "connection_lost"));
        }
        let mut attempts = 0;
        while let Some(name) = self.known_missing_target(call, session, &envelope) {
            if attempts == MAX_REDISCOVERY {
                let error = envelope
                    .error()
                    .cloned()
                    .unwrap_or_else(|| ErrorBody::new(ErrorCode::NotFound, "not found"));
                return Err(error
                    .with_reason(Reason::IdentityDrift)
                    .with_detail("rediscovery_attempts", attempts)
                    .with_detail("recovery", "ask_human")
                    .with_detail("object", name));
            }
            let Some(lookup) = session.agreement.lookup_tool() else {
                break;
            };
            if call.cancel.is_cancelled() {
                // Cancelled: the call is not looked up or sent again.
                break;
            }
            attempts += 1;
            // Re-discover by name: a target the session knows may be briefly unresolvable
            // (an undo step in progress, a reload); look it up, then try the call again.
            call.transport_calls += 1;
            let found = match session
                .read(lookup, json!({"name": name}), call.deadline, &call.cancel)
                .await
            {
                Ok(found) => found,
                Err(ReadError::Transport(e)) => return Err(transport_failure(call, session, &e)),
                Err(other) => return Err(other.to_error_body()),
            };
            if found.is_ok() && !call.cancel.is_cancelled() {
                envelope = send(call, session)
                    .await
                    .map_err(|e| transport_failure(call, session, &e))?;
            }
        }
        Ok(envelope)
    }

    /// The target name of a `not_found` answer, when it is an object this session knows.
    fn known_missing_target(
        &self,
        call: &CallContext,
        session: &Session,
        envelope: &Envelope,
    ) -> Option<String> {
        let error = envelope.error()?;
        if error.code != ErrorCode::NotFound
            || error.details.get("field").and_then(Value::as_str) != Some("name")
        {
            return None;
        }
        let name = call.str_param("name")?;
        lock(&session.created)
            .contains(name)
            .then(|| name.to_owned())
    }

    /// What the answer teaches the session, from the tool's declared effects and transaction
    /// role, and from the events the kernel reports (a file the human loaded).
    fn learn(&self, call: &CallContext, session: &Session, envelope: &Envelope) {
        let events = match envelope {
            Envelope::Ok(result) => result.get(META_KEY).and_then(|m| m.get("events")),
            Envelope::Err(error) => error.details.get("events"),
        };
        for event in events.and_then(Value::as_array).into_iter().flatten() {
            if event.get("event").and_then(Value::as_str) == Some("file_loaded") {
                forget_the_scene(session, call, event);
            }
        }
        let (Some(result), Some(spec)) = (envelope.result(), call.spec()) else {
            return;
        };
        let mut created = lock(&session.created);
        for effect in &spec.effects {
            if !effect.applies(&call.params, &spec.inputs) {
                continue;
            }
            let owner = effect.owner_of(&call.params);
            match (effect.action, effect.kind) {
                (EffectAction::Create, Some(kind)) => {
                    for name in effect.in_results(result) {
                        created.created_block(kind, owner, name);
                    }
                }
                (EffectAction::Rename, Some(kind)) => {
                    if let (Some(old), Some(new)) =
                        (effect.target(&call.params), effect.in_result(result))
                    {
                        created.renamed_block(kind, owner, old, new);
                    }
                }
                (EffectAction::Remove, Some(kind)) => {
                    if let Some(name) = effect.target(&call.params) {
                        created.removed_block(kind, owner, name);
                    }
                }
                (EffectAction::Load, _) => created.clear(),
                _ => {}
            }
        }
        match spec.transaction_role() {
            Some(TransactionRole::Begin) => {
                created.begin();
                session
                    .kernel_lock
                    .set(Some(session.session_id().to_owned()));
            }
            Some(TransactionRole::Commit) => {
                created.commit();
                session.kernel_lock.set(None);
            }
            Some(TransactionRole::Rollback) => {
                created.rollback();
                session.kernel_lock.set(None);
            }
            None => {}
        }
    }
}

/// A file was loaded in Blender (the human's, or `file.open`): what the agent made is gone
/// with the old scene, and so is a transaction that was open. Audited.
fn forget_the_scene(session: &Session, call: &CallContext, event: &Value) {
    lock(&session.created).clear();
    if event
        .get("transaction_dropped")
        .is_some_and(|t| !t.is_null())
    {
        session.kernel_lock.set(None);
    }
    session.audit_incident(
        vibe_audit::RecordKind::Note,
        json!({"event": "file_loaded", "tool": call.tool, "report": event}),
    );
}

#[async_trait]
impl Stage for ExecuteStage {
    fn phase(&self) -> Phase {
        Phase::Execute
    }
    fn name(&self) -> &'static str {
        "execute"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        let busy = call.does_file_io();
        if busy {
            session.busy.fetch_add(1, Ordering::SeqCst);
        }
        let result = self.execute(call, session).await;
        if busy {
            session.busy.fetch_sub(1, Ordering::SeqCst);
        }
        let envelope = result?;
        self.learn(call, session, &envelope);
        call.answer = Some(envelope);
        Ok(())
    }
}
