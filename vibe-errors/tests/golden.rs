//! Golden files: one error envelope per taxonomy reason, the committed JSON Schema, and the
//! taxonomy table in the crate docs. Run with `VIBE_BLESS=1` to rewrite the files after an
//! intended change, then review the diff.

use std::path::PathBuf;

use vibe_errors::{Envelope, ErrorBody, Reason, envelope_schema_text, taxonomy, taxonomy_markdown};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check_or_bless(path: PathBuf, actual: &str) {
    if std::env::var_os("VIBE_BLESS").is_some() {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} missing ({e}); run with VIBE_BLESS=1", path.display()));
    assert_eq!(
        expected,
        actual,
        "{} is stale; run with VIBE_BLESS=1 and review the diff",
        path.display()
    );
}

fn sample_message(reason: &Reason) -> &'static str {
    match reason {
        Reason::ContractViolation => "malformed frame from the peer: expected a JSON object",
        Reason::SecurityBlock => "blocked pattern: import of 'os' is not allowed",
        Reason::Deadlock => "Blender's main thread did not answer within 15000 ms",
        Reason::Sandbox => "path 'HUMAN_ONLY/rig.blend' is outside the session sandbox",
        Reason::MutationFailed => "RuntimeError: Error: Object 'Cube' cannot be parented to itself",
        Reason::Busy => "Blender is saving a file; wait for ready",
        Reason::SanityLimit => "subdivision levels 6 exceed the limit of 3",
        Reason::IdentityDrift => "object 'Cube' is no longer in the scene",
        Reason::ActuatorLock => "cannot delete 'Armature': the agent did not create it",
        Reason::ReadOnly => "read-only mode: mutations are refused until a human resets it",
        _ => "other",
    }
}

#[test]
fn every_reason_has_a_golden_envelope() {
    let rows = taxonomy();
    assert_eq!(rows.len(), Reason::KNOWN.len());
    for row in rows {
        let envelope = Envelope::from(ErrorBody::from_reason(
            row.reason.clone(),
            sample_message(&row.reason),
        ));
        let mut text = serde_json::to_string_pretty(&envelope.to_value()).unwrap();
        text.push('\n');
        let path = crate_dir().join(format!("tests/golden/{}.json", row.reason));
        check_or_bless(path.clone(), &text);
        // The golden file parses back to the same envelope, with the taxonomy's fields.
        let parsed = Envelope::from_slice(std::fs::read(&path).unwrap().as_slice()).unwrap();
        assert_eq!(parsed, envelope);
        let error = parsed.error().unwrap();
        assert_eq!(error.code, row.code);
        assert_eq!(error.reason(), Some(row.reason.clone()));
        assert_eq!(error.class(), row.class);
        assert_eq!(error.retryable(), row.retryable);
        assert_eq!(error.recovery(), row.recovery);
    }
}

#[test]
fn committed_schema_is_current() {
    check_or_bless(
        crate_dir().join("schema/envelope.schema.json"),
        &envelope_schema_text(),
    );
}

#[test]
fn crate_docs_show_the_taxonomy_table() {
    let lib = std::fs::read_to_string(crate_dir().join("src/lib.rs")).unwrap();
    let doc_table: String = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//! "))
        .filter(|line| line.starts_with('|'))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_eq!(
        doc_table,
        taxonomy_markdown(),
        "the taxonomy table in src/lib.rs differs from taxonomy_markdown()"
    );
}

/// Every named reason, of the taxonomy or a detail one, has one snake_case spelling that parses
/// back to it; only the taxonomy's reasons have a row.
#[test]
fn every_named_reason_round_trips_and_only_the_taxonomy_has_rows() {
    use vibe_errors::Reason;
    let mut spellings = std::collections::BTreeSet::new();
    for reason in Reason::KNOWN.iter().chain(&Reason::DETAIL) {
        let spelling = reason.as_str();
        assert!(
            spelling.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{spelling}"
        );
        assert!(spellings.insert(spelling), "{spelling} is spelled twice");
        assert_eq!(&Reason::parse(spelling), reason);
    }
    assert_eq!(spellings.len(), 22);
    assert!(Reason::KNOWN.iter().all(|r| r.entry().is_some()));
    assert!(Reason::DETAIL.iter().all(|r| r.entry().is_none()));
    assert_eq!(Reason::parse("made_up"), Reason::Other("made_up".into()));
}
