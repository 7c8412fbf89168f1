"""The GUI add-on's listener settings, without bpy: where it listens and with which token.

Each setting comes from the environment first (VIBE_PORT, VIBE_BIND, VIBE_TOKEN), then from the
add-on's preferences (preferences.py), then from the defaults: port 9833, bind address
127.0.0.1, and a random token written to a file only this user can read (tcp.make_token).

`bind_decision(bind, token)` says whether the listener may use a bind address. Loopback
(127.0.0.0/8, "localhost") is always allowed. Any other IPv4 address makes this Blender reachable
from other machines, so it is allowed only with an explicit token (environment or preferences,
never a generated one) of at least MIN_REMOTE_TOKEN_CHARS characters, and then with a warning
that the add-on prints and shows in its preferences; otherwise it is refused with the reason and
the add-on does not listen. Messages never contain the token.
"""

import ipaddress

from .tcp import DEFAULT_PORT

DEFAULT_BIND = "127.0.0.1"
MIN_REMOTE_TOKEN_CHARS = 16


class SettingsError(ValueError):
    """A setting that cannot be used; its message says which and why."""


def parse_port(text, source):
    try:
        port = int(str(text).strip())
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise SettingsError("%s must be a port number from 0 to 65535, not %r" % (source, text))
    return port


def resolve(environ, prefs):
    """The listener's settings: {port, bind, token, sources}. `environ` is a mapping like
    os.environ; `prefs` the preferences' values {port, bind, token} or None (not enabled through
    Blender's add-on system). `token` is the explicit token or None (one is generated then);
    `sources` names where each value came from ("VIBE_PORT", "preferences", "default", ...)."""
    prefs = prefs or {}
    sources = {}

    env_port = environ.get("VIBE_PORT")
    if env_port not in (None, ""):
        port, sources["port"] = parse_port(env_port, "VIBE_PORT"), "VIBE_PORT"
    elif prefs.get("port"):
        port, sources["port"] = parse_port(prefs["port"], "the preferences' port"), "preferences"
    else:
        port, sources["port"] = DEFAULT_PORT, "default"

    env_bind = (environ.get("VIBE_BIND") or "").strip()
    pref_bind = (prefs.get("bind") or "").strip()
    if env_bind:
        bind, sources["bind"] = env_bind, "VIBE_BIND"
    elif pref_bind:
        bind, sources["bind"] = pref_bind, "preferences"
    else:
        bind, sources["bind"] = DEFAULT_BIND, "default"

    if environ.get("VIBE_TOKEN"):
        token, sources["token"] = environ["VIBE_TOKEN"], "VIBE_TOKEN"
    elif prefs.get("token"):
        token, sources["token"] = prefs["token"], "preferences"
    else:
        token, sources["token"] = None, "generated"
    return {"port": port, "bind": bind, "token": token, "sources": sources}


def is_loopback(bind):
    """True for "localhost" and 127.0.0.0/8; False for any other IPv4 address; SettingsError for
    anything else (the listener is IPv4; a host name could resolve anywhere)."""
    if bind.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        raise SettingsError("bind address %r is not an IPv4 address (or localhost)" % bind) from None
    if address.version != 4:
        raise SettingsError("bind address %r is IPv6; the listener is IPv4 only" % bind)
    return address.is_loopback


def bind_decision(bind, token):
    """(allowed, message) for listening on `bind` with the explicit `token` (None: a generated
    one). Allowed on loopback with no message; allowed elsewhere only with a token of at least
    MIN_REMOTE_TOKEN_CHARS characters, and then `message` is the warning to show; refused
    (False) with the reason otherwise."""
    try:
        loopback = is_loopback(bind)
    except SettingsError as exc:
        return False, "vibe-kernel: not listening: %s" % exc
    if loopback:
        return True, None
    if not token:
        why = "no token was given (a generated token is not enough off loopback)"
    elif len(token) < MIN_REMOTE_TOKEN_CHARS:
        why = "the token given is shorter than %d characters" % MIN_REMOTE_TOKEN_CHARS
    else:
        return True, ("vibe-kernel: WARNING: listening on %s, which is not loopback: other machines can "
                      "reach this Blender, and whoever has the token can drive it. The connection is "
                      "not encrypted; use this only on a network you trust." % bind)
    return False, ("vibe-kernel: not listening: bind address %s is not loopback, and a non-loopback bind "
                   "needs an explicit token of at least %d characters (VIBE_TOKEN or the add-on's "
                   "preferences); %s" % (bind, MIN_REMOTE_TOKEN_CHARS, why))
