//! What a tool does to data-blocks, declared in the registry: which it creates, removes,
//! renames or unlinks, and whether it loads a file. The bridge's actuator lock and its record
//! of what the agent made read these declarations; no tool name is special-cased.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A kind of data-block an effect touches.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DataKind {
    /// An object (and, with it, its own data).
    Object,
    /// A modifier of an object.
    Modifier,
    /// A material.
    Material,
    /// A collection.
    Collection,
}

impl DataKind {
    /// Its name in refusals and records.
    pub fn as_str(self) -> &'static str {
        match self {
            DataKind::Object => "object",
            DataKind::Modifier => "modifier",
            DataKind::Material => "material",
            DataKind::Collection => "collection",
        }
    }
}

/// What an effect does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EffectAction {
    /// Makes a new data-block: it is the agent's.
    Create,
    /// Removes a data-block (protected: only the agent's).
    Remove,
    /// Renames a data-block (protected: only the agent's).
    Rename,
    /// Unlinks a data-block from where it is used (protected: only the agent's).
    Unlink,
    /// Loads a file: what the agent made before is gone; everything loaded is the human's.
    Load,
}

impl EffectAction {
    /// Whether the actuator lock allows this only on the agent's own data-blocks.
    pub fn is_protected(self) -> bool {
        matches!(
            self,
            EffectAction::Remove | EffectAction::Rename | EffectAction::Unlink
        )
    }

    /// Its name in refusals (`rule`).
    pub fn as_str(self) -> &'static str {
        match self {
            EffectAction::Create => "create",
            EffectAction::Remove => "remove",
            EffectAction::Rename => "rename",
            EffectAction::Unlink => "unlink",
            EffectAction::Load => "load",
        }
    }
}

/// One declared effect of a tool.
///
/// ```yaml
/// effects:
///   - { action: remove, kind: modifier, owner: name, param: modifier_name }
///   - { action: unlink, kind: object, param: name, unless: { mode: link } }
///   - { action: create, kind: material, result: name, if_result: created }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Effect {
    /// What happens.
    pub action: EffectAction,
    /// To what kind of data-block (none for `load`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<DataKind>,
    /// The argument naming the data-block, for effects on an existing one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// The argument naming the object that owns it (modifiers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Where the result names the data-block as it is now (created, or renamed): a path of
    /// object keys and array indexes (`-1` is the last element), dot-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// A boolean result key that must be true for the effect to have happened (`created` of
    /// tools that make a data-block only when it is missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_result: Option<String>,
    /// Argument values under which the effect does not happen (an absent argument takes the
    /// input schema's default).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unless: BTreeMap<String, Value>,
}

impl Effect {
    /// Whether the effect applies to a call with `params`, given the tool's input schema
    /// (for the defaults of absent arguments).
    pub fn applies(&self, params: &Value, inputs: &Value) -> bool {
        !self.unless.iter().any(|(key, value)| {
            let given = params
                .get(key)
                .or_else(|| inputs.pointer(&format!("/properties/{key}/default")));
            given == Some(value)
        })
    }

    /// The data-block's name in the call's arguments.
    pub fn target<'a>(&self, params: &'a Value) -> Option<&'a str> {
        params.get(self.param.as_deref()?)?.as_str()
    }

    /// The owning object's name in the call's arguments.
    pub fn owner_of<'a>(&self, params: &'a Value) -> Option<&'a str> {
        params.get(self.owner.as_deref()?)?.as_str()
    }

    /// The data-block's name in a result, and whether the effect happened (`if_result`).
    pub fn in_result<'a>(&self, result: &'a Value) -> Option<&'a str> {
        self.in_results(result).into_iter().next()
    }

    /// Every data-block the result names: one, or each string of an array when the path ends
    /// in `*` (`objects.*`: an import's new objects).
    pub fn in_results<'a>(&self, result: &'a Value) -> Vec<&'a str> {
        if let Some(flag) = &self.if_result
            && result.get(flag).and_then(Value::as_bool) != Some(true)
        {
            return Vec::new();
        }
        let Some(path) = self.result.as_deref() else {
            return Vec::new();
        };
        match path.strip_suffix("*") {
            Some(prefix) => {
                let array = match prefix.strip_suffix('.') {
                    Some(parent) => walk(result, parent),
                    None => Some(result),
                };
                array
                    .and_then(Value::as_array)
                    .map(|items| items.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default()
            }
            None => walk(result, path)
                .and_then(Value::as_str)
                .into_iter()
                .collect(),
        }
    }

    /// A description of a malformed declaration, if it is one: the fields each action needs.
    pub(crate) fn problem(&self) -> Option<&'static str> {
        match self.action {
            EffectAction::Load => self.kind.is_some().then_some("a load effect names no kind"),
            EffectAction::Create => match (self.kind, &self.result) {
                (None, _) => Some("a create effect needs a kind"),
                (_, None) => Some("a create effect needs `result`"),
                _ => None,
            },
            _ => match (self.kind, &self.param) {
                (None, _) => Some("an effect on a data-block needs a kind"),
                (_, None) => Some("an effect on an existing data-block needs `param`"),
                (Some(DataKind::Modifier), _) if self.owner.is_none() => {
                    Some("an effect on a modifier needs `owner`")
                }
                _ => None,
            },
        }
    }
}

