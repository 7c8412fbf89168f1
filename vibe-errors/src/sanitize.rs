//! Message hygiene: turn raw Blender / Python error text into a one-line message.
//!
//! Error model v1 forbids stack traces in `message`. Blender hands us tracebacks, `File "...",
//! line N` frames, source excerpts with caret markers, and absolute paths that leak the user's
//! home folder. [`sanitize_message`] keeps the line that says what went wrong (for Python, the
//! last line of the traceback) and drops everything else.

/// The longest message [`sanitize_message`] returns, in characters; longer text is cut with `…`.
pub const MAX_MESSAGE_CHARS: usize = 512;

/// What [`sanitize_message`] returns when nothing useful is left.
pub const EMPTY_MESSAGE: &str = "unknown error";

const TRACEBACK_HEADER: &str = "Traceback (most recent call last)";

/// Reduces raw error text to its useful last line, without traceback, frames or absolute paths.
///
/// ```
/// let raw = "Traceback (most recent call last):\n  File \"/home/ann/s.py\", line 3, in <module>\n    bpy.data.objects['X']\nKeyError: 'bpy_prop_collection[key]: key \"X\" not found'";
/// assert_eq!(
///     vibe_errors::sanitize_message(raw),
///     "KeyError: 'bpy_prop_collection[key]: key \"X\" not found'"
/// );
/// ```
pub fn sanitize_message(raw: &str) -> String {
    let line = last_error_line(raw).unwrap_or("");
    let line = strip_frames(line);
    let line = strip_absolute_paths(&line);
    let line = line.replace(TRACEBACK_HEADER, "");
    let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return EMPTY_MESSAGE.to_owned();
    }
    truncate_chars(&line, MAX_MESSAGE_CHARS)
}

/// Whether `text` contains a Python frame marker `File "...", line N`.
pub fn contains_frame(text: &str) -> bool {
    find_frame(text).is_some()
}

/// The last line that is neither traceback scaffolding nor a source excerpt.
fn last_error_line(raw: &str) -> Option<&str> {
    let mut last = None;
    let mut after_frame = false;
    for line in raw.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            after_frame = false;
            continue;
        }
        let is_frame = trimmed.starts_with("File \"") && find_frame(trimmed).is_some();
        let is_scaffold = trimmed.contains(TRACEBACK_HEADER)
            || trimmed.starts_with("During handling of the above exception")
            || trimmed.starts_with("The above exception was the direct cause")
            || trimmed.chars().all(|c| matches!(c, '^' | '~' | ' '));
        // The indented line right after a frame is the source excerpt of that frame.
        let is_source = after_frame && line.starts_with(char::is_whitespace);
        after_frame = is_frame || (after_frame && is_source);
        if is_frame || is_scaffold || is_source {
            continue;
        }
        last = Some(trimmed);
    }
    last
}

/// The byte range of a `File "...", line N[, in name]` marker in `text`.
fn find_frame(text: &str) -> Option<(usize, usize)> {
    let mut search_from = 0;
    while let Some(offset) = text[search_from..].find("File \"") {
        let start = search_from + offset;
        let after_quote = start + "File \"".len();
        if let Some(close) = text[after_quote..].find('"') {
            let rest_start = after_quote + close + 1;
            let rest = &text[rest_start..];
            if let Some(tail) = rest.strip_prefix(", line ") {
                let digits = tail.chars().take_while(char::is_ascii_digit).count();
                if digits > 0 {
                    let mut end = rest_start + ", line ".len() + digits;
                    if let Some(func) = text[end..].strip_prefix(", in ") {
                        let name_len = func
                            .find(|c: char| c.is_whitespace() || c == ',' || c == ':')
                            .unwrap_or(func.len());
                        end += ", in ".len() + name_len;
                    }
                    return Some((start, end));
                }
            }
        }
        search_from = after_quote;
    }
    None
}

