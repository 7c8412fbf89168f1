"""Admission to a TCP kernel and its sessions: a pre-auth deadline, connections closed after a
failed login, a growing delay after repeated failures, bounded pending connections (the oldest
evicted) and sessions, and one session per connection (own capabilities and sandbox, one
transaction holder per kernel). The frames run on a thread standing in for Blender's main
thread, as the add-on's timer does. Runs like test_kernel.py (loopback only)."""

import json
import os
import queue
import select
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vibe_kernel import channel, gatekeeper, tcp, wire  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402


class GateTest(unittest.TestCase):
    def setUp(self):
        self.kernel = Kernel()
        self.server = tcp.listen("127.0.0.1", 0)
        self.port = self.server.getsockname()[1]
        self.gate = gatekeeper.Gatekeeper()
        self.inbox = queue.Queue()
        self.saved = channel.PRE_AUTH_S
        channel.PRE_AUTH_S = 0.5

        self.sockets = []
        self.accepting = threading.Thread(target=tcp.accept_forever,
                                          args=(self.kernel, self.server, self.inbox, "secret", self.gate),
                                          daemon=True)
        self.accepting.start()

    def pump_until(self, ready, limit=10.0):
        """Runs queued frames on this (the main) thread, as the add-on's timer does, until
        `ready()`: bpy is only ever touched from the main thread."""
        deadline = time.monotonic() + limit
        while not ready():
            self.assertLess(time.monotonic(), deadline, "no answer in time")
            channel.drain(self.kernel, self.inbox, deadline=time.monotonic() + channel.TICK_BUDGET_S)
            time.sleep(0.002)

    def tearDown(self):
        channel.PRE_AUTH_S = self.saved
        tcp.stop_listening(self.server)
        for sock in self.sockets:
            sock.close()
        # No thread of the test may outlive it: the bpy 4.5 module hangs at exit while any
        # thread is alive.
        self.accepting.join(5)
        deadline = time.monotonic() + 5
        while any(t.name == "vibe-tcp" for t in threading.enumerate()) and time.monotonic() < deadline:
            time.sleep(0.01)
        tx = self.kernel.shared.transaction
        if tx is not None:
            os.remove(tx[1])

    def session(self, session_id, capabilities=("scene.read", "scene.write", "transactions"), sandbox=None):
        """A logged-in connection configured as `session_id`; returns a function that sends a
        frame and returns its answer's envelope."""
        sock, reader = self.connect()
        sock.sendall(b'{"type":"auth","token":"secret"}\n')
        self.assertEqual(json.loads(reader.readline())["type"], "auth_ok")
        counter = [0]

        def send(frame):
            counter[0] += 1
            frame = dict(frame, id=counter[0])
            sock.sendall((json.dumps(frame) + "\n").encode())
            self.pump_until(lambda: select.select([sock], [], [], 0)[0])
            answer = json.loads(reader.readline())
            self.assertEqual(answer["id"], counter[0])
            return answer["envelope"]

        settings = {"session_id": session_id, "capabilities": list(capabilities)}
        if sandbox is not None:
            settings["sandbox"] = sandbox
        self.assertTrue(send({"type": "configure", "session": settings})["ok"])
        def close():
            reader.close()
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()

        send.close = close
        return send

    def call(self, send, tool, **params):
        return send({"type": "call", "tool": tool, "params": params})

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.sockets.append(sock)
        reader = sock.makefile("rb")
        hello = json.loads(reader.readline())
        self.assertEqual(hello["type"], "hello")
        return sock, reader

    def test_closing_the_connections_ends_each_and_refuses_later_ones(self):
        """The add-on's unregister: once its timer stops, nothing runs frames any more, so no
        connection may stay open with calls that would never be answered."""
        send = self.session("a")
        self.assertTrue(send({"type": "configure", "session": {"session_id": "a"}})["ok"])
        waiting, _ = self.connect()  # not logged in yet
        tcp.stop_listening(self.server)
        self.accepting.join(5)
        tcp.close_connections(self.kernel)
        for sock in self.sockets:
            sock.settimeout(5)
            self.assertEqual(sock.recv(1024), b"", "a connection stayed open")
        self.pump_until(lambda: not self.kernel.channels)  # each reader ended, and its end ran
        # A connection accepted after (by an accept thread that was past its accept) is closed.
        listener = tcp.listen("127.0.0.1", 0)
        client = socket.create_connection(listener.getsockname()[:2], timeout=5)
        self.sockets.append(client)
        conn, _ = listener.accept()
        listener.close()
        self.assertIsNone(tcp.open_channel(self.kernel, self.inbox, conn, "secret"))
        self.assertEqual(client.recv(1024), b"")
        self.assertEqual(self.kernel.channels, set())

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

    def test_sessions_past_the_bound_are_refused_clearly(self):
        held = [self.session("s-%d" % i) for i in range(gatekeeper.MAX_CONNECTIONS)]
        sock, reader = self.connect()
        sock.sendall(b'{"type":"auth","token":"secret"}\n')
        answer = json.loads(reader.readline())
        self.assertIn("too many sessions", answer["error"]["message"])
        self.assertEqual(reader.readline(), b"", "closed")
        sock.close()
        held[0].close()
        self.pump_until(lambda: self.gate.sessions < gatekeeper.MAX_CONNECTIONS)
        again = self.session("late")
        self.assertTrue(self.call(again, "kernel.status")["ok"], "a freed slot is usable")
        for send in held[1:] + [again]:
            send.close()

    def test_idle_and_dripping_clients_never_keep_a_real_one_out(self):
        idle = [self.connect() for _ in range(gatekeeper.MAX_PENDING * 3)]
        for sock, _ in idle[: gatekeeper.MAX_PENDING]:
            sock.sendall(b'{"type":"au')  # dripping: a frame that never ends
        started = time.monotonic()
        send = self.session("real")
        self.assertTrue(self.call(send, "kernel.status")["ok"])
        self.assertLess(time.monotonic() - started, 2.0, "the real client got in without waiting out the idle ones")
        evicted = 0
        for sock, reader in idle:
            sock.settimeout(5)
            try:
                line = reader.readline()
            except OSError:
                line = b""
            if line and "newer connections" in json.loads(line)["error"]["message"]:
                evicted += 1
            sock.close()
        self.assertGreaterEqual(evicted, len(idle) - gatekeeper.MAX_PENDING,
                                "every idle client past the bound was told why")
        self.assertEqual(self.gate.failures, 0, "eviction is not a failed login")
        send.close()

    def test_each_connection_has_its_own_capabilities_and_sandbox(self):
        folder = tempfile.mkdtemp()
        reader = self.session("reader", capabilities=("scene.read",))
        writer = self.session("writer", sandbox=folder)
        refused = self.call(reader, "object.create", type="EMPTY", name="ReaderMade")
        self.assertFalse(refused["ok"])
        self.assertEqual(refused["error"]["code"], "capability_missing")
        made = self.call(writer, "object.create", type="EMPTY", name="WriterMade")
        self.assertTrue(made["ok"], made)
        self.assertEqual(self.kernel.channels and sorted(c.session.session_id for c in self.kernel.channels),
                         ["reader", "writer"])
        sandboxes = {c.session.session_id: c.session.sandbox for c in self.kernel.channels}
        self.assertEqual(sandboxes, {"reader": None, "writer": folder}, "configure of one never changed the other")
        root = reader({"type": "configure", "session": {"session_id": "reader", "sandbox": "/"}})
        self.assertFalse(root["ok"])
        self.assertEqual(root["error"]["code"], "invalid_arguments")
        self.assertTrue(self.call(writer, "object.delete", name="WriterMade")["ok"])
        reader.close()
        writer.close()

    def test_one_transaction_holder_per_kernel(self):
        a = self.session("a")
        b = self.session("b")
        self.assertTrue(self.call(a, "transaction.begin")["ok"])
        for tool, params in (("transaction.begin", {}), ("transaction.rollback", {}), ("transaction.commit", {}),
                             ("object.create", {"type": "EMPTY", "name": "FromB"})):
            refused = self.call(b, tool, **params)
            self.assertFalse(refused["ok"], tool)
            self.assertEqual(refused["error"]["details"]["rule"], "transaction_of_another_session", tool)
            self.assertEqual(refused["error"]["details"]["holder"], "a")
        self.assertTrue(self.call(b, "kernel.status")["ok"], "reads stay open")
        self.assertFalse(self.call(b, "kernel.status")["result"]["transaction_open"])
        self.assertTrue(self.call(a, "kernel.status")["result"]["transaction_open"])
        self.assertTrue(self.call(a, "object.create", type="EMPTY", name="FromA")["ok"])
        self.assertTrue(self.call(a, "transaction.rollback")["ok"])
        self.assertTrue(self.call(b, "object.create", type="EMPTY", name="FromB")["ok"], "free again")
        self.assertTrue(self.call(b, "object.delete", name="FromB")["ok"])
        a.close()
        b.close()

    def test_a_dropped_holder_keeps_its_transaction_until_the_grace_ends(self):
        saved = wire.ORPHAN_GRACE_S
        try:
            a = self.session("a")
            self.assertTrue(self.call(a, "transaction.begin")["ok"])
            tx_id = self.kernel.shared.transaction[0]
            a.close()
            back = self.session("a")  # the bridge reconnects with the same session id
            self.assertTrue(self.call(back, "kernel.status")["result"]["transaction_open"], "resumed")
            back.close()
            self.pump_until(lambda: self.kernel.shared.orphaned_at is not None)
            b = self.session("b")
            refused = self.call(b, "object.create", type="EMPTY", name="Early")
            self.assertEqual(refused["error"]["details"]["rule"], "transaction_of_another_session")
            wire.ORPHAN_GRACE_S = 0.0
            made = self.call(b, "object.create", type="EMPTY", name="AfterGrace")
            self.assertTrue(made["ok"], made)
            self.assertIsNone(self.kernel.shared.transaction)
            said = [e["message"] for e in self.kernel.shared.console]
            self.assertTrue(any(tx_id in m and "session a" in m for m in said), said)
            self.assertTrue(self.call(b, "object.delete", name="AfterGrace")["ok"])
            b.close()
        finally:
            wire.ORPHAN_GRACE_S = saved


if __name__ == "__main__":
    unittest.main()
