//! The actuator lock for agent code (seed 000): after agent code ran, every object the agent
//! did not create still exists under its name, linked into the same scene collections, with
//! its own object data. Property edits stay allowed; the agent's own objects stay free.
//!
//! Two ways to hold it, chosen by the transport:
//!
//! * **Boundary** (a transport with a [`CodeBoundary`](vibe_transport::CodeBoundary), such as `SupervisedKernel`): before the
//!   call, an inventory of every object is read from a kernel that has run no agent code; the
//!   kernel that runs the code is retired before the call answers and a fresh one loads the
//!   scene it left with Python auto-execution off; the inventory read there is compared, here in
//!   the bridge, with the bridge's own record of what the agent created. A violation (or a
//!   failed call) restores the state before the call from the bridge's checkpoint. No code the
//!   agent could reach takes part, and nothing it installed outlives the call.
//! * **Filter** (every other transport): the kernel checks the same rule itself before it
//!   answers (`lock.py` in the kernel, MockBlender's twin). Agent code can disarm a check in its
//!   own process, so this is a filter for agents the embedder trusts.
//!
//! Either way a violation answers `contract_violation` with reason `actuator_lock`, naming each
//! object and what happened to it, and is audited as a security incident.
//!
//! What the check sees: objects by name, their data by name, their scene collections, and the
//! names of their modifiers, constraints and vertex groups. What the agent made is known twice:
//! by name in the bridge's record (which agent code cannot forge) and by identity in the
//! kernel's verdict read before the code ran (which a person's rename cannot fool); an object is
//! the agent's only when both say so. No identity survives the save and load between the
//! kernels, so across the boundary a lookalike (the human's `Cube` deleted, a new `Cube` with
//! every protected part rebuilt under the same names) passes: what the human had is there by
//! every name the rule protects, as it would be after property edits, which are allowed. The
//! in-kernel filter tells it apart by Blender's session UID (4.x and later).

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use serde_json::{Value, json};
use vibe_audit::RecordKind;
use vibe_contract::DataKind;
use vibe_errors::{Envelope, ErrorBody, ErrorCode, Reason};

use crate::phase::{CallContext, Phase, Stage};
use crate::session::{CreatedRegistry, Session, lock};

/// What agent code did to one object the agent did not create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockViolation {
    /// The object's name before the call.
    pub name: String,
    /// What happened: `deleted`, `renamed to 'X'`, `unlinked from the scene`, `unlinked from C`,
    /// `object data removed`, `object data replaced by 'X'`.
    pub what: String,
}

#[derive(Debug)]
struct Record {
    data: Option<String>,
    collections: Vec<String>,
    in_scene: bool,
    modifiers: Vec<String>,
    constraints: Vec<String>,
    vertex_groups: Vec<String>,
    /// The kernel's own verdict (`created`), from the kernel that ran no agent code: it knows
    /// objects by identity, where the bridge's record knows them by name.
    kernel_says_created: Option<bool>,
}

/// The other data-blocks of an inventory (`blocks`: materials, collections, actions, node
/// groups, images, texts) as (kind, name).
fn blocks(inventory: &Value) -> BTreeSet<(String, String)> {
    let listed = inventory.get("blocks").and_then(Value::as_array);
    listed
        .into_iter()
        .flatten()
        .filter_map(|b| {
            let kind = b.get("kind")?.as_str()?.to_owned();
            Some((kind, b.get("name")?.as_str()?.to_owned()))
        })
        .collect()
}

/// The kinds the bridge records when the agent makes one (the rest are never the agent's).
fn recorded_kind(kind: &str) -> Option<DataKind> {
    match kind {
        "material" => Some(DataKind::Material),
        "collection" => Some(DataKind::Collection),
        _ => None,
    }
}

fn records(inventory: &Value) -> BTreeMap<String, Record> {
    let objects = inventory.get("objects").and_then(Value::as_array);
    objects
        .into_iter()
        .flatten()
        .filter_map(|object| {
            let name = object.get("name")?.as_str()?.to_owned();
            let strings = |key: &str| -> Vec<String> {
                object
                    .get(key)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            };
            Some((
                name,
                Record {
                    data: object
                        .get("data")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    collections: strings("collections"),
                    in_scene: object.get("in_scene").and_then(Value::as_bool) == Some(true),
                    modifiers: strings("modifiers"),
                    constraints: strings("constraints"),
                    vertex_groups: strings("vertex_groups"),
                    kernel_says_created: object.get("created").and_then(Value::as_bool),
                },
            ))
        })
        .collect()
}

