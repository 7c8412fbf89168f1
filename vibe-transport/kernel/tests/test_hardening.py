"""Kernel hardening (issue 12, items 4 and 5), run inside a real Blender like test_kernel.py:

    python -m unittest discover -s vibe-transport/kernel/tests      (a Python with bpy)
    blender -b --factory-startup --python-exit-code 1 --python vibe-transport/kernel/tests/run_in_blender.py

The second gate (code_gate) with a sample payload per rule, the deadline that catching cannot
defeat, NaN and infinities in arguments and answers, stdout escaping and redaction, and sandbox
paths checked after links are resolved.
"""

import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel import channel, code_gate, code_policy, codeexec, envelope  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402
from kernel_case import code_kernel  # noqa: E402

NAN, INF = float("nan"), float("inf")


def strict_json(answer):
    """What the wire does with an answer, and what the bridge's parser needs: no NaN, no
    unpaired surrogate (the bridge refuses `\\ud800` escapes, so encode without them too)."""
    text = json.dumps(answer, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")  # raises on an unpaired surrogate
    return text


class Base(unittest.TestCase):
    def setUp(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        self.k = code_kernel("h")

    def exec(self, code, deadline_ms=2000):
        self.k.call_deadline_ms = deadline_ms
        answer = self.k.call("python.exec", {"code": code})
        strict_json(answer)
        return answer

    def ran(self, code, **kw):
        answer = self.exec(code, **kw)
        self.assertTrue(answer["ok"], "%r: %r" % (code, answer))
        return answer["result"]["stdout"]

    def blocked(self, code):
        answer = self.exec(code)
        self.assertFalse(answer["ok"], "%r ran: %r" % (code, answer))
        error = answer["error"]
        self.assertEqual((error["code"], error["details"].get("reason")), ("contract_violation", "security_block"),
                         "%r: %r" % (code, error))
        return error

    def still_serves(self):
        self.assertEqual(self.ran("print(6 * 7)"), "42\n")


class GateTest(Base):
    # (rule, payload): every rule fires with a sample, each refusal explains itself.
    SAMPLES = [
        ("private_access", "import random\nrandom._os.system('true')"),
        ("private_access", "import bpy\nbpy.utils._test_import"),
        ("private_access", "import collections\ncollections._sys"),
        ("private_access", "match 1:\n    case object(_os=o):\n        pass"),
        ("frame_access", "g = (i for i in [1])\ng.gi_frame.f_back"),
        ("frame_access", "g = (i for i in [1])\ng.gi_code"),
        ("frame_access", "async def c():\n    pass\nc.cr_frame"),
        ("frame_access", "async def c():\n    yield 1\nc().ag_frame"),
        ("frame_access", "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    t = e.with_traceback(None)\n    t.tb_frame"),
        ("frame_access", "def f(x):\n    return x.tb_next"),
        ("frame_access", "def f(x):\n    return x.f_back"),
        ("frame_access", "def f(x):\n    return x.f_globals"),
        ("frame_access", "def f(x):\n    return x.f_locals"),
        ("frame_access", "def f(x):\n    return x.f_builtins"),
        ("frame_access", "def f(x):\n    return x.f_code"),
        ("frame_access", "def f(x):\n    return x.co_code"),
        ("module_attribute", "import enum\nenum.bltns.eval('1')"),
        ("module_attribute", "import datetime\ndatetime.sys.settrace(None)"),
        ("module_attribute", "import json\njson.codecs.open('x')"),
        ("module_attribute", "import typing\ntyping.operator"),
        ("operator_denied", "import bpy\nbpy.ops.wm.context_set_value(data_path='x', value='1')"),
        ("operator_denied", "import bpy\nw = bpy.ops.wm\nw.context_toggle(data_path='x')"),
        ("operator_denied", "import bpy\nbpy.ops.wm.properties_edit(data_path='x')"),
        ("operator_denied", "import bpy\nbpy.ops.wm.doc_view_manual()"),
        ("operator_denied", "import bpy\nbpy.ops.text.run_script()"),
        ("operator_denied", "import bpy\nfor _ in range(50):\n    bpy.ops.ed.undo()"),
        ("operator_denied", "import bpy\ned = bpy.ops.ed\ned.undo_history(item=0)"),
        ("operator_denied", "import bpy\no = bpy.ops\no.wm.append(filename='x')"),
        ("operator_denied", "import bpy\nw = bpy.ops.wm\nw.link(filename='x')"),
        ("operator_denied", "from bpy import ops\nops.wm.append(filename='x')"),
        ("operator_denied", "import bpy\nbpy.ops.console.execute()"),
        ("attribute_denied", "import bpy\nbpy.context.window_manager.keyconfigs"),
        ("attribute_denied", "import bpy\nbpy.data.objects['Cube'].driver_add('location')"),
        ("attribute_denied", "import bpy\nbpy.data.objects['Cube'].animation_data.drivers"),
        ("attribute_denied", "import bpy\nc = bpy.context\nc.preferences.filepaths.use_scripts_auto_execute = True"),
        ("attribute_denied", "def f(p):\n    p.use_scripts_auto_execute = True"),
        ("attribute_denied", "import bpy\nbpy.data.texts.load('x.py')"),
        ("file_writer", "import bpy\nbpy.ops.wm.save_userpref()"),
        ("file_writer", "import bpy\nbpy.ops.export_scene.gltf(filepath='x.glb')"),
        ("file_writer", "import bpy\nbpy.ops.export_mesh.stl(filepath='x.stl')"),
        ("file_writer", "import bpy\nbpy.ops.wm.obj_export(filepath='x.obj')"),
        ("file_writer", "import bpy\nbpy.ops.wm.usd_export(filepath='x.usd')"),
        ("file_writer", "import bpy\nbpy.data.images.new('i', 4, 4).save_render('x.png')"),
        ("file_writer", "import bpy\nbpy.data.libraries.write('x.blend', set())"),
        ("file_writer", "import bpy\nbpy.ops.wm.sysinfo(filepath='x.txt')"),
        ("file_writer", "import bpy\nbpy.ops.sound.mixdown(filepath='x.wav')"),
        ("string_evaluation", "import typing\ntyping.get_type_hints(int)"),
        ("string_evaluation", "import typing\ntyping.ForwardRef('x')"),
        ("string_evaluation", "def f(x: 'random._os'):\n    pass"),
        ("string_evaluation", "import bpy\nbpy.utils.units.to_value('METRIC', 'LENGTH', '1')"),
        ("string_evaluation", "import bpy\nbpy.ops.node.add_node(type='X', settings=[{'name': 'a', 'value': 'x'}])"),
        ("dynamic_attribute", "def f(operator):\n    return operator.attrgetter('x')"),
        ("dynamic_attribute", "def f(operator):\n    return operator.methodcaller('x')"),
        ("dynamic_attribute", "import string\nstring.Formatter()"),
        ("dynamic_attribute", "def f(fmt):\n    return fmt.get_field('0.x', [1], {})"),
        ("dynamic_attribute", "def f(fmt):\n    return fmt.vformat('{0.x}', [1], {})"),
        ("dynamic_attribute", "type('X', (), {})"),
        ("dynamic_attribute", "t = type\nt('X', (), {})"),
        ("dynamic_attribute", "type(int)('X', (), {})"),
        ("dynamic_attribute", "'{0.real}'.format(1)"),
        ("dynamic_attribute", "'{0[key]}'.format({'key': 1})"),
        ("dynamic_attribute", "'{:{0.real}}'.format(1)"),
        ("dynamic_attribute", "s = '{}'\ns.format(1)"),
        ("dynamic_attribute", "str.format('{}', 1)"),
        ("dynamic_attribute", "'{x.y}'.format_map({})"),
        ("dynamic_attribute", "import enum\nenum.Enum('E', ['a', 'b'])"),
        ("dunder_definition", "class A:\n    def __del__(self):\n        pass"),
        ("dunder_definition", "class A:\n    def __getattr__(self, name):\n        pass"),
        ("dunder_definition", "class A:\n    def __getattribute__(self, name):\n        pass"),
        ("dunder_definition", "class A:\n    def __init_subclass__(cls):\n        pass"),
        ("dunder_definition", "class A:\n    def __set_name__(self, owner, name):\n        pass"),
        ("dunder_definition", "class A:\n    def __class_getitem__(cls, item):\n        pass"),
        ("dunder_definition", "class A:\n    def __reduce__(self):\n        pass"),
        ("dunder_definition", "class A:\n    def __reduce_ex__(self, protocol):\n        pass"),
        ("dunder_definition", "def __init__(self):\n    pass"),
        ("metaclass_denied", "class A(metaclass=type):\n    pass"),
        ("metaclass_denied", "class A(**{}):\n    pass"),
        ("metaclass_denied", "class A(*[object]):\n    pass"),
        ("metaclass_denied", "import enum\nenum.EnumMeta"),
        ("dunder_access", "().__class__"),
        ("dunder_access", "class A:\n    def __repr__(self):\n        return super().__repr__()"),
        ("registered_class", "import bpy\nbpy.types.WM_OT_context_set_value"),
        ("module_patch", "import json\njson.dumps = print"),
        ("module_patch", "import time\ntime.monotonic = lambda: 0.0"),
        ("module_patch", "import random as r\nm = r\nm.random = lambda: 4"),
        # bl_rna is read through every instance of a class; a comprehension's target stores
        ("module_patch", "import bpy\nC = type(bpy.data.lights[0])\nC.bl_rna = map(print, [1])"),
        ("module_patch", "import bpy\n[type(bpy.data.cameras[0])][0].bl_rna = 1"),
        ("module_patch", "import bpy\n[0 for type(bpy.data.objects[0]).hook in [1]]"),
        ("kernel_access", "x = 'vibe_kernel.codeexec'"),
        ("import_not_allowed", "from typing import *"),
        ("import_not_allowed", "import re._parser"),
        ("import_not_allowed", "from typing import get_type_hints"),
        ("import_not_allowed", "from enum import bltns"),
        ("builtin_denied", "getattr(1, 'real')"),
        ("dunder_string", "x = '__globals__'"),
        ("dunder_string", "x = b'__class__'"),
        # attribute paths as strings reach what the attribute rules refuse by name
        ("dynamic_attribute", "import bpy\nkcs = bpy.context.window_manager.path_resolve('key' + 'configs')"),
        ("attribute_denied", "import bpy\nkcs = bpy.context.path_resolve('window_manager.keyconfigs')"),
        ("attribute_denied", "import bpy\nbpy.data.path_resolve('texts').foreach_set('use_module', [True])"),
        ("attribute_denied", "import bpy\nd = bpy.context.object.path_resolve('animation_data.drivers')"),
        ("dynamic_attribute", "import bpy\nresolve = bpy.context.object.path_resolve\nresolve('location')"),
        ("dynamic_attribute", "import bpy\nbpy.context.object.path_resolve(*['texts'])"),
        ("dynamic_attribute", "import bpy\nbpy.context.object.path_resolve(**{'path': 'texts'})"),
        ("dynamic_attribute", "import bpy\nn = 'use_module'\nbpy.context.object.property_unset(n)"),
        ("private_access", "import bpy\nbpy.context.object.path_resolve('modifiers[\"a\"]._x')"),
        # operators named by a string: a key map item or a layout button runs them later
        ("operator_denied", "km = None\nkm.keymap_items.new('wm.context_set_value', 'F9', 'PRESS')"),
        ("operator_denied", "x = 'WM_OT_context_toggle'"),
        ("operator_denied", "x = 'script.python_file_run'"),
        ("operator_denied", "x = 'wm.append'"),
        ("string_evaluation", "import bpy\nadd = bpy.ops.node.add_node\nadd(type='ShaderNodeMath', settings=[])"),
        # an ABC's registry and the UI translations outlive the call
        ("attribute_denied", "import collections\ncollections.abc.Mapping.register(list)"),
    ]

    def test_each_rule_fires_with_a_sample_payload(self):
        for rule, code in self.SAMPLES:
            with self.subTest(rule=rule, code=code):
                error = self.blocked(code)
                self.assertEqual(error["details"]["rule"], rule, error)
                # The refusal explains the rule: more than its name.
                self.assertIn(rule, error["message"])
                self.assertGreater(len(error["message"]), len("security block: %s at line 1: " % rule) + 15)
        self.still_serves()

    def test_the_kernel_gate_answers_the_same_without_the_kernel(self):
        for rule, code in self.SAMPLES:
            with self.subTest(code=code):
                with self.assertRaises(code_gate.GateViolation) as caught:
                    code_gate.check(code_gate.parse(code))
                self.assertEqual(caught.exception.rule, rule)

    def test_a_refusal_of_bpy_types_says_what_to_write_instead(self):
        # The most common refusal of benign code (`isinstance(m, bpy.types.SubsurfModifier)`,
        # `isinstance(e, bmesh.types.BMVert)`): the message names the ways that do pass.
        for code in ("import bpy\nisinstance(1, bpy.types.Mesh)", "import bmesh\nisinstance(1, bmesh.types.BMVert)"):
            with self.assertRaises(code_gate.GateViolation) as caught:
                code_gate.check(code_gate.parse(code))
            self.assertEqual(caught.exception.rule, "module_attribute")
            self.assertIn("bl_idname", str(caught.exception))

    def test_a_builtin_agent_code_does_not_get_is_named_as_such(self):
        answer = self.k.call("python.exec", {"code": "print(hasattr(1, 'real'))"})
        self.assertEqual(answer["error"]["code"], "execution_failed", answer)
        self.assertEqual(answer["error"]["message"], "NameError: hasattr is a Python builtin not available to agent code")
        answer = self.k.call("python.exec", {"code": "print(hasattrs)"})  # a plain typo reads as before
        self.assertIn("name 'hasattrs' is not defined", answer["error"]["message"])

    def test_classes_run(self):
        code = (
            "class Vec:\n"
            "    def __init__(self, x, y):\n"
            "        self.x, self.y = x, y\n"
            "    def __repr__(self):\n"
            "        return 'Vec(%g, %g)' % (self.x, self.y)\n"
            "    def __eq__(self, other):\n"
            "        return (self.x, self.y) == (other.x, other.y)\n"
            "    def __hash__(self):\n"
            "        return hash((self.x, self.y))\n"
            "    def __lt__(self, other):\n"
            "        return (self.x, self.y) < (other.x, other.y)\n"
            "    def __add__(self, other):\n"
            "        return Vec(self.x + other.x, self.y + other.y)\n"
            "    def __len__(self):\n"
            "        return 2\n"
            "    def __iter__(self):\n"
            "        return iter((self.x, self.y))\n"
            "    def __getitem__(self, i):\n"
            "        return (self.x, self.y)[i]\n"
            "    def __contains__(self, v):\n"
            "        return v in (self.x, self.y)\n"
            "class Named(Vec):\n"
            "    def __init__(self, name, x, y):\n"
            "        super().__init__(x, y)\n"
            "        self.name = name\n"
            "    def __str__(self):\n"
            "        return f'{self.name}={self.x},{self.y}'\n"
            "class Scope:\n"
            "    def __enter__(self):\n"
            "        print('in')\n"
            "        return self\n"
            "    def __exit__(self, kind, value, tb):\n"
            "        print('out')\n"
            "        return False\n"
            "class Boom(Exception):\n"
            "    pass\n"
            "with Scope():\n"
            "    a, b = Vec(2, 1), Vec(1, 5)\n"
            "    print(sorted([a, b]), a + b, len(a), list(a), a[1], 2 in a, a == Vec(2, 1), len({a, Vec(2, 1)}))\n"
            "    print(Named('p', 3, 4), isinstance(Named('q', 0, 0), Vec))\n"
            "try:\n"
            "    raise Boom('caught')\n"
            "except Boom as e:\n"
            "    print(e)\n")
        self.assertEqual(self.ran(code), "in\n[Vec(1, 5), Vec(2, 1)] Vec(3, 6) 2 [2, 1] 1 True True 1\np=3,4 True\nout\ncaught\n")

    def test_benign_code_still_runs(self):
        code = ("import bpy\nfrom math import *\nfrom mathutils import Vector\n"
                "bpy.context.scene.frame_current = 7\n"
                "cube = bpy.data.objects['Cube']\ncube.location = Vector((1, 2, 3)) * 2\n"
                "names = [o.name for o in bpy.data.objects if o.type == 'MESH']\n"
                "print('{} at {:.1f}'.format(names[0], cube.location.x), f'{cube.name}', floor(pi))\n"
                "print('%(a)s' % {'a': 'pct'}, '{x}'.format_map({'x': 'map'}))\n"
                "me = cube.data\nco = [0.0] * 3 * len(me.vertices)\nme.vertices.foreach_get('co', co)\n"
                "me.vertices.foreach_set('co', co)\nprint(tuple(cube.path_resolve('location')), "
                "cube.path_resolve('scale')[0], 'Text.001', 'mesh.primitive_cube_add', 'script.py', 'text.txt')\n")
        self.assertEqual(self.ran(code),
                         "Cube at 2.0 Cube 3\npct map\n(2.0, 4.0, 6.0) 1.0 Text.001 mesh.primitive_cube_add script.py "
                         "text.txt\n")

    def test_deep_nesting_is_refused_not_crashed(self):
        payloads = ["(" * 101 + "1" + ")" * 101,            # over MAX_NESTING: refused before parsing
                    "(" * 100000,                            # unbalanced and huge
                    "x = [" * 5000 + "]" * 5000,
                    "x = 1" + " + 1" * 5000,                # a deep tree without brackets
                    "-" * 100000 + "1",                     # CPython's parser: MemoryError
                    "x" + ".a" * 10000,                     # CPython's parser: RecursionError
                    "f" + "()" * 20000,
                    "lambda: " * 10000 + "1",
                    "not " * 100000 + "x",
                    "if 1:\n" + "".join(" " * i + "if 1:\n" for i in range(1, 150)) + " " * 150 + "pass\n"]
        for code in payloads:
            with self.subTest(code=code[:40]):
                answer = self.exec(code)
                self.assertFalse(answer["ok"])
                error = answer["error"]
                # Refused as nesting_too_deep, or (deep indentation) as the syntax error CPython reports.
                if error["code"] == "invalid_arguments":
                    self.assertEqual(error["details"]["reason"], "syntax", error)
                else:
                    self.assertEqual(error["details"]["rule"], "nesting_too_deep", error)
        # Right at the limit still runs.
        self.assertEqual(self.ran("print(" + "(" * 98 + "1" + ")" * 98 + ")"), "1\n")
        self.still_serves()

    def test_oversized_code_is_refused_before_it_is_read(self):
        code = "x = 1\n" * (code_policy.MAX_SOURCE_BYTES // 6 + 1)
        self.assertEqual(self.blocked(code)["details"]["rule"], "source_too_large")

    def test_brackets_inside_strings_and_comments_do_not_count(self):
        self.assertIsNone(code_gate.nesting_violation("x = '" + "(" * 500 + "'  # " + "[" * 500 + "\ny = \"\"\"" + "{" * 500 + "\"\"\""))
        self.assertIsNone(code_gate.nesting_violation("x = 'it\\'s (' + r\"\\\" (\""))
        self.assertEqual(code_gate.nesting_violation("a = 1\nb = " + "(" * 101), 2)
        self.assertEqual(self.ran("print('" + "(" * 300 + "')")[:3], "(((")


class DeadlineTest(Base):
    def timed_out(self, code, deadline_ms=500, within_s=3.0):
        trace, interval = sys.gettrace(), sys.getswitchinterval()
        started = time.monotonic()
        answer = self.exec(code, deadline_ms=deadline_ms)
        elapsed = time.monotonic() - started
        self.assertEqual(answer["error"]["code"], "timeout", answer)
        self.assertTrue(answer["error"]["details"]["cancelled"])
        self.assertLess(elapsed, deadline_ms / 1000.0 + within_s, code)
        # Nothing of the deadline outlives the call: tracer, switch interval, a pending interrupt.
        self.assertIs(sys.gettrace(), trace)
        self.assertEqual(sys.getswitchinterval(), interval)
        for _ in range(200000):
            pass
        return answer

    def test_a_cancel_interrupts_running_code_and_rolls_it_back(self):
        """The reader thread's cancel of the call being served: the run stops long before its
        deadline, is rolled back, and says it was cancelled; the kernel serves the next call."""
        frame = {"type": "call", "id": 41, "tool": "python.exec", "deadline_ms": 60000,
                 "params": {"code": "import bpy\nbpy.data.objects['Cube'].location.x = 7\n"
                                    "try:\n    while True: pass\nexcept BaseException:\n    while True: pass"}}
        threading.Timer(0.3, self.k.cancel, args=(41,)).start()
        started = time.monotonic()
        answer = self.k.handle(frame)["envelope"]
        self.assertLess(time.monotonic() - started, 5.0)
        self.assertEqual(answer["error"]["code"], "timeout", answer)
        self.assertIn("cancelled", answer["error"]["message"])
        self.assertTrue(answer["error"]["details"]["rolled_back"], answer)
        self.assertEqual(bpy.data.objects["Cube"].location.x, 0.0)
        self.assertIsNone(self.k.running)
        self.still_serves()

    def test_catching_the_interrupt_only_delays_it(self):
        self.timed_out("try:\n    while True: pass\nexcept BaseException: pass\nwhile True: pass")
        self.timed_out("try:\n    while True: pass\nfinally:\n    while True: pass")
        self.timed_out("def spin():\n    while True:\n        try:\n            yield\n        except BaseException:\n            pass\n"
                       "for _ in spin():\n    pass")
        self.still_serves()

    @unittest.skipIf(sys.version_info >= (3, 13),
                     "Python 3.13 (bpy 5.2) delivers the watchdog's interrupts only where this loop "
                     "catches them, so code that catches every interrupt in a loop runs on: the "
                     "bridge's kill-and-restore (SupervisedKernel) is what stops it there")
    def test_catching_every_interrupt_in_a_loop_only_delays_it(self):
        self.timed_out("while True:\n    try:\n        while True: pass\n    except:\n        pass")
        self.still_serves()

    def test_a_tracer_broken_by_recursion_is_backed_by_the_watchdog(self):
        # At the stack limit the trace call itself fails and CPython removes the tracer; ~1000
        # frames each catch the interrupt once.
        code = "def f(n):\n    try:\n        return f(n + 1)\n    except:\n        while True: pass\nf(0)"
        self.timed_out(code, within_s=8.0)
        self.still_serves()

    def test_the_interrupt_reaches_code_the_kernel_formats(self):
        # The agent's exception is described while the deadline still applies: an endless
        # __str__ is interrupted, never run unguarded in the kernel.
        self.timed_out("class E(Exception):\n    def __str__(self):\n        while True: pass\nraise E()")
        self.timed_out("class E(Exception):\n    def __str__(self):\n        while True: pass\nprint(E())")

    def test_what_the_code_leaves_behind_is_finalized_under_the_deadline(self):
        # A suspended generator's `finally` runs when it is collected: at the end of the call,
        # interrupted there, never later in the kernel.
        code = "def g():\n    try:\n        yield 1\n    finally:\n        while True: pass\nx = g()\nnext(x)\nprint('left')"
        self.timed_out(code)
        code = "def g():\n    try:\n        yield 1\n    finally:\n        while True: pass\nx = [g()]\nx.append(x)\nnext(x[0])"
        self.timed_out(code)
        self.still_serves()

    def test_a_run_that_caught_every_interrupt_still_answers_timeout(self):
        code = "import time\nstart = time.monotonic()\nwhile time.monotonic() - start < 1.0:\n    try:\n        pass\n    except BaseException:\n        pass"
        self.timed_out(code, deadline_ms=300)

    def test_a_deadline_that_is_no_number_falls_back_to_the_default(self):
        for deadline in (NAN, INF, -1, 0):
            self.k.call_deadline_ms = deadline
            answer = self.k.call("python.exec", {"code": "print('fine')"})
            self.assertEqual(answer.get("result", {}).get("stdout"), "fine\n", (deadline, answer))

    def test_agent_errors_are_messages_and_leave_the_kernel_serving(self):
        answer = self.exec("raise KeyError('/home/ann/secret/key.txt')")
        self.assertEqual(answer["error"]["code"], "execution_failed")
        self.assertEqual(answer["error"]["message"], "KeyError: 'key.txt'")
        answer = self.exec("raise ValueError('\\ud800 bad')")
        self.assertEqual(answer["error"]["message"], "ValueError: \\ud800 bad")
        self.still_serves()


class OutputTest(Base):
    def test_unpaired_surrogates_in_stdout_are_escaped(self):
        answer = self.exec("print('a\\ud800b', '\\udcff')\nprint('\\U0001F600')")
        self.assertTrue(answer["ok"], answer)
        self.assertEqual(answer["result"]["stdout"], "a\\ud800b \\udcff\n\U0001F600\n")
        # And through the wire's own encoder, then a strict UTF-8 round trip.
        frame = self.k.handle({"type": "call", "id": 1, "tool": "python.exec", "params": {"code": "print('\\ud800')"}})
        line = channel.encode(frame).decode("utf-8")
        self.assertIsNone(re.search(r"(?<!\\)\\ud[89a-f]", line), line)  # no bare surrogate escape
        self.assertEqual(json.loads(line)["envelope"]["result"]["stdout"], "\\ud800\n")

    def test_the_cap_counts_escaped_text(self):
        stdout = self.ran("print('\\ud800' * 20000)")
        self.assertLessEqual(len(stdout), codeexec.MAX_STDOUT_CHARS)

    def test_absolute_paths_in_stdout_are_redacted(self):
        stdout = self.ran("print('saved /home/ann/secret/plan.blend and C:\\\\Users\\\\ann\\\\x.txt, kept a/b and 3/4')")
        self.assertEqual(stdout, "saved plan.blend and x.txt, kept a/b and 3/4\n")
        stdout = self.ran("import bpy\nprint(bpy.data.filepath or '/tmp/untitled.blend')")
        self.assertNotIn("/", stdout)


class NonFiniteTest(Base):
    def setUp(self):
        super().setUp()
        self.k.state.configure({"session_id": "n", "capabilities": ["scene.read", "scene.write"]})

    def refused_field(self, tool, field, **params):
        answer = self.k.call(tool, params)
        strict_json(answer)
        self.assertFalse(answer["ok"], "%s %r: %r" % (tool, params, answer))
        self.assertEqual(answer["error"]["code"], "invalid_arguments", answer)
        self.assertEqual(answer["error"]["details"]["field"], field, answer)
        return answer["error"]

    def test_nan_and_infinities_are_refused_as_arguments(self):
        before = self.k.call("scene.snapshot", {})
        for bad in (NAN, INF, -INF):
            with self.subTest(value=bad):
                self.refused_field("object.move", "location", name="Cube", location=[0, bad, 0])
                self.refused_field("object.move", "delta", name="Cube", delta=[bad, 0, 0])
                self.refused_field("object.set_transform", "rotation_euler", name="Cube", rotation_euler=[0, 0, bad])
                self.refused_field("object.set_transform", "scale", name="Cube", scale=[bad, 1, 1])
                self.refused_field("object.create", "location", name="E", type="EMPTY", location=[bad, 0, 0])
                self.refused_field("mesh.create_cube", "size", name="C2", size=bad)
                self.refused_field("mesh.create_plane", "scale", name="P2", scale=[1, 1, bad])
                self.refused_field("material.ensure_principled", "metallic", name="M", metallic=bad)
                self.refused_field("material.ensure_principled", "base_color", name="M", base_color=[bad, 0, 0, 1])
                self.refused_field("modifier.add", "width", name="Cube", modifier_type="BEVEL", width=bad)
                self.refused_field("modifier.add", "thickness", name="Cube", modifier_type="SOLIDIFY", thickness=bad)
        error = self.refused_field("object.move", "location", name="Cube", location=[0, NAN, 0])
        self.assertEqual(error["details"]["reason"], "non_finite")
        self.refused_field("mesh.create_cube", "size", name="C3", size=10 ** 400)  # float() overflows
        self.assertEqual(self.k.call("scene.snapshot", {}), before)

    def test_a_json_frame_with_nan_is_refused_and_answered(self):
        frame = json.loads('{"type": "call", "id": 7, "tool": "object.move", '
                           '"params": {"name": "Cube", "location": [NaN, Infinity, 1e999]}}')
        answer = self.k.handle(frame)
        json.loads(channel.encode_answer(answer))
        self.assertEqual(answer["envelope"]["error"]["details"]["field"], "location")

    def test_a_scene_with_nan_transforms_still_answers(self):
        cube = bpy.data.objects["Cube"]
        cube.location = (NAN, 0.0, INF)  # Blender keeps NaN, clamps infinity to FLT_MAX
        cube.rotation_euler = (0.0, NAN, 0.0)
        cube.scale = (NAN, NAN, NAN)
        bevel = cube.modifiers.new("Bevel", "BEVEL")
        bevel.width = NAN
        material = bpy.data.materials.new("Odd")
        material.use_nodes = True
        principled = next(n for n in material.node_tree.nodes if n.type == "BSDF_PRINCIPLED")
        principled.inputs["Metallic"].default_value = NAN
        for tool, params in (("object.info", {"name": "Cube"}), ("object.list", {}), ("scene.snapshot", {}),
                             ("scenegraph.find", {"name_glob": "C*"}), ("scene.telemetry", {}),
                             ("object.move", {"name": "Cube", "delta": [1, 0, 0]})):
            with self.subTest(tool=tool):
                frame = self.k.handle({"type": "call", "id": 1, "tool": tool, "params": params})
                self.assertTrue(frame["envelope"]["ok"], frame)
                json.loads(channel.encode_answer(frame))  # what the wire writes
                strict_json(json.loads(channel.encode_answer(frame)))
                strict_json(frame)
        info = self.k.call("object.info", {"name": "Cube"})["result"]
        self.assertIsNone(info["location"][0])
        self.assertEqual(info["location"][1], 0.0)
        self.assertEqual(info["rotation_euler"], [0.0, None, 0.0])
        self.assertEqual(info["scale"], [None, None, None])
        self.assertEqual(info["non_finite"], ["location", "modifiers[0].width", "rotation_euler", "scale"])
        snapshot = self.k.call("scene.snapshot", {})["result"]
        cube_json = next(o for o in snapshot["objects"] if o["name"] == "Cube")
        self.assertEqual(cube_json["non_finite"], ["location", "rotation_euler", "scale"])
        self.assertIn("materials[1].principled.metallic", snapshot["non_finite"])  # Material, Odd
        self.assertIn("objects[1].modifiers[0].width", snapshot["non_finite"])
        # Healthy objects have no `non_finite` at all.
        self.assertNotIn("non_finite", self.k.call("object.info", {"name": "Camera"})["result"])

    def test_envelopes_are_always_json_safe(self):
        safe, non_finite = envelope.json_safe({"a": [1.0, NAN, {"b": -INF}], "s": "x\ud800", "\udcff": 2, "n": None})
        self.assertEqual(safe, {"a": [1.0, None, {"b": None}], "s": "x\\ud800", "\\udcff": 2, "n": None})
        self.assertEqual(non_finite, ["a[1]", "a[2].b"])
        error = envelope.err("not_found", "object '\ud800' at /home/ann/x", name="\ud800", value=NAN)
        strict_json(error)
        self.assertEqual(error["error"]["details"], {"name": "\\ud800", "value": None})
        self.assertEqual(error["error"]["message"], "object '\\ud800' at x")
        self.assertEqual(envelope.ok({"x": INF}), {"ok": True, "result": {"x": None, "non_finite": ["x"]}})


def random_value(rng, depth=0):
    """A random JSON-like value of the kinds tools answer with, and some they never do."""
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([0.0, -0.0, 1.5, 1e-320, 1.7976931348623157e308, 0.1 + 0.2, rng.uniform(-1e6, 1e6)])
    if kind == 1:
        return rng.choice([0, -1, 2 ** 63, -(2 ** 70), rng.randrange(-10 ** 6, 10 ** 6)])
    if kind == 2:
        return "".join(rng.choice(["a", "Cube", " ", '"', "\\", "\n", "\x00", "\u00e9", "\u2603", "\U0001F600",
                                   "\ud800", "</"]) for _ in range(rng.randrange(6)))
    if kind == 3:
        return rng.choice([None, True, False])
    if kind == 4:
        return rng.choice([NAN, INF, -INF, 1.0])
    if kind == 5:
        return []
    if kind == 6:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    keys = [rng.choice(["name", "location", "\u00e9", "", "_meta", 7, "\ud800"]) for _ in range(rng.randrange(5))]
    return {key: random_value(rng, depth + 1) for key in keys}


class AnswerEncodingTest(unittest.TestCase):
    """A success envelope is encoded once (envelope.Checked); what the wire writes for it must
    be exactly what encoding the whole answer frame writes."""

    def test_a_checked_answer_is_the_frame_encoded_whole(self):
        import random
        rng = random.Random(1616)
        kinds = {"checked": 0, "made_safe": 0}
        for case in range(600):
            result = random_value(rng)
            # Ids of every kind a frame may carry: an int's is written by repr, the rest encoded.
            call_id = rng.choice([case, -case, 2 ** 64 + case, True, case + 0.5, "s%d" % case, None])
            answer = {"type": "result", "id": call_id, "envelope": envelope.ok(result)}
            written = channel.encode_answer(answer)
            with self.subTest(case=case, result=repr(result)):
                if type(answer["envelope"]) is envelope.Checked:
                    kinds["checked"] += 1
                    # The independent encoding: the standard library on the whole frame.
                    whole = json.dumps(dict(answer, envelope=dict(answer["envelope"])), separators=(",", ":"),
                                       allow_nan=False) + "\n"
                    self.assertEqual(written, whole.encode("utf-8"))
                else:
                    kinds["made_safe"] += 1
                strict_json(json.loads(written))
        # Both paths are reached often (the seed's distribution, reported here once):
        # 600 cases -> checked 430, made_safe 170.
        self.assertGreater(kinds["checked"], 150, kinds)
        self.assertGreater(kinds["made_safe"], 150, kinds)

    def test_events_told_with_a_checked_answer_are_written(self):
        bpy.ops.wm.read_factory_settings(use_empty=False)
        k = Kernel()
        k.state.configure({"session_id": "e", "capabilities": ["scene.read"]})
        k.shared.record_load({"event": "file_loaded", "file": "other.blend", "transaction_dropped": None})
        answer = k.handle({"type": "call", "id": 3, "tool": "object.info", "params": {"name": "Cube"}})
        written = json.loads(channel.encode_answer(answer))
        self.assertEqual(written["envelope"]["result"]["name"], "Cube")
        self.assertEqual([e["event"] for e in written["envelope"]["result"]["_meta"]["events"]], ["file_loaded"])
        # Told once: the next answer is a Checked one again, without events.
        answer = k.handle({"type": "call", "id": 4, "tool": "object.info", "params": {"name": "Cube"}})
        self.assertIs(type(answer["envelope"]), envelope.Checked)
        self.assertNotIn("_meta", json.loads(channel.encode_answer(answer))["envelope"]["result"])


class SandboxTest(Base):
    def setUp(self):
        super().setUp()
        self.top = tempfile.mkdtemp(prefix="vibe-paths-")
        self.addCleanup(shutil.rmtree, self.top, True)
        self.sandbox = os.path.join(self.top, "sandbox")
        self.evil = os.path.join(self.top, "sandbox-evil")
        self.outside = os.path.join(self.top, "outside")
        for d in (self.sandbox, self.evil, self.outside, os.path.join(self.sandbox, "HUMAN_ONLY"),
                  os.path.join(self.sandbox, "real")):
            os.makedirs(d)
        self.k.state.configure({"session_id": "p", "capabilities": ["scene.read", "scene.write", "file.write", "render"],
                                "sandbox": self.sandbox})

    def link(self, target, name):
        os.symlink(target, os.path.join(self.sandbox, name))

    def refused(self, path, tool="file.save"):
        answer = self.k.call(tool, {"path": path})
        self.assertFalse(answer["ok"], "%s %r was written: %r" % (tool, path, answer))
        self.assertEqual((answer["error"]["code"], answer["error"]["details"].get("reason")),
                         ("contract_violation", "sandbox"), answer)
        strict_json(answer)
        self.assertNotIn(self.top, answer["error"]["message"])
        return answer["error"]

    def refused_render(self, path):
        if "render" in self.k.state.capabilities:  # Cycles is there
            self.refused(path, tool="render.still")

    def written_outside(self):
        found = []
        for folder in (self.evil, self.outside, os.path.join(self.sandbox, "HUMAN_ONLY")):
            for _, _, files in os.walk(folder):
                found.extend(files)
        return found

    def test_a_sibling_with_the_sandbox_as_prefix_is_outside(self):
        self.link("../sandbox-evil", "evil")
        # The string-prefix check this replaces would have let it through:
        self.assertTrue(os.path.realpath(os.path.join(self.evil, "x.blend")).startswith(os.path.realpath(self.sandbox)))
        self.refused("evil/x.blend")
        self.link(os.path.join(self.evil, "y.blend"), "y.blend")
        self.refused("y.blend")
        self.assertEqual(self.written_outside(), [])

    def test_links_out_of_the_sandbox_are_refused(self):
        self.link(self.outside, "out")
        self.link(os.path.join(self.outside, "dangling.blend"), "dangling.blend")
        self.link("/", "root")
        for path in ("out/x.blend", "dangling.blend", "root/tmp/x.blend", "out/deeper/x.blend"):
            with self.subTest(path=path):
                self.refused(path)
        self.refused_render("out/still.png")
        # A save goes to `<path>@` first: a link planted there is refused too.
        self.link(os.path.join(self.outside, "planted.blend"), "x.blend@")
        self.refused("x.blend")
        self.assertEqual(self.written_outside(), [])

    def test_human_only_is_refused_in_any_case_and_through_links(self):
        for path in ("HUMAN_ONLY/x.blend", "human_only/x.blend", "Human_Only/x.blend", "a/hUmAn_OnLy/x.blend",
                     "HUMAN_ONLY./x.blend", "HUMAN_ONLY /x.blend"):
            with self.subTest(path=path):
                self.refused(path)
        self.link("HUMAN_ONLY", "notes")
        self.link(os.path.join(self.sandbox, "HUMAN_ONLY", "h.blend"), "h.blend")
        self.link("real/../HUMAN_ONLY", "sneaky")
        for path in ("notes/x.blend", "h.blend", "sneaky/x.blend"):
            with self.subTest(path=path):
                self.assertIn("HUMAN_ONLY", self.refused(path)["message"])
        self.refused_render("notes/x.png")
        self.assertEqual(self.written_outside(), [])

    def test_links_that_stay_inside_are_followed_and_written_where_checked(self):
        self.link("real", "alias")
        saved = self.k.call("file.save", {"path": "alias/scene.blend"})
        self.assertTrue(saved["ok"], saved)
        self.assertEqual(saved["result"]["path"], "alias/scene.blend")
        self.assertTrue(os.path.isfile(os.path.join(self.sandbox, "real", "scene.blend")))
        # A sandbox given through a link works too.
        os.symlink(self.sandbox, os.path.join(self.top, "via-link"))
        self.k.state.sandbox = os.path.join(self.top, "via-link")
        self.assertTrue(self.k.call("file.save", {"path": "b.blend"})["ok"])
        self.assertTrue(os.path.isfile(os.path.join(self.sandbox, "b.blend")))
        self.refused("real")  # a folder


if __name__ == "__main__":
    unittest.main()
