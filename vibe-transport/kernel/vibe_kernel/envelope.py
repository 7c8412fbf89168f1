"""Error model v1 envelopes, as the Rust side defines them (vibe-errors)."""

import os
import re
import traceback

_FRAME = re.compile(r'File "[^"]*", line \d+(, in [^\s,:]+)?')
_ABS_PATH = re.compile(r'(?<![\w.])(/[^\s"\'`(),;<>|]+|[A-Za-z]:[\\/][^\s"\'`(),;<>|]+)')
MAX_MESSAGE_CHARS = 512


class Refusal(Exception):
    """A tool's answer that is an error envelope (never a crash)."""

    def __init__(self, code, message, **details):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


def sanitize(text):
    """The useful last line of error text: no traceback, no frames, no absolute paths."""
    lines = [l.strip() for l in str(text).splitlines() if l.strip()]
    keep = [l for l in lines
            if "Traceback (most recent call last)" not in l
            and not l.startswith('File "')
            and not set(l) <= set("^~ ")]
    line = keep[-1] if keep else "unknown error"
    line = _FRAME.sub("", line)
    line = _ABS_PATH.sub(lambda m: os.path.basename(m.group(0).rstrip("/\\")), line)
    line = " ".join(line.split())
    if len(line) > MAX_MESSAGE_CHARS:
        line = line[:MAX_MESSAGE_CHARS - 1] + "\u2026"
    return line or "unknown error"


def ok(result):
    return {"ok": True, "result": result}


def err(code, message, **details):
    return {"ok": False, "error": {"code": code, "message": sanitize(message), "details": details}}


def from_exception(exc):
    """An unexpected exception inside a tool: execution_failed, message sanitized."""
    text = "".join(traceback.format_exception_only(type(exc), exc))
    return err("execution_failed", text, reason="mutation_failed")


def invalid(field, message, **details):
    return Refusal("invalid_arguments", message, field=field, **details)


def not_found(field, what, name):
    return Refusal("not_found", "%s %r does not exist" % (what, name), field=field, name=name)
