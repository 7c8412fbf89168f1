"""What agent code's imports give it (module_views.py) and what it must leave as it found it
(kernel_state.py), run inside a real Blender like test_kernel.py:

    python -m unittest discover -s vibe-transport/kernel/tests      (a Python with bpy)
    blender -b --factory-startup --python-exit-code 1 --python vibe-transport/kernel/tests/run_in_blender.py

Each attack here passed the code gate (a filter) before these checks existed and changed the
kernel's own modules, classes or handlers for the calls after it.
"""

import json
import math
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from kernel_case import KernelCalls, code_kernel  # noqa: E402
from vibe_kernel import confine, kernel_state, module_views  # noqa: E402


def fingerprint():
    return sorted((o.name, tuple(round(v, 6) for v in o.location)) for o in bpy.data.objects)


class Base(KernelCalls, unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = code_kernel("s")
        self.k.call_deadline_ms = 5000
        self.undo_steps = bpy.context.preferences.edit.undo_steps

    def exec(self, code):
        return self.call("python.exec", code=code)

    def ran(self, code):
        return self.ok("python.exec", code=code)["stdout"]

    def failed(self, code, says):
        self.assertIn(says, self.exec_error(code, "execution_failed")["message"])

    def refused_kernel_state(self, code):
        error = self.exec_error(code, "contract_violation")
        self.assertEqual((error["details"].get("reason"), error["details"].get("rule")),
                         ("security_block", "kernel_state"), error)
        self.assertTrue(error["details"]["rolled_back"], error)
        return error


class ModuleViewTest(Base):
    def test_a_module_reached_through_a_list_is_read_only(self):
        isfinite, findall, abspath, encoder = math.isfinite, re.findall, bpy.path.abspath, json.encoder
        for code in ("import math\nm = [math][0]\nm.isfinite = print",
                     "import re\n[re][0].findall = lambda *a, **k: []",
                     "import bpy\n[bpy.path][0].abspath = print",
                     # A name deleted from a view would make the import fall back to sys.modules.
                     "import json\nm = [json][0]\ndel m.encoder\nfrom json import encoder\n"
                     "[encoder][0].encode_basestring_ascii = print"):
            with self.subTest(code=code):
                self.failed(code, "read-only")
        self.assertIs(math.isfinite, isfinite)
        self.assertIs(re.findall, findall)
        self.assertIs(bpy.path.abspath, abspath)
        self.assertIs(json.encoder, encoder)
        self.assertEqual(json.dumps({"name": "Cube"}), '{"name": "Cube"}')
        refused = self.exec("x = '__globals__'")
        self.assertEqual(refused["error"]["details"].get("rule"), "dunder_string", refused)

    def test_bpy_app_has_its_fields_by_name_but_no_iteration_or_indexing(self):
        version = ".".join(str(v) for v in bpy.app.version[:2])
        self.assertEqual(self.ran("import bpy\nprint('%d.%d' % bpy.app.version[:2])"), version + "\n")
        self.assertEqual(self.ran("from bpy import app\nprint(app.version_string[:3])"), bpy.app.version_string[:3]
                         + "\n")
        for code in ("import bpy\nlist(bpy.app)", "import bpy\nbpy.app[0]", "import bpy\na, *rest = bpy.app",
                     "import bpy\nfor x in [bpy.app]:\n    list(x)"):
            with self.subTest(code=code):
                self.failed(code, "TypeError")

    def test_a_view_holds_nothing_the_attribute_rules_refuse(self):
        # The names are refused as text too: the views themselves are looked at here.
        import random
        import typing

        views = module_views.Views()
        listed = set(dir(views.of(bpy).app))
        for module in (bpy, random, json, typing):
            listed |= set(vars(views.of(module)))
        for name in ("handlers", "timers", "driver_namespace", "msgbus", "types", "_os", "codecs", "sys",
                     "__builtins__", "__file__"):
            self.assertNotIn(name, listed)
        self.assertTrue({"version", "randint", "dumps", "data", "ops", "path"} <= listed, listed)
        self.assertIs(views.of(bpy).path, views.of(bpy.path))
        self.assertEqual(self.ran("from math import *\nprint(round(pi, 2), floor(2.5))"), "3.14 2\n")
        self.assertEqual(self.ran("import mathutils.noise as n\nimport bmesh\nprint(callable(n.random), "
                                  "callable(bmesh.new))"), "True True\n")
        self.assertEqual(self.ran("import bpy\nbpy.ops.mesh.primitive_cube_add()\nprint(len(bpy.data.objects))"),
                         "4\n")


class KernelStateTest(Base):
    def test_a_patched_class_of_an_allowed_module_is_put_back_and_refused(self):
        encode = json.JSONEncoder.encode
        before = fingerprint()
        error = self.refused_kernel_state("import bpy, json\nbpy.data.objects['Cube'].location.x = 7\n"
                                          "[json.JSONEncoder][0].encode = lambda self, o: 'forged'")
        self.assertEqual(error["details"]["changed"], ["JSONEncoder.encode"])
        self.assertIs(json.JSONEncoder.encode, encode)
        self.assertEqual(json.dumps({"a": 1}), '{"a": 1}')
        self.assertEqual(fingerprint(), before)

    def test_a_patched_bpy_class_is_put_back_and_refused(self):
        # (type(bpy.context) is the run's own view class: bpy's classes are reached through data.)
        error = self.refused_kernel_state("import bpy\nt = type(bpy.context.scene)\nt.copy = lambda self: {}")
        self.assertEqual(error["details"]["changed"], ["Scene.copy"])
        self.assertNotIn("copy", vars(bpy.types.Scene))
        # A class of bpy's Python metaclass (menus, panels, operators): the metaclass hook sees it.
        error = self.refused_kernel_state("import bpy\nstruct = type(bpy.context.scene).mro()[-2]\n"
                                          "m = struct.bl_rna_get_subclass_py('Menu')\n"
                                          "m.poll = lambda cls, context: False\nm.extra = 1")
        self.assertEqual(error["details"]["changed"], ["Menu.extra", "Menu.poll"])
        self.assertNotIn("extra", vars(bpy.types.Menu))
        self.assertNotIn("poll", vars(bpy.types.Menu))

    def test_a_private_class_of_bpys_python_modules_is_put_back_and_refused(self):
        # bpy.ops' operator class: a patched idname_py ran in the kernel's next save (the
        # rollback point of the next call) and deleted the Cube before the lock looked.
        before = fingerprint()
        op_class = type(bpy.ops.mesh.primitive_cube_add)
        code = ("import bpy\nt = type(bpy.ops.mesh.primitive_cube_add)\n"
                "def spy(self, old=t.idname_py, bpy=bpy):\n    bpy.data.objects.remove(bpy.data.objects['Cube'])\n"
                "    return old(self)\nt.idname_py = spy")
        if op_class.__flags__ & (1 << 8):  # a C type from bpy 5.2 on: Python refuses the store itself
            self.failed(code, "immutable type")
        else:
            idname_py = vars(op_class)["idname_py"]
            error = self.refused_kernel_state(code)
            self.assertEqual(error["details"]["changed"], ["%s.idname_py" % op_class.__name__])
            self.assertIs(vars(op_class)["idname_py"], idname_py)
        self.assertEqual(self.ran("print(1)"), "1\n")
        self.assertEqual(fingerprint(), before)

    def test_draw_functions_added_to_a_menu_are_taken_off(self):
        menu = bpy.types.VIEW3D_MT_mesh_add

        def own(self, context):
            pass

        menu.append(own)  # extended already (by an add-on): append grows the list in place
        self.addCleanup(menu.remove, own)
        before = list(menu.draw._draw_funcs)
        error = self.refused_kernel_state(
            "import bpy\nS = type(bpy.context.scene).mro()[-2]\nm = S.bl_rna_get_subclass_py('VIEW3D_MT_mesh_add')\n"
            "def spy(self, context):\n    pass\nm.append(spy)")
        self.assertEqual(error["details"]["changed"], ["VIEW3D_MT_mesh_add.draw"])
        self.assertEqual(menu.draw._draw_funcs, before)

    def test_a_list_a_class_holds_changed_in_place_is_put_back_and_refused(self):
        # A preset operator's `preset_defines` holds lines its execute runs with `exec` (and
        # writes into the preset's file) when a person adds a preset. Appended to in place, the
        # class's attribute stays the same list: no store, and the attribute compare passed it.
        cls = bpy.types.Operator.bl_rna_get_subclass_py("RENDER_OT_preset_add")
        before = list(cls.preset_defines)
        error = self.refused_kernel_state(
            "import bpy\nS = type(bpy.context.scene).mro()[-2]\nC = S.bl_rna_get_subclass_py('RENDER_OT_preset_add')\n"
            "C.preset_defines.append('print(1)')")
        self.assertEqual(error["details"]["changed"], ["%s.preset_defines (changed in place)" % cls.__name__])
        self.assertEqual(cls.preset_defines, before)

    def test_blenders_own_bookkeeping_in_private_containers_is_not_a_change(self):
        # Switching tools notes a tool group's last tool in a private dict of the tool panel's
        # class (`_tool_group_active`): Blender's own, which the gate keeps agent code from.
        self.ok("python.exec", code="import bpy\nfor name in ('builtin.select_lasso', 'builtin.select_box', "
                "'builtin.move', 'builtin.select_box'):\n    bpy.ops.wm.tool_set_by_id(name=name, space_type='VIEW_3D')")

    def test_dicts_and_sets_a_class_holds_changed_in_place_are_put_back(self):
        held = [(bpy.types.UIList.bl_rna_get_subclass_py("MESH_UL_attributes"), "display_domain_names",
                 lambda d: d.update(POINT=print)),
                (bpy.types.Menu.bl_rna_get_subclass_py("TEXTURE_MT_context_menu"), "COMPAT_ENGINES",
                 lambda s: (s.clear(), s.add("SPY")))]
        for cls, name, change in held:
            with self.subTest(name=name):
                container = getattr(cls, name)
                before = dict(container) if isinstance(container, dict) else set(container)
                watch = kernel_state.Watch()
                change(container)
                self.assertIn("%s.%s (changed in place)" % (cls.__name__, name), watch.changes(module_views.Views()))
                self.assertIs(getattr(cls, name), container)
                self.assertEqual(container, before)

    def test_a_store_on_a_class_description_is_put_back(self):
        # `bl_rna` is read through every instance of a class (`light.bl_rna`, the kernel's own
        # reads): a lazy map stored there ran when later code that only reads iterated it. The
        # gates refuse the store by name; the state check is the boundary behind them.
        for cls in (type(bpy.data.lights[0]), type(bpy.data.objects[0]), type(bpy.context.scene.render)):
            with self.subTest(cls=cls.__name__):
                had = vars(cls).get("bl_rna")
                watch = kernel_state.Watch()
                watch.hook()
                try:
                    cls.bl_rna = map(print, [1])
                finally:
                    watch.unhook()
                self.assertIn("%s.bl_rna" % cls.__name__, watch.changes(module_views.Views()))
                self.assertIs(vars(cls).get("bl_rna"), had)

    def test_operators_that_rebuild_blenders_structs_are_not_changes(self):
        # bpy 5.2's quick_fur rebuilds the geometry-node interface structs during the run: their
        # classes get a new `bl_rna` or lose it. That is bpy's own (refused before as the agent's,
        # in 2 of 3 runs), and putting the old description back would leave a dangling one.
        code = ("import bpy\nbpy.ops.object.select_all(action='DESELECT')\n"
                "bpy.ops.mesh.primitive_cube_add(location=(20, 0, 1))\nbpy.ops.object.quick_fur()\nprint('done')")
        for _ in range(3):
            answer = self.exec(code)
            self.assertTrue(answer["ok"], answer)

    def test_first_use_of_a_kind_and_the_codes_own_subclasses_are_not_changes(self):
        # bpy makes a class with functions of its own on the first use of a node kind or a pose;
        # the code's own subclass of a bpy type is its own.
        self.assertEqual(self.ran(
            "import bpy\nm = bpy.data.materials.new('M')\nm.use_nodes = True\n"
            "n = m.node_tree.nodes.new('ShaderNodeWavelength')\nn.inputs[0].default_value = 500\n"
            "print(n.bl_idname)"), "ShaderNodeWavelength\n")
        self.assertEqual(self.ran(
            "import bpy\na = bpy.data.armatures.new('A')\no = bpy.data.objects.new('Rig', a)\n"
            "bpy.context.scene.collection.objects.link(o)\nbpy.context.view_layer.update()\n"
            "print(len(o.pose.bones))"), "0\n")
        # The first isinstance against a runtime-checkable protocol makes its __annotations__.
        self.assertEqual(self.ran("import typing\nprint(isinstance(1, typing.SupportsInt), "
                                  "issubclass(int, typing.SupportsAbs), isinstance(1.0, typing.SupportsRound))"),
                         "True True True\n")
        self.assertEqual(self.ran(
            "import bpy\nclass Helper(type(bpy.data.meshes[0])):\n    def area(self):\n        return 1\n"
            "class K(type(bpy.context.scene.display)):\n    tag = 1\nprint(Helper.area(None), K.tag)"), "1 1\n")

    def test_handlers_left_by_code_are_taken_off_before_the_rollback_reload(self):
        # With the gate off (as the jail's tests run it) nothing refuses the names: the check at
        # run time alone must hold. load_post would fire inside the rollback's reload.
        confine.GATE_OFF = True
        try:
            lengths = [(name, len(getattr(bpy.app.handlers, name))) for name in ("frame_change_pre", "load_post")]
            before = fingerprint()
            code = ("import bpy\ndef moved(*args):\n    bpy.data.objects['Cube'].location.x = 42\n"
                    "bpy.app.handlers.frame_change_pre.append(moved)\nbpy.app.handlers.load_post.append(moved)\n")
            error = self.refused_kernel_state(code)
            self.assertEqual(error["details"]["changed"],
                             ["bpy.app.handlers.frame_change_pre", "bpy.app.handlers.load_post"])
            error = self.refused_kernel_state(code + "raise RuntimeError('and fail')")
            self.assertEqual([(name, len(getattr(bpy.app.handlers, name))) for name in ("frame_change_pre",
                                                                                      "load_post")], lengths)
            bpy.context.scene.frame_set(5)
            self.assertEqual(fingerprint(), before)
        finally:
            confine.GATE_OFF = False

    def test_key_maps_and_registered_texts_left_by_code_are_refused_and_taken_off(self):
        # With the gate off the code reaches them by name; with it on, only through path_resolve
        # with a run-time string, which the gate now refuses (test_hardening). The check must hold
        # alone: key maps are not in the .blend, so no rollback removes what the code added.
        confine.GATE_OFF = True
        try:
            def key_maps():
                return sorted((kc.name, km.name, len(km.keymap_items))
                              for kc in bpy.context.window_manager.keyconfigs for km in kc.keymaps)
            # The person's map (an add-on's): the code adds to it and takes from it. (Blender's own
            # maps are left alone: Blender 3.4 crashed in a later factory reset after tests
            # changed them.)
            person = bpy.context.window_manager.keyconfigs.addon.keymaps.new("Person Map", space_type="EMPTY")
            person.keymap_items.new("object.select_all", "A", "PRESS")
            self.addCleanup(lambda: [person.keymap_items.remove(i) for i in list(person.keymap_items)])
            before = key_maps()
            code = ("import bpy\nkcs = bpy.context.window_manager.keyconfigs\n"
                    "km = kcs.addon.keymaps.new('Agent Map', space_type='EMPTY')\n"
                    "kmi = km.keymap_items.new('wm.context_set_value', 'F9', 'PRESS')\n"
                    "kmi.properties.data_path = 'scene.frame_current'\nkcs.new('Agent Keys')\n"
                    "kcs.addon.keymaps['Person Map'].keymap_items.new('wm.context_toggle', 'F8', 'PRESS')\n"
                    "text = bpy.data.texts.new('agent.py')\ntext.from_string('print(1)')\ntext.use_module = True\n")
            error = self.refused_kernel_state(code)
            changed = error["details"]["changed"]
            self.assertIn("key configuration Agent Keys", changed)
            self.assertIn("key map Agent Map", changed)
            self.assertIn("text agent.py (registered as a module)", changed)
            self.assertEqual(len(changed), 4, changed)  # and the person's map an item was added to
            self.assertEqual(key_maps(), before)
            self.assertNotIn("agent.py", bpy.data.texts)
            # Items removed cannot be put back: refused, and named so.
            error = self.refused_kernel_state(
                "import bpy\nm = bpy.context.window_manager.keyconfigs.addon.keymaps['Person Map']\n"
                "m.keymap_items.remove(m.keymap_items[0])\n")
            self.assertTrue(error["details"]["changed"][0].endswith("(items removed, not put back)"), error)
            # A registered text the person had, rewritten by the code: refused and rolled back.
            text = bpy.data.texts.new("rig_ui.py")
            text.from_string("print('rig')")
            text.use_module = True
            error = self.refused_kernel_state("import bpy\nbpy.data.texts['rig_ui.py'].from_string('print(2)')\n")
            self.assertEqual(error["details"]["changed"], ["text rig_ui.py (registered as a module)"])
            self.assertEqual(bpy.data.texts["rig_ui.py"].as_string().strip(), "print('rig')")
        finally:
            confine.GATE_OFF = False

    def test_the_context_hands_out_only_what_the_attribute_rules_allow(self):
        # Context.copy hands out every member by a string key, which no text rule sees.
        self.assertEqual(self.ran("import bpy\nC = bpy.context\nprint(sorted(k for k in C.copy()\n"
                                  "             if k in ('scene', 'object', 'prefer' + 'ences', 'window_manager')))"),
                         "['object', 'scene', 'window_manager']\n")
        self.failed("import bpy\nbpy.context.copy()['prefer' + 'ences'].edit.undo_steps = 3", "KeyError")
        self.assertEqual(bpy.context.preferences.edit.undo_steps, self.undo_steps)
        # The view forwards to the real context: overrides show through.
        self.assertEqual(self.ran("import bpy\nwith bpy.context.temp_override(object=bpy.data.objects['Camera']):\n"
                                  "    print(bpy.context.object.name)\nprint(bpy.context.object.name, "
                                  "tuple(bpy.context.path_resolve('object.location')))"),
                         "Camera\nCube (0.0, 0.0, 0.0)\n")
        # Its own path rule holds when called past the gate.
        from vibe_kernel.module_views import context_view
        with self.assertRaises(AttributeError):
            context_view(bpy.context).path_resolve("prefer" + "ences")

    def test_a_property_callback_is_refused(self):
        # Blender calls it later (a redraw, a frame change), with the real context.
        for code in ("import bpy\ndef grab(self, ctx):\n    pass\nx = bpy.props.IntProperty(update=grab)",
                     "from bpy import props\nx = props.EnumProperty(items=lambda s, c: [])",
                     "import bpy\nmat = bpy.data.materials.new('M')\nmat.use_nodes = True\n"
                     "node = mat.node_tree.nodes.new('ShaderNodeVectorRotate')\nt = type(node)\n"
                     "t.probe = bpy.props.IntProperty(get=lambda self: 42)"):
            with self.subTest(code=code):
                self.failed(code, "callback")
        self.assertFalse(hasattr(bpy.types.ShaderNodeVectorRotate, "probe"))
        self.assertEqual(self.ran("import bpy\nx = bpy.props.EnumProperty(items=[('A', 'a', '')], name='e')\n"
                                  "y = bpy.props.IntProperty(default=2, min=0)\nprint('made')"), "made\n")

    def test_preferences_changed_by_code_are_put_back_and_refused(self):
        # With the gate off (no views) the code reaches the real preferences, as a callback
        # Blender calls with the real context would: the check must hold alone.
        filepaths = bpy.context.preferences.filepaths
        lists = hasattr(filepaths, "script_directories")  # a list from Blender 4.2 on
        count = len(filepaths.script_directories) if lists else 0
        auto_run = filepaths.use_scripts_auto_execute
        confine.GATE_OFF = True
        try:
            error = self.refused_kernel_state(
                "import bpy\nprefs = bpy.context.preferences\nprefs.edit.undo_steps = 3\n"
                "prefs.filepaths.use_scripts_auto_execute = %r\n" % (not auto_run)
                + ("prefs.filepaths.script_directories.new()\n" if lists else ""))
        finally:
            confine.GATE_OFF = False
        changed = error["details"]["changed"]
        self.assertIn("preferences.edit.undo_steps", changed)
        self.assertIn("preferences.filepaths.use_scripts_auto_execute", changed)
        self.assertEqual(bpy.context.preferences.edit.undo_steps, self.undo_steps)
        self.assertEqual(filepaths.use_scripts_auto_execute, auto_run)
        if lists:
            self.assertIn("preferences.filepaths.script_directories", changed)
            self.assertEqual(len(filepaths.script_directories), count)

    def test_a_setting_blender_writes_itself_during_a_render_is_not_a_change(self):
        # bpy 5.2 writes the GPU backend it picked over `AUTO` when a render first starts the GPU.
        if not hasattr(bpy.context.preferences.system, "gpu_preferred_device"):
            self.skipTest("no gpu_preferred_device before Blender 4.x")
        self.ok("python.exec", code="import bpy\nr = bpy.context.scene.render\nr.engine = 'BLENDER_WORKBENCH'\n"
                "r.resolution_x = r.resolution_y = 16\nbpy.ops.render.render()")

    def test_a_container_a_module_holds_is_the_runs_own_copy(self):
        import copy
        import collections
        table = dict(copy.dispatch_table)
        self.ran("import copy, collections\ndef spy(x):\n    return (collections.OrderedDict, ())\n"
                 "copy.dispatch_table[collections.OrderedDict] = spy\nprint(len(copy.dispatch_table))")
        self.assertEqual(copy.dispatch_table, table)
        self.assertEqual(copy.copy(collections.OrderedDict(a=1)), {"a": 1})

    def test_operators_evaluate_no_string_for_agent_code(self):
        # The node operators evaluate their `settings` values; the gate sees `settings=` only
        # where it can see the operator's name. Past it (`[...][0]`), the run-time guard refuses.
        import bl_operators.node as node_operators
        from vibe_kernel.kernel_state import NoEvaluation
        guard = NoEvaluation()
        guard.on()
        try:
            with self.assertRaises(RuntimeError):
                vars(node_operators)["eval"]("1 + 1")
        finally:
            guard.off()
        self.assertNotIn("eval", vars(node_operators))  # the guard is off again
        self.assertEqual(eval("1 + 1", vars(node_operators)), 2)
        if bpy.app.version < (4, 0, 0):
            # Run in a node editor of Blender 3.4 -b, the operator left the process to crash in
            # a later factory reset (a thread's interpreter loop, tests later in the suite).
            self.skipTest("the operator run through agent code: bpy 4.0 and later only")
        code = ("import bpy\nscreen = bpy.data.screens['Shading']\n"
                "area = [a for a in screen.areas if a.type == 'NODE_EDITOR'][0]\n"
                "mat = bpy.data.materials.new('M')\nmat.use_nodes = True\n"
                "area.spaces.active.node_tree = mat.node_tree\n"
                "add = [bpy.ops.node.add_node][0]\n"
                "with bpy.context.temp_override(screen=screen, area=area, region=area.regions[-1]):\n"
                "    add(type='ShaderNodeMath', settings=[{'name': 'label', 'value': \"'evaluated'\"}])\n")
        answer = self.exec(code)
        self.assertFalse(answer["ok"], answer)
        self.assertIn("evaluates a string as Python", answer["error"]["message"])  # the guard's own words
        self.assertFalse([n for m in bpy.data.materials if m.node_tree for n in m.node_tree.nodes
                          if n.label == "evaluated"])
        self.assertNotIn("eval", vars(node_operators))


if __name__ == "__main__":
    unittest.main()
