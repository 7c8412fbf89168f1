"""The confinement the kernel runs under, for its hello, and the last seccomp layer.

A jailed kernel is started by the bridge through bubblewrap and the `vibe-jail` launcher, which
confine the process before Blender runs (namespaces, Landlock, seccomp, rlimits) and say what
holds in VIBE_CONFINEMENT. The launcher must still execute Blender, so the filter that forbids
`execve` is installed here, before the kernel reads its first frame. Agent code may run only on
a jailed kernel, or where the operator set VIBE_ALLOW_UNCONFINED_CODE=1 (the GUI add-on cannot
be jailed)."""

import ctypes
import json
import os

import platform

PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
# seccomp(2) by architecture: the filter must reach every thread (Blender starts its own
# threads before the kernel runs), which only seccomp(2) with TSYNC does; prctl covers one.
SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_filter(path):
    """Installs the raw seccomp program at `path` (8-byte sock_filter records); True on success."""
    with open(path, "rb") as f:
        program = f.read()
    if not program or len(program) % 8:
        return False
    count = len(program) // 8
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(count, ctypes.cast(buffer, ctypes.c_void_p))
    number = SYS_SECCOMP.get(platform.machine())
    if number is None:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        return False
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(ctypes.c_long(number), ctypes.c_ulong(SECCOMP_SET_MODE_FILTER),
                        ctypes.c_ulong(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog)) == 0


def every_thread_filtered(count):
    """Whether every thread of this process has at least `count` seccomp filters."""
    try:
        for task in os.listdir("/proc/self/task"):
            with open("/proc/self/task/%s/status" % task, encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("Seccomp_filters:") and int(line.split()[1]) < count:
                        return False
    except (OSError, ValueError):
        return False
    return True


def seccomp_filters():
    """How many seccomp filters confine this process (0 when /proc says none)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Seccomp_filters:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def establish(environ=os.environ):
    """Reads what the launcher applied, adds the no-execve filter, and returns the hello's
    `confinement`. Removes the launcher's variables from the environment."""
    state = {"filesystem": False, "network": False, "exec": False, "layers": [],
             "unconfined_code_opt_in": environ.get("VIBE_ALLOW_UNCONFINED_CODE") == "1"}
    reported = environ.pop("VIBE_CONFINEMENT", None)
    filter_path = environ.pop("VIBE_EXEC_FILTER", None)
    if reported:
        try:
            launcher = json.loads(reported)
        except ValueError:
            launcher = {}
        state["filesystem"] = launcher.get("filesystem") is True
        state["network"] = launcher.get("network") is True
        if isinstance(launcher.get("memory_mib"), int):
            state["memory_mib"] = launcher["memory_mib"]
        state["layers"] = [str(layer) for layer in launcher.get("layers", [])]
        if launcher.get("exec") == "pending" and filter_path:
            before = seccomp_filters()
            try:
                installed = install_filter(filter_path)
            except OSError:
                installed = False
            state["exec"] = installed and seccomp_filters() > before and every_thread_filtered(before + 1)
    if filter_path:
        try:
            os.remove(filter_path)
        except OSError:
            pass
    global GATE_OFF
    GATE_OFF = gate_switched_off(state, environ)
    environ.pop("VIBE_KERNEL_GATE", None)
    return state


def gate_switched_off(state, environ):
    """VIBE_KERNEL_GATE=off turns the kernel's code gate and file.import's reference checks
    off, honoured only in a full jail: tests use it to show that the jail, not the kernel's own
    checks, is the boundary."""
    jailed = state["filesystem"] and state["network"] and state["exec"] and "memory_mib" in state
    return jailed and environ.get("VIBE_KERNEL_GATE") == "off"


def permits_code(state):
    jailed = state["filesystem"] and state["network"] and state["exec"] and "memory_mib" in state
    return jailed or state["unconfined_code_opt_in"]


GATE_OFF = False
STATE = {"filesystem": False, "network": False, "exec": False, "layers": [], "unconfined_code_opt_in": False}
