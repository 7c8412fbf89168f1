//! The code gate against a corpus of sandbox escapes (classic Python jail escapes, Blender-specific
//! ones, and every class issue 12 lists that a text gate can see): every one is refused in
//! enforcing mode, with the rule that caught it. A benign corpus must pass; deep input of every
//! construct the parser recurses on, and code built to derail its error recovery, must answer
//! from a 2 MiB thread stack, never overflow.
//!
//! The expected rules are written by hand from the policy, not recorded from the gate.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;
use support::*;
use vibe_exec::code::policy::{
    MAX_BINDING_PATH, MAX_EXPRESSION_DEPTH, MAX_FSTRING_NESTING, MAX_NESTING, MAX_SOURCE_BYTES,
};
use vibe_exec::code::{Verdict, check, check_on_stack, parse_stack};

/// (escape attempt, the rule that must catch it)
const ESCAPES: [(&str, &str); 51] = [
    ("import os\nos.system('rm -rf ~')", "import_not_allowed"),
    (
        "import subprocess\nsubprocess.run(['sh'])",
        "import_not_allowed",
    ),
    ("from os import system", "import_not_allowed"),
    (
        "import importlib\nimportlib.import_module('os')",
        "import_not_allowed",
    ),
    ("import sys\nsys.modules['os']", "import_not_allowed"),
    ("import builtins", "import_not_allowed"),
    ("import ctypes", "import_not_allowed"),
    ("import socket", "import_not_allowed"),
    ("import shutil", "import_not_allowed"),
    ("import pickle", "import_not_allowed"),
    ("from . import secrets", "import_not_allowed"),
    ("__import__('os').system('id')", "dunder_access"),
    (
        "().__class__.__bases__[0].__subclasses__()",
        "dunder_access",
    ),
    (
        "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen']",
        "dunder_access",
    ),
    (
        "f = lambda: 0\nf.__globals__['__builtins__']",
        "dunder_access",
    ),
    ("print.__self__", "dunder_access"),
    ("x = __builtins__", "dunder_access"),
    ("(lambda: 0).__code__", "dunder_access"),
    ("import bpy\nbpy.__loader__", "dunder_access"),
    ("eval('1+1')", "builtin_denied"),
    ("exec('import os')", "builtin_denied"),
    ("compile('x', 'f', 'exec')", "builtin_denied"),
    ("open('/etc/passwd').read()", "builtin_denied"),
    ("getattr(().__class__, 'mro')", "builtin_denied"),
    ("setattr(object, 'x', 1)", "builtin_denied"),
    ("globals()['x'] = 1", "builtin_denied"),
    ("vars()", "builtin_denied"),
    ("breakpoint()", "builtin_denied"),
    ("ｅｖａｌ('1')", "builtin_denied"),
    ("e = exec\ne('x')", "builtin_denied"),
    ("'{0.__class__.__mro__}'.format(1)", "dunder_string"),
    (
        "import bpy\nf = lambda: None\nbpy.app.timers.register(f, persistent=True)",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.app.handlers.load_post.append(print)",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.app.driver_namespace['x'] = print",
        "attribute_denied",
    ),
    ("from bpy.app import timers", "import_not_allowed"),
    (
        "import bpy\nbpy.utils.execfile('/tmp/x.py')",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.utils.register_class(object)",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.data.texts['x'].as_module()",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.msgbus.subscribe_rna(key=None, owner=None, args=(), notify=print)",
        "attribute_denied",
    ),
    ("import bpy\nbpy.ops.wm.quit_blender()", "operator_denied"),
    // The undo history holds the person's steps in the GUI.
    (
        "import bpy\nfor _ in range(50):\n    bpy.ops.ed.undo()",
        "operator_denied",
    ),
    (
        "import bpy\ned = bpy.ops.ed\ned.undo_history(item=0)",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.open_mainfile(filepath='/home/ann/rig.blend')",
        "operator_denied",
    ),
    (
        "import bpy\nops = bpy.ops\nops.wm.save_as_mainfile(filepath='/tmp/x.blend')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.preferences.addon_install(filepath='/tmp/evil.zip')",
        "operator_denied",
    ),
    (
        "import bpy\nm = bpy.data.materials.new('m')\nm.node_tree.nodes.new('ShaderNodeScript')",
        "script_node",
    ),
    (
        "import bpy\nw = bpy.ops.wm\nw.quit_blender()",
        "operator_denied",
    ),
    // The catch-all groups through an alias: the chain resolves to bpy.ops.wm.append.
    (
        "import bpy\no = bpy.ops\no.wm.append(filename='x')",
        "operator_denied",
    ),
    (
        "import bpy\nw = bpy.ops.wm\nw.link(filename='x')",
        "operator_denied",
    ),
    (
        "import bpy\no = bpy.ops\ns = o.script\ns.python_file_run(filepath='/tmp/x.py')",
        "operator_denied",
    ),
    (
        "import bpy\np = bpy.ops.preferences\np.addon_enable(module='evil')",
        "operator_denied",
    ),
];

