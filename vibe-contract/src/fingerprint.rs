//! Fingerprints: blake3 over canonical JSON, written `blake3:<hex>`.
//!
//! Canonical JSON is the one text every Vibe component hashes, so that the same value always
//! gives the same fingerprint whatever produced it (the Python kernel, the mock, a YAML file):
//!
//! * object keys sorted by their UTF-8 bytes, no insignificant whitespace;
//! * strings escaped as `serde_json` escapes them;
//! * numbers by value: integers as integers; other numbers rounded to 1e-6 (the tolerance of
//!   determinism rules v1), written as an integer when the rounded value is a whole number
//!   below 2^53 and otherwise in the shortest form that reads back to the same `f64`;
//!   `-0` is written `0`.
//!
//! The canonical text is streamed straight into the hasher, never built as a string.

use std::fmt;
use std::io::{self, Write};
use std::sync::LazyLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The prefix of every fingerprint.
pub const FINGERPRINT_PREFIX: &str = "blake3:";

/// A `blake3:<64 hex digits>` fingerprint of canonical JSON.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The fingerprint of a JSON value.
    pub fn of_value(value: &Value) -> Fingerprint {
        let mut writer = HashWriter::new();
        // Writing into a hasher cannot fail.
        let _ = write_canonical(&mut writer, value);
        Fingerprint::from_hash(writer.finish())
    }

    /// The fingerprint of the JSON object with these entries, as [`Fingerprint::of_value`] of
    /// that object would give, without building it (or copying the values): for an object
    /// made of parts of others. A key given twice counts once, with its last value, as in a map.
    pub fn of_object<'a>(entries: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Fingerprint {
        // Sorted by the keys' bytes (str's order), as canonical JSON writes an object.
        let entries: std::collections::BTreeMap<&str, &Value> = entries.into_iter().collect();
        let mut writer = HashWriter::new();
        let _ = write_entries(&mut writer, entries.into_iter(), &|_, _| None);
        Fingerprint::from_hash(writer.finish())
    }

    /// The fingerprint of anything serializable (through its JSON value).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Fingerprint {
        Fingerprint::of_value(&serde_json::to_value(value).unwrap_or(Value::Null))
    }

    fn from_hash(hash: blake3::Hash) -> Fingerprint {
        let hex = hash.to_hex();
        let mut text = String::with_capacity(FINGERPRINT_PREFIX.len() + hex.len());
        text.push_str(FINGERPRINT_PREFIX);
        text.push_str(&hex);
        Fingerprint(text)
    }

    /// The text form, `blake3:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Parses `blake3:<64 lowercase hex digits>`.
    pub fn parse(text: &str) -> Result<Fingerprint, String> {
        let hex = text.strip_prefix(FINGERPRINT_PREFIX).ok_or_else(|| {
            format!("fingerprint {text:?} does not start with {FINGERPRINT_PREFIX:?}")
        })?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format!(
                "fingerprint {text:?} is not 64 lowercase hex digits"
            ));
        }
        Ok(Fingerprint(text.to_owned()))
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Fingerprint {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        Fingerprint::parse(&text)
    }
}

impl From<Fingerprint> for String {
    fn from(fingerprint: Fingerprint) -> String {
        fingerprint.0
    }
}

/// The canonical JSON text of a value (for inspection and tests; hashing streams it instead).
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    let _ = write_canonical(&mut out, value);
    String::from_utf8(out).unwrap_or_default()
}

/// A number rounded as canonical JSON rounds it: to 1e-6, `-0` as `0`.
pub fn canonical_float(x: f64) -> f64 {
    let rounded = (x * 1e6).round() / 1e6;
    if rounded == 0.0 { 0.0 } else { rounded }
}

/// Bytes gathered before the hasher sees them: blake3 is fast on large slices and slow on the
/// many tiny writes canonical JSON makes. The buffer grows to this as needed: a snapshot
/// fingerprints thousands of small values, and a buffer of this size for each (allocated, or
/// zeroed and moved on the stack) cost more than hashing them.
const HASH_BUFFER: usize = 16 * 1024;

struct HashWriter {
    hasher: blake3::Hasher,
    buffer: Vec<u8>,
}

impl HashWriter {
    fn new() -> HashWriter {
        HashWriter {
            hasher: blake3::Hasher::new(),
            buffer: Vec::new(),
        }
    }

    fn finish(mut self) -> blake3::Hash {
        self.hasher.update(&self.buffer);
        self.hasher.finalize()
    }
}

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.buffer.len() + buf.len() > HASH_BUFFER {
            self.hasher.update(&self.buffer);
            self.buffer.clear();
        }
        if buf.len() >= HASH_BUFFER {
            self.hasher.update(buf);
        } else {
            self.buffer.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes the canonical JSON of `value` to `out`.
pub fn write_canonical<W: Write>(out: &mut W, value: &Value) -> io::Result<()> {
    write_canonical_with(out, value, &|_, _| None)
}

/// Writes the canonical JSON of `value` to `out`, each object entry (at any depth) for which
/// `replace(key, item)` answers a value written as that value instead of `item` (and not
/// looked into further): the canonical JSON of a copy with those entries replaced, without
/// the copy.
pub fn write_canonical_with<W, F>(out: &mut W, value: &Value, replace: &F) -> io::Result<()>
where
    W: Write,
    F: Fn(&str, &Value) -> Option<Value>,
{
    match value {
        Value::Null => out.write_all(b"null"),
        Value::Bool(true) => out.write_all(b"true"),
        Value::Bool(false) => out.write_all(b"false"),
        Value::Number(number) => write_number(out, number),
        Value::String(text) => write_string(out, text),
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical_with(out, item, replace)?;
            }
            out.write_all(b"]")
        }
        Value::Object(map) => {
            // serde_json's map is sorted unless a dependency turns on `preserve_order`;
            // sort only when it is not.
            let sorted =
                *MAPS_ARE_SORTED || map.keys().zip(map.keys().skip(1)).all(|(a, b)| a <= b);
            let entries = map.iter().map(|(key, item)| (key.as_str(), item));
            if sorted {
                write_entries(out, entries, replace)
            } else {
                let mut entries: Vec<(&str, &Value)> = entries.collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                write_entries(out, entries.into_iter(), replace)
            }
        }
    }
}