/// Compares two inventories (`{"objects": [{name, data, collections, in_scene}]}`) under the
/// rule; `created` holds what the agent created in this session. In name order.
pub fn violations(before: &Value, after: &Value, created: &CreatedRegistry) -> Vec<LockViolation> {
    let mut found = object_violations(&records(before), &records(after), created);
    let now = blocks(after);
    for (kind, name) in blocks(before) {
        let mine = recorded_kind(&kind).is_some_and(|k| created.owns(k, None, &name));
        if !mine && !now.contains(&(kind.clone(), name.clone())) {
            found.push(LockViolation {
                name,
                what: format!("({}) deleted or renamed", kind.replace('_', " ")),
            });
        }
    }
    found
}

fn object_violations(
    before: &BTreeMap<String, Record>,
    after: &BTreeMap<String, Record>,
    created: &CreatedRegistry,
) -> Vec<LockViolation> {
    let new_names: Vec<&String> = after.keys().filter(|n| !before.contains_key(*n)).collect();
    let mut found = Vec::new();
    for (name, was) in before {
        // The agent's when both records say so: the bridge's by name (agent code cannot forge
        // it) and the kernel's by identity (a person's rename and new object of the same name
        // cannot fool it).
        let agents = created.contains(name) && was.kernel_says_created != Some(false);
        if agents || !was.in_scene {
            continue;
        }
        if let Some(now) = after.get(name) {
            for modifier in &was.modifiers {
                if !now.modifiers.contains(modifier)
                    && !created.owns(DataKind::Modifier, Some(name), modifier)
                {
                    found.push(LockViolation {
                        name: name.clone(),
                        what: format!("lost its modifier {modifier:?}"),
                    });
                }
            }
            let parts = [
                ("constraint", &was.constraints, &now.constraints),
                ("vertex group", &was.vertex_groups, &now.vertex_groups),
            ];
            for (word, had, has) in parts {
                for part in had.iter().filter(|p| !has.contains(p)) {
                    found.push(LockViolation {
                        name: name.clone(),
                        what: format!("lost its {word} {part:?}"),
                    });
                }
            }
        }
        let what = match after.get(name) {
            None => {
                let renamed = new_names
                    .iter()
                    .find(|n| was.data.is_some() && after[**n].data == was.data);
                match renamed {
                    Some(new) => format!("renamed to {new:?}"),
                    None => "deleted".to_owned(),
                }
            }
            Some(now) if !now.in_scene => "unlinked from the scene".to_owned(),
            Some(now) => {
                let lost: Vec<&str> = was
                    .collections
                    .iter()
                    .filter(|c| !now.collections.contains(c))
                    .map(String::as_str)
                    .collect();
                if !lost.is_empty() {
                    format!("unlinked from {}", lost.join(", "))
                } else if was.data.is_some() && now.data != was.data {
                    match &now.data {
                        None => "object data removed".to_owned(),
                        Some(other) => format!("object data replaced by {other:?}"),
                    }
                } else {
                    continue;
                }
            }
        };
        found.push(LockViolation {
            name: name.clone(),
            what,
        });
    }
    found
}

/// The refusal for `found`.
pub fn refusal(tool: &str, found: &[LockViolation]) -> ErrorBody {
    let listed: Vec<Value> = found
        .iter()
        .map(|v| json!({"name": v.name, "what": v.what}))
        .collect();
    let summary: Vec<String> = found
        .iter()
        .map(|v| format!("{} {}", v.name, v.what))
        .collect();
    ErrorBody::from_reason(
        Reason::ActuatorLock,
        format!(
            "actuator lock: {tool} may not delete, rename or unlink objects the agent did not \
             create ({}); the call was rolled back",
            summary.join("; ")
        ),
    )
    .with_detail("violations", listed)
    .with_detail("rolled_back", true)
}

/// Phase 3: the inventory before agent code runs, from a kernel that has run none since it
/// started (boundary mode only).
#[derive(Debug, Default)]
pub struct CodeLockBefore;

