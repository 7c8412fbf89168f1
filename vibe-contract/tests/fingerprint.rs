//! Fingerprint laws.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use vibe_contract::{Fingerprint, canonical_json, default_registries};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        (-1000.0f64..1000.0).prop_map(|f| json!(f)),
        "[a-z\"\\\\é]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(("[a-z]{1,4}", inner), 0..5)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// Rebuilds every object with its keys inserted in reverse order.
fn reorder(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map.iter().rev() {
                out.insert(k.clone(), reorder(v));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(reorder).collect()),
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn key_order_and_whitespace_do_not_matter(value in json_value()) {
        let fp = Fingerprint::of_value(&value);
        prop_assert_eq!(&Fingerprint::of_value(&reorder(&value)), &fp);
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        let reparsed: Value = serde_json::from_str(&pretty).unwrap();
        prop_assert_eq!(&Fingerprint::of_value(&reparsed), &fp);
        // The canonical text is itself JSON that parses back to an equivalent value.
        let canonical: Value = serde_json::from_str(&canonical_json(&value)).unwrap();
        prop_assert_eq!(Fingerprint::of_value(&canonical), fp);
    }

    #[test]
    fn any_changed_value_changes_the_fingerprint(value in json_value(), extra in "[a-z]{1,4}") {
        let fp = Fingerprint::of_value(&value);
        let wrapped = json!({ "v": value, "k": extra });
        let changed = json!({ "v": value, "k": format!("{extra}!") });
        prop_assert_ne!(Fingerprint::of_value(&wrapped), Fingerprint::of_value(&changed));
        prop_assert_ne!(Fingerprint::of_value(&json!([value.clone()])), fp.clone());
        if let Value::Array(mut items) = value.clone() {
            items.push(Value::Null);
            prop_assert_ne!(Fingerprint::of_value(&Value::Array(items)), fp);
        }
    }

    /// An object fingerprinted from its entries equals the object built from them (keys in any
    /// order, a repeated key counting with its last value, as inserting into a map does).
    #[test]
    fn an_object_from_entries_is_the_object_they_build(
        entries in prop::collection::vec(("[a-c]{1,2}", json_value()), 0..8),
    ) {
        let built: Map<String, Value> = entries.iter().cloned().collect();
        let expected = Fingerprint::of_value(&Value::Object(built));
        let borrowed = entries.iter().map(|(key, value)| (key.as_str(), value));
        prop_assert_eq!(Fingerprint::of_object(borrowed), expected);
    }

    #[test]
    fn floats_within_tolerance_agree(x in -1.0e5f64..1.0e5) {
        let rounded = (x * 1e6).round() / 1e6;
        prop_assert_eq!(Fingerprint::of_value(&json!(x)), Fingerprint::of_value(&json!(rounded)));
    }
}

#[test]
fn registry_fingerprint_changes_with_any_tool_value() {
    let registries = default_registries().unwrap();
    let original = registries.tools.fingerprint().clone();
    let changed = registries.tools.subset(|tool| tool.name != "object.delete");
    assert_ne!(changed.fingerprint(), &original);
}