/// Writes an object of `entries`, which come sorted by key and without repeats.
fn write_entries<'a, W, F>(
    out: &mut W,
    entries: impl Iterator<Item = (&'a str, &'a Value)>,
    replace: &F,
) -> io::Result<()>
where
    W: Write,
    F: Fn(&str, &Value) -> Option<Value>,
{
    out.write_all(b"{")?;
    for (i, (key, item)) in entries.enumerate() {
        write_entry(out, i, key, item, replace)?;
    }
    out.write_all(b"}")
}

/// Whether serde_json's maps keep their keys sorted in this build (`preserve_order` off): then
/// no map needs checking, which is a string comparison per key of every object written.
static MAPS_ARE_SORTED: LazyLock<bool> = LazyLock::new(|| {
    let mut map = serde_json::Map::new();
    map.insert("b".into(), Value::Null);
    map.insert("a".into(), Value::Null);
    map.keys().next().is_some_and(|first| first == "a")
});

fn write_entry<W, F>(out: &mut W, i: usize, key: &str, item: &Value, replace: &F) -> io::Result<()>
where
    W: Write,
    F: Fn(&str, &Value) -> Option<Value>,
{
    if i > 0 {
        out.write_all(b",")?;
    }
    write_string(out, key)?;
    out.write_all(b":")?;
    match replace(key, item) {
        Some(replaced) => write_canonical(out, &replaced),
        None => write_canonical_with(out, item, replace),
    }
}

fn write_string<W: Write>(out: &mut W, text: &str) -> io::Result<()> {
    serde_json::to_writer(out, text).map_err(io::Error::other)
}

const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0; // 2^53

fn write_number<W: Write>(out: &mut W, number: &serde_json::Number) -> io::Result<()> {
    // Integers through `itoa`: the same digits as `Display`, without the formatting machinery
    // (most of a record's numbers are integers, and `write!` cost more than the rest of them).
    if let Some(n) = number.as_i64() {
        return out.write_all(itoa::Buffer::new().format(n).as_bytes());
    }
    if let Some(n) = number.as_u64() {
        return out.write_all(itoa::Buffer::new().format(n).as_bytes());
    }
    let x = canonical_float(number.as_f64().unwrap_or(0.0));
    if !x.is_finite() {
        // JSON has no infinities; serde_json never produces them, but stay total.
        return out.write_all(b"null");
    }
    if x.fract() == 0.0 && x.abs() < MAX_EXACT_INTEGER {
        out.write_all(itoa::Buffer::new().format(x as i64).as_bytes())
    } else {
        write!(out, "{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn canonical_text() {
        let value = json!({"b": [1, 2.5, -0.0, 1.0000004, 3.0], "a": {"z": null, "y": "\"q\""}});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"y":"\"q\"","z":null},"b":[1,2.5,0,1,3]}"#
        );
    }

    fn number_text(number: &serde_json::Number) -> String {
        let mut out = Vec::new();
        write_number(&mut out, number).unwrap();
        String::from_utf8(out).unwrap()
    }

    proptest! {
        /// Numbers are written as `Display` writes them (integers as they are, other numbers
        /// rounded by `canonical_float`, whose integral values `Display` writes without a
        /// fraction), whatever path writes them.
        #[test]
        fn numbers_are_written_as_display_writes_them(
            signed in any::<i64>(),
            unsigned in any::<u64>(),
            float in prop_oneof![
                prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO,
                (-1e7f64..1e7).prop_map(f64::round),
                -1e7f64..1e7,
            ],
        ) {
            prop_assert_eq!(number_text(&signed.into()), signed.to_string());
            prop_assert_eq!(number_text(&unsigned.into()), unsigned.to_string());
            let number = serde_json::Number::from_f64(float).unwrap();
            let rounded = canonical_float(float);
            let expected = if rounded.is_finite() { rounded.to_string() } else { "null".into() };
            prop_assert_eq!(number_text(&number), expected);
        }
    }

    #[test]
    fn fingerprint_form() {
        let fp = Fingerprint::of_value(&json!({}));
        assert!(fp.as_str().starts_with("blake3:"));
        assert_eq!(fp.as_str().len(), 7 + 64);
        assert_eq!(Fingerprint::parse(fp.as_str()).unwrap(), fp);
        assert!(Fingerprint::parse("sha256:00").is_err());
        assert!(Fingerprint::parse("blake3:XYZ").is_err());
    }

    #[test]
    fn tolerance_and_integers_agree() {
        assert_eq!(
            Fingerprint::of_value(&json!([1.0, 0.1 + 0.2])),
            Fingerprint::of_value(&json!([1, 0.3]))
        );
        assert_ne!(
            Fingerprint::of_value(&json!(0.3)),
            Fingerprint::of_value(&json!(0.300002))
        );
    }
}
