"""One connection (Channel): frames read on a thread of its own, hello and token, answers
written back; and `drain`, which runs the queued frames on Blender's main thread."""

import hmac
import json
import math
import queue
import socket
import threading
import time

from . import tools
from .envelope import ENCODER, Checked, err
from .gatekeeper import MAX_CONNECTIONS
from .state import Session
from .wire import MAX_BATCH_CALLS, MAX_FRAME_BYTES

TICK_BUDGET_S = 0.02  # the add-on's timer drains for this long per tick
ANSWER_GATHER_S = 0.001  # a batch's brief answers wait at most this long to be written together
PRE_AUTH_S = 5.0  # a TCP client has this long after the hello to prove the token


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


# Built once: json.loads with options builds a new decoder per call, which costs more than a
# small frame's parsing (the encoder, likewise, is envelope.ENCODER).
DECODER = json.JSONDecoder(parse_constant=refuse_constant)


def parse_frame(line):
    """The frame on one line read (None at the end of the stream). ValueError when the line is
    too long, not JSON, or not an object with a type."""
    if not line:
        return None
    if len(line) > MAX_FRAME_BYTES and not line.endswith(b"\n"):
        raise ValueError("frame exceeds %d bytes" % MAX_FRAME_BYTES)
    frame = DECODER.decode(line.decode("utf-8"))
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise ValueError("a frame must be a JSON object with a type")
    return frame


def check_id(frame):
    """ValueError when `frame`'s id cannot be answered: a number too large for a float
    (`1e999` parses to infinity, which JSON cannot carry back)."""
    call_id = frame.get("id")
    if isinstance(call_id, float) and not math.isfinite(call_id):
        raise ValueError("an id must be a finite number")


def encode(frame):
    return (ENCODER.encode(frame) + "\n").encode("utf-8")


def encode_answer(frame):
    """`frame` encoded, or an error answer in its place when it is not JSON. A result whose
    envelope is Checked (envelope.py) reuses the envelope's text."""
    try:
        envelope = frame.get("envelope")
        if type(envelope) is Checked and frame.get("type") == "result" and len(frame) == 3:
            call_id = frame.get("id")
            # An int's JSON is its repr (not a bool's); the encoder costs more than a brief call's
            # other answer work.
            call_id = repr(call_id) if type(call_id) is int else ENCODER.encode(call_id)
            return ('{"type":"result","id":%s,"envelope":%s}\n' % (call_id, envelope.text)).encode("utf-8")
        return encode(frame)
    except ValueError as exc:
        call_id = frame.get("id")
        try:
            ENCODER.encode(call_id)
        except (ValueError, TypeError):
            call_id = None  # refused at the door (check_id); never fatal here either
        return encode({"type": "result", "id": call_id, "envelope": err(
            "invalid_arguments", "the answer could not be encoded: %s" % exc)})


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
        # Calls read but not started (id -> the call), under the kernel's lock: the reader
        # thread queues and cancels (takes out), the main thread starts (takes out) only a
        # call still there, so a cancelled one never runs, even when a new call reuses its id.
        self.queued = {}
        # A batch's answers done and not yet written (see run_frame), under their own lock.
        self.held, self.held_since = [], 0.0
        self.hold_lock = threading.Lock()

    def send(self, *frames):
        """Writes frames, in one write. A frame that is not JSON (a non-finite number from a
        request) is replaced by an error answer, never fatal to the loop."""
        data = encode_answer(frames[0]) if len(frames) == 1 else b"".join(map(encode_answer, frames))
        with self.write_lock:
            if data and not self.closed:
                self.write_bytes(data)

    def hold(self, answer):
        """Keeps a batch's answer to be written with the next ones (`release`)."""
        with self.hold_lock:
            if not self.held:
                self.held_since = time.monotonic()
            self.held.append(answer)

    def release(self, older_than=0.0):
        """Writes the answers held, if the first of them has waited `older_than` seconds."""
        with self.hold_lock:
            if not self.held or time.monotonic() - self.held_since < older_than:
                return
            held, self.held = self.held, []
            send_quietly(self, held)

    def queue_calls(self, calls):
        """Notes calls read and not yet started, so that a cancel can answer them at once, and
        True. Ids are unique among a connection's calls in flight (PROTOCOL.md §5): a cancel
        must reach one call. With an id already queued or running on this connection (or twice
        in `calls`), none is noted, the connection is told (a protocol error: it ends) and
        False."""
        with self.kernel.lock:
            queued, running, seen = self.queued, self.kernel.running, set()
            for call in calls:
                call_id = call.get("id")
                if call_id in queued or call_id in seen or running == (self.session, call_id):
                    break
                seen.add(call_id)
            else:
                for call in calls:
                    queued[call.get("id")] = call
                return True
        self.send(protocol_error("call id %s is already in flight on this connection" % call_id))
        return False

    def read_frame(self):
        return parse_frame(self.reader.readline(MAX_FRAME_BYTES + 1))

    def accept(self, frame):
        """Takes one frame read from the connection: a cancel now, a request into the queue.
        False when the connection is to end (bye, or a frame that breaks the protocol, which is
        answered with an error first)."""
        kind = frame.get("type")
        if kind == "bye":
            return False
        check_id(frame)
        if kind == "cancel":
            self.kernel.cancel(frame.get("id"), self)
        elif kind in ("call", "configure", "checkpoint", "restore", "inventory"):
            if kind == "call" and not self.queue_calls((frame,)):
                return False
            self.deliver(frame)
        elif kind == "batch":
            calls = frame.get("calls")
            if (not isinstance(calls, list) or not 1 <= len(calls) <= MAX_BATCH_CALLS
                    or not all(isinstance(c, dict) for c in calls)):
                self.send(protocol_error("a batch carries 1 to %d call objects" % MAX_BATCH_CALLS))
                return False
            for call in calls:
                check_id(call)
            if not self.queue_calls(calls):
                return False
            self.deliver(frame)
        else:
            self.send(protocol_error("unexpected frame type %r" % kind))
            return False
        return True

    def deliver(self, frame):
        """Hands a request to the main thread (the kernel's queue)."""
        self.inbox.put((self, frame))

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
                if frame is None or not self.accept(frame):
                    return
        except OSError:
            pass
        except Exception as exc:  # noqa: BLE001 - a frame that breaks the loop is malformed
            try:
                self.send(protocol_error("malformed frame: %s" % (str(exc) or type(exc).__name__)))
            except OSError:
                pass
        finally:
            self.inbox.put((self, None))
            if self.gate is not None:
                self.gate.leave(self.conn, self.is_session)
            if self.conn is not None and not self.auth_ok:
                # Refused or timed out: close now, not when the main thread gets to it.
                close_quietly(self.conn)