/// Issue 12's payload classes, as far as a text gate can see them: (escape, the rule).
const ISSUE_12_ESCAPES: &[(&str, &str)] = &[
    // Frames, code objects and tracebacks reach any module's globals.
    (
        "def g():\n    yield 1\nx = g()\nx.gi_frame.f_back.f_globals['os']",
        "frame_access",
    ),
    (
        "async def c():\n    pass\nc().cr_frame.f_globals",
        "frame_access",
    ),
    ("async def a():\n    yield 1\na().ag_frame", "frame_access"),
    (
        "g = (x for x in [1])\ng.gi_frame.f_builtins",
        "frame_access",
    ),
    ("def g():\n    yield\ng().gi_yieldfrom", "frame_access"),
    ("async def c():\n    pass\nc().cr_await", "frame_access"),
    (
        "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    t = e\nf = t.tb_frame",
        "frame_access",
    ),
    (
        "def f(tb):\n    return tb.tb_next.tb_frame.f_locals",
        "frame_access",
    ),
    ("def f(fr):\n    return fr.f_back.f_code", "frame_access"),
    ("k = lambda: 0\nk.gi_code", "frame_access"),
    ("f = print\nf.func_globals", "frame_access"),
    ("def f(code):\n    return code.co_consts", "frame_access"),
    // Private attributes of allowed modules import what the allowlist does not.
    ("import random\nrandom._os.system('id')", "private_access"),
    (
        "import bpy\nbpy.utils._test_import('os', {})",
        "private_access",
    ),
    (
        "import collections\ncollections._sys.modules",
        "private_access",
    ),
    ("import statistics\nstatistics._sum", "private_access"),
    ("import datetime\ndatetime._time", "private_access"),
    ("import enum\nenum._sys", "private_access"),
    ("import re\nre._compiler", "private_access"),
    (
        "import typing\ntyping._eval_type(ref, {}, {})",
        "string_evaluation",
    ),
    ("from random import _os", "import_not_allowed"),
    ("from typing import _eval_type", "import_not_allowed"),
    ("import json._x", "import_not_allowed"),
    (
        "class A:\n    def m(self):\n        return self.__x",
        "private_access",
    ),
    // Dunder names built at run time, and the helpers that look names up.
    (
        "g = (x for x in [1])\n'{0.gi_frame}'.format(g)",
        "dynamic_attribute",
    ),
    ("'{x.y}'.format(x=1)", "dynamic_attribute"),
    ("'{0[0]}'.format([1])", "dynamic_attribute"),
    ("'{:{0.x}}'.format(1)", "dynamic_attribute"),
    ("'{0.x}'.format_map({})", "dynamic_attribute"),
    (
        "fmt = '{0.' + '_' * 2 + 'class' + '_' * 2 + '}'\nfmt.format(1)",
        "dynamic_attribute",
    ),
    ("str.format('{0.x}', 1)", "dynamic_attribute"),
    ("f = '{0.x}'.format\nf(1)", "dynamic_attribute"),
    ("x = 1\nf'{x}'.format(1)", "dynamic_attribute"),
    (
        "m = map(str.format_map, ['{0.x}'], [{}])",
        "dynamic_attribute",
    ),
    (
        "import string\nstring.Formatter().get_field('0.x', [1], {})",
        "dynamic_attribute",
    ),
    (
        "import string\nf = string.Formatter()\nf.vformat('{0.x}', [1], {})",
        "dynamic_attribute",
    ),
    ("from string import Formatter", "import_not_allowed"),
    (
        "import operator\noperator.attrgetter('x')",
        "import_not_allowed",
    ),
    ("from operator import attrgetter", "import_not_allowed"),
    ("attrgetter('gi_frame')(g)", "dynamic_attribute"),
    ("methodcaller('format', 1)(s)", "dynamic_attribute"),
    ("x = y.attrgetter", "dynamic_attribute"),
    ("type('X', (object,), {})", "dynamic_attribute"),
    ("t = type\nt('X', (), {})", "dynamic_attribute"),
    ("type(*args)", "dynamic_attribute"),
    ("type(x, name='y')", "dynamic_attribute"),
    ("class M(type):\n    pass", "dynamic_attribute"),
    (
        "import typing\ntyping.Type('X', (), {})",
        "dynamic_attribute",
    ),
    (
        "import enum\nE = enum.Enum('E', names)",
        "dynamic_attribute",
    ),
    (
        "from enum import IntEnum\nE = IntEnum('E', names=n)",
        "dynamic_attribute",
    ),
    (
        "import functools\nfunctools.update_wrapper(a, b, assigned=names, updated=())",
        "dynamic_attribute",
    ),
    (
        "import functools\nw = functools.wraps(f, names)",
        "dynamic_attribute",
    ),
    (
        "n = bytes([95, 95]).decode() + 'class' + bytes([95, 95]).decode()\ngetattr(x, n)",
        "builtin_denied",
    ),
    ("n = 'gi' + '_frame'\nf = vars(g)[n]", "builtin_denied"),
    ("n = '__cla' 'ss__'", "dunder_string"),
    ("x = 1\ns = f'{x}__class__'", "dunder_string"),
    // Library functions that evaluate strings.
    (
        "import typing\ntyping.get_type_hints(f)",
        "string_evaluation",
    ),
    ("from typing import get_type_hints", "import_not_allowed"),
    (
        "import typing\nr = typing.ForwardRef('os')",
        "string_evaluation",
    ),
    (
        "import typing as t\nt.evaluate_forward_ref(r)",
        "string_evaluation",
    ),
    (
        "def f(x: \"os.system('id')\"):\n    pass",
        "string_evaluation",
    ),
    ("def f() -> 'evil()':\n    pass", "string_evaluation"),
    ("x: 'evil()' = 1", "string_evaluation"),
    (
        "import functools\n@functools.singledispatch\ndef f(x):\n    pass\n@f.register\ndef g(x: 'List[int]'):\n    pass",
        "string_evaluation",
    ),
    (
        "import bpy\nbpy.utils.units.to_value('METRIC', 'LENGTH', s)",
        "string_evaluation",
    ),
    (
        "import bpy\nbpy.ops.wm.context_set_value(data_path='x', value='y')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.context_toggle(data_path='space_data.x')",
        "operator_denied",
    ),
    (
        "import bpy\nw = bpy.ops.wm\nw.context_modal_mouse(data_path_iter='x', data_path_item='y')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.context_cycle_enum(data_path='x')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.context_cycle_array(data_path='x')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.context_scale_float(data_path='x', value=2.0)",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.context_collection_boolean_set(data_path_iter='x', data_path_item='y')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.context_menu_enum(data_path='x')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.context_set_string(data_path='x')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.properties_edit(data_path='x', property_name='y')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.operator_pie_enum(data_path='x')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.call_menu(name='X')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.types.WM_OT_context_set_value.execute(fake, bpy.context)",
        "registered_class",
    ),
    (
        "import bpy\nbpy.types.VIEW3D_MT_add.append(draw)",
        "registered_class",
    ),
    (
        "from bpy.types import WM_OT_context_toggle",
        "import_not_allowed",
    ),
    (
        "import bpy\nkc = bpy.context.window_manager.keyconfigs.user",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.keyconfig_import(filepath='/tmp/k.py')",
        "operator_denied",
    ),
    (
        "import bpy\nt = bpy.data.texts.new('x')\nt.write('import os')\nt.as_module()",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.data.texts.load('/etc/passwd')",
        "attribute_denied",
    ),
    ("import bpy\nbpy.ops.text.run_script()", "operator_denied"),
    ("import bpy\nbpy.ops.text.save()", "operator_denied"),
    ("import bpy\nbpy.ops.console.execute()", "operator_denied"),
    (
        "import bpy\nbpy.ops.script.execute_preset(filepath='/tmp/p.py', menu_idname='x')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.extensions.package_install_files(filepath='/tmp/x.zip')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.utils.register_classes_factory([X])",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.utils.modules_from_path('/tmp', set())",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.utils.keyconfig_set('/tmp/k.py')",
        "attribute_denied",
    ),
    // Python drivers, after switching auto-run on.
    (
        "import bpy\nbpy.context.preferences.filepaths.use_scripts_auto_execute = True",
        "attribute_denied",
    ),
    (
        "import bpy\nC = bpy.context\np = C.preferences",
        "attribute_denied",
    ),
    (
        "def f(fp):\n    fp.use_scripts_auto_execute = True",
        "attribute_denied",
    ),
    (
        "import bpy\nd = bpy.data.objects['Cube'].driver_add('location', 0)",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.data.objects['Cube'].animation_data.drivers.new('location')",
        "attribute_denied",
    ),
    (
        "import bpy\nns = bpy.app.driver_namespace",
        "attribute_denied",
    ),
    // Handlers and timers reached by run-time names.
    (
        "import bpy.app.handlers as h\nh.depsgraph_update_post.append(print)",
        "import_not_allowed",
    ),
    (
        "from bpy.app.handlers import persistent",
        "import_not_allowed",
    ),
    (
        "from bpy.app import *\nhandlers.load_post.append(print)",
        "import_not_allowed",
    ),
    (
        "from bpy.utils import *\nexecfile('/tmp/x.py')",
        "import_not_allowed",
    ),
    (
        "import bpy\napp = bpy.app\nt = app.timers",
        "attribute_denied",
    ),
    // Special methods that act after the call returned, or hook lookups and class creation.
    (
        "class A:\n    def __del__(self):\n        print('later')\nkeep = A()",
        "dunder_definition",
    ),
    (
        "class A:\n    if True:\n        def __del__(self):\n            pass",
        "dunder_definition",
    ),
    (
        "class A:\n    def __getattr__(self, n):\n        return n",
        "dunder_definition",
    ),
    (
        "class A:\n    def __getattribute__(self, n):\n        return n",
        "dunder_definition",
    ),
    (
        "class A:\n    def __init_subclass__(cls):\n        pass",
        "dunder_definition",
    ),
    (
        "class A:\n    def __set_name__(self, o, n):\n        pass",
        "dunder_definition",
    ),
    (
        "class A:\n    def __class_getitem__(cls, k):\n        pass",
        "dunder_definition",
    ),
    (
        "class A:\n    def __reduce__(self):\n        return (print, ())",
        "dunder_definition",
    ),
    ("def __del__(self):\n    pass", "dunder_definition"),
    ("class A(metaclass=M):\n    pass", "metaclass_denied"),
    ("class A(B, hook=1):\n    pass", "metaclass_denied"),
    ("class A(*bases):\n    pass", "metaclass_denied"),
    ("class A(**kw):\n    pass", "metaclass_denied"),
    (
        "import enum\nclass E(metaclass=enum.EnumMeta):\n    pass",
        "metaclass_denied",
    ),
    (
        "import abc\nclass A(abc.ABC):\n    pass",
        "import_not_allowed",
    ),
    (
        "import collections.abc as c\nM = c.ABCMeta",
        "metaclass_denied",
    ),
    ("class A:\n    __del__ = print", "dunder_access"),
    (
        "class A:\n    def __init__(self):\n        self.__dict__['x'] = 1",
        "dunder_access",
    ),
    (
        "class A:\n    def __init__(self):\n        self.__init__()",
        "dunder_access",
    ),
    (
        "class A:\n    def m(self):\n        return super().__getattribute__('x')",
        "dunder_access",
    ),
    // Replacing the kernel's own check, or patching a module the kernel shares.
    ("import vibe_kernel", "import_not_allowed"),
    ("from vibe_kernel import gate", "import_not_allowed"),
    ("vibe_kernel.check = lambda code: True", "kernel_access"),
    ("import bpy\nk = bpy.vibe_kernel_state", "kernel_access"),
    ("m = modules['vibe_kernel.codeexec']", "kernel_access"),
    (
        "import json\njson.dumps = lambda *a, **k: '{}'",
        "module_patch",
    ),
    ("import re\nre.compile = None", "module_patch"),
    ("import json as j\nj.loads = print", "module_patch"),
    ("import json\nm = json\nm.dumps = print", "module_patch"),
    ("import json\ndel json.dumps", "module_patch"),
    (
        "import json\njson.decoder.JSONDecoder.decode = print",
        "module_patch",
    ),
    (
        "import bpy\nbpy.types.Object.evil = property(print)",
        "module_patch",
    ),
    (
        "import bpy\nT = bpy.types\nT.Scene.hook = 1",
        "module_patch",
    ),
    (
        "from bpy import types\ntypes.Object.hook = 1",
        "module_patch",
    ),
    ("import bpy\nbpy.hook = print", "module_patch"),
    (
        "from mathutils import Vector\nVector.length = 0",
        "module_patch",
    ),
    ("import bpy\ntype(bpy.context.object).x = 1", "module_patch"),
    ("import random\nrandom.random, x = print, 1", "module_patch"),
    ("import math\nfor math.pi in [3]:\n    pass", "module_patch"),
    // Files written outside the sandbox (the jail's work; the gate refuses the obvious).
    (
        "import bpy\nbpy.ops.export_scene.fbx(filepath='/home/ann/x.fbx')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.export_scene.gltf(filepath='x')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.export_mesh.stl(filepath='/tmp/x.stl')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.wm.obj_export(filepath='/tmp/x.obj')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.wm.stl_export(filepath='x')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.wm.ply_export(filepath='x')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.wm.usd_export(filepath='x')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.wm.alembic_export(filepath='x')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.wm.collada_export(filepath='x')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.wm.grease_pencil_export_svg(filepath='x')",
        "file_writer",
    ),
    (
        "import bpy\ne = bpy.ops.export_scene\ne.obj(filepath='x')",
        "file_writer",
    ),
    (
        "import bpy\nimg = bpy.data.images['Render Result']\nimg.save_render('/tmp/x.png')",
        "file_writer",
    ),
    (
        "import bpy\nimg = bpy.data.images.new('i', 4, 4)\nimg.filepath_raw = '/tmp/x.png'",
        "file_writer",
    ),
    ("def f(img):\n    img.save()", "file_writer"),
    (
        "import bpy\nbpy.data.libraries.write('/tmp/x.blend', set())",
        "file_writer",
    ),
    ("import bpy\nbpy.ops.wm.save_userpref()", "file_writer"),
    (
        "import bpy\nbpy.ops.wm.sysinfo(filepath='/tmp/x.txt')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.sound.mixdown(filepath='/tmp/x.wav')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.image.save_as(filepath='/tmp/x.png')",
        "file_writer",
    ),
    ("import bpy\nbpy.ops.image.save()", "file_writer"),
    (
        "import bpy\nbpy.ops.file.unpack_all(method='WRITE_LOCAL')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.data.images['x'].unpack(method='WRITE_ORIGINAL')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.screen.screenshot(filepath='/tmp/x.png')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.anim.keying_set_export(filepath='/tmp/k.py')",
        "file_writer",
    ),
    (
        "import bpy\nbpy.ops.wm.save_mainfile(filepath='/tmp/x.blend')",
        "operator_denied",
    ),
    // External programs.
    (
        "import bpy\nbpy.ops.image.external_edit(filepath='x')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.render.play_rendered_anim()",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.doc_view_manual(doc_id='x')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.previews_batch_generate(files=[])",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.wm.url_open(url='http://x')",
        "operator_denied",
    ),
    // Attribute paths as strings: what the attribute rules refuse by name, reached at run time
    // (a key map item that runs `wm.context_set_value` on F9 in the GUI; a text marked as a
    // module; a scripted driver).
    (
        "import bpy\nkcs = bpy.context.window_manager.path_resolve('key' + 'configs')",
        "dynamic_attribute",
    ),
    (
        "import bpy\nkcs = bpy.context.path_resolve('window_manager.keyconfigs')",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.data.path_resolve('texts').foreach_set('use_module', [True])",
        "attribute_denied",
    ),
    (
        "import bpy\nt = bpy.data.objects[0]\nt.foreach_set(name, [1])",
        "dynamic_attribute",
    ),
    (
        "import bpy\nd = bpy.context.object.path_resolve('animation_data.drivers')",
        "attribute_denied",
    ),
    (
        "import bpy\nresolve = bpy.context.object.path_resolve\nresolve('location')",
        "dynamic_attribute",
    ),
    (
        "import bpy\nbpy.context.object.path_resolve(*['texts'])",
        "dynamic_attribute",
    ),
    (
        "import bpy\nbpy.context.object.path_resolve(**{'path': 'texts'})",
        "dynamic_attribute",
    ),
    (
        "import bpy\nbpy.context.object.property_unset(f'{x}')",
        "dynamic_attribute",
    ),
    (
        "import bpy\nbpy.context.object.path_resolve('modifiers[\"a\"]._x')",
        "private_access",
    ),
    // Operators named by a string: a key map item or a layout button runs them later.
    (
        "km.keymap_items.new('wm.context_set_value', 'F9', 'PRESS')",
        "operator_denied",
    ),
    (
        "items.new('WM_OT_context_toggle', 'F9', 'PRESS')",
        "operator_denied",
    ),
    ("layout.operator('wm.append')", "operator_denied"),
    (
        "layout.operator('script.python_file_run')",
        "operator_denied",
    ),
    // `settings=` values are evaluated as Python, under any name the operator is bound to.
    (
        "import bpy\nadd = bpy.ops.node.add_node\nadd(type='ShaderNodeMath', settings=[])",
        "string_evaluation",
    ),
    (
        "from bpy import ops\nops.node.add_node(type='ShaderNodeMath', settings=[])",
        "string_evaluation",
    ),
    // `register` is an ABC's registry and the UI translations: both outlive the call.
    (
        "import collections\ncollections.abc.Mapping.register(list)",
        "attribute_denied",
    ),
    // `bl_rna` is read through every instance of a class (the kernel's reads too): a lazy map
    // stored there ran when later code that only reads iterated it.
    (
        "import bpy\nC = type(bpy.data.lights[0])\nC.bl_rna = map(bpy.data.objects.remove, list(bpy.data.objects))",
        "module_patch",
    ),
    (
        "import bpy\n[type(bpy.data.cameras[0])][0].bl_rna = 1",
        "module_patch",
    ),
    // A comprehension's target stores like a for loop's.
    (
        "import bpy\n[0 for type(bpy.data.objects[0]).hook in [1]]",
        "module_patch",
    ),
];

