"""The kernel's handlers on Blender's loads, saves, undo and redo (bpy.app.handlers): the
kernel is busy while a person loads or saves, and its state follows the file."""

import os

import bpy

from . import index, lock


def install_busy_handlers(kernel):
    """Loads and saves started by a person (GUI) make the kernel busy too, and the state follows
    every file a person loads (Kernel.file_loaded); the kernel's own loads and saves (file_op) are
    left to their callers. The handlers are persistent: Blender drops the others on every load,
    the very event they watch. `remove_handlers` takes them off again."""
    shared = kernel.shared

    @bpy.app.handlers.persistent
    def busy(*_):
        shared.busy += 1

    @bpy.app.handlers.persistent
    def ready(*_):
        shared.busy = max(0, shared.busy - 1)

    @bpy.app.handlers.persistent
    def forget(*_):
        # Undo and redo reallocate datablocks (as loads do; see file_op and Kernel.file_loaded):
        # cached references must not survive them.
        shared.identity.clear()

    @bpy.app.handlers.persistent
    def reattach(*_):
        # After the step the records find their blocks again (lock.reattach; the agent's
        # modifiers on the human's objects are the human's again).
        shared.identity.clear()
        lock.reattach(shared)

    @bpy.app.handlers.persistent
    def loaded(*_):
        if not shared.own_file_op:
            kernel.file_loaded()

    @bpy.app.handlers.persistent
    def saved(*_):
        if not shared.own_file_op:  # a person's "Save As" names the file anew
            shared.file = os.path.basename(bpy.data.filepath)

    wanted = [("load_pre", busy), ("load_post", ready), ("save_pre", busy), ("save_post", ready),
              ("load_post_fail", ready), ("save_post_fail", ready), ("load_post", loaded), ("save_post", saved)]
    wanted += [("undo_pre", forget), ("redo_pre", forget), ("undo_post", reattach), ("redo_post", reattach)]
    for name, fn in wanted:
        handlers = getattr(bpy.app.handlers, name, None)
        if handlers is not None:
            handlers.append(fn)
            kernel.handlers.append((name, fn))


def remove_handlers(kernel):
    """Takes off the handlers `install_busy_handlers` and the scene index put on."""
    index.uninstall()
    for name, fn in kernel.handlers:
        handlers = getattr(bpy.app.handlers, name, [])
        if fn in handlers:
            handlers.remove(fn)
    kernel.handlers = []
