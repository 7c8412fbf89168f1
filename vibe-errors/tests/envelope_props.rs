//! Property tests: envelope round trips, forward compatibility, MCP mapping.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use vibe_errors::{Determinism, Envelope, ErrorBody, ErrorCode, FailureClass, Meta, Reason};

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e9f64..1e9).prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    prop_oneof![
        (0..ErrorCode::KNOWN.len()).prop_map(|i| ErrorCode::KNOWN[i].clone()),
        "[a-z][a-z0-9_]{0,20}".prop_map(|s| ErrorCode::parse(&s)),
    ]
}

fn error_body() -> impl Strategy<Value = ErrorBody> {
    (
        error_code(),
        "[A-Za-z0-9 ':._-]{1,40}",
        prop::collection::btree_map("[a-z_]{1,8}", json_value(), 0..4),
        prop::option::of((0..Reason::KNOWN.len()).prop_map(|i| Reason::KNOWN[i].clone())),
    )
        .prop_map(|(code, message, details, reason)| {
            let mut body = ErrorBody::new(code, message.trim());
            for (k, v) in details {
                body = body.with_detail(k, v);
            }
            match reason {
                Some(reason) => body.with_reason(reason),
                None => body,
            }
        })
}

fn envelope() -> impl Strategy<Value = Envelope> {
    prop_oneof![
        json_value().prop_map(Envelope::Ok),
        error_body().prop_map(Envelope::Err),
    ]
}

proptest! {
    #[test]
    fn envelope_json_envelope_is_identity(envelope in envelope()) {
        let text = envelope.to_json_string();
        let back = Envelope::from_slice(text.as_bytes()).unwrap();
        prop_assert_eq!(&back, &envelope);
        prop_assert_eq!(back.to_json_string(), text);
    }

    #[test]
    fn wire_has_exactly_two_top_level_keys(envelope in envelope()) {
        let value = envelope.to_value();
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        prop_assert_eq!(keys.len(), 2);
        prop_assert_eq!(value["ok"].as_bool(), Some(envelope.is_ok()));
        if let Some(error) = value.get("error") {
            let mut keys: Vec<&String> = error.as_object().unwrap().keys().collect();
            keys.sort();
            prop_assert_eq!(keys, vec!["code", "details", "message"]);
        }
    }

    #[test]
    fn unknown_codes_survive_re_serialization(code in "[a-z][a-z0-9_]{0,20}") {
        let text = json!({"ok": false, "error": {"code": code, "message": "m", "details": {"x": 1}}}).to_string();
        let envelope = Envelope::from_slice(text.as_bytes()).unwrap();
        let wire = envelope.to_value();
        prop_assert_eq!(wire["error"]["code"].as_str(), Some(code.as_str()));
        prop_assert_eq!(envelope.error().unwrap().code.is_known(), ErrorCode::KNOWN.iter().any(|k| k.as_str() == code));
    }

    #[test]
    fn mcp_result_mirrors_the_envelope(envelope in envelope()) {
        let mcp = envelope.to_mcp_tool_result();
        prop_assert_eq!(&mcp["structuredContent"], &envelope.to_value());
        prop_assert_eq!(mcp["isError"].as_bool(), Some(!envelope.is_ok()));
        let text = mcp["content"][0]["text"].as_str().unwrap();
        prop_assert_eq!(Envelope::from_slice(text.as_bytes()).unwrap(), envelope);
    }

    #[test]
    fn meta_rides_inside_the_result(result in json_value(), seed in any::<u32>()) {
        let meta = Meta { determinism: Some(Determinism::DeterministicWithSeed), seed: Some(json!(seed)), fingerprint: Some("blake3:00".into()), retry_count: Some(1), events: vec![json!({"event": "file_loaded", "file": "a.blend"})], ..Meta::default() };
        let envelope = Envelope::ok(result.clone()).with_meta(meta.clone());
        prop_assert_eq!(envelope.meta(), Some(meta));
        let wire = envelope.to_value();
        prop_assert_eq!(wire.as_object().unwrap().len(), 2);
        // The original result is still there, untouched.
        match result {
            Value::Object(original) => for (k, v) in original.iter().filter(|(k, _)| k.as_str() != "_meta") {
                prop_assert_eq!(&wire["result"][k], v);
            },
            other => prop_assert_eq!(&wire["result"]["value"], &other),
        }
    }
}

