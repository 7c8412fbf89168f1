//! Records and their hash chain.
//!
//! A record is one JSON line with a fixed field order:
//!
//! ```text
//! {"seq":7,"time":"2026-11-21T22:31:17.123Z","session":"s-1","kind":"answer","tool":"object.move","call_id":12,"args":null,"envelope":{...},"class":"E3","detail":null,"prev":"blake3:…","hash":"blake3:…"}
//! ```
//!
//! Nested values are written as canonical JSON (sorted keys), so the line up to `,"hash":` — the
//! record's *body* — is a canonical form. `hash` is blake3 over the body's bytes; the body
//! contains `prev`, the previous record's hash, and the envelope, so the answer is hashed too.
//! Verifying a record needs no JSON parse of its contents: hash the body, compare, read `seq` and
//! `prev`.

use serde_json::{Value, json};

use crate::redact::Redactor;

/// `prev` of the very first record of a log.
pub const GENESIS: &str = "blake3:0000000000000000000000000000000000000000000000000000000000000000";

/// The separator between a record's body and its hash.
pub const HASH_MARK: &[u8] = b",\"hash\":\"";

/// What a record is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecordKind {
    /// A tool call as received.
    Call,
    /// The answer to a call.
    Answer,
    /// A security event (blocked code, sandbox escape, actuator lock, auth failure).
    Security,
    /// A terminal failure (halt, circuit breaker, read-only switch).
    Terminal,
    /// Records the non-blocking writer had to drop.
    Dropped,
    /// The log continues from a rotated file.
    Rotated,
    /// A torn tail was cut off when the log was reopened.
    Recovered,
    /// A note from the embedder (session start, contract fingerprint, ...).
    Note,
}

impl RecordKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Call => "call",
            RecordKind::Answer => "answer",
            RecordKind::Security => "security",
            RecordKind::Terminal => "terminal",
            RecordKind::Dropped => "dropped",
            RecordKind::Rotated => "rotated",
            RecordKind::Recovered => "recovered",
            RecordKind::Note => "note",
        }
    }
}

/// What the embedder hands the log: everything of a record but its place in the chain.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The session.
    pub session: String,
    /// What it is about.
    pub kind: RecordKind,
    /// The tool, for calls and answers.
    pub tool: Option<String>,
    /// The call id, for calls and answers.
    pub call_id: Option<u64>,
    /// The call's arguments (redacted before they are written).
    pub args: Option<Value>,
    /// The answer's envelope.
    pub envelope: Option<Value>,
    /// The failure class (E0-E3) of a failed answer.
    pub class: Option<String>,
    /// Anything else.
    pub detail: Option<Value>,
}

impl Event {
    /// An event of `kind` in `session`, with nothing else set.
    pub fn new(session: impl Into<String>, kind: RecordKind) -> Event {
        Event {
            session: session.into(),
            kind,
            tool: None,
            call_id: None,
            args: None,
            envelope: None,
            class: None,
            detail: None,
        }
    }

    /// A call.
    pub fn call(
        session: impl Into<String>,
        call_id: u64,
        tool: impl Into<String>,
        args: Value,
    ) -> Event {
        Event {
            tool: Some(tool.into()),
            call_id: Some(call_id),
            args: Some(args),
            ..Event::new(session, RecordKind::Call)
        }
    }

    /// An answer; the failure class is taken from the envelope. An image the answer carries
    /// (`_meta.image`, a render) is recorded by its type and size, not its bytes: the file stays
    /// in the sandbox, and a log of renders does not grow by their pixels.
    pub fn answer(
        session: impl Into<String>,
        call_id: u64,
        tool: impl Into<String>,
        envelope: &vibe_errors::Envelope,
    ) -> Event {
        Event {
            tool: Some(tool.into()),
            call_id: Some(call_id),
            envelope: Some(recorded_envelope(envelope)),
            class: class_of(envelope).map(str::to_owned),
            ..Event::new(session, RecordKind::Answer)
        }
    }

    /// Its parts as a record writes them.
    pub(crate) fn body(&self) -> Body<'_> {
        Body {
            session: &self.session,
            kind: self.kind,
            tool: self.tool.as_deref(),
            call_id: self.call_id,
            args: self.args.as_ref(),
            envelope: self.envelope.as_ref().map(Answer::Value),
            class: self.class.as_deref(),
            detail: self.detail.as_ref(),
        }
    }

    /// A security or terminal event with details.
    pub fn incident(session: impl Into<String>, kind: RecordKind, detail: Value) -> Event {
        Event {
            detail: Some(detail),
            ..Event::new(session, kind)
        }
    }
}