/// Code an agent writes for real work: every one must pass.
const BENIGN: &[&str] = &[
    "import bpy\nbpy.data.objects['Cube'].location.x += 1",
    "import bpy, bmesh\nfrom mathutils import Vector\nv = Vector((1, 2, 3))\nprint(v.length)",
    "import math, random\nrandom.seed(1)\nprint(math.sqrt(random.random()))",
    "import bpy\nfor o in bpy.data.objects:\n    print(f'{o.name}: {o.type}')",
    "import bpy\nbpy.ops.mesh.primitive_cube_add(size=1)",
    "import json\nprint(json.dumps({'a': [1, 2]}))",
    // Scene edits through bpy.
    "import bpy\nobj = bpy.context.active_object\nobj.location = (1.0, 2.0, 3.0)\nobj.rotation_euler.z = 0.5\nobj.scale *= 2",
    "import bpy\nbpy.context.scene.frame_current = 10\nbpy.context.scene.render.resolution_x = 1920",
    "import bpy\nC = bpy.context\nC.scene.frame_end = 100\nscene = bpy.context.scene\nscene.render.fps = 30",
    "import bpy\nbpy.context.scene.render.filepath = '//render.png'",
    "import bpy\nbpy.context.scene.render.image_settings.file_format = 'PNG'\nbpy.context.scene.render.ffmpeg.format = 'MPEG4'",
    "import bpy\nmat = bpy.data.materials.new('Red')\nmat.use_nodes = True\nbsdf = mat.node_tree.nodes.get('Principled BSDF')\nbsdf.inputs['Base Color'].default_value = (1, 0, 0, 1)\nbpy.data.objects['Cube'].data.materials.append(mat)",
    "import bpy\nmod = bpy.data.objects['Cube'].modifiers.new(name='Bevel', type='BEVEL')\nmod.width = 0.1\nmod.segments = 3",
    "import bpy\nfor i in range(5):\n    bpy.ops.mesh.primitive_uv_sphere_add(radius=0.5, location=(i * 2, 0, 0))",
    "import bpy\nobj = bpy.data.objects['Cube']\nobj.keyframe_insert(data_path='location', frame=1)",
    "import bpy\nobj = bpy.data.objects['Cube']\nobj['my_prop'] = 1.5\nprint(obj.get('my_prop'), obj.data.vertices[0].co)",
    "import bpy\nfc = bpy.data.actions['A'].fcurves[0]\nfc.keyframe_points[0].co_ui.y = 2",
    "import bpy\nfor obj in bpy.context.scene.objects:\n    if obj.type == 'MESH' and obj.name.startswith('Cube'):\n        obj.select_set(True)\n        obj.hide_viewport = False",
    "import bpy\nscene = bpy.context.scene\ncam = bpy.data.objects.new('Cam', bpy.data.cameras.new('Cam'))\nscene.collection.objects.link(cam)\nscene.camera = cam",
    "import bpy\nbpy.ops.object.select_all(action='DESELECT')\nbpy.ops.object.shade_smooth()\nbpy.ops.object.modifier_apply(modifier='Bevel')",
    "import bpy\nwith bpy.context.temp_override(active_object=None):\n    pass",
    "import bmesh, bpy\nbm = bmesh.new()\nbmesh.ops.create_cube(bm, size=1.0)\nme = bpy.data.meshes.new('m')\nbm.to_mesh(me)\nbm.free()",
    // Math.
    "import math\nfrom mathutils import Vector, Matrix\nangle = math.radians(45)\nm = Matrix.Rotation(angle, 4, 'Z')\nv = m @ Vector((1, 0, 0))\nprint(round(v.x, 3), math.pi, math.hypot(3, 4))",
    "from math import *\nprint(sqrt(16), pi)",
    "x = 2 ** 10 // 3 % 7 - -1 + abs(-3.5) * (1 + 2j).real",
    // Classes.
    "class Foo: pass",
    "class A:\n    pass\nclass B(A):\n    def m(self):\n        return 1",
    "class Shape:\n    count = 0\n\n    def __init__(self, name, size=1.0):\n        self.name = name\n        self.size = size\n        Shape.count += 1\n\n    def __repr__(self):\n        return f'Shape({self.name!r}, {self.size})'\n\n    def area(self):\n        return self.size ** 2\n\n\nclass Square(Shape):\n    def __init__(self, name, size):\n        super().__init__(name, size)\n\n    def __eq__(self, other):\n        return isinstance(other, Square) and self.size == other.size\n\n    def __hash__(self):\n        return hash(self.size)\n\n\ns = Square('a', 2)\nprint(s, s.area(), s == Square('b', 2))",
    "class Timer:\n    def __enter__(self):\n        return self\n\n    def __exit__(self, *exc):\n        return False\n\n\nwith Timer() as t:\n    print(t)",
    "class Bag:\n    def __init__(self):\n        self.items = []\n\n    def __len__(self):\n        return len(self.items)\n\n    def __iter__(self):\n        return iter(self.items)\n\n    def __getitem__(self, i):\n        return self.items[i]\n\n    def __str__(self):\n        return 'Bag'\n\n\nb = Bag()\nb.items.append(1)\nprint(len(b), list(b), b[0], str(b))",
    "class P(object):\n    def __init__(self, x):\n        super(P, self).__init__()\n        self.x = x\n\n    @property\n    def double(self):\n        return self.x * 2\n\n    @staticmethod\n    def make():\n        return P(1)\n\n    @classmethod\n    def other(cls):\n        return cls(2)\n\n\nprint(P.make().double, P.other().x)",
    "import enum\nclass Color(enum.Enum):\n    RED = 1\n    GREEN = 2\nprint(Color.RED.name, Color(2))",
    "x = 1\nprint(type(x) is int, isinstance(x, (int, float)))",
    // Comprehensions, generators, lambdas.
    "squares = [x * x for x in range(10) if x % 2]\nlookup = {n: n ** 2 for n in range(5)}\nuniq = {c for c in 'hello'}\ntotal = sum(x for x in squares)\ndef gen(n):\n    for i in range(n):\n        yield i\nprint(list(gen(3)), total, lookup, uniq)",
    "items = [('b', 2), ('a', 1)]\nitems.sort(key=lambda kv: kv[1])\nby_name = sorted(items, key=lambda kv: kv[0], reverse=True)\nprint(items, by_name, list(map(lambda a, b: a + b, [1], [2])))",
    "def outer(k):\n    def inner(x):\n        nonlocal k\n        k += x\n        return k\n    return inner\nacc = outer(1)\nprint(acc(2), acc(3))",
    // Printing and formatting.
    "x = 3.14159\na, b = 1, 2\nprint('{:.3f}'.format(x))\nprint('{} {}'.format(a, b))\nprint('%s' % x)\nprint('%d items' % 3)\nprint('%(n)s' % {'n': 1})\nprint(f'{x:.2f} {a + b} {a!r:>5}')\nprint('{name}: {0}'.format(1, name='n'))\nprint('{0:>{1}}'.format('x', 5))\nprint('{{literal}}'.format())\nprint('{:,}'.format_map({}))",
    "s = 'Hello, World'\nprint(s.lower().replace('world', 'there').split(', '), s[::-1], s.startswith('He'), ', '.join(['a', 'b']))",
    // Control flow, errors, data.
    "try:\n    value = int('x')\nexcept ValueError as err:\n    print('bad', err)\nelse:\n    pass\nfinally:\n    print('done')",
    "n = 0\nwhile (n := n + 1) < 5:\n    if n == 2:\n        continue\n    print(n)\nelse:\n    print('end')",
    "x = [1, 2, 3]\ndel x[0]\nassert len(x) == 2, 'size'\ntry:\n    raise ValueError('boom')\nexcept (ValueError, TypeError):\n    pass",
    "d = {'a': 1}\nd.update(b=2)\nd.setdefault('c', 3)\ns = set(d) | {'z'}\nprint(d.get('a'), sorted(s), d.keys() & {'a'}, {**d, 'e': 5}, [*s])",
    "CONFIG = {'sizes': [1, 2, 3], 'names': ('a', 'b')}\ndef use():\n    global CONFIG\n    CONFIG = dict(CONFIG, extra=True)\nuse()\nprint(CONFIG)",
    "import random, json, collections\nrandom.seed(7)\ncounts = collections.Counter(random.choice('abc') for _ in range(10))\nprint(json.dumps(dict(counts), sort_keys=True))",
    "import collections\nPoint = collections.namedtuple('Point', ['x', 'y'])\np = Point(1, 2)\nprint(p.x + p.y, p._replace(x=3), p._asdict())",
    "import functools\n@functools.lru_cache(maxsize=None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\ndef deco(f):\n    @functools.wraps(f)\n    def inner(*a, **k):\n        return f(*a, **k)\n    return inner\nprint(fib(20), functools.reduce(lambda a, b: a + b, [1, 2, 3]))",
    "from typing import List, Optional\ndef total(xs: List[float], scale: Optional[float] = None) -> float:\n    return sum(xs) * (scale or 1.0)\nprint(total([1.0, 2.0]))",
    "import datetime, time\nnow = datetime.datetime(2024, 1, 2)\nprint(now.strftime('%Y-%m-%d'), time.monotonic() > 0)",
    "import itertools, statistics, colorsys, copy\npairs = list(itertools.combinations([1, 2, 3], 2))\nprint(pairs, statistics.mean([1, 2, 3]), colorsys.rgb_to_hsv(1, 0, 0), copy.deepcopy(pairs))",
    "import re\nm = re.match(r'(\\w+)-(\\d+)', 'cube-12')\nprint(m.group(1), int(m.group(2)), re.sub('a', 'b', 'aaa'), re.compile('x'))",
    "_private_local = 1\nfor _ in range(2):\n    _private_local += 1",
    "match command.split():\n    case [action, obj]:\n        print(action, obj)\n    case _:\n        pass",
    // Attribute paths and operator names as literals.
    "import bpy\nobj = bpy.context.object\nloc = obj.path_resolve('location')\nz = obj.path_resolve(path='modifiers[\"Bevel\"].width')",
    "import bpy\nme = bpy.context.object.data\nco = [0.0] * 3 * len(me.vertices)\nme.vertices.foreach_get('co', co)\nme.vertices.foreach_set('co', co)\nme.update()",
    "import bpy\nprint(bpy.data.objects['Text.001'].name, 'mesh.primitive_cube_add', 'Text.txt', 'wm.x')",
    "names = ['script.py', 'text.txt', 'console.log', 'ed.md', 'preferences.json']",
];

