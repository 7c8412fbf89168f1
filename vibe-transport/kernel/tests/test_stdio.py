"""The stdio loop (stdio.py): frames read on the main thread itself, in order; cancels of
queued calls answered before those calls would run; running agent code reached by the watcher;
malformed and oversized frames end the connection with a protocol error."""

import gc
import json
import os
import sys
import threading
import time
import unittest
import weakref

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel import headless, stdio  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "code_exec"]


def line(frame):
    return (json.dumps(frame) + "\n").encode()


def configure(call_id=100):
    return {"type": "configure", "id": call_id, "session": {"session_id": "s", "capabilities": CAPABILITIES}}


def info(call_id, name="Cube"):
    return {"type": "call", "id": call_id, "tool": "object.info", "params": {"name": name}, "deadline_ms": 5000}


class StdioLoopTest(unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.k.state.features.add("code_exec")

    def serve_fed(self, feed, write):
        """Serves a pipe on this thread while `feed(write_end)` writes it on another (and closes
        it); answers go to `write(bytes)`."""
        read_end, write_end = os.pipe()
        feeder = threading.Thread(target=feed, args=(write_end,))
        feeder.start()
        try:
            stdio.serve_stdio(self.k, read_end, write)
        finally:
            feeder.join()
            os.close(read_end)

    def serve(self, chunks, pause=0.0):
        """Serves a pipe fed with `chunks` (bytes each, `pause` seconds apart, then closed) on
        this thread; the frames written back, after the hello."""
        writes = []

        def feed(write_end):
            for chunk in chunks:
                os.write(write_end, chunk)
                time.sleep(pause)
            os.close(write_end)

        self.serve_fed(feed, writes.append)
        frames = [json.loads(text) for chunk in writes for text in chunk.decode().splitlines()]
        self.assertEqual(frames[0]["type"], "hello")
        return frames[1:]

    def test_frames_run_in_order_and_the_end_of_input_ends_the_loop(self):
        move = {"type": "call", "id": 2, "tool": "object.move",
                "params": {"name": "Cube", "location": [1, 2, 3]}, "deadline_ms": 5000}
        # One frame split over two writes, and two frames in one: lines, not writes, count.
        data = line(configure()) + line(move) + line(info(3))
        answers = self.serve([data[:7], data[7:]], pause=0.05)
        self.assertEqual([a["id"] for a in answers], [100, 2, 3])
        self.assertEqual(answers[2]["envelope"]["result"]["location"], [1.0, 2.0, 3.0])
        self.assertEqual(self.k.channels, set())

    def test_a_cancel_read_with_its_queued_call_answers_it_and_it_never_runs(self):
        move = {"type": "call", "id": 2, "tool": "object.move",
                "params": {"name": "Cube", "delta": [5, 0, 0]}, "deadline_ms": 5000}
        answers = self.serve([line(configure()) + line(move) + line({"type": "cancel", "id": 2}) + line(info(3))])
        self.assertEqual([a["id"] for a in answers], [2, 100, 3])  # the cancel is answered as it is read
        self.assertTrue(answers[0]["envelope"]["error"]["details"]["cancelled"])
        self.assertEqual(answers[2]["envelope"]["result"]["location"], [0.0, 0.0, 0.0])  # not moved

    def test_running_agent_code_is_reached_by_a_cancel(self):
        spin = {"type": "call", "id": 2, "tool": "python.exec", "params": {"code": "while True:\n    pass"},
                "deadline_ms": 60000}
        started = time.monotonic()
        answers = self.serve([line(configure()) + line(spin), line({"type": "cancel", "id": 2}) + line(info(3))],
                             pause=0.5)
        self.assertLess(time.monotonic() - started, 30, "the cancel did not reach the running code")
        self.assertEqual([a["id"] for a in answers], [100, 2, 3])
        error = answers[1]["envelope"]["error"]
        self.assertEqual(error["code"], "timeout", error)
        self.assertTrue(answers[2]["envelope"]["ok"])

    def test_a_call_with_the_id_of_the_running_one_is_a_protocol_error(self):
        """Read by the watcher while the code runs: a cancel of that id could not say which
        call it means, so the repeat is refused and the running call still answers."""
        # Sleeps rather than counts: a traced loop's speed differs tenfold between Pythons.
        sleep = {"type": "call", "id": 2, "tool": "python.exec", "params": {"code": "import time\ntime.sleep(1.5)"},
                 "deadline_ms": 60000}
        answers = self.serve([line(configure()) + line(sleep), line(info(2)) + line(info(3))], pause=0.3)
        self.assertEqual([a["type"] for a in answers], ["result", "error", "result"], answers)
        self.assertIn("call id 2 is already in flight", answers[1]["error"]["message"])
        self.assertEqual(answers[2]["id"], 2)
        self.assertTrue(answers[2]["envelope"]["ok"], answers[2])

    def test_a_malformed_frame_is_a_protocol_error_and_ends_the_connection(self):
        answers = self.serve([line(info(1)) + b"{not json\n" + line(info(2))])
        # Said as it is read; the call read before it still runs, nothing after it does.
        errors = [a for a in answers if a["type"] == "error"]
        self.assertEqual(len(errors), 1)
        self.assertIn("malformed frame", errors[0]["error"]["message"])
        self.assertEqual([a["id"] for a in answers if a["type"] == "result"], [1])

    def test_a_frame_past_the_limit_is_refused_without_waiting_for_its_end(self):
        limit = stdio.MAX_FRAME_BYTES
        stdio.MAX_FRAME_BYTES = 1000
        try:
            answers = self.serve([b'{"type": "call", "params": "' + b"x" * 2000])
        finally:
            stdio.MAX_FRAME_BYTES = limit
        self.assertEqual(answers[0]["type"], "error")
        self.assertIn("exceeds 1000 bytes", answers[0]["error"]["message"])

    def test_unknown_frames_and_bye_end_the_connection(self):
        answers = self.serve([line(info(1)) + line({"type": "bye"}) + line(info(2))])
        self.assertEqual([a["id"] for a in answers], [1])
        answers = self.serve([line({"type": "launch"}) + line(info(2))])
        self.assertEqual(answers[0]["type"], "error")
        self.assertEqual(len(answers), 1)

    def grow(self, count):
        """`count` more objects sharing one mesh, so that a snapshot takes a while."""
        mesh = bpy.data.meshes.new("m")
        for i in range(count):
            bpy.context.scene.collection.objects.link(bpy.data.objects.new("O%d" % i, mesh))

    def test_a_frame_the_loop_cannot_take_is_refused_and_the_calls_before_it_are_answered(self):
        for bad in (b'{"type":"cancel","id":[1]}\n', b'{"type":"call","id":{"a":1},"tool":"object.info"}\n',
                    b'{"type":"x","p":' + b"[" * 5000 + b"]" * 5000 + b"}\n",
                    line({"type": "batch", "calls": [{"id": 7, "tool": ["object.info"], "params": {}}]}),
                    # Ids that parse to infinity: no answer could carry them back.
                    b'{"type":"call","id":1e999,"tool":"object.info","params":{"name":"Cube"}}\n',
                    b'{"type":"batch","calls":[{"id":8,"tool":"object.info"},{"id":-1e999,"tool":"object.info"}]}\n',
                    b'{"type":"configure","id":1e999,"session":{}}\n', b'{"type":"cancel","id":1e999}\n'):
            answers = self.serve([line(info(1)) + bad])
            self.assertEqual([a["id"] for a in answers if a["type"] == "result"][:1], [1], bad[:40])
            if b'"tool": [' in bad:  # a tool that is not a name is answered, not fatal
                self.assertEqual(answers[-1]["envelope"]["error"]["code"], "contract_violation")
            else:
                self.assertEqual([a["type"] for a in answers].count("error"), 1, bad[:40])

    def test_a_last_frame_without_its_newline_still_runs(self):
        answers = self.serve([line(info(1)) + line(info(2))[:-1]])
        self.assertEqual([a["id"] for a in answers], [1, 2])

    def test_a_cancel_that_comes_while_a_brief_call_runs_stops_the_call_queued_behind_it(self):
        self.grow(6000)
        snapshot = {"type": "call", "id": 2, "tool": "scene.snapshot", "params": {}, "deadline_ms": 60000}
        move = {"type": "call", "id": 3, "tool": "object.move", "params": {"name": "Cube", "delta": [7, 0, 0]},
                "deadline_ms": 60000}
        answers = self.serve([line(configure()), line(snapshot) + line(move), line({"type": "cancel", "id": 3})],
                             pause=0.03)
        three = [a for a in answers if a.get("id") == 3]
        self.assertEqual(len(three), 1)
        self.assertTrue(three[0]["envelope"]["error"]["details"]["cancelled"], three)
        self.assertEqual(bpy.data.objects["Cube"].location.x, 0.0)

    def test_a_batch_answer_is_not_held_for_the_whole_of_a_slow_brief_call(self):
        self.grow(6000)
        batch = {"type": "batch", "calls": [
            {"id": 1, "tool": "object.info", "params": {"name": "Cube"}, "deadline_ms": 60000},
            {"id": 2, "tool": "scene.snapshot", "params": {}, "deadline_ms": 60000}]}
        writes = []

        def feed(write_end):
            os.write(write_end, line(configure()) + line(batch))
            time.sleep(2)  # the input stays open while the batch runs
            os.close(write_end)

        self.serve_fed(feed, lambda data: writes.append((time.monotonic(), data)))
        by_id = {json.loads(text).get("id"): at for at, chunk in writes for text in chunk.decode().splitlines()}
        self.assertLess(by_id[1], by_id[2])  # written on its own, while the snapshot ran

    def test_answers_that_cannot_be_written_never_make_a_call_run_twice(self):
        broken = []

        def write(data):
            if broken:
                raise BrokenPipeError(32, "Broken pipe")

        sleep = {"type": "call", "id": 2, "tool": "python.exec", "params": {"code": "import time\ntime.sleep(0.4)"},
                 "deadline_ms": 9000}
        move = {"type": "call", "id": 3, "tool": "object.move", "params": {"name": "Cube", "delta": [1, 0, 0]},
                "deadline_ms": 9000}

        def feed(write_end):
            os.write(write_end, line(configure()) + line(sleep))
            time.sleep(0.1)
            broken.append(True)
            os.write(write_end, line(move) + line(info(4)) + line({"type": "cancel", "id": 4}))
            time.sleep(0.6)
            os.write(write_end, line(info(5)))
            os.close(write_end)

        self.serve_fed(feed, write)
        self.assertEqual(bpy.data.objects["Cube"].location.x, 1.0)

    def test_a_cancel_that_comes_while_code_is_checked_stops_it_as_it_starts(self):
        from vibe_kernel import codeexec
        self.k.state.configure({"session_id": "s", "capabilities": CAPABILITIES})
        checked = codeexec.check

        def check_then_cancel(tree):
            self.k.cancel(2)  # the cancel arrives while the gate reads the code
            return checked(tree)

        codeexec.check = check_then_cancel
        try:
            answer = self.k.handle({"type": "call", "id": 2, "tool": "python.exec", "deadline_ms": 30000,
                                    "params": {"code": "import bpy\nbpy.data.objects['Cube'].location.x = 5"}})
        finally:
            codeexec.check = checked
        error = answer["envelope"]["error"]
        self.assertEqual(error["code"], "timeout", error)
        self.assertTrue(error["details"]["cancelled"], error)
        self.assertEqual(bpy.data.objects["Cube"].location.x, 0.0)
        # The next call is not cancelled by it.
        answer = self.k.handle({"type": "call", "id": 3, "tool": "python.exec", "deadline_ms": 30000,
                                "params": {"code": "import bpy\nbpy.data.objects['Cube'].location.x = 5"}})
        self.assertTrue(answer["envelope"]["ok"], answer)

    def test_the_idle_spin_is_bounded_and_can_be_turned_off(self):
        os.environ["VIBE_KERNEL_SPIN_US"] = "0"
        try:
            self.assertEqual(stdio.idle_spin(), 0)
            os.environ["VIBE_KERNEL_SPIN_US"] = "99999999"
            self.assertEqual(stdio.idle_spin(), 1.0)
            os.environ["VIBE_KERNEL_SPIN_US"] = "soon"
            with self.assertRaises(SystemExit):
                stdio.idle_spin()
        finally:
            del os.environ["VIBE_KERNEL_SPIN_US"]
        self.assertEqual(stdio.idle_spin(), stdio.IDLE_SPIN_S)


class StartupHeapTest(unittest.TestCase):
    """headless.freeze_startup_heap: what exists at the start is no longer walked by a full
    collection; what is made afterwards is collected as before."""

    def tearDown(self):
        gc.unfreeze()

    def test_the_startup_heap_leaves_the_collector_and_later_cycles_are_still_collected(self):
        Kernel()
        gc.collect()  # garbage left by earlier tests (one Blender runs every module) is not counted
        tracked = len(gc.get_objects())
        self.assertGreater(tracked, 10000)  # bpy's types alone; the figure the docstring gives
        headless.freeze_startup_heap()
        self.assertGreaterEqual(gc.get_freeze_count(), tracked * 9 // 10)
        self.assertLess(len(gc.get_objects()), tracked // 10)

        class Node:
            pass

        node = Node()
        node.me = node  # a cycle: only the collector frees it
        gone = weakref.ref(node)
        del node
        gc.collect()
        self.assertIsNone(gone())


if __name__ == "__main__":
    unittest.main()
