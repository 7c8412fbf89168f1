"""The headless start (run_kernel.py): the command line, a private temp folder, and serving
one client over stdio or several over TCP until the end."""

import gc
import os
import sys

import bpy

from . import files, stdio
from .app_handlers import install_busy_handlers, remove_handlers
from .tcp import DEFAULT_PORT, ensure_token, serve_tcp
from .wire import Kernel


def serve_stdio(kernel):
    frames_fd = os.dup(1)
    os.dup2(2, 1)  # Blender's C-level prints now go to stderr, off the frame stream.
    sys.stdout = sys.stderr

    def write(data):
        # os.write may write part of a large answer (a signal in the middle): the rest follows.
        written = os.write(frames_fd, data)
        if written < len(data):
            view = memoryview(data)[written:]
            while view:
                view = view[os.write(frames_fd, view):]

    stdio.serve_stdio(kernel, sys.stdin.fileno(), write)


def freeze_startup_heap():
    """Takes what exists now (bpy's types, the kernel's modules, the scene's wrappers: ~67,000
    objects) out of the cyclic collector's reach for good: they live as long as the process.
    Otherwise every full collection walks them all, a pause of ~17 ms (bpy 5.0.1) that lands in
    whichever call triggers it, about once per 300 ms of brief calls; after, a few hundred
    microseconds. Headless only: in the GUI the interpreter is the person's Blender's, with
    other add-ons in it. Objects made later (agent code's included) are collected as before; a
    startup object that later becomes cyclic garbage is never freed (bounded: the startup heap,
    each object once)."""
    gc.collect()
    gc.freeze()


def parse_args(argv):
    options = {"mode": None, "host": "127.0.0.1", "port": DEFAULT_PORT, "token": os.environ.get("VIBE_TOKEN"),
               "factory": False, "once": False, "open": None}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--stdio":
            options["mode"] = "stdio"
        elif arg == "--tcp":
            options["mode"] = "tcp"
            if args and not args[0].startswith("--"):
                host, _, port = args.pop(0).rpartition(":")
                options["host"], options["port"] = host or "127.0.0.1", int(port)
        elif arg == "--token-file":
            with open(args.pop(0), encoding="utf-8") as f:
                options["token"] = f.read().strip()
        elif arg == "--factory":
            options["factory"] = True
        elif arg == "--once":
            options["once"] = True
        elif arg == "--open":
            if not args:
                raise SystemExit("vibe-kernel: --open needs a .blend path")
            options["open"] = args.pop(0)
        else:
            raise SystemExit("vibe-kernel: unknown argument %r" % arg)
    if options["mode"] is None:
        raise SystemExit("usage: run_kernel.py (--stdio | --tcp [HOST:PORT] [--token-file F] [--once]) [--factory] "
                         "[--open FILE.blend]")
    return options


def private_temp():
    """A temp folder of this kernel's own (snapshots go there), and the folders of kernels
    that were killed before they could remove theirs."""
    import shutil
    import tempfile
    base = tempfile.gettempdir()
    for name in os.listdir(base):
        if name.startswith("vibe-kernel-run-"):
            pid = name.rpartition("-")[2]
            if pid.isdigit() and not os.path.exists("/proc/%s" % pid) and sys.platform.startswith("linux"):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    own = os.path.join(base, "vibe-kernel-run-%d" % os.getpid())
    os.makedirs(own, mode=0o700, exist_ok=True)
    tempfile.tempdir = own
    import atexit
    atexit.register(shutil.rmtree, own, True)


def main(argv):
    options = parse_args(argv)
    if options["factory"]:
        bpy.ops.wm.read_factory_settings(use_empty=False)
    private_temp()
    # Headless: snapshots are not pictures; no thumbnails in the user's cache.
    if hasattr(bpy.context.preferences.filepaths, "file_preview_type"):
        bpy.context.preferences.filepaths.file_preview_type = "NONE"
    kernel = Kernel()
    install_busy_handlers(kernel)
    try:
        if options["open"] is not None:
            # The operator's file, before anyone connects: everything in it is the human's.
            try:
                files.open_blend(kernel, os.path.abspath(options["open"]))
            except Exception as exc:  # noqa: BLE001 - said clearly, then the kernel does not start
                raise SystemExit("vibe-kernel: cannot open %s: %s" % (options["open"], exc))
        freeze_startup_heap()
        if options["mode"] == "stdio":
            serve_stdio(kernel)
        else:
            if options["host"] not in ("127.0.0.1", "localhost", "::1"):
                print("vibe-kernel: listening beyond loopback on %s; anyone who can reach it needs the token"
                      % options["host"], file=sys.stderr, flush=True)
            serve_tcp(kernel, options["host"], options["port"], ensure_token(options["token"]), once=options["once"])
    finally:
        # Persistent handlers left on at exit hang the bpy 4.5 module's shutdown.
        remove_handlers(kernel)
