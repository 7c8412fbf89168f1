"""The in-process baseline of the live bench (benches/live_kernel.rs): the kernel's own
handlers called directly in Blender (no wire, no bridge), on the scenes the bench builds.

    python bench_in_process.py        (a Python with bpy)

A line server: each request on stdin is one JSON object, each answer one line on stdout that
starts with `@@` (Blender prints other lines there):

    {"op": "populate", "to": N}                      the scene grows to N objects (empties E0000...,
                                                     made by agent code as in the bench's kernels)
    {"op": "time", "tool": T, "params": P, "iters": K, "json": B}
                                                     K calls of T in a row; the answer is
                                                     {"ns": total}; with B, each call is also
                                                     decoded from its call frame's line and its
                                                     answer encoded as the wire's result frame:
                                                     the kernel's JSON work per call
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402

from vibe_kernel.channel import encode_answer, parse_frame  # noqa: E402
from vibe_kernel.wire import Kernel  # noqa: E402

CAPABILITIES = ["scene.read", "scene.write", "transactions", "code_exec"]


def populate(k, to):
    """The scene grows as the bench's kernels grow theirs: through agent code, so the empties are
    the agent's and the kernel has run code that writes (agent_code.WRITING_CODE_RAN)."""
    have = len(bpy.context.scene.objects)
    code = ("import bpy\ncoll = bpy.data.collections['Collection']\nfor i in range(%d, %d):\n"
            "    coll.objects.link(bpy.data.objects.new('E%%04d' %% i, None))\n" % (have - 3, to - 3))
    answer = k.call("python.exec", {"code": code})
    if not answer["ok"]:
        raise RuntimeError("populating the scene failed: %r" % answer)


def timed(k, tool, params, iters, with_json):
    line = (json.dumps({"type": "call", "id": 1, "tool": tool, "params": params, "deadline_ms": 120000})
            + "\n").encode()
    start = time.perf_counter_ns()
    if with_json:
        for i in range(iters):
            frame = parse_frame(line)
            envelope = k.call(frame["tool"], frame["params"])
            encode_answer({"type": "result", "id": i, "envelope": envelope})
    else:
        for i in range(iters):
            k.call(tool, params)
    return time.perf_counter_ns() - start


def main():
    bpy.ops.wm.read_factory_settings(use_empty=False)
    k = Kernel()
    k.state.features.add("code_exec")
    k.state.configure({"session_id": "bench", "capabilities": CAPABILITIES})
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "populate":
            populate(k, request["to"])
            answer = {"ok": True}
        else:
            answer = {"ns": timed(k, request["tool"], request.get("params", {}), request["iters"], request["json"])}
        sys.stdout.write("@@" + json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