#[test]
fn the_escape_corpus_is_refused_in_full_with_the_rule_that_caught_it() {
    assert!(ESCAPES.len() + ISSUE_12_ESCAPES.len() >= 150);
    for (code, rule) in ESCAPES.iter().chain(ISSUE_12_ESCAPES) {
        match check(code) {
            Verdict::Violations(found) => {
                assert!(
                    found.iter().any(|v| v.rule == *rule),
                    "{code:?}: expected {rule}, got {found:?}"
                );
                for violation in &found {
                    assert!(violation.line >= 1 && violation.column >= 1, "{violation}");
                    assert!(violation.detail.len() > 10, "explained: {violation}");
                }
            }
            other => panic!("{code:?} was not refused: {other:?}"),
        }
    }
}

#[test]
fn ordinary_blender_code_passes() {
    assert!(BENIGN.len() >= 40);
    for code in BENIGN {
        assert_eq!(check(code), Verdict::Clean, "{code:?}");
    }
    // A big mesh as a literal, a long (but not absurd) expression, reasonable nesting.
    let verts: Vec<String> = (0..2000).map(|i| format!("(-{i}.5, {i}, -1.0)")).collect();
    let long_sum = vec!["x"; 120].join(" + ");
    let nested = format!("y = {}1{}", "[(".repeat(20), ")]".repeat(20));
    let code = format!(
        "verts = [\n    {}\n]\nx = 1\nt = {long_sum}\n{nested}\n",
        verts.join(",\n    ")
    );
    assert_eq!(check(&code), Verdict::Clean);
}

