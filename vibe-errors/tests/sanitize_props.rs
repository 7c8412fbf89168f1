//! Property tests of message hygiene over generated Python tracebacks.

use proptest::prelude::*;
use vibe_errors::{ErrorBody, ErrorCode, MAX_MESSAGE_CHARS, contains_frame, sanitize_message};

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        "(/[a-z]{1,8}){1,5}\\.py",
        "[A-Z]:(\\\\[a-z]{1,8}){1,4}\\.py",
        Just("<string>".to_owned()),
        Just("<blender_console>".to_owned()),
    ]
}

fn frame() -> impl Strategy<Value = String> {
    (path(), 1u32..5000, "[a-z_<>]{1,12}", "[a-z_.()= ]{0,30}").prop_map(|(p, line, func, src)| {
        if src.trim().is_empty() {
            format!("  File \"{p}\", line {line}, in {func}")
        } else {
            format!(
                "  File \"{p}\", line {line}, in {func}\n    {}\n    ^^^^",
                src.trim()
            )
        }
    })
}

fn error_line() -> impl Strategy<Value = String> {
    (
        "(Runtime|Key|Value|Type|Attribute|Name)Error",
        "[A-Za-z0-9 '._\\[\\]]{1,60}",
    )
        .prop_map(|(kind, text)| format!("{kind}: {}", text.trim()))
        .prop_filter("non-empty text", |l| !l.ends_with(": "))
}

proptest! {
    #[test]
    fn tracebacks_reduce_to_their_last_error_line(
        frames in prop::collection::vec(frame(), 0..6),
        last in error_line(),
        chained in prop::option::of(error_line()),
    ) {
        let mut raw = String::new();
        if let Some(first) = &chained {
            raw.push_str("Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n");
            raw.push_str(first);
            raw.push_str("\n\nDuring handling of the above exception, another exception occurred:\n\n");
        }
        raw.push_str("Traceback (most recent call last):\n");
        for f in &frames {
            raw.push_str(f);
            raw.push('\n');
        }
        raw.push_str(&last);
        let clean = sanitize_message(&raw);
        prop_assert!(!clean.contains("Traceback (most recent call last)"));
        prop_assert!(!contains_frame(&clean));
        prop_assert!(!clean.contains('\n'));
        let expected = last.split_whitespace().collect::<Vec<_>>().join(" ");
        prop_assert_eq!(clean, expected);
    }

    #[test]
    fn any_text_is_one_clean_bounded_line(raw in "(?s).{0,2000}") {
        let clean = sanitize_message(&raw);
        prop_assert!(!clean.is_empty());
        prop_assert!(!clean.contains('\n') && !clean.contains('\r'));
        prop_assert!(!clean.contains("Traceback (most recent call last)"));
        prop_assert!(!contains_frame(&clean));
        prop_assert!(clean.chars().count() <= MAX_MESSAGE_CHARS);
    }

    #[test]
    fn absolute_paths_never_survive(dirs in prop::collection::vec("[a-z]{2,8}", 1..5), file in "[a-z]{1,8}\\.blend") {
        let raw = format!("OSError: cannot open '/{}/{file}' for writing", dirs.join("/"));
        let clean = ErrorBody::from_raw(ErrorCode::ExecutionFailed, raw).message;
        let leaked = format!("/{}", dirs[0]);
        prop_assert!(!clean.contains(&leaked));
        prop_assert_eq!(clean, format!("OSError: cannot open '{file}' for writing"));
    }
}
