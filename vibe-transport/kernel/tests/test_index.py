"""The scene index (index.py) against Blender's own scans, after random edits of every kind.

A property over seeded random sequences: typed tools (structural or not), agent code, a
person's edits made straight in bpy (followed by the depsgraph update a window makes, swaps
that keep every count included), undo steps, transaction rollbacks (a file
load headless) and a factory reset. After every step, for every object and name, the index
answers what `Object.users_collection`, `scene.objects.get` and a walk over the scene's
collections answer. The distribution of the steps is printed once.
"""

import collections
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel import app_handlers  # noqa: E402
from vibe_kernel.index import SCENE_INDEX  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "transactions", "code_exec"]
SEEDS = (1, 2, 3)
STEPS = 120
NAMES = ["A", "B", "C", "D", "E", "F", "Cube", "Light", "Camera"]
COLLECTIONS = ["Collection", "Props", "Set", "Lights"]


def scanned_collections(obj):
    return sorted(c.name for c in obj.users_collection)


def scanned_parent(name):
    for other in bpy.context.scene.collection.children_recursive:
        if name in other.children:
            return other.name
    return None


class IndexProperty(unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = Kernel()
        self.k.state.features.add("code_exec")
        self.k.state.configure({"session_id": "agent", "capabilities": CAPABILITIES})
        app_handlers.install_busy_handlers(self.k)
        self.addCleanup(app_handlers.remove_handlers, self.k)

    def agrees(self, context):
        scene = bpy.context.scene
        for obj in bpy.data.objects:
            self.assertEqual(SCENE_INDEX.collections_of(obj), scanned_collections(obj), (context, obj.name))
        for name in [o.name for o in bpy.data.objects] + NAMES + ["Renamed.%d" % i for i in range(4)]:
            self.assertEqual(SCENE_INDEX.object_named(name), scene.objects.get(name), (context, name))
        for coll in scene.collection.children_recursive:
            self.assertEqual(SCENE_INDEX.parent_of(coll.name), scanned_parent(coll.name), (context, coll.name))

    # ------------------------------------------------------------ the steps

    def tool(self, rng, name, params):
        """A kernel call, refused or not (the index must agree either way); an object in its
        answer shows the collections Blender lists for it at the end of the call."""
        answer = self.k.call(name, params)
        result = answer.get("result") if answer["ok"] else None
        if isinstance(result, dict) and "collections" in result and result.get("name") in bpy.data.objects:
            self.assertEqual(result["collections"], scanned_collections(bpy.data.objects[result["name"]]),
                             (name, params))

    def person(self, rng, edit):
        """An edit made straight in bpy, followed by the depsgraph update a window makes after
        every operator (and the add-on's timer before every batch of calls)."""
        edit(rng)
        bpy.context.view_layer.update()

    def step(self, rng):
        objects = list(bpy.data.objects)
        colls = list(bpy.data.collections)
        obj = rng.choice(objects) if objects else None
        coll = rng.choice(colls) if colls else None
        kinds = ["create", "create_empty", "rename", "delete", "assign", "new_collection", "move", "info",
                 "exec", "person_link", "person_unlink", "person_rename", "person_new", "person_remove",
                 "person_swap", "undo", "rollback"]
        kind = rng.choice(kinds)
        name = rng.choice(NAMES) + ("" if rng.random() < 0.5 else ".%d" % rng.randrange(3))
        where = rng.choice(COLLECTIONS)
        if kind == "create":
            self.tool(rng, "mesh.create_cube", {"name": name, "collection": where})
        elif kind == "create_empty":
            self.tool(rng, "object.create", {"name": name, "type": "EMPTY"})
        elif kind == "rename" and obj is not None:
            self.tool(rng, "object.rename", {"name": obj.name, "new_name": name})
        elif kind == "delete" and obj is not None:
            self.tool(rng, "object.delete", {"name": obj.name})
        elif kind == "assign" and obj is not None:
            self.tool(rng, "object.assign_collection", {"name": obj.name, "collection": where,
                                                         "mode": rng.choice(["move", "link"])})
        elif kind == "new_collection":
            self.tool(rng, "scene.create_collection", {"name": where, "parent": rng.choice([None, "Collection"])})
        elif kind == "move" and obj is not None:
            self.tool(rng, "object.move", {"name": obj.name, "delta": [1, 0, 0]})
        elif kind == "info" and obj is not None:
            self.tool(rng, "object.info", {"name": obj.name})
        elif kind == "exec" and obj is not None and coll is not None:
            code = rng.choice([
                "import bpy\nbpy.data.collections[%r].objects.link(bpy.data.objects.new(%r, None))" % (coll.name, name),
                "import bpy\no = bpy.data.objects[%r]\nfor c in list(o.users_collection):\n    c.objects.unlink(o)"
                % obj.name,
                "import bpy\nbpy.data.objects[%r].name = %r" % (obj.name, name),
                "import bpy\nbpy.data.collections[%r].objects.link(bpy.data.objects[%r])\nraise ValueError('no')"
                % (coll.name, obj.name),
            ])
            self.tool(rng, "python.exec", {"code": code})
        elif kind == "person_link" and obj is not None and coll is not None:
            self.person(rng, lambda r: obj.name in coll.objects or coll.objects.link(obj))
        elif kind == "person_unlink" and obj is not None and coll is not None:
            self.person(rng, lambda r: obj.name not in coll.objects or coll.objects.unlink(obj))
        elif kind == "person_rename" and obj is not None:
            self.person(rng, lambda r: setattr(obj, "name", "Renamed.%d" % r.randrange(4)))
        elif kind == "person_new" and coll is not None:
            self.person(rng, lambda r: coll.objects.link(bpy.data.objects.new(name, None)))
        elif kind == "person_remove" and obj is not None:
            self.person(rng, lambda r: bpy.data.objects.remove(obj))
        elif kind == "person_swap" and len(colls) >= 2:
            # Two objects trade collections: every count stays as it was; the depsgraph update
            # that follows a person's edit in a window is what tells the index.
            first, second = rng.sample(colls, 2)
            a = next((o for o in first.objects if o.name not in second.objects), None)
            b = next((o for o in second.objects if o.name not in first.objects), None)
            if a is None or b is None:
                return "skipped"

            def swap(_):
                first.objects.unlink(a)
                second.objects.link(a)
                second.objects.unlink(b)
                first.objects.link(b)
            self.person(rng, swap)
        elif kind == "undo":
            bpy.ops.ed.undo_push(message="before")
            if obj is not None and coll is not None and obj.name not in coll.objects:
                coll.objects.link(obj)
            bpy.ops.ed.undo_push(message="after")
            bpy.ops.ed.undo()
        elif kind == "rollback":
            self.tool(rng, "transaction.begin", {})
            self.tool(rng, "mesh.create_cube", {"name": name, "collection": where})
            self.tool(rng, "transaction.rollback", {})
        else:
            return "skipped"
        return kind

    def test_indexed_answers_equal_the_scans(self):
        counts = collections.Counter()
        for seed in SEEDS:
            bpy.ops.wm.read_factory_settings(use_empty=False)  # a load: the handlers see it too
            rng = random.Random(seed)
            for i in range(STEPS):
                kind = self.step(rng)
                counts[kind] += 1
                self.agrees("seed %d step %d (%s)" % (seed, i, kind))
        print("\nscene index property: %d steps: %s" % (sum(counts.values()), dict(sorted(counts.items()))))
        self.assertLess(counts["skipped"], sum(counts.values()) // 5)


if __name__ == "__main__":
    unittest.main()
