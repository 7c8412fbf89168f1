//! The actuator lock for typed tools, the twin of the kernel's `lock.refuse_object` and
//! `lock.refuse_modifier`.
//!
//! A data-block is the agent's when this session made it: an object made by `object.create`,
//! `mesh.create_cube` or `mesh.create_plane` or imported by `file.import` (its uid in
//! `created`; the kernel also counts the materials, images, actions and node groups an import
//! makes, which the mock's importers never make), a modifier added by
//! `modifier.add` (its object's uid and its name in `modifiers`), and every modifier of an object
//! of the agent's. `object.rename`, `object.delete`, `object.assign_collection` with mode
//! `"move"` and `modifier.remove` of anything else are refused, after the names are resolved and
//! before the tool's other checks: `contract_violation` with reason `actuator_lock`, `rule`
//! (`remove`, `rename`, `unlink`), `kind` (`object`, `modifier`), `name`, `object` (for a
//! modifier) and `field`. Property edits stay allowed.

use vibe_errors::{ErrorBody, Reason};

use super::MockBlender;

/// The rule's refusal message for an object, with the kernel's words.
fn object_message(rule: &str, name: &str) -> String {
    match rule {
        "remove" => format!(
            "security block: cannot delete object \"{name}\", which the agent did not create in this session"
        ),
        "rename" => format!(
            "security block: cannot rename object \"{name}\", which the agent did not create in this session"
        ),
        _ => format!(
            "security block: cannot move object \"{name}\", which the agent did not create in this session, \
             out of its collections; mode \"link\" adds a collection and keeps them"
        ),
    }
}

impl MockBlender {
    /// Whether this session made the object called `name`.
    pub(super) fn created_by_agent(&self, name: &str) -> bool {
        self.scene
            .objects
            .get(name)
            .is_some_and(|o| !o.linked && self.created.contains(&o.uid))
    }

    /// Whether the modifier `modifier` of the object `object` is the agent's.
    fn modifier_is_agents(&self, object: &str, modifier: &str) -> bool {
        self.created_by_agent(object)
            || self
                .scene
                .objects
                .get(object)
                .is_some_and(|o| self.modifiers.contains(&(o.uid, modifier.to_owned())))
    }

    /// Refuses `rule` (`remove`, `rename`, `unlink`) on the object called `name` unless the agent
    /// made it.
    pub(super) fn refuse_object(&self, name: &str, rule: &str) -> Result<(), ErrorBody> {
        if self.created_by_agent(name) {
            return Ok(());
        }
        Err(
            ErrorBody::from_reason(Reason::ActuatorLock, object_message(rule, name))
                .with_detail("rule", rule)
                .with_detail("kind", "object")
                .with_detail("name", name)
                .with_detail("field", "name"),
        )
    }

    /// Refuses `modifier.remove` of `modifier` of the object `object` unless the agent added it.
    pub(super) fn refuse_modifier(&self, object: &str, modifier: &str) -> Result<(), ErrorBody> {
        if self.modifier_is_agents(object, modifier) {
            return Ok(());
        }
        Err(ErrorBody::from_reason(
            Reason::ActuatorLock,
            format!(
                "security block: cannot remove modifier \"{modifier}\" of \"{object}\", which the agent \
                 did not add in this session"
            ),
        )
        .with_rule(vibe_errors::Rule::Remove)
        .with_detail("kind", "modifier")
        .with_detail("name", modifier)
        .with_detail("object", object)
        .with_detail("field", "modifier_name"))
    }

    /// Records a modifier the agent added to the object called `object`.
    pub(super) fn record_modifier(&mut self, object: &str, modifier: &str) {
        if let Some(o) = self.scene.objects.get(object) {
            self.modifiers.insert((o.uid, modifier.to_owned()));
        }
    }

    /// Forgets a modifier the agent removed (a person's modifier of that name later is theirs).
    pub(super) fn forget_modifier(&mut self, object: &str, modifier: &str) {
        if let Some(o) = self.scene.objects.get(object) {
            self.modifiers.remove(&(o.uid, modifier.to_owned()));
        }
    }

    /// Forgets everything recorded about an object that is deleted.
    pub(super) fn forget_object(&mut self, uid: u64) {
        self.created.remove(&uid);
        self.modifiers.retain(|(owner, _)| *owner != uid);
    }
}