#[test]
fn refusals_say_where_and_why() {
    let Verdict::Violations(found) = check("import bpy\nx = 1\nbpy.app.handlers.load_post") else {
        panic!("refused")
    };
    let first = &found[0];
    assert_eq!(
        (first.rule, first.line, first.column),
        ("attribute_denied", 3, 9)
    );
    assert!(
        first
            .to_string()
            .starts_with("attribute_denied at line 3, column 9: "),
        "{first}"
    );
    let Verdict::Violations(found) = check("class A:\n    def __del__(self): pass") else {
        panic!("refused")
    };
    assert_eq!(
        (found[0].rule, found[0].line, found[0].column),
        ("dunder_definition", 2, 9)
    );
    assert!(
        found[0].detail.contains("after the call returned"),
        "{}",
        found[0]
    );
    let Verdict::Violations(found) = check(&"eval(1)\n".repeat(1000)) else {
        panic!("refused")
    };
    assert_eq!(found.len(), vibe_exec::code::policy::MAX_VIOLATIONS);
    assert_eq!(found[49].line, 50);
}

/// Inputs `depth` levels deep in one construct the parser recurses on.
fn nested(construct: &str, depth: usize) -> String {
    let wrap = |open: &str, inner: &str, close: &str| {
        format!("{}{inner}{}", open.repeat(depth), close.repeat(depth))
    };
    let block = |header: &str| {
        let mut code = String::new();
        for level in 0..depth {
            code.push_str(&format!("{}{header}\n", " ".repeat(level)));
        }
        code + &" ".repeat(depth) + "pass\n"
    };
    match construct {
        "parentheses" => wrap("(", "1", ")"),
        "lists" => wrap("[", "", "]"),
        "dicts" => wrap("{1: ", "1", "}"),
        "calls with keywords" => wrap("f(a=", "1", ")"),
        "comprehensions" => wrap("[x for x in ", "y", "]"),
        "unary minus" => wrap("- ", "x", ""),
        "not" => wrap("not ", "x", ""),
        "lambda" => wrap("lambda: ", "0", ""),
        "lambda with parameters" => wrap("lambda a, b=1: ", "0", ""),
        "await" => format!("async def f():\n    {}", wrap("await ", "x", "")),
        "yield in tuples" => format!("def f():\n    x = {}", wrap("yield 1, ", "1", "")),
        "attribute chain" => wrap("", "a", ".b"),
        "call chain" => wrap("", "f", "()"),
        "subscript chain" => wrap("", "a", "[0]"),
        "sum" => wrap("", "1", " + 1"),
        "power" => wrap("", "2", " ** 2"),
        "conditional" => wrap("1 if c else ", "1", ""),
        "f-strings" => wrap("f\"{", "x", "}\""),
        "format specs" => format!("f\"{}\"", wrap("{x:", "x", "}")),
        "walrus" => wrap("(a := ", "1", ")"),
        "starred" => wrap("*", "a", ""),
        "match patterns" => format!(
            "match x:\n    case {}:\n        pass\n",
            wrap("[", "1", "]")
        ),
        "if blocks" => block("if x:"),
        "def blocks" => block("def f(a, b=1):"),
        "class blocks" => block("class A(B):"),
        "with blocks" => block("with a as b:"),
        "mixed" => wrap("(-a.b[not f(lambda: ", "x", ")])"),
        other => panic!("{other}"),
    }
}