fn strip_frames(line: &str) -> String {
    let mut text = line.to_owned();
    while let Some((start, end)) = find_frame(&text) {
        text.replace_range(start..end, "");
    }
    text
}

fn is_path_char(c: char) -> bool {
    !(c.is_whitespace()
        || matches!(
            c,
            '"' | '\'' | '`' | ')' | '(' | ',' | ';' | '<' | '>' | '|'
        ))
}

/// Where an absolute path starts at byte `i` of `text`, if one does.
fn path_starts_at(text: &str, i: usize) -> bool {
    let bytes = text.as_bytes();
    let boundary = i == 0
        || matches!(
            bytes[i - 1],
            b' ' | b'\t' | b'"' | b'\'' | b'`' | b'(' | b'=' | b':' | b'[' | b'{' | b','
        );
    if !boundary {
        return false;
    }
    let rest = &bytes[i..];
    let unix =
        rest.len() >= 2 && rest[0] == b'/' && is_path_char(rest[1] as char) && rest[1] != b'/';
    let windows = rest.len() >= 3
        && rest[0].is_ascii_alphabetic()
        && rest[1] == b':'
        && (rest[2] == b'\\' || rest[2] == b'/');
    let unc = rest.len() >= 3 && rest[0] == b'\\' && rest[1] == b'\\' && rest[2] != b'\\';
    unix || windows || unc
}

/// Replaces every absolute path by its last component (`/home/ann/x.blend` -> `x.blend`).
fn strip_absolute_paths(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if path_starts_at(line, i) {
            let len = line[i..]
                .find(|c: char| !is_path_char(c))
                .unwrap_or(line.len() - i);
            let path = &line[i..i + len];
            let name = path
                .trim_end_matches(['/', '\\'])
                .rsplit(['/', '\\'])
                .next()
                .unwrap_or("");
            out.push_str(name);
            i += len;
        } else {
            let c = line[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_last_line_of_a_traceback() {
        let raw = "Traceback (most recent call last):\n  File \"/tmp/x.py\", line 1, in <module>\n    foo()\n    ^^^^^\nNameError: name 'foo' is not defined";
        assert_eq!(
            sanitize_message(raw),
            "NameError: name 'foo' is not defined"
        );
    }

    #[test]
    fn strips_inline_frames_and_paths() {
        let raw = "Error: Python: File \"/home/ann/scripts/a.py\", line 12, in run: RuntimeError: cannot open /home/ann/private/scene.blend";
        let clean = sanitize_message(raw);
        assert_eq!(
            clean,
            "Error: Python: : RuntimeError: cannot open scene.blend"
        );
        assert!(!clean.contains("/home"));
    }

    #[test]
    fn windows_paths_and_division_are_told_apart() {
        assert_eq!(
            sanitize_message(r"OSError: cannot read C:\Users\ann\scene.blend"),
            "OSError: cannot read scene.blend"
        );
        assert_eq!(
            sanitize_message("ratio 1/2 and a / b"),
            "ratio 1/2 and a / b"
        );
    }

    #[test]
    fn chained_exceptions_keep_the_final_error() {
        let raw = "Traceback (most recent call last):\n  File \"<string>\", line 2, in <module>\nKeyError: 'a'\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"<string>\", line 4, in <module>\nValueError: bad value";
        assert_eq!(sanitize_message(raw), "ValueError: bad value");
    }

    #[test]
    fn empty_and_scaffold_only_text() {
        assert_eq!(sanitize_message(""), EMPTY_MESSAGE);
        assert_eq!(
            sanitize_message("Traceback (most recent call last):\n"),
            EMPTY_MESSAGE
        );
    }

    #[test]
    fn long_messages_are_cut() {
        let long = "x".repeat(MAX_MESSAGE_CHARS * 2);
        let clean = sanitize_message(&long);
        assert_eq!(clean.chars().count(), MAX_MESSAGE_CHARS);
        assert!(clean.ends_with('…'));
    }
}
