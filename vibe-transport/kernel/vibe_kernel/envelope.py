"""Error model v1 envelopes, as the Rust side defines them (vibe-errors).

Every envelope leaves here JSON-safe: the wire encodes with `allow_nan=False` (a NaN there would
end the kernel's loop) and the bridge's JSON parser refuses unpaired surrogates (a `\\ud800`
escape would halt it). So `ok` and `err` check each envelope and, when needed, turn non-finite
numbers into null (listing where, under `non_finite`) and escape unpaired surrogates.

A success envelope whose result is JSON-safe as it is (nearly all) is a `Checked` one: its check
was encoding the result, and that text is kept and written as the answer (channel.encode_answer),
so a result is encoded once, not twice. Encoding is most of a quick call's cost."""

import json
import math
import re
import traceback

_FRAME = re.compile(r'File "[^"]*", line \d+(, in [^\s,:]+)?')
_ABS_PATH = re.compile(r'(?<![\w.])(/[^\s"\'`(),;<>|]+|[A-Za-z]:[\\/][^\s"\'`(),;<>|]+)')
MAX_MESSAGE_CHARS = 512


# Built once (json.dumps with options builds an encoder per call): compact, and a non-finite
# number is an error, as on the wire.
ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class Checked(dict):
    """A success envelope found JSON-safe by encoding it; `text` is that encoding, which is what
    the wire writes for it. Nothing changes a Checked envelope or its result afterwards: a change
    is made to a plain copy (as wire.Kernel.tell_events does)."""

    __slots__ = ("text",)


class Refusal(Exception):
    """A tool's answer that is an error envelope (never a crash)."""

    def __init__(self, code, message, **details):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


def escape_surrogates(text):
    """`text` with unpaired surrogates written as backslash escapes (valid pairs cannot occur in
    a Python str; `print("\\ud800")` can)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def redact_paths(text):
    """Absolute paths replaced by their last component, as in error messages."""
    return _ABS_PATH.sub(lambda m: re.split(r"[\\/]", m.group(0).rstrip("/\\"))[-1] or "/", text)


def sanitize(text):
    """The useful last line of error text: no traceback, no frames, no absolute paths, and not
    the `Location: file:line` an operator's error ends with (Blender appends where the operator
    was called after the error its Python code raised, which is the line that says why)."""
    lines = [l.strip() for l in escape_surrogates(str(text)).splitlines() if l.strip()]
    keep = [l for l in lines
            if "Traceback (most recent call last)" not in l
            and not l.startswith('File "')
            and not l.startswith("Location: ")
            and not set(l) <= set("^~ ")]
    line = keep[-1] if keep else "unknown error"
    line = _FRAME.sub("", line)
    line = redact_paths(line)
    line = " ".join(line.split())
    if len(line) > MAX_MESSAGE_CHARS:
        line = line[:MAX_MESSAGE_CHARS - 1] + "\u2026"
    return line or "unknown error"


def _json_safe(value, path, non_finite):
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        non_finite.append(path or "$")
        return None
    if isinstance(value, str):
        return escape_surrogates(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = escape_surrogates(str(k))
            out[key] = _json_safe(v, "%s.%s" % (path, key) if path else key, non_finite)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, "%s[%d]" % (path, i), non_finite) for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int)):
        return value
    return escape_surrogates(str(value))  # never reached by the tools; never a crash either


def safe_text(value):
    """The compact JSON of `value` when it is JSON-safe as it is (no non-finite number, no
    unpaired surrogate), else None: one pass of the C encoder."""
    try:
        text = ENCODER.encode(value)
    except (ValueError, TypeError):
        return None
    return text if "\\ud" not in text else None  # ASCII output: surrogates show up as \\udXXX escapes


def json_safe(value):
    """(value made JSON-safe, the paths of the non-finite numbers it had). The common case, already
    safe, costs one pass of the C encoder."""
    if safe_text(value) is not None:
        return value, []
    non_finite = []
    return _json_safe(value, "", non_finite), non_finite


def ok(result):
    text = safe_text(result)
    if text is not None:
        envelope = Checked(ok=True, result=result)
        envelope.text = '{"ok":true,"result":' + text + "}"
        return envelope
    non_finite = []
    result = _json_safe(result, "", non_finite)
    if non_finite and isinstance(result, dict):
        # Blender held NaN or infinity there (a person or agent code can set them); null here.
        result["non_finite"] = sorted(set(result.get("non_finite") or []) | set(non_finite))
    return {"ok": True, "result": result}


def err(code, message, **details):
    details, _ = json_safe(details)
    return {"ok": False, "error": {"code": code, "message": sanitize(message), "details": details}}


def from_exception(exc):
    """An unexpected exception inside a tool: execution_failed, message sanitized."""
    text = "".join(traceback.format_exception_only(type(exc), exc))
    return err("execution_failed", text, reason="mutation_failed")


def invalid(field, message, **details):
    return Refusal("invalid_arguments", message, field=field, **details)


def not_found(field, what, name):
    return Refusal("not_found", "%s %r does not exist" % (what, name), field=field, name=name)