const CONSTRUCTS: [&str; 27] = [
    "parentheses",
    "lists",
    "dicts",
    "calls with keywords",
    "comprehensions",
    "unary minus",
    "not",
    "lambda",
    "lambda with parameters",
    "await",
    "yield in tuples",
    "attribute chain",
    "call chain",
    "subscript chain",
    "sum",
    "power",
    "conditional",
    "f-strings",
    "format specs",
    "walrus",
    "starred",
    "match patterns",
    "mixed",
    "if blocks",
    "def blocks",
    "class blocks",
    "with blocks",
];

/// Runs `f` on a thread with the default 2 MiB stack (a test thread's, a tokio worker's), the
/// realistic place for an embedding process to call the gate.
fn on_default_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let thread = std::thread::Builder::new().stack_size(2 << 20).spawn(f);
    thread.unwrap().join().unwrap()
}

fn is_limit(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Violations(found) if found.len() == 1
        && matches!(found[0].rule, "nesting_too_deep" | "source_too_large")
        && [
            "MAX_NESTING = 100",
            "MAX_EXPRESSION_DEPTH = 256",
            "MAX_FSTRING_NESTING = 4",
            "MAX_SOURCE_BYTES = 131072",
        ]
        .iter()
            .any(|limit| found[0].detail.contains(limit))
        && found[0].line >= 1 && found[0].column == 1)
}

#[test]
fn deep_input_of_every_construct_answers_with_the_limit_named() {
    on_default_stack(|| {
        for construct in CONSTRUCTS {
            for depth in [100, 1_000, 10_000, 100_000] {
                let blocks = construct.ends_with("blocks");
                if blocks && depth > 1_000 {
                    continue; // indentation grows as depth²: past MAX_SOURCE_BYTES already
                }
                let started = Instant::now();
                let verdict = check(&nested(construct, depth));
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "{construct} {depth}"
                );
                if depth >= 1_000 {
                    assert!(is_limit(&verdict), "{construct} at {depth}: {verdict:?}");
                }
            }
        }
    });
}

#[test]
fn the_deepest_accepted_input_of_every_construct_fits_in_half_the_default_stack() {
    // The parser gets 1 MiB of stack here, not the stack `check` sizes for the source.
    let check = |source: &str| check_on_stack(source, 1 << 20);
    let thread = std::thread::Builder::new().spawn(move || {
        for construct in CONSTRUCTS {
            let (mut accepted, mut refused) = (1, 2 * MAX_EXPRESSION_DEPTH);
            assert!(is_limit(&check(&nested(construct, refused))), "{construct}");
            while refused - accepted > 1 {
                let depth = (accepted + refused) / 2;
                match is_limit(&check(&nested(construct, depth))) {
                    true => refused = depth,
                    false => accepted = depth,
                }
            }
            if construct == "f-strings" {
                assert_eq!(accepted, MAX_FSTRING_NESTING);
                continue;
            }
            assert!(
                accepted >= 20,
                "{construct}: only {accepted} levels accepted"
            );
            if construct == "parentheses" || construct == "lists" {
                assert_eq!(accepted, MAX_NESTING, "{construct}");
            }
        }
    });
    thread.unwrap().join().unwrap();
}

#[test]
fn sixteen_mebibytes_answer_on_the_default_stack() {
    on_default_stack(|| {
        let payload = 16 * 1024 * 1024;
        for unit in [
            "(",
            "-",
            "not ",
            "lambda: ",
            "f\"{",
            "a.",
            "x = 1\n",
            "'",
            "eval(1)\n",
        ] {
            let source = unit.repeat(payload / unit.len());
            let started = Instant::now();
            assert!(is_limit(&check(&source)), "{unit:?}");
            assert!(started.elapsed() < Duration::from_secs(2), "{unit:?}");
        }
        // Just under the gate's own limit, every nesting is refused on its depth instead.
        for unit in [
            "(",
            "-",
            "not ",
            "lambda: ",
            "f\"{",
            "a.",
            "1 if c else ",
            "yield 1, ",
        ] {
            let source = unit.repeat(MAX_SOURCE_BYTES / unit.len());
            let verdict = check(&source);
            let depth =
                matches!(&verdict, Verdict::Violations(f) if f[0].rule == "nesting_too_deep");
            assert!(depth && is_limit(&verdict), "{unit:?}: {verdict:?}");
        }
        // And a flat program of that size parses and passes, in bounded time.
        let program = "x = bpy.data.objects['Cube'].location.x + 1\n";
        let source = format!(
            "import bpy\n{}",
            program.repeat((MAX_SOURCE_BYTES - 11) / program.len())
        );
        let started = Instant::now();
        assert_eq!(check(&source), Verdict::Clean);
        assert!(started.elapsed() < Duration::from_secs(30));
    });
}

