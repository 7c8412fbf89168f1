"""Wire protocol v1 (see PROTOCOL.md beside the crate): frames, hello, auth, and the loops that
feed calls to Blender's main thread one at a time, in arrival order.

Three ways to run, one dispatcher:
  * stdio  - `blender -b --python run_kernel.py -- --stdio`, or `python run_kernel.py --stdio`
             with the bpy module. Frames go out on a duplicate of fd 1; fd 1 itself is pointed at
             stderr, so Blender's own prints never corrupt the frame stream.
  * tcp    - the same, listening on 127.0.0.1 (default port 9833) with a token.
  * add-on - in GUI Blender: a server thread queues frames, and ONE persistent timer drains the
             queue on the main thread within a time budget per tick.
"""

import hmac
import json
import os
import queue
import socket
import sys
import threading
import time

import bpy

from . import confine, lock, snapshot, tools
from .envelope import Refusal, err, from_exception, ok
from .state import KernelState

PROTOCOL = 1
KERNEL_VERSION = "0.1.0"
DEFAULT_PORT = 9833
MAX_FRAME_BYTES = 16 * 1024 * 1024
TICK_BUDGET_S = 0.02
PRE_AUTH_S = 5.0  # a TCP client has this long after the hello to prove the token
MAX_CONNECTIONS = 8  # TCP connections at once; more are refused with a clear error
MAX_BACKOFF_S = 5.0  # the longest wait before a failed login is answered


class Gatekeeper:
    """Admission to a TCP listener: a bounded number of connections, and a growing delay after
    failed logins (0.05 s doubling to MAX_BACKOFF_S, reset by a success), so guessing the token
    is slow and a flood of failures cannot starve real calls."""

    def __init__(self):
        self.lock = threading.Lock()
        self.active = 0
        self.failures = 0

    def admit(self):
        with self.lock:
            if self.active >= MAX_CONNECTIONS:
                return False
            self.active += 1
            return True

    def leave(self):
        with self.lock:
            self.active = max(0, self.active - 1)

    def failed(self):
        with self.lock:
            self.failures += 1
            return min(MAX_BACKOFF_S, 0.05 * 2 ** min(self.failures - 1, 16))

    def succeeded(self):
        with self.lock:
            self.failures = 0


def blender_version():
    return "%d.%d.%d" % tuple(bpy.app.version[:3])


def offered_features():
    features = {"scene.read", "scene.write", "transactions", "file.write"}
    # Agent code only in a jail, or where the operator opted in to unconfined code.
    if confine.permits_code(confine.STATE):
        features.add("code_exec")
    # Stills render with Cycles on the CPU; it is an add-on, enabled in factory settings.
    if hasattr(bpy.types.Scene, "cycles") or "cycles" in bpy.context.preferences.addons:
        features.add("render")
    return features


