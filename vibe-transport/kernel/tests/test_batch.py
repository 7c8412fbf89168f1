"""`batch` frames: several calls run in order in one hop of the main thread, each answered by
its own `result` (protocol §5) as soon as it is done; a malformed batch is a protocol error."""

import io
import json
import os
import queue
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel import wire  # noqa: E402
from vibe_kernel.channel import Channel, drain  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402


def line(frame):
    return (json.dumps(frame) + "\n").encode()


class BatchTest(unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()

    def run_frames(self, *frames):
        """Feeds frames through a channel as the reader thread would, then drains the queue on
        this (main) thread; returns the writes and the frames written."""
        writes = []
        inbox = queue.Queue()
        channel = Channel(self.k, inbox, io.BytesIO(b"".join(line(f) for f in frames)), writes.append)
        channel.run()
        drain(self.k, inbox, deadline=time.monotonic() + 30)
        frames_out = [json.loads(text) for chunk in writes for text in chunk.decode().splitlines()]
        return writes, frames_out[1:]  # after the hello

    def test_calls_run_in_order_and_are_answered_each(self):
        hello = self.k.hello(False)
        self.assertEqual(hello["max_batch_calls"], wire.MAX_BATCH_CALLS)
        calls = [{"id": 1, "tool": "object.move", "params": {"name": "Cube", "location": [1, 2, 3]}, "deadline_ms": 5000},
                 {"id": 2, "tool": "object.info", "params": {"name": "Cube"}, "deadline_ms": 5000},
                 {"id": 3, "tool": "object.info", "params": {"name": "Nope"}, "deadline_ms": 5000},
                 {"id": 4, "tool": "object.move", "params": {"name": "Cube", "delta": [1, 0, 0]}, "deadline_ms": 5000}]
        writes, answers = self.run_frames({"type": "batch", "calls": calls})
        # The hello, then the four brief answers together (well within ANSWER_GATHER_S).
        self.assertEqual(len(writes), 2)
        self.assertEqual([a["id"] for a in answers], [1, 2, 3, 4])
        self.assertEqual(answers[1]["envelope"]["result"]["location"], [1.0, 2.0, 3.0])  # ran after call 1
        self.assertEqual(answers[2]["envelope"]["error"]["code"], "not_found")  # an error does not stop the rest
        self.assertEqual(answers[3]["envelope"]["result"]["location"], [2.0, 2.0, 3.0])

    def test_answers_done_are_written_before_a_call_that_may_run_long(self):
        calls = [{"id": 1, "tool": "object.info", "params": {"name": "Cube"}, "deadline_ms": 5000},
                 {"id": 2, "tool": "object.info", "params": {"name": "Light"}, "deadline_ms": 5000},
                 {"id": 3, "tool": "file.save", "params": {"path": "a.blend"}, "deadline_ms": 5000},
                 {"id": 4, "tool": "object.info", "params": {"name": "Camera"}, "deadline_ms": 5000}]
        writes, answers = self.run_frames({"type": "batch", "calls": calls})
        self.assertEqual([a["id"] for a in answers], [1, 2, 3, 4])
        # file.save is of the file time class: what was done before it leaves first.
        ids = [[json.loads(text)["id"] for text in chunk.decode().splitlines()] for chunk in writes[1:]]
        self.assertEqual(ids, [[1, 2], [3, 4]])

    def test_a_cancelled_call_of_a_batch_is_answered_at_once_and_not_run(self):
        calls = [{"id": i, "tool": "object.move", "params": {"name": "Cube", "delta": [1, 0, 0]}, "deadline_ms": 5000}
                 for i in (1, 2, 3)]
        _, answers = self.run_frames({"type": "batch", "calls": calls}, {"type": "cancel", "id": 2})
        # The reader answers the queued call as it reads the cancel, before the batch runs.
        self.assertEqual([a["id"] for a in answers], [2, 1, 3])
        error = answers[0]["envelope"]["error"]
        self.assertTrue(error["details"]["cancelled"])
        self.assertIn("object.move was cancelled before it started", error["message"])
        by_id = {a["id"]: a["envelope"] for a in answers}
        self.assertEqual(by_id[3]["result"]["location"], [2.0, 0.0, 0.0])  # call 2 never ran

    def test_a_cancel_of_a_finished_or_unknown_call_leaves_no_trace(self):
        """Ids are each connection's own: a cancel after the answer, or for an id never sent,
        must not reach a later call that reuses the id (a reconnected bridge numbers from 1)."""
        call = {"type": "call", "id": 5, "tool": "object.info", "params": {"name": "Cube"}, "deadline_ms": 5000}
        _, first = self.run_frames(call)
        self.assertTrue(first[0]["envelope"]["ok"])
        _, later = self.run_frames({"type": "cancel", "id": 5}, {"type": "cancel", "id": 99}, call)
        self.assertEqual(len(later), 1)
        self.assertTrue(later[0]["envelope"]["ok"], later)

    def test_an_id_in_flight_twice_is_a_protocol_error(self):
        """Ids are unique among a connection's calls in flight (protocol §5): a cancel must
        reach one call, and an answer must be one call's."""
        def move(call_id):
            return {"id": call_id, "tool": "object.move", "params": {"name": "Cube", "delta": [1, 0, 0]},
                    "deadline_ms": 5000}
        cube = bpy.data.objects["Cube"]
        # Twice in one batch: refused whole, nothing runs, the connection ends.
        _, answers = self.run_frames({"type": "batch", "calls": [move(1), move(2), move(1)]},
                                     {"type": "call", **move(3)})
        self.assertEqual([a["type"] for a in answers], ["error"])
        self.assertIn("call id 1 is already in flight", answers[0]["error"]["message"])
        self.assertEqual(tuple(cube.location), (0.0, 0.0, 0.0))
        # Queued by an earlier frame: the later frame is refused, the earlier call runs once.
        for later in ({"type": "call", **move(4)}, {"type": "batch", "calls": [move(5), move(4)]}):
            with self.subTest(later=later.get("type")):
                cube.location = (0.0, 0.0, 0.0)
                _, answers = self.run_frames({"type": "call", **move(4)}, later, {"type": "call", **move(6)})
                self.assertEqual([a["type"] for a in answers], ["error", "result"])
                self.assertIn("call id 4 is already in flight", answers[0]["error"]["message"])
                self.assertEqual(answers[1]["id"], 4)
                self.assertEqual(tuple(cube.location), (1.0, 0.0, 0.0))
        # An id answered is free again: a queued call answered as cancelled, then a new call of
        # its id, cancelled too, then a third. Each cancel reaches its own call (not the id):
        # only the third runs.
        cube.location = (0.0, 0.0, 0.0)
        cancel = {"type": "cancel", "id": 7}
        _, answers = self.run_frames({"type": "call", **move(7)}, cancel, {"type": "call", **move(7)}, cancel,
                                     {"type": "call", **move(7)})
        self.assertEqual([a["id"] for a in answers], [7, 7, 7])
        self.assertTrue(answers[0]["envelope"]["error"]["details"]["cancelled"])
        self.assertTrue(answers[1]["envelope"]["error"]["details"]["cancelled"])
        self.assertTrue(answers[2]["envelope"]["ok"], answers)
        self.assertEqual(tuple(cube.location), (1.0, 0.0, 0.0))

    def test_malformed_batches_are_protocol_errors(self):
        too_many = [{"id": i, "tool": "kernel.status", "params": {}, "deadline_ms": 5000}
                    for i in range(wire.MAX_BATCH_CALLS + 1)]
        for calls in ([], "x", [1], too_many):
            with self.subTest(calls=str(calls)[:40]):
                _, answers = self.run_frames({"type": "batch", "calls": calls})
                self.assertEqual([a["type"] for a in answers], ["error"])
        _, answers = self.run_frames({"type": "batch", "calls": too_many[:-1]})
        self.assertEqual(len(answers), wire.MAX_BATCH_CALLS)  # the bound itself is taken


if __name__ == "__main__":
    unittest.main()
