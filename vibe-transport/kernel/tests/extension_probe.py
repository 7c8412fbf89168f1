"""Installs the built zip into the Blender that runs this script and probes the add-on; run by
test_extension.py in a child process whose BLENDER_USER_* folders are throwaway temp folders
(never the person's own). Blender 4.2+ installs it as an extension (user_default repository),
older ones as a legacy add-on. Prints one line `PROBE {json}` with what it saw.

    python extension_probe.py ZIP PORT TOKEN            (a Python with the bpy module)
    blender -b --factory-startup --python extension_probe.py -- ZIP PORT TOKEN
"""

import json
import os
import socket
import sys
import threading
import time

import bpy

import addon_utils  # noqa: E402 - on the path once bpy is imported

argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
ZIP, PORT, TOKEN = argv[0], int(argv[1]), argv[2]
report = {"blender": list(bpy.app.version)}


def install():
    """Installs and enables the zip; returns the add-on's module name."""
    if bpy.app.version >= (4, 2, 0):
        result = bpy.ops.extensions.package_install_files(filepath=ZIP, repo="user_default",
                                                           enable_on_install=True)
        report["how"] = "extension"
        module = "bl_ext.user_default.vibe_kernel"
        report["installed_in"] = next(r.directory for r in bpy.context.preferences.extensions.repos
                                     if r.module == "user_default")
    else:
        result = bpy.ops.preferences.addon_install(filepath=ZIP)
        report["how"] = "legacy add-on"
        module = "vibe_kernel"
        bpy.ops.preferences.addon_enable(module=module)
        report["installed_in"] = bpy.utils.user_resource("SCRIPTS", path="addons")
    report["install"] = sorted(result)
    return module


def pump_while(thread):
    """Runs the add-on's timer on this (the main) thread while `thread` talks to it: a
    background Blender runs no timers by itself."""
    tick = sys.modules[MODULE]._server[1]
    while thread.is_alive():
        tick()
        time.sleep(0.005)


def session(port, token, out):
    """Logs in with `token`, configures a session and asks for object.info; fills `out`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            reader = sock.makefile("rb")
            out["hello"] = json.loads(reader.readline())["type"]
            sock.sendall((json.dumps({"type": "auth", "token": token}) + "\n").encode())
            out["auth"] = json.loads(reader.readline())
            if out["auth"].get("type") != "auth_ok":
                return
            sock.sendall(b'{"type":"configure","id":1,"session":{"session_id":"probe",'
                         b'"capabilities":["scene.read"]}}\n')
            out["configure"] = json.loads(reader.readline())["envelope"]["ok"]
            sock.sendall(b'{"type":"call","id":2,"tool":"object.info","params":{"name":"Cube"}}\n')
            out["call"] = json.loads(reader.readline())["envelope"]
    except OSError as exc:
        out["error"] = "%s: %s" % (type(exc).__name__, exc)


def talk(port, token):
    out = {}
    thread = threading.Thread(target=session, args=(port, token, out))
    thread.start()
    pump_while(thread)
    thread.join()
    return out


def connectable(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def reenable():
    addon_utils.disable(MODULE, default_set=False)
    addon_utils.enable(MODULE, default_set=False)
    return dict(sys.modules[MODULE + ".preferences"].STATUS)


MODULE = install()
report["enabled"] = MODULE in bpy.context.preferences.addons
status = sys.modules[MODULE + ".preferences"].STATUS
report["status"] = dict(status)
report["good_token"] = talk(PORT, TOKEN)
report["wrong_token"] = talk(PORT, "not-" + TOKEN)

# The preferences, with the environment cleared: a non-loopback bind with a short token is
# refused (nothing listens), a loopback bind uses the preferences' port and token.
for name in ("VIBE_PORT", "VIBE_TOKEN", "VIBE_BIND"):
    os.environ.pop(name, None)
prefs = bpy.context.preferences.addons[MODULE].preferences
prefs.port, prefs.bind, prefs.token = PORT, "0.0.0.0", "short"
report["refused"] = reenable()
report["refused_listening"] = connectable(PORT)
prefs = bpy.context.preferences.addons[MODULE].preferences  # the class was registered again
report["prefs_kept"] = [prefs.port, prefs.bind, prefs.token == "short"]
prefs.bind, prefs.token = "127.0.0.1", TOKEN + "-prefs"
report["prefs"] = reenable()
report["prefs_token"] = talk(PORT, TOKEN + "-prefs")

addon_utils.disable(MODULE, default_set=False)
report["after_disable_listening"] = connectable(PORT)
print("PROBE " + json.dumps(report), flush=True)