class Kernel:
    """Executes frames on Blender's main thread."""

    def __init__(self):
        self.blender_version = blender_version()
        self.state = KernelState(offered_features())
        self.cancelled = set()
        self.lock = threading.Lock()
        self.call_deadline_ms = self.state.time_per_tool_ms
        # A random id of this start: a restarted Blender on the same port is told apart.
        self.instance = os.urandom(8).hex()

    def hello(self, auth_required):
        build = bpy.app.build_hash
        build = build.decode() if isinstance(build, bytes) else str(build)
        return {"type": "hello", "protocol": PROTOCOL, "kernel": "vibe-kernel", "kernel_version": KERNEL_VERSION,
                "blender": {"version": self.blender_version, "build_hash": build, "platform": sys.platform,
                            "background": bool(bpy.app.background), "features": sorted(self.state.features),
                            "confinement": dict(confine.STATE)},
                "auth_required": auth_required, "max_frame_bytes": MAX_FRAME_BYTES, "instance": self.instance}

    def file_op(self, operation):
        """Runs a file load or save; the kernel is busy meanwhile (handlers also catch the user's)."""
        self.state.busy += 1
        # A load frees every datablock: no cached reference may outlive it.
        self.state.identity.clear()
        try:
            result = operation()
            if "FINISHED" not in result:
                raise RuntimeError("the file operation did not finish: %s" % sorted(result))
        finally:
            self.state.busy = 0

    def call(self, name, params):
        entry = tools.TOOLS.get(name)
        if entry is None:
            return err("contract_violation", "unknown tool %r" % name, tool=name)
        fn, mutates, capability = entry
        if not isinstance(params, dict):
            return err("invalid_arguments", "params must be an object", field="params")
        needed = {capability, "file.write"} if name == "render.still" else {capability}
        missing = sorted(needed - self.state.capabilities)
        if missing:
            return err("capability_missing", "%s needs capability %r, which this session does not have"
                       % (name, missing[0]), capability=missing[0])
        if mutates and self.state.busy:
            return err("contract_violation", "Blender is loading or saving a file; wait until kernel.status says ready",
                       reason="busy")
        try:
            return ok(fn(self, params))
        except Refusal as refusal:
            return err(refusal.code, refusal.message, **refusal.details)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an envelope
            envelope = from_exception(exc)
            self.state.log_console(name, envelope["error"]["message"])
            return envelope

    def handle(self, frame):
        """The answer frame to one request frame (None for frames without an answer)."""
        kind = frame.get("type")
        if kind == "call":
            call_id = frame.get("id")
            with self.lock:
                cancelled = call_id in self.cancelled
                self.cancelled.discard(call_id)
            if cancelled:
                envelope = err("timeout", "%s was cancelled before it started" % frame.get("tool"),
                               cancelled=True, partial_effects="none: the call never started")
            else:
                self.call_deadline_ms = frame.get("deadline_ms") or self.state.time_per_tool_ms
                envelope = self.call(frame.get("tool"), frame.get("params", {}))
            return {"type": "result", "id": call_id, "envelope": envelope}
        if kind == "configure":
            return {"type": "result", "id": frame.get("id"), "envelope": ok(self.state.configure(frame.get("session", {})))}
        if kind == "inventory":
            try:
                envelope = ok({"objects": list(lock.inventory().values())})
            except Exception as exc:  # noqa: BLE001 - a scene that cannot be listed is an answer
                envelope = from_exception(exc)
            return {"type": "result", "id": frame.get("id"), "envelope": envelope}
        if kind in ("checkpoint", "restore"):
            return {"type": "result", "id": frame.get("id"),
                    "envelope": self.state_file(kind, frame.get("path"), frame.get("transaction"))}
        return None

    def state_file(self, kind, path, transaction=None):
        """Saves the scene to, or loads it from, a `.blend` the bridge names (the last good state
        a replacement kernel is restored from)."""
        if not isinstance(path, str) or not os.path.isabs(path) or not path.endswith(".blend"):
            return err("invalid_arguments", "%s needs an absolute .blend path" % kind, field="path")
        try:
            if kind == "checkpoint":
                snapshot.save(path, self.file_op)
            else:
                snapshot.load(path, self.file_op)
                self.state.seen.clear()
                self.take_over(transaction)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an envelope
            return from_exception(exc)
        return ok({"path": path})

    def take_over(self, transaction):
        """The transaction open at a restored checkpoint: its `begin` snapshot is copied into a
        folder of this kernel's own (the bridge keeps the original out of reach)."""
        import shutil
        import tempfile
        if self.state.transaction is not None:
            tools.remove_snapshot(self.state.transaction[1])
        self.state.transaction = None
        if isinstance(transaction, dict) and isinstance(transaction.get("snapshot"), str):
            copy = os.path.join(tempfile.mkdtemp(prefix="vibe-tx-"), "snapshot.blend")
            shutil.copyfile(transaction["snapshot"], copy)
            tx_id = str(transaction.get("id", "tx-carried"))
            self.state.transaction = (tx_id, copy)
            number = tx_id.rpartition("-")[2]
            if number.isdigit():
                self.state.transactions_started = max(self.state.transactions_started, int(number))

    def cancel(self, call_id):
        with self.lock:
            self.cancelled.add(call_id)


def auth_error(message):
    return {"type": "error", "error": {"code": "contract_violation", "message": message,
                                       "details": {"reason": "security_block"}}}


def close_quietly(conn):
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        conn.close()
    except OSError:
        pass


def protocol_error(message):
    return {"type": "error", "error": {"code": "contract_violation", "message": message,
                                       "details": {"reason": "contract_violation"}}}


def refuse_constant(name):
    raise ValueError("%s is not JSON" % name)


