"""Wire protocol v1 (see PROTOCOL.md beside the crate): frames, hello, auth, and the loops that
feed calls to Blender's main thread one at a time, in arrival order.

Three ways to run, one dispatcher:
  * stdio  - `blender -b --python run_kernel.py -- --stdio`, or `python run_kernel.py --stdio`
             with the bpy module. Frames go out on a duplicate of fd 1; fd 1 itself is pointed at
             stderr, so Blender's own prints never corrupt the frame stream. The main thread
             reads its own frames (stdio.py): no hop from a reader thread.
  * tcp    - the same, listening on 127.0.0.1 (default port 9833) with a token.
  * add-on - in GUI Blender: a server thread queues frames, and ONE persistent timer drains the
             queue on the main thread within a time budget per tick.

This module holds the dispatcher (Kernel) and the protocol's limits. A connection's frames and
the queue they are drained from are in channel.py, TCP listening and admission in tcp.py and
gatekeeper.py, Blender's load / save / undo handlers in app_handlers.py, and the headless start
(run_kernel.py's `main`) in headless.py; the add-on is __init__.py.
"""

import contextlib
import os
import sys
import threading
import time

import bpy

from . import codeexec, confine, exchange, lock, snapshot, tools
from .index import SCENE_INDEX
from .envelope import Refusal, err, from_exception, json_safe, ok
from .state import ORPHAN_GRACE_S, Session, Shared

PROTOCOL = 1
KERNEL_VERSION = "0.1.0"
MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_BATCH_CALLS = 256  # calls in one `batch` frame (said in the hello)


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
        tools.check_complete()
        self.blender_version = blender_version()
        self.shared = Shared(offered_features())
        # The session of the frame being run (each connection has its own; see state.py).
        self.state = Session(self.shared)
        # The call being served, as (its connection's session, its id), for a cancel. A cancel
        # of a queued call is answered by its connection at once (channel.py); one of a finished
        # or unknown call leaves no trace.
        self.running = None
        self.lock = threading.Lock()
        self.call_deadline_ms = self.state.time_per_tool_ms
        # A random id of this start: a restarted Blender on the same port is told apart.
        self.instance = os.urandom(8).hex()
        self.channels = set()  # live connections, under self.lock
        self.serving = True  # False once the add-on is turned off: no connection is taken (tcp.py)
        self.handlers = []  # (handler list name, function) installed by install_busy_handlers

    def hello(self, auth_required):
        build = bpy.app.build_hash
        build = build.decode() if isinstance(build, bytes) else str(build)
        return {"type": "hello", "protocol": PROTOCOL, "kernel": "vibe-kernel", "kernel_version": KERNEL_VERSION,
                "blender": {"version": self.blender_version, "build_hash": build, "platform": sys.platform,
                            "background": bool(bpy.app.background), "features": sorted(self.state.features),
                            "confinement": dict(confine.STATE)},
                "auth_required": auth_required, "max_frame_bytes": MAX_FRAME_BYTES, "instance": self.instance,
                "max_batch_calls": MAX_BATCH_CALLS, "formats": exchange.available_formats()}

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
        entry = tools.TOOLS.get(name) if isinstance(name, str) else None
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

    def handle(self, frame, session=None, channel=None):
        """The answer frame to one request frame (None for frames without an answer), run
        in `session` (a connection's own; the kernel's default one if None). A call that
        `channel` queued (Channel.queue_calls) and a cancel reached meanwhile is not run, and
        None is returned: its connection answered it already."""
        kind = frame.get("type")
        if kind == "call":
            return self.handle_call(frame, session, channel)
        if session is not None:
            self.state = session
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
                objects = list(lock.inventory(self, all_parts=True).values())
                envelope = ok({"objects": objects, "blocks": lock.blocks(self)})
            except Exception as exc:  # noqa: BLE001 - a scene that cannot be listed is an answer
                envelope = from_exception(exc)
            return {"type": "result", "id": frame.get("id"), "envelope": envelope}
        if kind in ("checkpoint", "restore"):
            return {"type": "result", "id": frame.get("id"),
                    "envelope": self.state_file(kind, frame.get("path"), frame.get("transaction"))}
        return None

    def handle_call(self, frame, session=None, channel=None):
        """`handle` of a call frame (a batch's calls come here as they are, without a type)."""
        if session is not None:
            self.state = session
        call_id = frame.get("id")
        with self.lock:
            if channel is not None:
                # Every call of a channel was queued as it was read; one no longer there was
                # cancelled meanwhile (and answered then).
                if channel.queued.get(call_id) is not frame:
                    return None
                del channel.queued[call_id]
            self.running = (session, call_id)
            if codeexec.CANCELLED_EARLY:  # only a cancel sets it, and under this lock
                codeexec.new_call()
        state = self.state
        if state.loads_reported < self.shared.loads:
            state.seen.clear()  # a file was loaded since: the pointers it holds are stale
        self.call_deadline_ms = frame.get("deadline_ms") or state.time_per_tool_ms
        try:
            envelope = self.call(frame.get("tool"), frame["params"] if "params" in frame else {})
        finally:
            with self.lock:
                self.running = None
        if state.loads_reported != self.shared.loads:
            envelope = self.tell_events(envelope)
        return {"type": "result", "id": call_id, "envelope": envelope}

    def tell_events(self, envelope):
        """The answer with the file loads this session has not heard of yet: on success under
        `result._meta.events`, on failure under `error.details.events`. Then it has heard.
        Called only when a load happened since the session's last answer (handle_call)."""
        events, _ = json_safe(self.state.missed_events())
        self.state.caught_up()
        if not events:
            return envelope
        if envelope.get("ok"):
            envelope = dict(envelope)  # a plain copy: a Checked envelope's text has no events
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

    def cancel(self, call_id, channel=None):
        """Call `call_id` of `channel` (None: a call handed to `handle` directly) is to stop or
        not to run. Running agent code is interrupted (and rolled back); other running work (a
        render, a save) cannot be stopped from here, and the bridge's supervisor kills the
        kernel. A call still queued is answered now, as cancelled before it started, and is not
        run. A finished or unknown id is ignored: ids are each connection's own."""
        session = channel.session if channel is not None else None
        with self.lock:
            if self.running == (session, call_id):
                running, queued = codeexec.cancel_running(), None
            elif channel is not None and call_id in channel.queued:
                running, queued = None, channel.queued.pop(call_id)
            else:
                return
        if running is not None:
            running.stop_now()
        if queued is not None:
            channel.send({"type": "result", "id": call_id, "envelope": err(
                "timeout", "%s was cancelled before it started" % queued.get("tool"),
                cancelled=True, partial_effects="none: the call never started")})