#[test]
fn malformed_envelopes_are_refused_precisely() {
    for (text, needle) in [
        (r#"{"ok":true}"#, "without `result`"),
        (r#"{"ok":false}"#, "without `error`"),
        (
            r#"{"ok":true,"result":1,"error":{"code":"timeout","message":"m"}}"#,
            "with an `error`",
        ),
        (r#"{"result":1}"#, "missing field `ok`"),
        (r#"[1,2]"#, "invalid type"),
    ] {
        let err = Envelope::from_slice(text.as_bytes()).unwrap_err();
        assert!(err.to_string().contains(needle), "{text}: {err}");
    }
}

#[test]
fn null_result_and_missing_details_are_accepted() {
    let ok = Envelope::from_slice(br#"{"ok":true,"result":null}"#).unwrap();
    assert_eq!(ok, Envelope::Ok(Value::Null));
    let err = Envelope::from_slice(br#"{"ok":false,"error":{"code":"timeout","message":"late"}}"#)
        .unwrap();
    let body = err.error().unwrap();
    assert_eq!(body.details, Map::new());
    assert_eq!(body.class(), FailureClass::E0);
    assert!(body.retryable());
}

#[test]
fn raw_text_is_redacted_unless_asked_for() {
    let raw = "Traceback (most recent call last):\n  File \"/home/ann/x.py\", line 2, in <module>\nRuntimeError: Operator bpy.ops.object.modifier_apply.poll() failed, context is incorrect";
    let body = ErrorBody::from_raw(ErrorCode::ExecutionFailed, raw);
    assert_eq!(
        body.message,
        "RuntimeError: Operator bpy.ops.object.modifier_apply.poll() failed, context is incorrect"
    );
    let wire = Envelope::from(body.clone()).to_json_string();
    assert!(!wire.contains("Traceback") && !wire.contains("/home/ann"));
    assert!(!format!("{body:?}").contains("/home/ann"));
    assert_eq!(body.expose_raw(), Some(raw));
    assert_eq!(body.to_value_with_raw()["details"]["raw"], raw);
}

#[test]
fn macro_context_and_reason_defaults() {
    let body = ErrorBody::from_reason(Reason::SanityLimit, "levels 6 > 3")
        .with_detail("field", "levels")
        .with_context(json!({"macro": "build_and_place", "step": 2}));
    assert_eq!(body.code, ErrorCode::InvalidArguments);
    assert_eq!(body.details["context"]["step"], 2);
    let other =
        ErrorBody::new(ErrorCode::NotFound, "no 'Lamp'").with_reason(Reason::Other("gone".into()));
    assert_eq!(other.reason(), Some(Reason::Other("gone".into())));
    assert_eq!(other.class(), FailureClass::E3);
}

#[test]
fn guidance_completes_bare_errors_from_peers() {
    let bare = Envelope::from_slice(br#"{"ok":false,"error":{"code":"not_found","message":"Traceback (most recent call last):\nKeyError: 'X'","details":{"reason":"identity_drift","field":"name"}}}"#).unwrap();
    let completed = bare.error().unwrap().clone().with_guidance();
    assert_eq!(completed.message, "KeyError: 'X'");
    assert_eq!(completed.details["class"], "E3");
    assert_eq!(completed.details["recovery"], "inspect_scene");
    assert_eq!(completed.details["retryable"], true);
    // What a peer did say is kept.
    let kept = ErrorBody::new(ErrorCode::Timeout, "late")
        .with_detail("recovery", "ask_human")
        .with_guidance();
    assert_eq!(kept.details["recovery"], "ask_human");
}
