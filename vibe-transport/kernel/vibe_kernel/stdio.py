"""The stdio loop: frames read and run on Blender's main thread itself.

A reader thread that queues each frame for the main thread costs two wake-ups per call (the
reader's, then the main thread's), and on a virtual machine waking a sleeping CPU costs more
than most calls. Here the main thread reads its own frames. Idle, it polls stdin for
`IDLE_SPIN_S` before it sleeps in poll(2), so a call that follows the last answer at once (an
agent's loop, the bridge's next call) is read without waking anything; after that the kernel
sleeps and costs nothing.

While a frame runs that a cancel can reach, a watcher thread reads instead: agent code (which a
cancel interrupts), a tool whose time class is not quick (a render, a file), a batch (whose
queued calls a cancel answers at once) and the kernel's own frames (checkpoint, restore,
inventory, configure). A quick lone call is not watched: a cancel that arrives during it is read
when it is done, as if it had come a moment later, which the protocol allows (a finished call's
cancel is ignored). Whoever reads holds `reading`, so frames keep their order.
"""

import collections
import os
import select
import threading
import time

from . import tools
from .channel import ANSWER_GATHER_S, Channel, end_channel, parse_frame, protocol_error, run_frame, send_quietly
from .wire import MAX_FRAME_BYTES

IDLE_SPIN_S = 0.001  # how long an idle kernel polls before it sleeps; VIBE_KERNEL_SPIN_US overrides
WATCH_POLL_S = 0.05  # a watcher's wait for input, after which it sees whether its frame is done
#                      and writes a batch's answers held longer than ANSWER_GATHER_S
READ_CHUNK = 1 << 16


def idle_spin():
    """The idle spin in seconds: `VIBE_KERNEL_SPIN_US` (microseconds, 0 turns it off; at most
    one second) or `IDLE_SPIN_S`."""
    value = os.environ.get("VIBE_KERNEL_SPIN_US")
    if value is None:
        return IDLE_SPIN_S
    try:
        micros = int(value)
    except ValueError:
        raise SystemExit("vibe-kernel: VIBE_KERNEL_SPIN_US must be a whole number of microseconds, not %r" % value)
    return min(max(micros, 0), 1_000_000) / 1e6


class StdioChannel(Channel):
    """The one stdio connection: its frames wait in `pending` for the main thread instead of
    in the kernel's queue, read from file descriptor `fd` by the main thread or the watcher."""

    def __init__(self, kernel, fd, write):
        super().__init__(kernel, None, None, write)
        self.fd = fd
        self.buffer = bytearray()  # the start of a frame not read whole yet
        self.pending = collections.deque()  # frames read and not run; None: the end
        self.ended = False
        self.reading = threading.Lock()  # held by whoever reads `fd`, `buffer` and `pending`
        self.watching = threading.Event()  # set while a watched frame runs
        self.poller = select.poll()
        self.poller.register(fd, select.POLLIN)
        self.spin = idle_spin()

    def deliver(self, frame):
        self.pending.append(frame)

    def finish(self):
        """No more frames: the main thread ends the connection once it gets here."""
        self.ended = True
        self.pending.append(None)

    def take_in(self):
        """Reads what `fd` has (it was readable) and takes each whole line in, each out of the
        buffer before it is handled; whole lines read at once never pass through the buffer.
        Holding `reading`."""
        try:
            data = os.read(self.fd, READ_CHUNK)
        except OSError:
            data = b""
        if not data:
            if self.buffer and not self.ended:
                # A last frame without its newline counts, as a line read to the end does.
                line, self.buffer = bytes(self.buffer), bytearray()
                self.take_line(line)
            if not self.ended:
                self.finish()
            return
        if not self.buffer and data.find(b"\n") == len(data) - 1:
            self.take_line(data)  # the usual read: one whole frame
            return
        start = 0
        if self.buffer:  # a frame read in pieces: copied once, when its newline comes
            end = data.find(b"\n")
            if end < 0:
                self.buffer += data
                data = b""
            else:
                line, self.buffer = bytes(self.buffer) + data[:end + 1], bytearray()
                start = end + 1
                self.take_line(line)
        while not self.ended:
            end = data.find(b"\n", start)
            if end < 0:
                break
            line, start = data[start:end + 1], end + 1
            self.take_line(line)
        if not self.ended and start < len(data):
            self.buffer += memoryview(data)[start:]
        if not self.ended and len(self.buffer) > MAX_FRAME_BYTES:
            self.refuse("frame exceeds %d bytes" % MAX_FRAME_BYTES)

    def take_line(self, line):
        """Takes one line in. Whatever it holds (too long, not JSON, nested past Python's
        recursion limit, an id that cannot be a key) is a protocol error that ends the
        connection, never an exception out of the loop."""
        try:
            if len(line) > MAX_FRAME_BYTES + 1:
                raise ValueError("frame exceeds %d bytes" % MAX_FRAME_BYTES)
            if not self.accept(parse_frame(line)):
                self.finish()
        except OSError:
            self.finish()  # the answers cannot be written: the connection is over
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self.refuse(str(exc) or type(exc).__name__)

    def refuse(self, why):
        try:
            self.send(protocol_error("malformed frame: %s" % why))
        except OSError:
            pass
        self.finish()

    def next_frame(self):
        """The next frame to run, read on this (the main) thread if none is waiting; None at
        the end. Idle, it polls for `spin` seconds, then sleeps until input comes."""
        with self.reading:
            # With frames waiting, read what came first: a cancel of one of them must be seen
            # before it starts. (With none, the spin below reads.)
            if self.pending and not self.ended and self.poller.poll(0):
                self.take_in()
            while not self.pending:
                ready = False
                if self.spin > 0:
                    until = time.monotonic() + self.spin
                    while not (ready := self.poller.poll(0)) and time.monotonic() < until:
                        pass
                if not ready:
                    self.poller.poll()
                self.take_in()
            return self.pending.popleft()

    def watch(self):
        """The watcher thread: reads frames while a watched frame runs on the main thread."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while not self.ended:
            self.watching.wait()
            readable = poller.poll(WATCH_POLL_S * 1000)
            self.release(ANSWER_GATHER_S)  # a batch's answers held while a slow call runs
            if not readable or not self.reading.acquire(blocking=False):
                continue  # nothing came, or the main thread is reading (its frame is done)
            try:
                if self.watching.is_set() and not self.ended and poller.poll(0):
                    self.take_in()
            finally:
                self.reading.release()

    def serve(self):
        """Says hello, then runs frames in order until the end of the input or `bye`."""
        self.send(self.kernel.hello(False))
        threading.Thread(target=self.watch, name="vibe-stdio-watch", daemon=True).start()
        while True:
            frame = self.next_frame()
            if frame is None:
                self.watching.set()  # the watcher sees `ended` and stops
                end_channel(self.kernel, self)
                return
            if frame.get("type") == "call" and tools.runs_briefly(frame.get("tool")):
                # A quick lone call, the most common frame, is not watched (see the module's
                # docs): what run_frame does for it, without its layers (they cost more than the
                # call's own bookkeeping).
                answer = self.kernel.handle_call(frame, self.session, self)
                if answer is not None:
                    send_quietly(self, (answer,))
                continue
            self.watching.set()
            try:
                run_frame(self.kernel, self, frame)
            finally:
                self.watching.clear()


def serve_stdio(kernel, fd, write):
    """Serves the one stdio connection: frames from `fd`, answers through `write(bytes)`."""
    channel = StdioChannel(kernel, fd, write)
    kernel.channels.add(channel)
    channel.serve()