/// The failure class an answer is recorded with.
pub(crate) fn class_of(envelope: &vibe_errors::Envelope) -> Option<&'static str> {
    envelope.error().map(|e| e.class().as_str())
}

/// An answer's envelope as it is recorded: an image it carries by its size, not its bytes.
fn recorded_envelope(envelope: &vibe_errors::Envelope) -> Value {
    let mut recorded = envelope.to_value();
    if let Some(data) = vibe_errors::take_image_data(&mut recorded)
        && let Some(image) = recorded.pointer_mut("/result/_meta/image")
    {
        let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
        image["bytes"] = json!(data.len() / 4 * 3 - padding);
    }
    recorded
}

/// Whether a result has `_meta.image.data` (an image's bytes, which are not recorded).
fn carries_image(result: &Value) -> bool {
    // By keys, not `Value::pointer`, which allocates for every step of its path.
    result
        .get("_meta")
        .and_then(|meta| meta.get("image"))
        .is_some_and(|image| image.get("data").is_some())
}

/// The parts of an event as its record line writes them, borrowed: from an [`Event`], or
/// straight from a call's arguments and its answer (no copy of either).
pub(crate) struct Body<'a> {
    pub(crate) session: &'a str,
    pub(crate) kind: RecordKind,
    pub(crate) tool: Option<&'a str>,
    pub(crate) call_id: Option<u64>,
    pub(crate) args: Option<&'a Value>,
    pub(crate) envelope: Option<Answer<'a>>,
    pub(crate) class: Option<&'a str>,
    pub(crate) detail: Option<&'a Value>,
}

impl<'a> Body<'a> {
    /// A call.
    pub(crate) fn call(session: &'a str, call_id: u64, tool: &'a str, args: &'a Value) -> Self {
        Body {
            session,
            kind: RecordKind::Call,
            tool: Some(tool),
            call_id: Some(call_id),
            args: Some(args),
            envelope: None,
            class: None,
            detail: None,
        }
    }

    /// An answer, as [`Event::answer`] records it.
    pub(crate) fn answer(
        session: &'a str,
        call_id: u64,
        tool: &'a str,
        envelope: &'a vibe_errors::Envelope,
    ) -> Self {
        Body {
            session,
            kind: RecordKind::Answer,
            tool: Some(tool),
            call_id: Some(call_id),
            args: None,
            envelope: Some(Answer::Envelope(envelope)),
            class: class_of(envelope),
            detail: None,
        }
    }
}

/// An answer's envelope: as an event holds it, or the call's own.
pub(crate) enum Answer<'a> {
    Value(&'a Value),
    Envelope(&'a vibe_errors::Envelope),
}

fn write_opt_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(text) => {
            let _ = serde_json::to_writer(&mut *out, text);
        }
        None => out.extend_from_slice(b"null"),
    }
}

fn write_opt_value(out: &mut Vec<u8>, value: Option<&Value>, redactor: &Redactor) {
    match value {
        Some(value) => redactor.write(out, value),
        None => out.extend_from_slice(b"null"),
    }
}

/// Writes an answer's envelope as [`Event::answer`] records it (canonical, redacted): a
/// success without an image straight from its result, anything else through the recorded copy.
fn write_answer(out: &mut Vec<u8>, answer: &Answer<'_>, redactor: &Redactor) {
    match answer {
        Answer::Value(value) => redactor.write(out, value),
        // `ok` sorts before `result`, and neither is a key redaction looks at.
        Answer::Envelope(vibe_errors::Envelope::Ok(result)) if !carries_image(result) => {
            out.extend_from_slice(b"{\"ok\":true,\"result\":");
            redactor.write(out, result);
            out.push(b'}');
        }
        Answer::Envelope(envelope) => redactor.write(out, &recorded_envelope(envelope)),
    }
}

/// Writes one sealed record line (with its newline) into `out` and returns its hash: its place
/// in time and in the chain, the event's part `body` (written by [`write_body`], on the caller's
/// thread when the writer logs), the previous hash, and the hash of all that.
pub(crate) fn seal_body(
    out: &mut Vec<u8>,
    seq: u64,
    time: &str,
    prev: &str,
    body: &[u8],
) -> String {
    let start = out.len();
    write_head(out, seq, time);
    out.extend_from_slice(body);
    write_tail(out, start, prev)
}

