"""The scene's structure, indexed once per change instead of scanned per call.

Two questions Blender answers only by scanning the whole file:

* which collections hold an object (`Object.users_collection` searches every collection's
  object list: ~30 us at 1,000 objects, ~110 us at 4,000, and `scene.snapshot` asks it once per
  object, which made the snapshot quadratic);
* which object of the scene has a name (`scene.objects.get` walks the scene's objects in order:
  ~20 us for the 500th of them).

`SceneIndex` answers both from dictionaries built in one pass over the collections and the
scene's objects, and rebuilt when anything may have changed them. What counts as a change:

* `changed()`: the kernel's own file loads (rollbacks, `file.open`, a supervisor's restore), and
  Blender's undo, redo, load and `depsgraph_update_post` handlers, put on by the index itself
  (`install`; in the GUI every edit a person makes in a window is followed by a depsgraph
  update, and a reload may give new objects the addresses of old ones);
* `structural()`: around every call of a tool that may create, delete, rename or relink objects
  or collections, agent code included (typed tools that only move or edit objects, materials and
  modifiers are registered with `keeps_structure`); inside it every use rebuilds;
* a name is checked against the object found, and a name not found is looked up again after a
  rebuild, so a rename or a new object is never missed however it was made.

Counting is all there is: Blender's `len()` of an ID list walks the list (20 us at 4,000
objects), so no signature of the scene is cheap enough to check per call. What none of these
sees is an edit outside the kernel that fires no handler (a script of a person's add-on
relinking objects from a timer, say); headless nothing but the kernel runs. The kernel's tests
compare the indexed answers with Blender's own scans after random edits of every kind
(tests/test_index.py, run under real Blender).
"""

import contextlib

import bpy


class SceneIndex:
    def __init__(self):
        self.generation = 0  # bumped by every change (see the module docs)
        self.built_for = None  # (generation, scene) of the current build
        self.members = {}  # object -> sorted names of the collections that hold it
        self.by_name = {}  # name -> object of the scene
        self.parents = {}  # collection name -> the name of the collection it is a child of
        self.changing = 0  # structural calls running (see `structural`)
        self.installed = False  # `on_change` is on Blender's handlers

    def changed(self, *_):
        """Something may have changed the structure: the next use rebuilds."""
        self.generation += 1

    @contextlib.contextmanager
    def structural(self):
        """Around a call that may change the structure: the index is rebuilt on each use inside,
        and once more after."""
        self.changing += 1
        try:
            yield
        finally:
            self.changing -= 1
            self.generation += 1

    def current(self):
        """Rebuilds when the generation or the scene moved since the last build (and on every use
        while a structural call runs: its own changes are not counted yet)."""
        if self.changing:
            self.generation += 1
        if not self.installed:
            install()
        scene = bpy.context.scene
        key = (self.generation, scene.as_pointer())
        if key != self.built_for:
            self.rebuild(scene)
            self.built_for = key
        return self

    def rebuild(self, scene):
        members = {}
        parents = {}
        for collection in bpy.data.collections:
            for obj in collection.objects:
                members.setdefault(obj, []).append(collection.name)
        for each in bpy.data.scenes:
            master = each.collection
            for obj in master.objects:
                members.setdefault(obj, []).append(master.name)
        # A collection's parent among the scene's collections (the master collection is no
        # parent here): the first that lists it as a child, in the scene's order.
        for collection in scene.collection.children_recursive:
            for child in collection.children:
                parents.setdefault(child.name, collection.name)
        for names in members.values():
            names.sort()
        self.members = members
        self.parents = parents
        objects = scene.objects
        self.by_name = dict(zip(objects.keys(), objects))

    def collections_of(self, obj):
        """Sorted names of every collection that holds `obj` (as `Object.users_collection`)."""
        return list(self.current().members.get(obj, ()))

    def object_named(self, name):
        """The scene's object called `name`, or None. A hit is checked against the object's
        name and a miss is looked up again after a rebuild, so renames, deletions and new
        objects are seen however they were made."""
        obj = self.current().by_name.get(name)
        try:
            if obj is not None and obj.name == name:
                return obj
        except ReferenceError:  # removed, or the file was reloaded
            pass
        self.rebuild(bpy.context.scene)
        return self.by_name.get(name)

    def parent_of(self, collection_name):
        """The name of the scene collection (not the master) that has `collection_name` as a
        child, or None."""
        return self.current().parents.get(collection_name)


# One per Blender process (the scene is the process's, whatever number of kernels serve it).
SCENE_INDEX = SceneIndex()


@bpy.app.handlers.persistent
def on_change(*_):
    """Blender's handler for loads, undo, redo and depsgraph updates (see `install`)."""
    SCENE_INDEX.changed()


HANDLED = ("load_post", "undo_post", "redo_post", "depsgraph_update_post")


def install():
    """Puts `on_change` on Blender's handlers (once; the index does so on its first use, so no
    load escapes it, whoever makes the kernel). Persistent: they outlive loads."""
    for name in HANDLED:
        handlers = getattr(bpy.app.handlers, name, None)
        if handlers is not None and on_change not in handlers:
            handlers.append(on_change)
    SCENE_INDEX.installed = True
    SCENE_INDEX.changed()  # what happened before is unknown


def uninstall():
    """Takes `on_change` off again (the add-on's unregister)."""
    for name in HANDLED:
        handlers = getattr(bpy.app.handlers, name, None)
        if handlers is not None and on_change in handlers:
            handlers.remove(on_change)
    SCENE_INDEX.installed = False
