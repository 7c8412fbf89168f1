//! MockBlender's twin of the kernel's `import_refs.py`, for the formats the mock claims: before
//! a `file.import` reads anything, every file the model names must lie inside the sandbox, else
//! `contract_violation` with reason `sandbox`, `field` `path` and the `reference` as written.
//!
//! * glTF: every `uri` anywhere in the document (buffers, images, extensions) that is not a
//!   `data:` URI, also percent-decoded.
//! * OBJ: each `mtllib` name, beside the OBJ; then in each material library inside the
//!   sandbox, each texture line (`map_*`, `bump`, `disp`, `decal`, `norm`, `refl`): every run of
//!   words to the line's end (the path after any options), beside the library.
//! * STL names no files.
//!
//! A reference is read in every form an importer might read it (as written, without quotes,
//! percent-decoded, with backslashes as separators); a URI scheme (`file:`) or drive is refused,
//! and the rest is resolved on paths alone, as the mock's other path checks are (there are no
//! links to resolve here; the kernel resolves them). The kernel's extra rule for a bare texture
//! name found in its working folder has no twin here: the mock reads no textures.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use vibe_errors::{ErrorBody, Reason};

use super::MockBlender;
use super::files::{is_human_only, normalize};

/// How many material libraries one OBJ may lead the check through (the kernel's MAX_FILES).
const MAX_FILES: usize = 64;
/// The texture lines of a material library, beside every `map_` key.
const MTL_MAP_KEYS: [&str; 5] = ["bump", "disp", "decal", "norm", "refl"];

fn refusal(relative: &str, reference: &str, why: &str) -> ErrorBody {
    ErrorBody::from_reason(
        Reason::Sandbox,
        format!("path {relative:?} names {reference:?}, which {why}"),
    )
    .with_detail("field", "path")
    .with_detail("reference", reference)
}

/// `%XX` escapes decoded (an escape that is not two hex digits is kept as written).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The ways an importer might read `reference`.
fn forms(reference: &str, decode: bool) -> Vec<String> {
    let mut found = vec![reference.to_owned(), reference.replace('"', "")];
    if decode {
        found.push(percent_decoded(reference));
    }
    let slashed: Vec<String> = found.iter().map(|f| f.replace('\\', "/")).collect();
    found.extend(slashed);
    found.sort();
    found.dedup();
    found
}

/// Whether `text` starts with a URI scheme or a drive (`file:`, `C:`).
fn has_scheme(text: &str) -> bool {
    let Some((scheme, _)) = text.split_once(':') else {
        return false;
    };
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
}

/// Every run of words up to the line's end.
fn tails(words: &[&str]) -> Vec<String> {
    (0..words.len()).map(|i| words[i..].join(" ")).collect()
}

/// Every string under a `uri` key anywhere in `value`.
fn uris<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                match (key.as_str(), item) {
                    ("uri", Value::String(uri)) => out.push(uri),
                    _ => uris(item, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| uris(item, out)),
        _ => {}
    }
}

/// The file a glTF URI names, as the importer reads it (percent-decoded, beside the model):
/// checked by [`MockBlender::check_model_references`] before it is read.
pub(super) fn uri_path(folder: &Path, uri: &str) -> PathBuf {
    let joined = folder.join(percent_decoded(uri));
    normalize(&joined.to_string_lossy()).unwrap_or(joined)
}