/// The record's place in time and in the chain, before its event.
fn write_head(out: &mut Vec<u8>, seq: u64, time: &str) {
    out.extend_from_slice(b"{\"seq\":");
    out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.extend_from_slice(b",\"time\":");
    write_opt_str(out, Some(time));
}

/// The event's part of a record line, redacted: everything from `,"session"` to the
/// `detail`, in their fixed order. It depends on the event alone, not on the record's place in
/// the chain.
pub(crate) fn write_body(out: &mut Vec<u8>, body: &Body<'_>, redactor: &Redactor) {
    out.extend_from_slice(b",\"session\":");
    write_opt_str(out, Some(body.session));
    out.extend_from_slice(b",\"kind\":\"");
    out.extend_from_slice(body.kind.as_str().as_bytes());
    out.extend_from_slice(b"\",\"tool\":");
    write_opt_str(out, body.tool);
    out.extend_from_slice(b",\"call_id\":");
    match body.call_id {
        Some(id) => {
            out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"args\":");
    write_opt_value(out, body.args, redactor);
    out.extend_from_slice(b",\"envelope\":");
    match &body.envelope {
        Some(answer) => write_answer(out, answer, redactor),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"class\":");
    write_opt_str(out, body.class);
    out.extend_from_slice(b",\"detail\":");
    write_opt_value(out, body.detail, redactor);
}

/// The previous hash, then the hash of everything from `start` on; returns the hash.
fn write_tail(out: &mut Vec<u8>, start: usize, prev: &str) -> String {
    out.extend_from_slice(b",\"prev\":");
    write_opt_str(out, Some(prev));
    let hash = format!("blake3:{}", blake3::hash(&out[start..]).to_hex());
    out.extend_from_slice(HASH_MARK);
    out.extend_from_slice(hash.as_bytes());
    out.extend_from_slice(b"\"}\n");
    hash
}

/// The parts of a record line that the chain needs, read without parsing the JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineParts<'a> {
    /// The sequence number.
    pub seq: u64,
    /// The previous record's hash.
    pub prev: &'a str,
    /// The stored hash.
    pub hash: &'a str,
    /// The body the hash covers.
    pub body: &'a [u8],
}

/// Why a line is not a well-formed record: the part it lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MissingPart {
    /// No `,"hash":"..."}` at the end.
    Hash,
    /// No leading `{"seq":N`.
    Seq,
    /// No `"prev":"..."` just before the hash.
    Prev,
}

/// Splits a record line (without its newline) into its chain parts.
pub fn split_line(line: &[u8]) -> Result<LineParts<'_>, MissingPart> {
    let mark = memchr::memmem::rfind(line, HASH_MARK).ok_or(MissingPart::Hash)?;
    let body = &line[..mark];
    let tail = &line[mark + HASH_MARK.len()..];
    let hash = tail.strip_suffix(b"\"}").ok_or(MissingPart::Hash)?;
    let hash = std::str::from_utf8(hash).map_err(|_| MissingPart::Hash)?;
    let rest = line.strip_prefix(b"{\"seq\":").ok_or(MissingPart::Seq)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let seq = std::str::from_utf8(&rest[..digits])
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or(MissingPart::Seq)?;
    const PREV: &[u8] = b",\"prev\":\"";
    let prev_at = memchr::memmem::rfind(body, PREV).ok_or(MissingPart::Prev)?;
    let prev = body[prev_at + PREV.len()..]
        .strip_suffix(b"\"")
        .ok_or(MissingPart::Prev)?;
    let prev = std::str::from_utf8(prev).map_err(|_| MissingPart::Prev)?;
    Ok(LineParts {
        seq,
        prev,
        hash,
        body,
    })
}

/// Whether a record's stored hash matches its body.
pub fn hash_matches(parts: &LineParts<'_>) -> bool {
    // Verification handles no secret, so a plain comparison of the hex digits is fine.
    let expected = blake3::hash(parts.body);
    parts
        .hash
        .strip_prefix("blake3:")
        .is_some_and(|hex| hex.as_bytes() == expected.to_hex().as_bytes())
}

/// Now, as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since.as_secs() as i64, since.subsec_millis())
}

