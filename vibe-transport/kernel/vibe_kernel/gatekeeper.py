"""Admission to a TCP listener: how many connections may wait to log in, how many sessions
may be logged in at once, and how long a failed login waits for its answer."""

import collections
import threading

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