/// Deep input mixing the constructs, up to 50,000 levels each (blocks up to 1,500: their
/// indentation grows as depth²), often shallow enough to parse.
fn deep_input() -> impl Strategy<Value = String> {
    let depth = prop_oneof![2 => 1..=120usize, 1 => 1..=50_000usize];
    let layer = (0..CONSTRUCTS.len() - 4, depth);
    let inline = prop::collection::vec(layer, 1..=3).prop_map(|layers| {
        let mut code = String::from("x");
        for (construct, depth) in layers {
            let sample = nested(CONSTRUCTS[construct], depth);
            // Put what was built so far where the construct's innermost operand is.
            let operand = ["1", "x", "y", "0", "a", "f", "2"]
                .into_iter()
                .filter_map(|o| sample.find(o).map(|at| (at, o)))
                .max_by_key(|(at, _)| *at);
            code = match operand {
                Some((at, o)) => format!("{}{code}{}", &sample[..at], &sample[at + o.len()..]),
                None => sample,
            };
        }
        code
    });
    let blocks = (
        0..4usize,
        1..=1_500usize,
        0..CONSTRUCTS.len() - 4,
        1..=120usize,
    )
        .prop_map(|(header, depth, inner, inner_depth)| {
            let header = ["if x:", "for i in y:", "while x:", "try:"][header];
            let mut code = String::new();
            for level in 0..depth {
                code.push_str(&format!("{}{header}\n", " ".repeat(level)));
            }
            let body = nested(CONSTRUCTS[inner], inner_depth).replace('\n', " ");
            code + &" ".repeat(depth) + &body + "\n"
        });
    prop_oneof![3 => inline, 1 => blocks]
}

/// Runs 256 cases of `input` through the gate from a 2 MiB stack, each answering within five
/// seconds, and counts the verdicts by rule (`syntax error` and `clean` for the others).
fn tally_verdicts(
    input: impl Strategy<Value = String> + Send + 'static,
) -> BTreeMap<&'static str, usize> {
    on_default_stack(move || {
        let mut runner = TestRunner::new(Config {
            cases: 256,
            failure_persistence: None,
            ..Config::default()
        });
        let tally = std::cell::RefCell::new(BTreeMap::new());
        runner
            .run(&input, |source| {
                let started = Instant::now();
                let verdict = check(&source);
                prop_assert!(started.elapsed() < Duration::from_secs(5));
                let kind = match &verdict {
                    Verdict::Violations(f) => f[0].rule,
                    Verdict::Syntax(_) => "syntax error",
                    Verdict::Clean => "clean",
                };
                *tally.borrow_mut().entry(kind).or_insert(0) += 1;
                Ok(())
            })
            .unwrap();
        tally.into_inner()
    })
}

#[test]
fn the_gate_never_panics_on_generated_deep_input() {
    let counts = tally_verdicts(deep_input());
    println!("deep input, 256 cases: {counts:?}");
    assert!(
        counts.get("nesting_too_deep").is_some_and(|n| *n > 0),
        "the depth limit was exercised"
    );
}

/// `unit` repeated to fill `MAX_SOURCE_BYTES` between `head` and `tail`.
fn filled(head: &str, unit: &str, tail: &str) -> String {
    let room = MAX_SOURCE_BYTES - head.len() - tail.len();
    format!("{head}{}{tail}", unit.repeat(room / unit.len()))
}

/// Code with a syntax error that the parser, recovering, reads deeper than the pre-scan's
/// estimate: the inputs of `MAX_SOURCE_BYTES` that need the most stack per byte known.
fn derailing_attacks() -> Vec<(&'static str, String)> {
    // A `def` in an f-string's field (the case a CI run met): the parser leaves the field, and
    // the f-string's closing quote opens a string, the rest read as code.
    let field = "f\"{f\"{async def f():\n    await x}\"}\"";
    // `pass` in a format spec's list lowers the lexer's count below the spec's: `{{` is no longer
    // an escape, and the text after it is code.
    let spec = "f\"{x:{[a, pass]}}{{";
    // `;` in a lambda's parameters is skipped, but the pre-scan took it for a statement's end.
    let lambda = format!("lambda;:{}", "-".repeat(200));
    // After `pass` the bracket's lines are logical; the indentation errors lose their Dedents.
    let blocks = ("x = [\n  a,\n  pass\n", " if a:\n  a,\n");
    vec![
        ("field, braces", filled(field, "{", "\n")),
        ("field, attributes", filled(field, ".b", "\n")),
        ("spec, braces", filled(spec, "{", "\"\n")),
        ("spec, parentheses", filled(spec, "(", "\"\n")),
        ("lambda parameters", filled("", &lambda, "0\n")),
        ("lost dedents", filled(blocks.0, blocks.1, "")),
        ("staircase", staircase()),
    ]
}

/// The deepest staircase of blocks inside one bracket: the pre-scan sees short runs (each
/// header's comma starts a new one), the parser, recovering from `def`, one block per line.
fn staircase() -> String {
    let mut code = String::from("x = [1,\ndef\n");
    let mut level = 0;
    // Room for this line ("with a, b:\n" after the indent) and the last ("pass\n]\n").
    while code.len() + (level + 11) + (level + 1 + 7) <= MAX_SOURCE_BYTES {
        code.push_str(&format!("{}with a, b:\n", " ".repeat(level)));
        level += 1;
    }
    code + &" ".repeat(level) + "pass\n]\n"
}

#[test]
fn code_that_derails_the_parser_answers_within_the_stack_its_size_gets() {
    for (attack, source) in derailing_attacks() {
        assert!(source.len() <= MAX_SOURCE_BYTES, "{attack}");
        let verdict = on_default_stack(move || check(&source));
        assert!(
            matches!(verdict, Verdict::Syntax(_)),
            "{attack}: {verdict:?}"
        );
    }
}

#[test]
fn the_stack_a_source_gets_is_what_its_worst_byte_needs_with_a_margin() {
    // The costliest byte known is an unclosed bracket read as code. After `pass` in a format
    // spec, `{{` is code and the `(`s after it are brackets: at MAX_SOURCE_BYTES that needs about
    // 540 MiB, half of what `parse_stack` reserves (measured in a debug build by bisecting the
    // stack given to `check_on_stack`; 64 MiB overflows). An optimized build needs far less.
    let (attack, source) = derailing_attacks().swap_remove(3);
    assert_eq!(attack, "spec, parentheses");
    let full = parse_stack(source.len());
    assert!(full >= 1 << 30, "{full}");
    let verdict = on_default_stack(move || check_on_stack(&source, full));
    assert!(matches!(verdict, Verdict::Syntax(_)), "{verdict:?}");
}