/// Seconds since the epoch as RFC 3339 UTC (proleptic Gregorian calendar).
pub fn rfc3339(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days, after Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_records_its_image_by_size_not_bytes() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&16u32.to_be_bytes());
        png.extend_from_slice(&16u32.to_be_bytes());
        png.extend_from_slice(&[7; 1000]);
        let meta = vibe_errors::Meta {
            image: Some(vibe_errors::Image::png(png.clone()).unwrap()),
            ..vibe_errors::Meta::default()
        };
        let envelope = vibe_errors::Envelope::ok(json!({"path": "a.png"})).with_meta(meta);
        let event = Event::answer("s", 1, "render.still", &envelope);
        let image = &event.envelope.as_ref().unwrap()["result"]["_meta"]["image"];
        assert!(image.get("data").is_none());
        assert_eq!(image["bytes"], png.len());
        assert_eq!(
            (image["width"].as_u64(), image["height"].as_u64()),
            (Some(16), Some(16))
        );
    }

    /// The records of a call and its answer written straight from the arguments and envelope
    /// are byte for byte those of the events [`Event::call`] and [`Event::answer`] make (the
    /// copies, redacted, then written): successes with and without an image or `_meta`, values
    /// to redact at any depth, failures, results that are not objects.
    #[test]
    fn borrowed_bodies_write_what_events_write() {
        use vibe_errors::{Envelope, ErrorBody, ErrorCode, Image, Meta};
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&4u32.to_be_bytes());
        png.extend_from_slice(&4u32.to_be_bytes());
        let image = Meta {
            image: Some(Image::png(png).unwrap()),
            ..Meta::default()
        };
        let envelopes = [
            Envelope::ok(json!({"name": "Cube", "location": [1.0, 2.5, -0.0], "visible": true})),
            Envelope::ok(json!({"path": "/sandbox/a.png"})).with_meta(image),
            Envelope::ok(json!({"_meta": {"image": {"path": "/sandbox/b.png", "data": 7}}})),
            Envelope::ok(
                json!({"a": [{"Token": "t-value", "code": "print(1)"}, {"FilePath": "/etc/x"}]}),
            ),
            Envelope::ok(json!("text")),
            Envelope::ok(json!([1, {"output": "/sandbox/o.txt"}])),
            Envelope::Err(
                ErrorBody::new(ErrorCode::InvalidArguments, "bad")
                    .with_detail("path", "/sandbox/p")
                    .with_detail("secret", "s-value"),
            ),
        ];
        let args = json!({"name": "Cube", "script": "x = 1", "nested": {"auth": "a-value", "output": "/o"}});
        let redactor = Redactor::new(
            &vibe_contract::AuditPolicy::default(),
            Some("/sandbox".into()),
        );
        let written = |body: &Body<'_>| {
            let mut out = Vec::new();
            write_body(&mut out, body, &redactor);
            String::from_utf8(out).unwrap()
        };
        let event = Event::call("s", 3, "python.exec", args.clone());
        assert_eq!(
            written(&Body::call("s", 3, "python.exec", &args)),
            written(&event.body())
        );
        for envelope in &envelopes {
            let event = Event::answer("s", 3, "object.info", envelope);
            let borrowed = written(&Body::answer("s", 3, "object.info", envelope));
            assert_eq!(borrowed, written(&event.body()));
            assert!(
                !borrowed.contains("/etc") && !borrowed.contains("-value"),
                "{borrowed}"
            );
        }
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_300_277, 123), "2026-11-21T22:31:17.123Z");
        assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn a_sealed_line_splits_and_verifies() {
        let mut out = Vec::new();
        let event = Event::call("s", 1, "object.move", serde_json::json!({"name": "Cube"}));
        let mut body = Vec::new();
        write_body(&mut body, &event.body(), &Redactor::default());
        let hash = seal_body(&mut out, 1, "t", GENESIS, &body);
        assert!(
            String::from_utf8_lossy(&out).starts_with(r#"{"seq":1,"time":"t","session":"s","kind":"call","tool":"object.move","call_id":1,"args":{"name":"Cube"},"envelope":null,"class":null,"detail":null,"prev":""#),
            "{}",
            String::from_utf8_lossy(&out)
        );
        let parts = split_line(&out[..out.len() - 1]).unwrap();
        assert_eq!(
            (parts.seq, parts.prev, parts.hash),
            (1, GENESIS, hash.as_str())
        );
        assert!(hash_matches(&parts));
        let value: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["args"]["name"], "Cube");
    }
}