/// The value at a dot-separated path of object keys and array indexes (`-1` is the last).
fn walk<'a>(result: &'a Value, path: &str) -> Option<&'a Value> {
    let mut at = result;
    for step in path.split('.') {
        at = match (at, step.parse::<i64>()) {
            (Value::Array(items), Ok(i)) => {
                let index = if i < 0 {
                    items.len().checked_sub(i.unsigned_abs() as usize)?
                } else {
                    i as usize
                };
                items.get(index)?
            }
            (value, _) => value.get(step)?,
        };
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unless_takes_the_schema_default_for_an_absent_argument() {
        let unlink: Effect = serde_json::from_value(
            json!({"action": "unlink", "kind": "object", "param": "name", "unless": {"mode": "link"}}),
        )
        .unwrap();
        let moving = json!({"properties": {"mode": {"default": "move"}}});
        let linking = json!({"properties": {"mode": {"default": "link"}}});
        assert!(unlink.applies(&json!({"name": "Cube"}), &moving));
        assert!(!unlink.applies(&json!({"name": "Cube"}), &linking));
        assert!(!unlink.applies(&json!({"name": "Cube", "mode": "link"}), &moving));
        assert!(unlink.applies(&json!({"name": "Cube", "mode": "move"}), &linking));
    }

    #[test]
    fn a_result_path_ending_in_a_star_names_every_string_of_the_array() {
        let imported: Effect = serde_json::from_value(
            json!({"action": "create", "kind": "object", "result": "objects.*"}),
        )
        .unwrap();
        let result = json!({"objects": ["Chair", "Table", 3]});
        assert_eq!(imported.in_results(&result), ["Chair", "Table"]);
        assert_eq!(imported.in_result(&result), Some("Chair"));
        assert!(imported.in_results(&json!({"objects": []})).is_empty());
        assert!(imported.in_results(&json!({"objects": "Chair"})).is_empty());
    }

    #[test]
    fn result_paths_reach_the_last_element_and_honour_if_result() {
        let added: Effect = serde_json::from_value(
            json!({"action": "create", "kind": "modifier", "owner": "name", "result": "modifiers.-1.name"}),
        )
        .unwrap();
        let result = json!({"modifiers": [{"name": "Bevel"}, {"name": "Subdivision"}]});
        assert_eq!(added.in_result(&result), Some("Subdivision"));
        assert_eq!(added.in_result(&json!({"modifiers": []})), None);
        let ensured: Effect = serde_json::from_value(
            json!({"action": "create", "kind": "material", "result": "name", "if_result": "created"}),
        )
        .unwrap();
        assert_eq!(
            ensured.in_result(&json!({"name": "Wood", "created": true})),
            Some("Wood")
        );
        assert_eq!(
            ensured.in_result(&json!({"name": "Wood", "created": false})),
            None
        );
    }

    #[test]
    fn malformed_declarations_are_named() {
        let no_owner: Effect = serde_json::from_value(
            json!({"action": "remove", "kind": "modifier", "param": "modifier_name"}),
        )
        .unwrap();
        assert_eq!(
            no_owner.problem(),
            Some("an effect on a modifier needs `owner`")
        );
        let no_result: Effect =
            serde_json::from_value(json!({"action": "create", "kind": "object"})).unwrap();
        assert!(no_result.problem().is_some());
    }
}
