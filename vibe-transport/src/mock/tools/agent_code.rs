//! `python.exec`: agent code, run by the embedder's [`CodeHandler`](crate::mock::CodeHandler),
//! atomic, and held to the twin of the kernel's in-kernel actuator lock for code (the kernel's
//! `agent_code.py` and `lock.py`).

use std::collections::BTreeSet;

use serde_json::{Value, json};
use vibe_errors::{ErrorBody, ErrorCode, Reason};

use super::{ToolResult, req_str};
use crate::mock::MockBlender;
use crate::mock::scene::Scene;

impl MockBlender {
    pub(super) fn python_exec(&mut self, params: &Value) -> ToolResult {
        let code = req_str(params, "code")?.to_owned();
        let Some(handler) = self.code.as_mut() else {
            return Err(ErrorBody::new(
                ErrorCode::CapabilityMissing,
                "MockBlender cannot run Python",
            ));
        };
        let before = self.scene.clone();
        let outcome = handler(&code, &mut self.scene);
        let stdout = match outcome {
            Ok(stdout) => stdout,
            Err(raw) => {
                // Atomic: a failed run leaves nothing behind.
                self.restore_scene(before);
                return Err(ErrorBody::from_raw(ErrorCode::ExecutionFailed, raw));
            }
        };
        // The twin of the kernel's in-kernel actuator lock for code (lock.py).
        let broken = code_lock_violations(&before, &self.scene, &self.created);
        if !broken.is_empty() {
            self.restore_scene(before);
            let summary: Vec<String> = broken
                .iter()
                .map(|(name, what)| format!("{name} {what}"))
                .collect();
            let listed: Vec<Value> = broken
                .iter()
                .map(|(name, what)| json!({"name": name, "what": what}))
                .collect();
            return Err(ErrorBody::from_reason(
                Reason::ActuatorLock,
                format!(
                    "actuator lock: agent code may not delete, rename or unlink objects it did not \
                     create ({}); the call was rolled back",
                    summary.join("; ")
                ),
            )
            .with_detail("violations", listed)
            .with_detail("rolled_back", true));
        }
        let known: BTreeSet<u64> = before.objects.values().map(|o| o.uid).collect();
        let mut made = Vec::new();
        for object in self.scene.objects.values() {
            if !known.contains(&object.uid) {
                self.created.insert(object.uid);
                made.push(object.name.clone());
            }
        }
        Ok(json!({"stdout": stdout, "truncated": false, "created": made}))
    }
}

/// What agent code did to objects the agent did not create (by uid): `(name, what)` pairs in
/// name order, with the kernel's words.
fn code_lock_violations(
    before: &Scene,
    after: &Scene,
    created: &BTreeSet<u64>,
) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (name, was) in &before.objects {
        if created.contains(&was.uid) || was.collections.is_empty() {
            continue;
        }
        let now = after.objects.values().find(|o| o.uid == was.uid);
        let what = match now {
            None => "deleted".to_owned(),
            Some(now) if &now.name != name => format!("renamed to {:?}", now.name),
            Some(now) if now.collections.is_empty() => "unlinked from the scene".to_owned(),
            Some(now) => {
                let lost: Vec<&str> = was
                    .collections
                    .iter()
                    .filter(|c| !now.collections.contains(c))
                    .map(String::as_str)
                    .collect();
                if lost.is_empty() {
                    continue;
                }
                format!("unlinked from {}", lost.join(", "))
            }
        };
        found.push((name.clone(), what));
    }
    // The other data-blocks the mock has: materials and collections the agent did not make.
    for material in before.materials.keys() {
        if !after.materials.contains_key(material) {
            found.push((material.clone(), "(material) deleted or renamed".to_owned()));
        }
    }
    for collection in &before.collections {
        if !after.collections.iter().any(|c| c.name == collection.name) {
            found.push((
                collection.name.clone(),
                "(collection) deleted or renamed".to_owned(),
            ));
        }
    }
    found
}

#[cfg(test)]
mod code_lock_tests {
    use super::*;

    fn agent(scene: &mut Scene) {
        let mut made = scene.objects["Cube"].clone();
        made.uid = 99;
        made.name = "Box".into();
        scene.objects.insert("Box".into(), made);
    }

    #[test]
    fn every_way_to_take_a_protected_object_is_named() {
        let before = Scene::default_startup();
        let created = BTreeSet::new();
        let mut deleted = before.clone();
        deleted.objects.remove("Cube");
        assert_eq!(
            code_lock_violations(&before, &deleted, &created),
            [("Cube".into(), "deleted".into())]
        );
        let mut renamed = before.clone();
        let mut cube = renamed.objects.remove("Cube").unwrap();
        cube.name = "junk".into();
        renamed.objects.insert("junk".into(), cube);
        assert_eq!(
            code_lock_violations(&before, &renamed, &created),
            [("Cube".into(), "renamed to \"junk\"".into())]
        );
        let mut unlinked = before.clone();
        unlinked
            .objects
            .get_mut("Camera")
            .unwrap()
            .collections
            .clear();
        assert_eq!(
            code_lock_violations(&before, &unlinked, &created),
            [("Camera".into(), "unlinked from the scene".into())]
        );
        let mut two = before.clone();
        two.objects
            .get_mut("Light")
            .unwrap()
            .collections
            .push("Props".into());
        let mut moved = two.clone();
        moved.objects.get_mut("Light").unwrap().collections = vec!["Props".into()];
        assert_eq!(
            code_lock_violations(&two, &moved, &created),
            [("Light".into(), "unlinked from Collection".into())]
        );
    }

    #[test]
    fn property_edits_and_the_agents_own_objects_are_free() {
        let before = Scene::default_startup();
        let mut edited = before.clone();
        edited.objects.get_mut("Cube").unwrap().location = [1.0, 2.0, 3.0];
        agent(&mut edited);
        assert!(code_lock_violations(&before, &edited, &BTreeSet::new()).is_empty());
        let mut own = edited.clone();
        own.objects.remove("Box");
        assert!(code_lock_violations(&edited, &own, &BTreeSet::from([99])).is_empty());
    }
}
