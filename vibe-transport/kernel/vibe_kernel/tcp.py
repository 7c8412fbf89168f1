"""TCP serving: the listener on 127.0.0.1, the accept loop (a channel and a session per
connection, admitted by the gatekeeper), the token it demands, and the headless TCP loop."""

import os
import queue
import socket
import sys
import threading
import time

from .channel import Channel, auth_error, close_quietly, drain, encode
from .gatekeeper import MAX_PENDING, Gatekeeper

DEFAULT_PORT = 9833


def listen(host, port):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(4)
    return server


def open_channel(kernel, inbox, conn, token, gate=None):
    """The channel of a connection just accepted; None (and the connection closed) when the
    kernel no longer serves (close_connections)."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    channel = Channel(kernel, inbox, conn.makefile("rb"), conn.sendall, token, conn=conn, gate=gate)
    with kernel.lock:
        if kernel.serving:
            kernel.channels.add(channel)
            return channel
    close_quietly(conn)
    return None


def close_connections(kernel):
    """Ends every connection of `kernel`, and any accepted from now on: the add-on is turned
    off and nothing will run their frames any more (their calls would wait for answers that
    never come, and their frames would pile up). Their reader threads see the end and stop."""
    with kernel.lock:
        kernel.serving = False
        channels = list(kernel.channels)
    for each in channels:
        each.closed = True
        if each.conn is not None:
            close_quietly(each.conn)


def accept_one(server, gate):
    """The next connection, or None when the listener is closed. Descriptor exhaustion is
    logged and waited out, never the end of the listener. Past MAX_PENDING connections that
    have not logged in, the oldest of them is told why and closed."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError as exc:
            if server.fileno() == -1:
                return None
            time.sleep(0.1)
            if server.fileno() == -1:
                return None  # shut down and closed meanwhile (stop_listening): not a failure
            print("vibe-kernel: accept failed (%s); retrying" % exc, file=sys.stderr, flush=True)
            continue
        evicted = gate.admit(conn)
        if evicted is not None:
            try:
                evicted.settimeout(1.0)
                evicted.sendall(encode(auth_error("closed: %d newer connections are waiting to log in"
                                                  % MAX_PENDING)))
            except OSError:
                pass
            close_quietly(evicted)
        return conn


def stop_listening(server):
    """Closes a listener so that its accept thread ends: a close alone does not wake a thread
    blocked in accept() on Linux, and a thread left there hangs the bpy 4.5 module's exit."""
    try:
        server.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    server.close()


def accept_forever(kernel, server, inbox, token, gate):
    """The accept loop (a thread): each connection gets its own channel and session."""
    while True:
        conn = accept_one(server, gate)
        if conn is None:
            return
        channel = open_channel(kernel, inbox, conn, token, gate)
        if channel is not None:
            threading.Thread(target=channel.run, name="vibe-tcp", daemon=True).start()


def serve_tcp(kernel, host, port, token, once=False):
    """Headless TCP: several connections, each its own session, their frames run one at a time
    on the main thread in arrival order. `once` stops after the first connection ends."""
    server = listen(host, port)
    print("vibe-kernel listening on %s:%d" % server.getsockname()[:2], file=sys.stderr, flush=True)
    inbox = queue.Queue()
    threading.Thread(target=accept_forever, args=(kernel, server, inbox, token, Gatekeeper()),
                     name="vibe-accept", daemon=True).start()
    while True:
        ended = drain(kernel, inbox)
        if once and ended is not None and ended.auth_ok:
            stop_listening(server)
            return


def ensure_token(token):
    """TCP always demands a token. Without one given, a random token is made and written to a
    file only this user can read; its path (never the token) is printed on stderr."""
    if token:
        return token
    token, path = make_token()
    print("vibe-kernel: no token given; generated one in %s" % path, file=sys.stderr, flush=True)
    return token


def make_token():
    """(token, path): a random token (256 bits) written to `<temp>/vibe-kernel-token-<pid>`, a
    new file of mode 0600. A file or link already at that path (left by a crashed run, or
    planted by someone else) is never written through: it is replaced when it is this user's,
    and the token goes to a fresh private file beside it otherwise."""
    import secrets
    import tempfile
    token = secrets.token_urlsafe(32)
    path = os.path.join(tempfile.gettempdir(), "vibe-kernel-token-%d" % os.getpid())
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        try:
            if os.lstat(path).st_uid != os.geteuid():
                raise PermissionError(path)
            os.unlink(path)
            fd = os.open(path, flags, 0o600)
        except OSError:
            fd, path = tempfile.mkstemp(prefix="vibe-kernel-token-%d-" % os.getpid())
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return token, path
