"""The deadline of agent code: a tracer and one watchdog thread that interrupt runaway code
on the main thread while the kernel keeps serving (the bridge's kill stays the boundary)."""

import sys
import threading
import time

# After the deadline the watchdog raises the interrupt again this often until the code stops,
# so that catching it (`except BaseException:`, a bare `except:`) only delays it.
REFIRE_S = 0.001

_monotonic = time.monotonic  # bound once: agent code may replace time.monotonic


class Interrupted(BaseException):
    """The deadline passed, or the run was cancelled (`cancelled`). BaseException so that
    `except Exception` cannot swallow it; raised again and again until the code stops, so that
    `except BaseException` cannot either."""

    cancelled = False


def _async_raiser():
    """PyThreadState_SetAsyncExc: raises an exception in a thread at its next bytecode boundary
    without going through the trace function (CPython removes a trace function that raises, so a
    raise from the tracer works once only). None where ctypes is missing."""
    try:
        import ctypes
        fn = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
            ("PyThreadState_SetAsyncExc", ctypes.pythonapi))
        return fn
    except Exception:  # noqa: BLE001 - no ctypes: the tracer raises directly (once)
        return None


_ASYNC = _async_raiser()


def _take_pending():
    """Runs a little bytecode: a pending asynchronous exception is raised at a function's start
    and at a loop's backward jump."""
    for _ in (0, 1):
        pass


class Deadline:
    """Interrupts the code running on this thread once `seconds` have passed.

    Two paths raise `Interrupted` in the agent's code:
      * the tracer (fast and exact): at the first trace event past the deadline. CPython removes
        a trace function as soon as it raises, so it cannot fire twice (and code that makes the
        trace call itself fail, with a RecursionError at the stack limit, removes it earlier);
      * a watchdog thread: from the deadline on, every REFIRE_S, until the code has stopped. It
        raises through PyThreadState_SetAsyncExc, which needs no tracer, so catching the
        interrupt (`except BaseException:`, a bare `except:`) only delays it by REFIRE_S.
    Neither stops C-level work (`sum(range(10**12))`, `time.sleep`): the bridge kills the kernel
    for those. A run that reached its deadline answers `timeout` even if the code caught every
    interrupt and returned."""

    def __init__(self, seconds):
        self.stop_at = _monotonic() + seconds
        self.cancelled = False
        self.thread_id = threading.get_ident()
        self.lock = threading.Lock()
        self.active = True
        self.fired = False
        self.done = threading.Event()
        self.wake = threading.Event()  # set by a cancel and by the end of the run
        self.previous = None
        self.switch_interval = None

    def tracer(self, frame, event, arg):
        # Opcode events too: a one-line loop (`while True: pass`) may raise no line event.
        frame.f_trace_opcodes = True
        if self.active and _monotonic() > self.stop_at:
            self.fired = True
            raise Interrupted()
        return self.tracer

    def stop_now(self):
        """A cancel (from the kernel's reader thread): the deadline is now."""
        self.cancelled = True
        self.stop_at = _monotonic()
        self.wake.set()

    def watch(self):
        # One wait until the deadline, cut short by a cancel (`wake`) or the end of the run.
        # (Not a polling loop: on Python 3.13 the watchdog's periodic wake-ups left the
        # runaway code uninterruptible.)
        self.wake.wait(max(0.0, self.stop_at - _monotonic()))
        if self.done.is_set():
            return
        while True:
            with self.lock:
                if not self.active:
                    return
                if self.switch_interval is None:
                    # This thread needs the GIL to fire: ask the running code to hand it over
                    # more often until it stops (restored by `stop`).
                    self.switch_interval = sys.getswitchinterval()
                    sys.setswitchinterval(min(self.switch_interval, REFIRE_S / 2))
                self.fired = True
                _ASYNC(self.thread_id, Interrupted)
            if self.done.wait(REFIRE_S):
                return

    def start(self):
        self.previous = sys.gettrace()
        if _ASYNC is not None:
            WATCHDOG.arm(self)
        sys.settrace(self.tracer)

    def settle(self):
        """Called once `active` is False: waits out a firing in flight, then takes delivery of an
        interrupt still pending for this thread, so that none escapes into the kernel. Raises
        Interrupted when it delivers one; after `active` went False at most two can be delivered
        (one pending, one in flight: the thread state holds one at a time), so the caller calls
        this up to three times, each in its own try. (Clearing a pending one with
        PyThreadState_SetAsyncExc(id, NULL) leaves CPython 3.11's eval breaker set, which hangs
        a traced frame: it is not used.)"""
        with self.lock:
            pass
        _take_pending()

    def finish(self):
        """After `settle`: nothing can interrupt any more; undo what `start` and `watch` set."""
        self.done.set()
        self.wake.set()
        sys.settrace(self.previous)
        if self.switch_interval is not None:
            sys.setswitchinterval(self.switch_interval)
            self.switch_interval = None


class Watchdog:
    """The one thread that watches every run's deadline (`Deadline.watch`), started with the
    first run and kept: a thread per run cost ~1 ms to start in Blender's Python, more than the
    trivial code it watched. It watches one run at a time (runs are on the main thread, one
    after another)."""

    def __init__(self):
        self.condition = threading.Condition()
        self.armed = None  # the Deadline of the run in progress
        self.thread = None

    def arm(self, deadline):
        with self.condition:
            self.armed = deadline
            if self.thread is None or not self.thread.is_alive():
                try:
                    self.thread = threading.Thread(target=self.loop, name="vibe-deadline", daemon=True)
                    self.thread.start()
                except RuntimeError:  # no thread to spare: the tracer alone (the bridge's kill stays)
                    self.thread = None
            self.condition.notify()

    def loop(self):
        while True:
            with self.condition:
                while self.armed is None or self.armed.done.is_set():
                    self.condition.wait()
                deadline = self.armed
            deadline.watch()


WATCHDOG = Watchdog()