def end_channel(kernel, channel):
    """A connection ended (its reader queued the end): closed, forgotten, its session noted."""
    channel.closed = True
    if channel.conn is not None:
        close_quietly(channel.conn)
    with kernel.lock:
        kernel.channels.discard(channel)
        live = {c.session.session_id for c in kernel.channels}
    kernel.session_ended(channel.session, live)


def run_frame(kernel, channel, frame):
    """Runs one request frame of `channel` on the calling (main) thread, in its session.

    A batch's calls run in order, one after another, in this one hop of the main thread, each
    answered as it would be alone (checks, cancels and deadlines included). Answers of brief
    calls are written together, at most ANSWER_GATHER_S after the first of them is done (each
    write wakes the bridge, which costs more than a brief call); before a call that may run
    long, and at the end, whatever is done is written, so the bridge reads it while the rest
    runs. While a brief call turns out slow, the stdio kernel's watcher writes what is held."""
    if frame.get("type") != "batch":
        answer = kernel.handle(frame, channel.session, channel)
        if answer is not None:
            send_quietly(channel, [answer])
        return
    try:
        for call in frame["calls"]:
            # Read without the lock (only this thread adds answers; the watcher may have
            # written them already, which release sees under it).
            if channel.held and (not tools.runs_briefly(call.get("tool"))
                                 or time.monotonic() - channel.held_since >= ANSWER_GATHER_S):
                channel.release()
            answer = kernel.handle_call(call, channel.session, channel)
            if answer is not None:  # None: cancelled while queued, and answered already
                channel.hold(answer)
    finally:
        channel.release()


def send_quietly(channel, answers):
    """Writes answers; a connection that broke is marked closed (its reader ends it)."""
    try:
        channel.send(*answers)
    except OSError:
        channel.closed = True


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
            end_channel(kernel, channel)
            if deadline is None:
                return channel
            continue
        run_frame(kernel, channel, frame)
        if deadline is not None and time.monotonic() >= deadline:
            return None
