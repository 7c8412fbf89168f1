"""The GUI add-on's preferences (Edit > Preferences > Add-ons > Vibe kernel): port, bind address
and token, and what the listener is doing (its address, where its token came from, a warning for
a non-loopback bind, or why it does not listen).

`bl_idname = __package__`, so the same class serves the extension (`bl_ext.<repo>.vibe_kernel`)
and the legacy add-on (`vibe_kernel`). The environment (VIBE_PORT, VIBE_BIND, VIBE_TOKEN) wins
over these values (addon_settings.py). The values take effect when the add-on is enabled again
or Blender restarts. The token field is drawn masked; Blender keeps it in userpref.blend as plain
text when the preferences are saved, so VIBE_TOKEN or the generated token file keep it off disk
in Blender's folders.
"""

import bpy
from bpy.props import IntProperty, StringProperty

from .tcp import DEFAULT_PORT

# What register() found: {"state": "listening" | "refused" | "failed", "message", "warning",
# "address", "token_source", "token_file", "sources"}. Never the token itself.
STATUS = {}


def values():
    """The preferences' {port, bind, token}, or None when the add-on was not enabled through
    Blender's add-on system (its preferences do not exist then)."""
    addon = bpy.context.preferences.addons.get(__package__)
    prefs = getattr(addon, "preferences", None) if addon is not None else None
    if prefs is None:
        return None
    return {"port": prefs.port, "bind": prefs.bind, "token": prefs.token}


class VibeKernelPreferences(bpy.types.AddonPreferences):
    bl_idname = __package__

    port: IntProperty(name="Port", description="TCP port the kernel listens on (VIBE_PORT overrides it)",
                      default=DEFAULT_PORT, min=1, max=65535)
    bind: StringProperty(name="Bind address", default="127.0.0.1",
                         description="IPv4 address to listen on (VIBE_BIND overrides it). Anything "
                                     "but loopback needs a token of at least 16 characters")
    token: StringProperty(name="Token", subtype="PASSWORD", default="",
                          description="The token a bridge must give (VIBE_TOKEN overrides it). Empty: "
                                      "a random one is written to a file only you can read")

    def draw(self, context):
        layout = self.layout
        layout.prop(self, "port")
        layout.prop(self, "bind")
        layout.prop(self, "token")
        box = layout.box()
        state = STATUS.get("state")
        if state == "listening":
            box.label(text="Listening on %s" % STATUS["address"], icon="CHECKMARK")
            where = STATUS.get("token_file")
            box.label(text="Token: %s" % ("generated, in %s" % where if where else "from " + STATUS["token_source"]))
        elif state is not None:
            box.alert = True
            alert_lines(box, STATUS.get("message", ""))
        warning = STATUS.get("warning")
        if warning:
            alert = layout.box()
            alert.alert = True
            alert_lines(alert, warning)
        overridden = [s for s in (STATUS.get("sources") or {}).values() if s.startswith("VIBE_")]
        if overridden:
            layout.label(text="Set by the environment: %s" % ", ".join(sorted(overridden)), icon="INFO")
        layout.label(text="Changes apply when the add-on is enabled again or Blender restarts.", icon="INFO")


def alert_lines(layout, text):
    """`text` wrapped into labels, the first with the error icon."""
    for i, line in enumerate(wrap(text)):
        layout.label(text=line, icon="ERROR" if i == 0 else "BLANK1")


def wrap(text, width=90):
    """`text` as lines of at most about `width` characters (a label does not wrap)."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = "%s %s" % (line, word) if line else word
    return lines + ([line] if line else [])


def register():
    bpy.utils.register_class(VibeKernelPreferences)


def unregister():
    STATUS.clear()
    bpy.utils.unregister_class(VibeKernelPreferences)
