"""The kernel's state, in two parts.

`Shared` is one per kernel: the console ring, the one open transaction (and the session that
owns it), the identity cache, the busy count, the record of modifiers the agent added, and the
file loads so far. `Session` is one per connection: the settings its `configure` sent (session
id, capabilities, sanity limits, sandbox, project roots, time per tool), the objects it resolved
and the last file load it reported. Several TCP clients therefore never change each other's
capabilities or sandbox, and only the session that began a transaction may commit, roll back or
change the scene while it is open.
"""

import collections
import os
import time

CONSOLE_CAPACITY = 200
DEFAULT_CAPABILITIES = ("scene.read", "scene.write", "transactions")
DEFAULT_SANITY = {"max_subdivision_levels": 3, "max_array_count": 64,
                  "max_bevel_segments": 16, "max_polygons": 2000000}
# How long the transaction of a session whose last connection closed waits for that session to
# reconnect (the bridge reconnects with the same session id) before another session may end it.
ORPHAN_GRACE_S = 30.0
# How many file-load events the kernel keeps for sessions that have not heard of them yet.
EVENTS_KEPT = 32


class Shared:
    def __init__(self, features):
        self.features = set(features)
        self.console = collections.deque()
        self.console_seq = 0
        self.console_dropped = 0
        # (id, what a rollback returns to, owner session id): a snapshot path headless, an undo
        # position in the GUI (snapshot.Position)
        self.transaction = None
        self.orphaned_at = None  # monotonic time the owner's last connection closed
        self.transactions_started = 0
        self.identity = {}  # name -> object reference, validated on every use
        self.busy = 0  # file loads / saves in progress
        self.own_file_op = False  # the kernel's own load or save runs (the handlers leave it be)
        # (object identity, modifier name) -> id of the session whose modifier.add made it; see
        # lock.py. Emptied by every file load and undo: after a restart or a load it is simply empty.
        self.modifiers = {}
        # identity (lock.stable_id) -> (session id, kind, name) of each data-block a session made;
        # see lock.py. Carried by name over the kernel's own reloads, emptied by a file load.
        self.created = {}
        # Both records at transaction.begin, by name, for a rollback (lock.record_by_name; None: not
        # known, as in a replacement kernel, whose rollback records again what carries a tag).
        self.transaction_record = None
        self.file = None  # the open file's name ("" for an unsaved one; None: not read yet)
        self.loads = 0  # files loaded since the kernel started (a person's, or file.open)
        self.events = collections.deque(maxlen=EVENTS_KEPT)  # (load number, event)
        self.reported = {}  # session id -> the load number its last answer reported

    def record_load(self, event):
        """Counts a file load and keeps its event for the sessions that have not heard of it."""
        self.loads += 1
        self.events.append((self.loads, event))

    def log_console(self, source, message):
        self.console_seq += 1
        if len(self.console) == CONSOLE_CAPACITY:
            self.console.popleft()
            self.console_dropped += 1
        self.console.append({"seq": self.console_seq, "source": source, "message": message})


def shared_property(name):
    return property(lambda self: getattr(self.shared, name),
                    lambda self, value: setattr(self.shared, name, value))


class Session:
    """One connection's settings over the kernel's shared state."""

    features = shared_property("features")
    console = shared_property("console")
    console_seq = shared_property("console_seq")
    console_dropped = shared_property("console_dropped")
    transactions_started = shared_property("transactions_started")
    identity = shared_property("identity")
    busy = shared_property("busy")
    modifiers = shared_property("modifiers")

    def __init__(self, shared):
        self.shared = shared
        self.session_id = "unconfigured"
        self.capabilities = set(DEFAULT_CAPABILITIES) & shared.features
        self.sanity = dict(DEFAULT_SANITY)
        self.sandbox = None
        self.project_roots = []
        self.time_per_tool_ms = 15000
        self.seen = {}  # name -> pointer of objects the session resolved
        # The load number this session's answers last reported: a new connection has missed
        # nothing yet (a reconnect of a known session id takes that session's number; see configure).
        self.loads_reported = shared.loads

    @property
    def transaction(self):
        """This session's open transaction as (id, snapshot path or undo position), or None (also
        when another session's transaction is open)."""
        tx = self.shared.transaction
        return (tx[0], tx[1]) if tx is not None and tx[2] == self.session_id else None

    @transaction.setter
    def transaction(self, value):
        self.shared.transaction = None if value is None else (value[0], value[1], self.session_id)
        self.shared.orphaned_at = None

    def foreign_transaction(self):
        """(id, owner session id, seconds since the owner disconnected or None) of a transaction
        another session holds, or None."""
        tx = self.shared.transaction
        if tx is None or tx[2] == self.session_id:
            return None
        since = self.shared.orphaned_at
        return tx[0], tx[2], None if since is None else time.monotonic() - since

    def configure(self, session):
        sandbox = session.get("sandbox")
        if sandbox is not None and not valid_sandbox(sandbox):
            raise ValueError("sandbox must be an absolute path to an existing folder other than the "
                             "filesystem root")
        roots = session.get("project_roots")
        roots = [] if roots is None else roots
        if not isinstance(roots, list) or not all(valid_sandbox(root) for root in roots):
            raise ValueError("project_roots must be absolute paths to existing folders other than the "
                             "filesystem root")
        if sandbox is not None and any(inside(root, sandbox) or inside(sandbox, root) for root in roots):
            raise ValueError("the sandbox may not lie inside a project root, nor a project root inside the "
                             "sandbox: nothing is ever written into a project root")
        session_id = str(session.get("session_id", "unconfigured"))
        if session_id != self.session_id:
            self.seen.clear()
            if session_id in self.shared.reported:  # the bridge reconnects: what did it miss?
                self.loads_reported = self.shared.reported[session_id]
        self.session_id = session_id
        # Known from here on, so that a reconnect hears of the loads it missed (answers keep
        # this up to date only when there was a load to report: Kernel.tell_events).
        self.shared.reported.setdefault(session_id, self.loads_reported)
        self.capabilities = set(session.get("capabilities", [])) & self.features
        self.sanity = dict(DEFAULT_SANITY, **session.get("sanity", {}))
        self.sandbox = sandbox
        self.project_roots = list(roots)
        self.time_per_tool_ms = session.get("time_per_tool_ms", 15000)
        tx = self.shared.transaction
        if tx is not None and tx[2] == session_id:
            self.shared.orphaned_at = None  # the owner is back
        return {"session_id": self.session_id, "capabilities": sorted(self.capabilities)}

    def log_console(self, source, message):
        self.shared.log_console(source, message)

    def missed_events(self):
        """The file-load events since this session's last answer (the oldest may have been
        dropped past EVENTS_KEPT)."""
        return [event for number, event in self.shared.events if number > self.loads_reported]

    def caught_up(self):
        """This session's answer reported every load so far."""
        self.loads_reported = self.shared.loads
        self.shared.reported[self.session_id] = self.shared.loads


def valid_sandbox(path):
    """An absolute path to an existing folder other than the filesystem root (the sandbox and
    each project root)."""
    if not isinstance(path, str) or not os.path.isabs(path) or not os.path.isdir(path):
        return False
    return os.path.realpath(path) != os.path.realpath(os.sep)


def inside(outer, inner):
    """Whether `inner` is `outer` or lies inside it, compared by path components after
    resolving links (a string prefix would put `/x/sandbox-evil` inside `/x/sandbox`)."""
    outer, inner = os.path.realpath(outer), os.path.realpath(inner)
    try:
        return os.path.commonpath([outer, inner]) == outer
    except ValueError:  # different drives
        return False