/// Inputs built to derail the parser's error recovery: an f-string, a format spec or a bracket
/// holding a token that makes the parser recover, then a deep payload in code, a string, a
/// comment or another f-string, or a staircase of blocks after it.
fn derailing_input() -> impl Strategy<Value = String> {
    let trigger = prop::sample::select(vec![
        "def",
        "async def f():\n",
        "class",
        "pass",
        "]",
        ")",
        "}",
        ":",
        "=",
        "!r",
        "\n",
        "#c\n",
        "'{'",
        "\"",
        "'",
        "lambda;:",
        "lambda\n:",
        "import",
        "[def]",
        "(def\n)",
        "{x:{",
        "\\\n",
        "[a, pass]",
    ]);
    let opener = prop::sample::select(vec![
        "f\"{", "f'{", "f\"\"\"{", "t\"{", "f\"{f\"{", "f'{[", "[", "(", "f\"{x:{", "rf\"{",
    ]);
    let closer = prop::sample::select(vec!["}\"", "}'", "}\"\"\"", "]", ")", "}\"}\"", "}}{{", ""]);
    let wrapper = prop::sample::select(vec!["", "\"", "'", "\"\"\"", "#", "f\"{", "'{"]);
    let payload = (0..CONSTRUCTS.len() - 4, 1..=10_000usize)
        .prop_map(|(construct, depth)| nested(CONSTRUCTS[construct], depth).replace('\n', " "));
    let layer = (opener, prop::collection::vec(trigger, 1..=3), closer);
    (
        prop::collection::vec(layer, 1..=3),
        wrapper,
        payload,
        0..=400usize,
    )
        .prop_map(|(layers, wrapper, payload, stairs)| {
            let mut code = String::new();
            for (opener, triggers, closer) in layers {
                code.push_str(opener);
                code.push_str(" x ");
                code.push_str(&triggers.concat());
                code.push_str(closer);
            }
            code.push_str(wrapper);
            code.push_str(&payload);
            code.push_str(wrapper);
            code.push('\n');
            for level in 0..stairs {
                code.push_str(&format!("{}with a, b:\n", " ".repeat(level)));
            }
            code
        })
}

#[test]
fn the_gate_never_overflows_on_input_built_to_derail_recovery() {
    let counts = tally_verdicts(derailing_input());
    println!("derailing input: {counts:?}");
    assert!(
        counts.get("syntax error").is_some_and(|n| *n > 64),
        "{counts:?}"
    );
}

#[test]
fn long_binding_chains_are_not_followed_and_stay_linear() {
    // A binding grown to ~32,000 names, then used 16,000 times: following it copied the path
    // at every use (seconds to minutes); past MAX_BINDING_PATH it is not followed.
    let mut code = String::from("import bpy\nm = bpy.context\n");
    while code.len() < MAX_SOURCE_BYTES / 2 {
        code.push_str(&format!("m = m{}\n", ".a".repeat(250)));
    }
    let targets = "m.a, ".repeat((MAX_SOURCE_BYTES - code.len() - 8) / 5);
    code.push_str(&format!("{targets}= 1\n"));
    let started = Instant::now();
    let verdict = on_default_stack(move || check(&code));
    assert!(started.elapsed() < Duration::from_secs(5), "{verdict:?}");
    // Within the limit, an alias is still followed.
    let alias = "import bpy\nw = bpy.ops.wm\nw.quit_blender()\n";
    let Verdict::Violations(found) = check(alias) else {
        panic!("{alias}")
    };
    assert_eq!(found[0].rule, "operator_denied");
    // Past it, a refused operator is still refused by its name.
    let deep = format!(
        "import bpy\nw = bpy{}\nw.ops.wm.quit_blender()\n",
        ".a".repeat(MAX_BINDING_PATH)
    );
    assert!(matches!(check(&deep), Verdict::Violations(f) if f[0].rule == "operator_denied"));
}

#[test]
fn syntax_errors_come_back_with_line_and_column() {
    match check("import bpy\nfor o in bpy.data.objects\n    print(o)") {
        Verdict::Syntax(issue) => assert_eq!(issue.line, 2, "{issue:?}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn enforcing_mode_blocks_and_turns_the_session_read_only() {
    let (transport, builder) = builder(python_mock(), None, &["code_exec"]);
    let p = builder.code_gate().start().await.unwrap();
    let syntax = p.call("python.exec", json!({"code": "print(1"})).await;
    assert_eq!(syntax.error().unwrap().details["reason"], "syntax");
    assert_eq!(syntax.error().unwrap().details["line"], 1);
    let before = transport.count();
    let blocked = p
        .call(
            "python.exec",
            json!({"code": "import os\nprint(os.getcwd())"}),
        )
        .await;
    let error = blocked.error().unwrap();
    assert_eq!(error.details["reason"], "security_block");
    assert_eq!(error.details["rule"], "import_not_allowed");
    assert_eq!(
        transport.count(),
        before,
        "the blocked code never reached Blender"
    );
    assert!(
        p.session().is_read_only(),
        "seed 000: a security breach sets READ_ONLY"
    );
}

#[tokio::test]
async fn log_only_mode_records_and_runs() {
    let constraints = vibe_contract::Constraints {
        code_gate: vibe_contract::CodeGateMode::LogOnly,
        ..Default::default()
    };
    let (_transport, mut builder_) =
        builder(python_mock(), Some(constraints.clone()), &["code_exec"]);
    // Both sides must ask for full trust: the bridge policy here keeps its default (enforcing),
    // so negotiation keeps enforcing.
    assert_eq!(
        builder_
            .stage_names()
            .iter()
            .filter(|(_, n)| *n == "code_gate")
            .count(),
        1
    );
    builder_ = builder_.code_gate();
    let p = builder_.start().await.unwrap();
    assert_eq!(
        p.session().agreement.contract.constraints.code_gate,
        vibe_contract::CodeGateMode::Enforcing
    );

    let transport = std::sync::Arc::new(Counting::new(vibe_transport::MockTransport::new(
        python_mock(),
    )));
    let hello = vibe_transport::Transport::hello(transport.as_ref()).clone();
    let host = vibe_contract::HostProfile {
        name: "t".into(),
        version: "1".into(),
        capabilities: caps(&["scene.read", "scene.write", "code_exec"]),
        ..Default::default()
    };
    let mut proposal = vibe_contract::HostProposal::new("trust", host);
    proposal.constraints = Some(constraints.clone());
    let mut policy = vibe_contract::BridgePolicy {
        constraints,
        ..Default::default()
    };
    policy.capabilities.insert("code_exec".into());
    let agreement = vibe_contract::negotiate(
        &proposal,
        &policy,
        &hello.blender,
        &vibe_contract::default_registries().unwrap(),
    )
    .unwrap();
    let dyn_transport: std::sync::Arc<dyn vibe_transport::Transport> = transport.clone();
    let p = vibe_exec::Pipeline::builder(agreement, dyn_transport)
        .code_gate()
        .start()
        .await
        .unwrap();
    let ran = p
        .call(
            "python.exec",
            json!({"code": "import os\nprint('full trust')"}),
        )
        .await;
    assert_eq!(ran.result().unwrap()["stdout"], "full trust\n");
    assert!(!p.session().is_read_only());
}

#[test]
fn the_gate_never_panics_on_token_soup() {
    let tokens = vec![
        "(", ")", "[", "]", "{", "}", "f\"", "\"", "'", "'''", "\n", "    ", "\t", ":", ",", ";",
        "-", "not ", "lambda ", "yield ", "await ", "if ", "else ", "x", "1", ".", "=", "*", "**",
        "\\\n", "#", "class ", "def ", "@", "->", ":=", "!r", "é", "\r", "t\"", "rb'", "match ",
        "case ", "__init__", "async ", "for ", "in ",
    ];
    let soup = prop::collection::vec(prop::sample::select(tokens), 0..400).prop_map(|t| t.concat());
    let config = Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    };
    on_default_stack(move || {
        let mut runner = TestRunner::new(config);
        runner.run(&soup, |source| {
            let _ = check(&source);
            Ok(())
        })
    })
    .unwrap();
}