#[async_trait]
impl Stage for CodeLockBefore {
    fn phase(&self) -> Phase {
        Phase::Plan
    }
    fn name(&self) -> &'static str {
        "code_lock"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        let Some(boundary) = session.transport.code_boundary() else {
            return Ok(());
        };
        if !call.runs_code() {
            return Ok(());
        }
        call.transport_calls += 1;
        let inventory = boundary.inventory().await.map_err(|e| {
            ErrorBody::new(
                ErrorCode::InternalError,
                format!("the scene could not be read before agent code ran: {e}"),
            )
        })?;
        call.scene_before = Some(inventory);
        Ok(())
    }
}

/// Phase 5: the bridge's decision on what agent code left (boundary mode), and what the agent
/// created (both modes).
#[derive(Debug, Default)]
pub struct CodeLockAfter;

impl CodeLockAfter {
    fn learn_created(session: &Session, names: impl IntoIterator<Item = String>) {
        let mut created = lock(&session.created);
        for name in names {
            created.created(&name);
        }
    }
}

#[async_trait]
impl Stage for CodeLockAfter {
    fn phase(&self) -> Phase {
        Phase::Verify
    }
    fn name(&self) -> &'static str {
        "code_lock"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        if !call.runs_code() {
            return Ok(());
        }
        let answer_ok = call.answer.as_ref().is_some_and(Envelope::is_ok);
        let Some(boundary) = session.transport.code_boundary() else {
            // Filter mode: the kernel checked the rule; learn what the code created.
            if let Some(result) = call.answer.as_ref().and_then(Envelope::result) {
                let made = result.get("created").and_then(Value::as_array);
                let names = made
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned));
                Self::learn_created(session, names);
            }
            if let Some(error) = call.answer.as_ref().and_then(Envelope::error)
                && error.reason() == Some(Reason::ActuatorLock)
            {
                session.audit_incident(RecordKind::Security, json!({"event": "actuator_lock", "mode": "filter", "tool": call.tool, "violations": error.details.get("violations")}));
            }
            return Ok(());
        };
        let settle_failed = |e: vibe_transport::TransportError| {
            session.open_breaker(format!(
                "the scene could not be settled after agent code: {e}"
            ));
            ErrorBody::new(
                ErrorCode::InternalError,
                format!(
                    "the scene could not be settled after agent code: {e}; a human reset is needed"
                ),
            )
            .with_detail("recovery", "ask_human")
        };
        // The kernel that ran the code was retired by the bridge (a swap it made itself).
        session.audit_incident(
            RecordKind::Note,
            json!({"event": "kernel_retired", "tool": call.tool, "after": "agent code"}),
        );
        if !answer_ok {
            // A failed call has no effects: the state before it, exactly, from the bridge's copy.
            return boundary.settle(false).await.map_err(settle_failed);
        }
        let Some(before) = call.scene_before.take() else {
            return boundary.settle(false).await.map_err(settle_failed);
        };
        call.transport_calls += 1;
        let after = match boundary.inventory().await {
            Ok(after) => after,
            Err(e) => {
                // No verdict without facts: the state before the call, exactly.
                boundary.settle(false).await.map_err(settle_failed)?;
                return Err(ErrorBody::new(
                    ErrorCode::ExecutionFailed,
                    format!(
                        "the scene agent code left could not be checked ({e}); the call was rolled back"
                    ),
                )
                .with_detail("rolled_back", true));
            }
        };
        let found = violations(&before, &after, &lock(&session.created));
        if !found.is_empty() {
            boundary.settle(false).await.map_err(settle_failed)?;
            let refusal = refusal(&call.tool, &found);
            session.audit_incident(RecordKind::Security, json!({"event": "actuator_lock", "mode": "boundary", "tool": call.tool, "violations": refusal.details.get("violations")}));
            call.answer = Some(Envelope::Err(refusal));
            return Ok(());
        }
        boundary.settle(true).await.map_err(settle_failed)?;
        let before_names: Vec<String> = records(&before).into_keys().collect();
        let after_records = records(&after);
        {
            let mut created = lock(&session.created);
            let gone: Vec<String> = created
                .names()
                .filter(|n| !after_records.contains_key(*n))
                .map(str::to_owned)
                .collect();
            for name in gone {
                created.deleted(&name);
            }
        }
        Self::learn_created(
            session,
            after_records
                .into_keys()
                .filter(|n| !before_names.contains(n)),
        );
        Ok(())
    }
}
