"""Vibe kernel: wire protocol v1 inside Blender.

As an add-on (GUI Blender) it listens on 127.0.0.1:9833 and runs requests on the main thread
from one persistent timer. Port, bind address and token come from the environment (VIBE_PORT,
VIBE_BIND, VIBE_TOKEN), else the add-on's preferences (preferences.py), else the defaults; without
a token a random one is written to a file readable only by this user, and its path printed (the
token never is). A bind address other than loopback needs an explicit token of at least 16
characters and is then warned about; otherwise the add-on does not listen and says why
(addon_settings.py). It installs as an extension on Blender 4.2+ (blender_manifest.toml) and as a
legacy add-on on 3.4 to 4.1 (bl_info), from the one zip `build_extension.py` builds.
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
    import sys
    import threading
    import time

    import bpy

    from . import addon_settings, app_handlers, channel, confine, gatekeeper, preferences, tcp, wire

    global _server
    preferences.register()
    status = preferences.STATUS
    try:
        settings = addon_settings.resolve(os.environ, preferences.values())
        allowed, message = addon_settings.bind_decision(settings["bind"], settings["token"])
    except addon_settings.SettingsError as exc:
        settings, allowed, message = None, False, "vibe-kernel: not listening: %s" % exc
    if settings is not None:
        status.update(sources=settings["sources"], token_source=settings["sources"]["token"])
    if not allowed:
        # Refused, not raised: the add-on stays enabled so that its preferences can be fixed.
        status.update(state="refused", message=message)
        print(message, file=sys.stderr, flush=True)
        return
    status["warning"] = message
    if message:
        print(message, file=sys.stderr, flush=True)
    try:
        server = tcp.listen(settings["bind"], settings["port"])
    except OSError as exc:
        status.update(state="failed", message="vibe-kernel: not listening: cannot listen on %s:%d (%s)"
                      % (settings["bind"], settings["port"], exc.strerror or exc))
        print(status["message"], file=sys.stderr, flush=True)
        return
    token = settings["token"]
    if token is None:
        token, status["token_file"] = tcp.make_token()
        print("vibe-kernel: no token given; generated one in %s" % status["token_file"], file=sys.stderr, flush=True)
    # The GUI cannot be jailed: agent code runs here only if the operator opted in.
    confine.STATE = confine.establish({"VIBE_ALLOW_UNCONFINED_CODE": os.environ.get("VIBE_ALLOW_UNCONFINED_CODE")})
    kernel = wire.Kernel()
    app_handlers.install_busy_handlers(kernel)
    inbox = queue.Queue()

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
    status.update(state="listening", address="%s:%d" % server.getsockname()[:2])
    print("vibe-kernel add-on listening on %s" % status["address"])


def unregister():
    import bpy

    import os

    from . import app_handlers, preferences, tcp

    global _server
    token_file = preferences.STATUS.get("token_file")
    if token_file:
        try:
            os.remove(token_file)  # the token dies with the listener
        except OSError:
            pass
    if _server is not None:
        server, tick, kernel = _server
        if bpy.app.timers.is_registered(tick):
            bpy.app.timers.unregister(tick)
        app_handlers.remove_handlers(kernel)  # persistent: they would outlive the add-on
        try:
            tcp.stop_listening(server)
        except OSError:
            pass
        tcp.close_connections(kernel)  # their frames would never run again
        _server = None
    preferences.unregister()
