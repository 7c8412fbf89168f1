"""The kernel's session state: settings from `configure`, the console ring, the transaction."""

import collections

CONSOLE_CAPACITY = 200
DEFAULT_CAPABILITIES = ("scene.read", "scene.write", "transactions")
DEFAULT_SANITY = {"max_subdivision_levels": 3, "max_array_count": 64,
                  "max_bevel_segments": 16, "max_polygons": 2000000}


class KernelState:
    def __init__(self, features):
        self.features = set(features)
        self.session_id = "unconfigured"
        self.capabilities = set(DEFAULT_CAPABILITIES) & self.features
        self.sanity = dict(DEFAULT_SANITY)
        self.sandbox = None
        self.time_per_tool_ms = 15000
        self.console = collections.deque()
        self.console_seq = 0
        self.console_dropped = 0
        self.transaction = None  # (id, snapshot path)
        self.transactions_started = 0
        self.seen = {}  # name -> pointer of objects the session resolved
        self.identity = {}  # name -> object reference, validated on every use
        self.busy = 0  # file loads / saves in progress

    def configure(self, session):
        if session.get("session_id") != self.session_id:
            self.seen.clear()
        self.session_id = session.get("session_id", "unconfigured")
        self.capabilities = set(session.get("capabilities", [])) & self.features
        self.sanity = dict(DEFAULT_SANITY, **session.get("sanity", {}))
        self.sandbox = session.get("sandbox")
        self.time_per_tool_ms = session.get("time_per_tool_ms", 15000)
        return {"session_id": self.session_id, "capabilities": sorted(self.capabilities)}

    def log_console(self, source, message):
        self.console_seq += 1
        if len(self.console) == CONSOLE_CAPACITY:
            self.console.popleft()
            self.console_dropped += 1
        self.console.append({"seq": self.console_seq, "source": source, "message": message})
