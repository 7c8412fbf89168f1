"""Vibe kernel: wire protocol v1 inside Blender.

As an add-on (GUI Blender) it listens on 127.0.0.1:9833 (port and token from the environment:
VIBE_PORT, VIBE_TOKEN; without VIBE_TOKEN a random token is written to a file readable only by
this user, and its path printed) and runs requests on the main thread from one persistent timer.
The GUI cannot be jailed, so agent code (`python.exec`) is offered only when the operator sets
VIBE_ALLOW_UNCONFINED_CODE=1 before starting Blender; the hello then says "unconfined". Headless,
run `run_kernel.py` instead (see wire.py and headless.py).

In the GUI the agent works in the person's undo history (snapshot.py): each of its changes is one
undo step (`Vibe: object.move Cube`) that Ctrl+Z takes back, a transaction rolls back through
undo (never by reloading the file), and changes wait while the person is in Edit Mode or the like.
"""

bl_info = {
    "name": "Vibe kernel",
    "author": "Vibe",
    "version": (0, 1, 0),
    "blender": (3, 4, 0),
    "location": "runs in the background; see the Vibe README",
    "description": "Lets a Vibe bridge drive this Blender safely over loopback TCP",
    "category": "System",
}

_server = None


def register():
    import os
    import queue
    import threading
    import time

    import bpy

    from . import app_handlers, channel, confine, gatekeeper, tcp, wire

    global _server
    # The GUI cannot be jailed: agent code runs here only if the operator opted in.
    confine.STATE = confine.establish({"VIBE_ALLOW_UNCONFINED_CODE": os.environ.get("VIBE_ALLOW_UNCONFINED_CODE")})
    kernel = wire.Kernel()
    app_handlers.install_busy_handlers(kernel)
    inbox = queue.Queue()
    port = int(os.environ.get("VIBE_PORT", tcp.DEFAULT_PORT))
    token = tcp.ensure_token(os.environ.get("VIBE_TOKEN"))
    server = tcp.listen("127.0.0.1", port)

    def tick():
        # One persistent timer drains every pending request within a budget; never a timer per
        # command (those get lost).
        if not inbox.empty():
            # Edits since the last depsgraph update (another add-on's timer, say) fire its
            # handler now, before any call reads the scene index (index.py).
            try:
                bpy.context.view_layer.update()
            except Exception:  # noqa: BLE001 - no view layer to update (a file loading): nothing to see
                pass
        channel.drain(kernel, inbox, deadline=time.monotonic() + channel.TICK_BUDGET_S)
        return 0.01

    threading.Thread(target=tcp.accept_forever, args=(kernel, server, inbox, token, gatekeeper.Gatekeeper()),
                     name="vibe-accept", daemon=True).start()
    bpy.app.timers.register(tick, persistent=True)
    _server = (server, tick, kernel)
    print("vibe-kernel add-on listening on 127.0.0.1:%d" % port)


def unregister():
    import bpy

    from . import app_handlers, tcp

    global _server
    if _server is not None:
        server, tick, kernel = _server
        if bpy.app.timers.is_registered(tick):
            bpy.app.timers.unregister(tick)
        app_handlers.remove_handlers(kernel)  # persistent: they would outlive the add-on
        try:
            tcp.stop_listening(server)
        except OSError:
            pass
        _server = None
