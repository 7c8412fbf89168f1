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

import collections
import contextlib
import hmac
import json
import os
import queue
import socket
import sys
import threading
import time

import bpy

from . import confine, files, lock, snapshot, tools
from . import index
from .index import SCENE_INDEX
from .envelope import Refusal, err, from_exception, json_safe, ok
from .state import ORPHAN_GRACE_S, Session, Shared

PROTOCOL = 1
KERNEL_VERSION = "0.1.0"
DEFAULT_PORT = 9833
MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_BATCH_CALLS = 256  # calls in one `batch` frame (said in the hello)
TICK_BUDGET_S = 0.02
PRE_AUTH_S = 5.0  # a TCP client has this long after the hello to prove the token
MAX_CONNECTIONS = 8  # logged-in TCP sessions at once; more are refused with a clear error
MAX_PENDING = 16  # TCP connections not logged in (or failed and waiting); see Gatekeeper
MAX_BACKOFF_S = 5.0  # the longest wait before a failed login is answered


class Gatekeeper:
    """Admission to a TCP listener.

    * Connections that have not logged in are bounded (MAX_PENDING). A new one past the bound
      evicts a connection whose login already failed (it waits out its delay), else the oldest
      one waiting: idle or dripping clients never keep a real one out for longer than it takes
      MAX_PENDING newer connections to arrive, and a real client logs in within milliseconds.
    * Logged-in sessions are bounded (MAX_CONNECTIONS), with a clear refusal past it.
    * A failed login is answered after a growing delay (0.05 s doubling to MAX_BACKOFF_S, reset
      by a success). The token is the boundary; the delay slows guessing of weak tokens.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.pending = collections.deque()  # connected, not logged in
        self.failing = collections.deque()  # login failed, waiting out the delay
        self.sessions = 0
        self.failures = 0

    def admit(self, conn):
        """Takes a new connection in; returns the connection it evicted, if any."""
        with self.lock:
            evicted = None
            if len(self.pending) + len(self.failing) >= MAX_PENDING:
                evicted = (self.failing or self.pending).popleft()
            self.pending.append(conn)
            return evicted

    def logged_in(self, conn):
        """The connection proved the token: a session, if there is room for one."""
        with self.lock:
            self.failures = 0
            if conn in self.pending:
                self.pending.remove(conn)
            if self.sessions >= MAX_CONNECTIONS:
                return False
            self.sessions += 1
            return True

    def leave(self, conn, was_session):
        with self.lock:
            for waiting in (self.pending, self.failing):
                if conn in waiting:
                    waiting.remove(conn)
            if was_session:
                self.sessions = max(0, self.sessions - 1)

    def failed(self, conn=None):
        """A failed login: the delay before it is answered."""
        with self.lock:
            if conn is not None and conn in self.pending:
                self.pending.remove(conn)
                self.failing.append(conn)
            self.failures += 1
            return min(MAX_BACKOFF_S, 0.05 * 2 ** min(self.failures - 1, 16))


def blender_version():
    return "%d.%d.%d" % tuple(bpy.app.version[:3])


def offered_features():
    features = {"scene.read", "scene.write", "transactions", "file.read", "file.write"}
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
        self.shared = Shared(offered_features())
        # The session of the frame being run (each connection has its own; see state.py).
        self.state = Session(self.shared)
        self.cancelled = set()
        self.running_call = None  # the id of the call being served (for a cancel)
        self.lock = threading.Lock()
        self.call_deadline_ms = self.state.time_per_tool_ms
        # A random id of this start: a restarted Blender on the same port is told apart.
        self.instance = os.urandom(8).hex()
        self.channels = set()  # live connections, under self.lock
        self.handlers = []  # (handler list name, function) installed by install_busy_handlers

    def hello(self, auth_required):
        build = bpy.app.build_hash
        build = build.decode() if isinstance(build, bytes) else str(build)
        return {"type": "hello", "protocol": PROTOCOL, "kernel": "vibe-kernel", "kernel_version": KERNEL_VERSION,
                "blender": {"version": self.blender_version, "build_hash": build, "platform": sys.platform,
                            "background": bool(bpy.app.background), "features": sorted(self.state.features),
                            "confinement": dict(confine.STATE)},
                "auth_required": auth_required, "max_frame_bytes": MAX_FRAME_BYTES, "instance": self.instance,
                "max_batch_calls": MAX_BATCH_CALLS}

    def file_op(self, operation):
        """Runs one of the kernel's own file loads or saves; the kernel is busy meanwhile (the
        handlers catch the user's). The load and save handlers leave these to the caller: a
        rollback reloads the same document, and file.open reports its load itself."""
        self.file_name()  # before a snapshot load puts the snapshot's path there
        self.state.busy += 1
        self.shared.own_file_op = True
        # A load frees every datablock: no cached reference may outlive it.
        self.state.identity.clear()
        try:
            result = operation()
            if "FINISHED" not in result:
                raise RuntimeError("the file operation did not finish: %s" % sorted(result))
        finally:
            self.state.busy = 0
            self.shared.own_file_op = False
            SCENE_INDEX.changed()

    def file_name(self):
        """The open file's name ("" for an unsaved one), as kernel.status reports it: read from
        Blender until the kernel's own loads could change it (an add-on registering cannot read
        bpy.data yet), then kept by the file events (Kernel.file_loaded, a person's save)."""
        if self.shared.file is None:
            self.shared.file = os.path.basename(bpy.data.filepath)
        return self.shared.file

    def file_loaded(self):
        """A file was loaded (a person's load in the GUI, or file.open): the state follows the file.
        An open transaction is dropped (its snapshot, or the undo history it marked, belongs to
        another document), the identity cache and the modifier record are emptied, everything in
        the file is the human's (the records are emptied and the CREATED_PROP tags taken off), and the load is recorded as
        an event that every session hears of in its next answer (see `handle`)."""
        shared = self.shared
        dropped = None
        if shared.transaction is not None:
            dropped, path, owner = shared.transaction
            shared.transaction = None
            shared.orphaned_at = None
            snapshot.discard(path)
            shared.log_console("kernel", "transaction %s of session %s was dropped: another file was loaded"
                               % (dropped, owner))
        shared.transaction_record = None
        shared.identity.clear()
        lock.untag_all(shared)
        shared.file = os.path.basename(bpy.data.filepath)
        shared.record_load({"event": "file_loaded", "file": shared.file, "transaction_dropped": dropped})

    def call(self, name, params):
        entry = tools.TOOLS.get(name)
        if entry is None:
            return err("contract_violation", "unknown tool %r" % name, tool=name)
        fn, mutates, capabilities = entry
        if not isinstance(params, dict):
            return err("invalid_arguments", "params must be an object", field="params")
        if mutates:
            refusal = self.foreign_transaction_refusal(name)
            if refusal is not None:
                return refusal
        missing = sorted(capabilities - self.state.capabilities)
        if missing:
            return err("capability_missing", "%s needs capability %r, which this session does not have"
                       % (name, missing[0]), capability=missing[0])
        if mutates and self.state.busy:
            return err("contract_violation", "Blender is loading or saving a file; wait until kernel.status says ready",
                       reason="busy")
        gui = mutates and snapshot.uses_undo()
        if gui and name != "transaction.commit":
            human = snapshot.human_activity()
            if human is not None:
                return err("contract_violation", "the human is %s in Blender; %s waits until they are done (reads "
                           "still work)" % (human, name), reason="busy", human=human)
        structural = SCENE_INDEX.structural() if name in tools.STRUCTURAL else contextlib.nullcontext()
        try:
            with structural:
                # In the GUI every change is one undo step of its own (snapshot.run_as_step).
                return ok(snapshot.run_as_step(self, name, fn, params) if gui else fn(self, params))
        except Refusal as refusal:
            return err(refusal.code, refusal.message, **refusal.details)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an envelope
            envelope = from_exception(exc)
            self.state.log_console(name, envelope["error"]["message"])
            return envelope

    def foreign_transaction_refusal(self, name):
        """The refusal of a change while another session's transaction is open (its rollback
        would take this change with it), or None. A transaction whose session's connections all
        closed more than ORPHAN_GRACE_S ago is ended first (see `end_orphan`)."""
        foreign = self.state.foreign_transaction()
        if foreign is None:
            return None
        tx_id, owner, orphaned_for = foreign
        if orphaned_for is not None and orphaned_for >= ORPHAN_GRACE_S:
            self.end_orphan()
            return None
        return err("contract_violation", "session %s has transaction %s open on this Blender; %s now would be "
                   "rolled back with it" % (owner, tx_id, name), rule="transaction_of_another_session",
                   transaction=tx_id, holder=owner)

    def end_orphan(self):
        """Ends the transaction of a session that left: headless it is rolled back (what an
        uncommitted transaction means); in the GUI the scene is kept (the human may be working on
        it; the agent's steps stay in the undo history). Said on the console."""
        tx_id, path, owner = self.shared.transaction
        self.shared.transaction = None
        self.shared.orphaned_at = None
        record, self.shared.transaction_record = self.shared.transaction_record, None
        outcome = "kept its changes"
        if isinstance(path, str):  # a file snapshot (headless)
            try:
                snapshot.load(path, self.file_op)
                lock.restore_record(self.shared, record)
                outcome = "was rolled back"
            except Exception as exc:  # noqa: BLE001 - a failed reload is reported, not fatal
                outcome = "could not be rolled back (%s); the scene was kept" % exc
        snapshot.discard(path)
        self.shared.log_console("kernel", "transaction %s of session %s %s: its connection closed %.0f s ago"
                                % (tx_id, owner, outcome, ORPHAN_GRACE_S))

    def session_ended(self, session, live_sessions):
        """A connection closed. If its session holds the transaction and no other connection
        has that session, the transaction waits ORPHAN_GRACE_S for the session to come back."""
        tx = self.shared.transaction
        if tx is not None and tx[2] == session.session_id and session.session_id not in live_sessions:
            self.shared.orphaned_at = time.monotonic()

    def handle(self, frame, session=None):
        """The answer frame to one request frame (None for frames without an answer), run
        in `session` (a connection's own; the kernel's default one if None)."""
        if session is not None:
            self.state = session
        kind = frame.get("type")
        if kind == "call":
            call_id = frame.get("id")
            with self.lock:
                cancelled = call_id in self.cancelled
                self.cancelled.discard(call_id)
            if self.state.loads_reported < self.shared.loads:
                self.state.seen.clear()  # a file was loaded since: the pointers it holds are stale
            if cancelled:
                envelope = err("timeout", "%s was cancelled before it started" % frame.get("tool"),
                               cancelled=True, partial_effects="none: the call never started")
            else:
                self.call_deadline_ms = frame.get("deadline_ms") or self.state.time_per_tool_ms
                with self.lock:
                    self.running_call = call_id
                try:
                    envelope = self.call(frame.get("tool"), frame.get("params", {}))
                finally:
                    with self.lock:
                        self.running_call = None
                        self.cancelled.discard(call_id)
            return {"type": "result", "id": call_id, "envelope": self.tell_events(envelope)}
        if kind == "configure":
            settings = frame.get("session", {})
            try:
                if not isinstance(settings, dict):
                    raise ValueError("session must be an object")
                envelope = ok(self.state.configure(settings))
            except (ValueError, TypeError) as exc:
                envelope = err("invalid_arguments", "configure: %s" % exc, field="session")
            return {"type": "result", "id": frame.get("id"), "envelope": envelope}
        if kind == "inventory":
            try:
                envelope = ok({"objects": list(lock.inventory(self).values()), "blocks": lock.blocks(self)})
            except Exception as exc:  # noqa: BLE001 - a scene that cannot be listed is an answer
                envelope = from_exception(exc)
            return {"type": "result", "id": frame.get("id"), "envelope": envelope}
        if kind in ("checkpoint", "restore"):
            return {"type": "result", "id": frame.get("id"),
                    "envelope": self.state_file(kind, frame.get("path"), frame.get("transaction"))}
        return None

    def tell_events(self, envelope):
        """The answer with the file loads this session has not heard of yet: on success under
        `result._meta.events`, on failure under `error.details.events`. Then it has heard."""
        if self.state.loads_reported == self.shared.loads:
            return envelope  # nothing loaded since its last answer
        events, _ = json_safe(self.state.missed_events())
        self.state.caught_up()
        if not events:
            return envelope
        if envelope.get("ok"):
            result = envelope["result"]
            if isinstance(result, dict):
                meta = result.get("_meta") if isinstance(result.get("_meta"), dict) else {}
                result["_meta"] = dict(meta, events=list(meta.get("events") or []) + events)
        else:
            envelope["error"]["details"]["events"] = events
        return envelope

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
                lock.adopt_tags(self.shared)  # a replacement kernel: the records start from the tags
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
            snapshot.discard(self.state.transaction[1])
        self.state.transaction = None
        self.shared.transaction_record = None
        if isinstance(transaction, dict) and isinstance(transaction.get("snapshot"), str):
            copy = os.path.join(tempfile.mkdtemp(prefix="vibe-tx-"), "snapshot.blend")
            shutil.copyfile(transaction["snapshot"], copy)
            tx_id = str(transaction.get("id", "tx-carried"))
            self.state.transaction = (tx_id, copy)
            number = tx_id.rpartition("-")[2]
            if number.isdigit():
                self.state.transactions_started = max(self.state.transactions_started, int(number))

    def cancel(self, call_id):
        """Call `call_id` is not to run, or to stop: a queued call is answered without running,
        running agent code is interrupted (and rolled back); other running work (a render, a
        save) cannot be stopped from here, and the bridge's supervisor kills the kernel."""
        from . import codeexec

        with self.lock:
            self.cancelled.add(call_id)
            running = codeexec.RUNNING if self.running_call == call_id else None
        if running is not None:
            running.stop_now()


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
        self.is_session = False  # counted among the gate's sessions
        self.write_lock = threading.Lock()
        self.closed = False
        # This connection's own settings (capabilities, sandbox, ...) over the kernel's state.
        self.session = Session(kernel.shared)

    def send(self, frame):
        """Writes one frame. A frame that is not JSON (a non-finite number from a request) is
        replaced by an error answer, never fatal to the loop."""
        try:
            data = encode(frame)
        except ValueError as exc:
            data = encode({"type": "result", "id": frame.get("id"), "envelope": err(
                "invalid_arguments", "the answer could not be encoded: %s" % exc)})
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
                if frame is None:
                    return  # closed (or evicted) before logging in: not a failed login
                given = frame.get("token", "") if frame.get("type") == "auth" else ""
                if not hmac.compare_digest(str(given).encode(), self.token.encode()):
                    if self.gate is not None:
                        time.sleep(self.gate.failed(self.conn))
                    self.send(auth_error("authentication failed: a valid token is required"))
                    return
                if self.gate is not None:
                    self.is_session = self.gate.logged_in(self.conn)
                    if not self.is_session:
                        self.send(auth_error("too many sessions (at most %d); try again later" % MAX_CONNECTIONS))
                        self.auth_ok = False
                        return
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
                elif frame.get("type") == "batch":
                    calls = frame.get("calls")
                    if (not isinstance(calls, list) or not 1 <= len(calls) <= MAX_BATCH_CALLS
                            or not all(isinstance(c, dict) for c in calls)):
                        self.send(protocol_error("a batch carries 1 to %d call objects" % MAX_BATCH_CALLS))
                        return
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
                self.gate.leave(self.conn, self.is_session)
            if self.conn is not None and not self.auth_ok:
                # Refused or timed out: close now, not when the main thread gets to it.
                close_quietly(self.conn)


def drain(kernel, inbox, deadline=None):
    """Runs queued frames on the calling (main) thread, each in its connection's session.
    Headless (no `deadline`) it waits for frames and returns the first channel that ends; with
    a `deadline` (the add-on's timer) it returns when the queue is empty or the time is up."""
    while True:
        try:
            channel, frame = inbox.get() if deadline is None else inbox.get_nowait()
        except queue.Empty:
            return None
        if frame is None:
            channel.closed = True
            if channel.conn is not None:
                close_quietly(channel.conn)
            with kernel.lock:
                kernel.channels.discard(channel)
                live = {c.session.session_id for c in kernel.channels}
            kernel.session_ended(channel.session, live)
            if deadline is None:
                return channel
            continue
        # A batch's calls run in order, one after another, in this one hop of the main thread,
        # each answered as it would be alone (checks, cancels and deadlines included) and as
        # soon as it is done, so that the bridge reads one answer while the next call runs.
        calls = [dict(call, type="call") for call in frame["calls"]] if frame.get("type") == "batch" else [frame]
        for call in calls:
            answer = kernel.handle(call, channel.session)
            if answer is not None:
                try:
                    channel.send(answer)
                except OSError:
                    channel.closed = True
        if deadline is not None and time.monotonic() >= deadline:
            return None


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
    kernel.channels.add(channel)
    threading.Thread(target=channel.run, name="vibe-stdio", daemon=True).start()
    drain(kernel, inbox)


def listen(host, port):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(4)
    return server


def open_channel(kernel, inbox, conn, token, gate=None):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    channel = Channel(kernel, inbox, conn.makefile("rb"), conn.sendall, token, conn=conn, gate=gate)
    with kernel.lock:
        kernel.channels.add(channel)
    return channel


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
            print("vibe-kernel: accept failed (%s); retrying" % exc, file=sys.stderr, flush=True)
            time.sleep(0.1)
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


def install_busy_handlers(kernel):
    """Loads and saves started by a person (GUI) make the kernel busy too, and the state follows
    every file a person loads (Kernel.file_loaded); the kernel's own loads and saves (file_op) are
    left to their callers. The handlers are persistent: Blender drops the others on every load,
    the very event they watch. `remove_handlers` takes them off again."""
    shared = kernel.shared

    @bpy.app.handlers.persistent
    def busy(*_):
        shared.busy += 1

    @bpy.app.handlers.persistent
    def ready(*_):
        shared.busy = max(0, shared.busy - 1)

    @bpy.app.handlers.persistent
    def forget(*_):
        # Undo and redo reallocate datablocks (as loads do; see file_op and Kernel.file_loaded):
        # cached references must not survive them.
        shared.identity.clear()

    @bpy.app.handlers.persistent
    def reattach(*_):
        # After the step the records find their blocks again (lock.reattach; the agent's
        # modifiers on the human's objects are the human's again).
        shared.identity.clear()
        lock.reattach(shared)

    @bpy.app.handlers.persistent
    def loaded(*_):
        if not shared.own_file_op:
            kernel.file_loaded()

    @bpy.app.handlers.persistent
    def saved(*_):
        if not shared.own_file_op:  # a person's "Save As" names the file anew
            shared.file = os.path.basename(bpy.data.filepath)

    wanted = [("load_pre", busy), ("load_post", ready), ("save_pre", busy), ("save_post", ready),
              ("load_post_fail", ready), ("save_post_fail", ready), ("load_post", loaded), ("save_post", saved)]
    wanted += [("undo_pre", forget), ("redo_pre", forget), ("undo_post", reattach), ("redo_post", reattach)]
    for name, fn in wanted:
        handlers = getattr(bpy.app.handlers, name, None)
        if handlers is not None:
            handlers.append(fn)
            kernel.handlers.append((name, fn))


def remove_handlers(kernel):
    """Takes off the handlers `install_busy_handlers` and the scene index put on."""
    index.uninstall()
    for name, fn in kernel.handlers:
        handlers = getattr(bpy.app.handlers, name, [])
        if fn in handlers:
            handlers.remove(fn)
    kernel.handlers = []


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
               "factory": False, "once": False, "open": None}
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
        elif arg == "--open":
            if not args:
                raise SystemExit("vibe-kernel: --open needs a .blend path")
            options["open"] = args.pop(0)
        else:
            raise SystemExit("vibe-kernel: unknown argument %r" % arg)
    if options["mode"] is None:
        raise SystemExit("usage: run_kernel.py (--stdio | --tcp [HOST:PORT] [--token-file F] [--once]) [--factory] "
                         "[--open FILE.blend]")
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
    try:
        if options["open"] is not None:
            # The operator's file, before anyone connects: everything in it is the human's.
            try:
                files.open_blend(kernel, os.path.abspath(options["open"]))
            except Exception as exc:  # noqa: BLE001 - said clearly, then the kernel does not start
                raise SystemExit("vibe-kernel: cannot open %s: %s" % (options["open"], exc))
        if options["mode"] == "stdio":
            serve_stdio(kernel)
        else:
            if options["host"] not in ("127.0.0.1", "localhost", "::1"):
                print("vibe-kernel: listening beyond loopback on %s; anyone who can reach it needs the token"
                      % options["host"], file=sys.stderr, flush=True)
            serve_tcp(kernel, options["host"], options["port"], ensure_token(options["token"]), once=options["once"])
    finally:
        # Persistent handlers left on at exit hang the bpy 4.5 module's shutdown.
        remove_handlers(kernel)
