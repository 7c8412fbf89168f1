"""The in-process baseline of the live bench: the kernel's own handlers called directly in
Blender (no wire, no bridge), on the same scenes the bench builds.

    python bench_in_process.py        (a Python with bpy; prints one JSON line)
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel.wire import Kernel  # noqa: E402


def populate(n):
    coll = bpy.data.collections["Collection"]
    for i in range(n):
        obj = bpy.data.objects.new("E%04d" % i, None)
        coll.objects.link(obj)


def per_call(fn, repeat):
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


bpy.ops.wm.read_factory_settings(use_empty=False)
k = Kernel()
populate(1000)
info_us = per_call(lambda: k.call("object.info", {"name": "E0500"}), 2000) * 1e6
populate_more = 1500
coll = bpy.data.collections["Collection"]
for i in range(1000, 1000 + populate_more):
    coll.objects.link(bpy.data.objects.new("E%04d" % i, None))
snapshot_ms = per_call(lambda: k.call("scene.snapshot", {}), 5) * 1e3
size = len(json.dumps(k.call("scene.snapshot", {})))
print(json.dumps({"object_info_us_1000_objects": round(info_us, 1), "snapshot_ms_2500_objects": round(snapshot_ms, 2),
                  "snapshot_bytes": size}))