def encode(frame):
    return (json.dumps(frame, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


class Channel:
    """One connection: reads frames on a thread into the kernel's queue, writes answers."""

    def __init__(self, kernel, inbox, reader, write, token=None, conn=None, gate=None):
        self.kernel, self.inbox, self.reader, self.write_bytes, self.token = kernel, inbox, reader, write, token
        self.conn, self.gate = conn, gate
        self.auth_ok = token is None
        self.write_lock = threading.Lock()
        self.closed = False

    def send(self, frame):
        data = encode(frame)
        with self.write_lock:
            if not self.closed:
                self.write_bytes(data)

    def read_frame(self):
        line = self.reader.readline(MAX_FRAME_BYTES + 1)
        if not line:
            return None
        if len(line) > MAX_FRAME_BYTES and not line.endswith(b"\n"):
            raise ValueError("frame exceeds %d bytes" % MAX_FRAME_BYTES)
        frame = json.loads(line.decode("utf-8"), parse_constant=refuse_constant)
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            raise ValueError("a frame must be a JSON object with a type")
        return frame

    def run(self):
        """The reader thread: hello, auth, then frames into the queue until bye or end."""
        try:
            self.send(self.kernel.hello(self.token is not None))
            if self.token is not None:
                if self.conn is not None:
                    self.conn.settimeout(PRE_AUTH_S)
                try:
                    frame = self.read_frame()
                except socket.timeout:
                    self.send(auth_error("no token within %.0f s; the connection is closed" % PRE_AUTH_S))
                    return
                given = frame.get("token", "") if frame and frame.get("type") == "auth" else ""
                if not hmac.compare_digest(str(given).encode(), self.token.encode()):
                    if self.gate is not None:
                        time.sleep(self.gate.failed())
                    self.send(auth_error("authentication failed: a valid token is required"))
                    return
                if self.gate is not None:
                    self.gate.succeeded()
                if self.conn is not None:
                    self.conn.settimeout(None)
                self.auth_ok = True
                self.send({"type": "auth_ok"})
            while True:
                frame = self.read_frame()
                if frame is None or frame.get("type") == "bye":
                    return
                if frame.get("type") == "cancel":
                    self.kernel.cancel(frame.get("id"))
                elif frame.get("type") in ("call", "configure", "checkpoint", "restore", "inventory"):
                    self.inbox.put((self, frame))
                else:
                    self.send(protocol_error("unexpected frame type %r" % frame.get("type")))
                    return
        except (ValueError, UnicodeDecodeError) as exc:
            self.send(protocol_error("malformed frame: %s" % exc))
        except OSError:
            pass
        finally:
            self.inbox.put((self, None))
            if self.gate is not None:
                self.gate.leave()
            if self.conn is not None and not self.auth_ok:
                # Refused or timed out: close now, not when the main thread gets to it.
                close_quietly(self.conn)


def drain(kernel, inbox, deadline=None):
    """Runs queued frames on the calling (main) thread; returns False once a channel ended and
    the caller should stop (headless), else True. `deadline` bounds the time spent (add-on)."""
    while True:
        try:
            timeout = None if deadline is None else 0
            channel, frame = inbox.get(timeout=timeout) if deadline is None else inbox.get_nowait()
        except queue.Empty:
            return True
        if frame is None:
            channel.closed = True
            if channel.conn is not None:
                close_quietly(channel.conn)
            return False
        answer = kernel.handle(frame)
        if answer is not None:
            try:
                channel.send(answer)
            except ValueError as exc:
                # An answer that is not JSON (a non-finite number from a request) is refused,
                # never fatal to the loop.
                channel.send({"type": "result", "id": None, "envelope": err(
                    "invalid_arguments", "the answer could not be encoded: %s" % exc)})
            except OSError:
                channel.closed = True
        if deadline is not None and time.monotonic() >= deadline:
            return True


def serve_stdio(kernel):
    frames_fd = os.dup(1)
    os.dup2(2, 1)  # Blender's C-level prints now go to stderr, off the frame stream.
    sys.stdout = sys.stderr
    out = os.fdopen(frames_fd, "wb", buffering=0)
    inbox = queue.Queue()

    def write(data):
        out.write(data)
        out.flush()

    channel = Channel(kernel, inbox, sys.stdin.buffer, write)
    threading.Thread(target=channel.run, name="vibe-stdio", daemon=True).start()
    while drain(kernel, inbox):
        pass


def listen(host, port):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(4)
    return server


def open_channel(kernel, inbox, conn, token, gate=None):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return Channel(kernel, inbox, conn.makefile("rb"), conn.sendall, token, conn=conn, gate=gate)


def accept_one(server, gate):
    """The next admitted connection, or None when the listener is closed. Descriptor
    exhaustion is logged and waited out, never the end of the listener; connections past
    MAX_CONNECTIONS get a clear refusal and are closed."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError as exc:
            if server.fileno() == -1:
                return None
            print("vibe-kernel: accept failed (%s); retrying" % exc, file=sys.stderr, flush=True)
            time.sleep(0.1)
            continue
        if gate.admit():
            return conn
        try:
            conn.settimeout(1.0)
            conn.sendall(encode(auth_error("too many connections (at most %d); try again later" % MAX_CONNECTIONS)))
        except OSError:
            pass
        close_quietly(conn)


def serve_tcp(kernel, host, port, token, once=False):
    """Headless TCP: one session at a time, served on the main thread."""
    server = listen(host, port)
    print("vibe-kernel listening on %s:%d" % server.getsockname()[:2], file=sys.stderr, flush=True)
    gate = Gatekeeper()
    while True:
        conn = accept_one(server, gate)
        if conn is None:
            return
        inbox = queue.Queue()
        channel = open_channel(kernel, inbox, conn, token, gate)
        threading.Thread(target=channel.run, name="vibe-tcp", daemon=True).start()
        while drain(kernel, inbox):
            pass
        conn.close()
        if once:
            return


def install_busy_handlers(kernel):
    """Loads and saves started by a person (GUI) make the kernel busy too."""
    def busy(*_):
        kernel.state.busy += 1

    def ready(*_):
        kernel.state.busy = max(0, kernel.state.busy - 1)

    def forget(*_):
        # Loads, undo and redo reallocate datablocks: cached references must not survive them.
        kernel.state.identity.clear()

    for name, fn in (("load_pre", busy), ("load_post", ready), ("save_pre", busy), ("save_post", ready),
                     ("load_post_fail", ready), ("save_post_fail", ready)):
        handlers = getattr(bpy.app.handlers, name, None)
        if handlers is not None:
            handlers.append(fn)
    for name in ("load_pre", "load_post", "undo_pre", "undo_post", "redo_pre", "redo_post"):
        handlers = getattr(bpy.app.handlers, name, None)
        if handlers is not None:
            handlers.append(forget)


def ensure_token(token):
    """TCP always demands a token. Without one given, a random token is made and written to a
    file only this user can read; its path is printed on stderr."""
    if token:
        return token
    import secrets
    import tempfile
    token = secrets.token_urlsafe(32)
    path = os.path.join(tempfile.gettempdir(), "vibe-kernel-token-%d" % os.getpid())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    print("vibe-kernel: no token given; generated one in %s" % path, file=sys.stderr, flush=True)
    return token


def parse_args(argv):
    options = {"mode": None, "host": "127.0.0.1", "port": DEFAULT_PORT, "token": os.environ.get("VIBE_TOKEN"),
               "factory": False, "once": False}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--stdio":
            options["mode"] = "stdio"
        elif arg == "--tcp":
            options["mode"] = "tcp"
            if args and not args[0].startswith("--"):
                host, _, port = args.pop(0).rpartition(":")
                options["host"], options["port"] = host or "127.0.0.1", int(port)
        elif arg == "--token-file":
            with open(args.pop(0), encoding="utf-8") as f:
                options["token"] = f.read().strip()
        elif arg == "--factory":
            options["factory"] = True
        elif arg == "--once":
            options["once"] = True
        else:
            raise SystemExit("vibe-kernel: unknown argument %r" % arg)
    if options["mode"] is None:
        raise SystemExit("usage: run_kernel.py (--stdio | --tcp [HOST:PORT] [--token-file F] [--once]) [--factory]")
    return options


def private_temp():
    """A temp folder of this kernel's own (snapshots go there), and the folders of kernels
    that were killed before they could remove theirs."""
    import shutil
    import tempfile
    base = tempfile.gettempdir()
    for name in os.listdir(base):
        if name.startswith("vibe-kernel-run-"):
            pid = name.rpartition("-")[2]
            if pid.isdigit() and not os.path.exists("/proc/%s" % pid) and sys.platform.startswith("linux"):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    own = os.path.join(base, "vibe-kernel-run-%d" % os.getpid())
    os.makedirs(own, mode=0o700, exist_ok=True)
    tempfile.tempdir = own
    import atexit
    atexit.register(shutil.rmtree, own, True)


def main(argv):
    options = parse_args(argv)
    if options["factory"]:
        bpy.ops.wm.read_factory_settings(use_empty=False)
    private_temp()
    # Headless: snapshots are not pictures; no thumbnails in the user's cache.
    if hasattr(bpy.context.preferences.filepaths, "file_preview_type"):
        bpy.context.preferences.filepaths.file_preview_type = "NONE"
    kernel = Kernel()
    install_busy_handlers(kernel)
    if options["mode"] == "stdio":
        serve_stdio(kernel)
    else:
        if options["host"] not in ("127.0.0.1", "localhost", "::1"):
            print("vibe-kernel: listening beyond loopback on %s; anyone who can reach it needs the token"
                  % options["host"], file=sys.stderr, flush=True)
        serve_tcp(kernel, options["host"], options["port"], ensure_token(options["token"]), once=options["once"])
