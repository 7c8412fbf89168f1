"""Admission to a TCP kernel: a pre-auth deadline, connections closed after a failed login, a
growing delay after repeated failures, a bound on connections, and an accept loop that outlives
errors. Runs like test_kernel.py (loopback only)."""

import json
import os
import queue
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vibe_kernel import wire  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402


class GateTest(unittest.TestCase):
    def setUp(self):
        self.kernel = Kernel()
        self.server = wire.listen("127.0.0.1", 0)
        self.port = self.server.getsockname()[1]
        self.gate = wire.Gatekeeper()
        self.inbox = queue.Queue()
        self.saved = wire.PRE_AUTH_S
        wire.PRE_AUTH_S = 0.5

        def accept():
            while True:
                conn = wire.accept_one(self.server, self.gate)
                if conn is None:
                    return
                channel = wire.open_channel(self.kernel, self.inbox, conn, "secret", self.gate)
                threading.Thread(target=channel.run, daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()

    def tearDown(self):
        wire.PRE_AUTH_S = self.saved
        self.server.close()

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        reader = sock.makefile("rb")
        hello = json.loads(reader.readline())
        self.assertEqual(hello["type"], "hello")
        return sock, reader

    def test_a_silent_client_is_closed_after_the_pre_auth_deadline(self):
        sock, reader = self.connect()
        started = time.monotonic()
        answer = json.loads(reader.readline())
        self.assertIn("no token", answer["error"]["message"])
        self.assertEqual(reader.readline(), b"", "the connection is closed")
        self.assertLess(time.monotonic() - started, 3)
        sock.close()

    def test_a_failed_login_is_closed_and_failures_slow_down(self):
        waits = []
        for _ in range(4):
            sock, reader = self.connect()
            started = time.monotonic()
            sock.sendall(b'{"type":"auth","token":"guess"}\n')
            answer = json.loads(reader.readline())
            waits.append(time.monotonic() - started)
            self.assertIn("authentication failed", answer["error"]["message"])
            self.assertEqual(reader.readline(), b"", "closed after a failed login")
            sock.close()
        self.assertGreater(waits[-1], waits[0])
        self.assertGreater(waits[-1], 0.3)  # 0.05, 0.1, 0.2, 0.4 s
        sock, reader = self.connect()
        sock.sendall(b'{"type":"auth","token":"secret"}\n')
        self.assertEqual(json.loads(reader.readline())["type"], "auth_ok")
        self.assertEqual(self.gate.failures, 0, "a success resets the delay")
        sock.close()

    def test_connections_past_the_bound_are_refused_clearly(self):
        held = [self.connect() for _ in range(wire.MAX_CONNECTIONS)]
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        answer = json.loads(sock.makefile("rb").readline())
        self.assertIn("too many connections", answer["error"]["message"])
        sock.close()
        for s, _ in held:
            s.close()


if __name__ == "__main__":
    unittest.main()