impl MockBlender {
    /// Refuses `reference` (named by the model `relative`, resolved against the absolute
    /// folder `folder`) unless every form of it lies inside the sandbox; returns the path.
    fn check_reference(
        &self,
        relative: &str,
        folder: &Path,
        reference: &str,
        decode: bool,
    ) -> Result<PathBuf, ErrorBody> {
        let root = self
            .session
            .sandbox
            .as_deref()
            .and_then(normalize)
            .unwrap_or_default();
        let roots: Vec<PathBuf> = self
            .session
            .project_roots
            .iter()
            .filter_map(|r| normalize(r))
            .collect();
        let mut resolved = PathBuf::new();
        for form in forms(reference, decode) {
            if has_scheme(&form) && !form.starts_with("data:") {
                return Err(refusal(
                    relative,
                    reference,
                    "is a URI or drive path; only relative paths inside the sandbox are read",
                ));
            }
            let joined = folder.join(&form);
            let target = normalize(&joined.to_string_lossy()).unwrap_or_default();
            if roots.iter().any(|r| target.starts_with(r)) {
                return Err(refusal(relative, reference, "resolves into a project root"));
            }
            if target == root || !target.starts_with(&root) {
                return Err(refusal(relative, reference, "resolves outside the sandbox"));
            }
            let inner = target.strip_prefix(&root).unwrap_or(&target);
            if inner
                .components()
                .any(|c| matches!(c, Component::Normal(p) if is_human_only(&p.to_string_lossy())))
            {
                return Err(refusal(
                    relative,
                    reference,
                    "resolves into HUMAN_ONLY, which is for people only",
                ));
            }
            if form == reference {
                resolved = target;
            }
        }
        Ok(resolved)
    }

    /// The kernel's check before an import, for the mock's formats; `path` is the model's
    /// absolute path (already inside the sandbox), `text` its content.
    pub(super) fn check_model_references(
        &self,
        format: &str,
        relative: &str,
        path: &Path,
        text: &str,
    ) -> Result<(), ErrorBody> {
        let folder = path.parent().unwrap_or(path);
        match format {
            "gltf" => {
                // A document that does not parse is the reader's to refuse.
                let Ok(document) = serde_json::from_str::<Value>(text) else {
                    return Ok(());
                };
                let mut found = Vec::new();
                uris(&document, &mut found);
                for uri in found.into_iter().filter(|u| !u.starts_with("data:")) {
                    self.check_reference(relative, folder, uri, true)?;
                }
            }
            "obj" => {
                let mut libraries = Vec::new();
                for line in text.lines() {
                    let words: Vec<&str> = line.split_whitespace().collect();
                    if words.len() > 1 && words[0] == "mtllib" {
                        let mut names = tails(&words[1..]);
                        names.extend(words[1..].iter().map(|w| (*w).to_owned()));
                        for name in names {
                            libraries.push(self.check_reference(relative, folder, &name, false)?);
                        }
                    }
                }
                libraries.sort();
                libraries.dedup();
                for library in libraries.iter().filter(|l| l.is_file()).take(MAX_FILES) {
                    let content = std::fs::read(library).unwrap_or_default();
                    let beside = library.parent().unwrap_or(library);
                    for line in String::from_utf8_lossy(&content).lines() {
                        let words: Vec<&str> = line.split_whitespace().collect();
                        let Some(key) = words.first().map(|k| k.to_ascii_lowercase()) else {
                            continue;
                        };
                        if words.len() > 1
                            && (key.starts_with("map_") || MTL_MAP_KEYS.contains(&key.as_str()))
                        {
                            for name in tails(&words[1..]) {
                                self.check_reference(relative, beside, &name, false)?;
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_cover_quotes_percent_escapes_and_backslashes() {
        let found = forms("..%2F\"x\\y\"", true);
        for form in [
            "..%2F\"x\\y\"",
            "..%2Fx\\y",
            "../\"x\\y\"",
            "../\"x/y\"",
            "..%2F\"x/y\"",
        ] {
            assert!(found.contains(&form.to_owned()), "{form} not in {found:?}");
        }
        assert_eq!(percent_decoded("%2e%2e/%zz%4"), "../%zz%4");
    }

    #[test]
    fn schemes_and_drives_are_told_from_paths() {
        assert!(has_scheme("file:///etc/passwd"));
        assert!(has_scheme("C:/x.png"));
        assert!(has_scheme("data:application/octet-stream;base64,AAAA"));
        assert!(!has_scheme("tex/a:b.png"));
        assert!(!has_scheme("../x.png"));
        assert!(!has_scheme("1x:y"));
    }
}
