"""Drives `vibe-mcp --mock` with the official MCP Python SDK's stdio client.

    python mcp_client_check.py path/to/vibe-mcp --sandbox DIR \
        --mock-delay render.still=1500 --mock-delay mesh.create_plane=3000

The two delays are needed: render.still must run long enough to report progress, and
mesh.create_plane long enough to be cancelled before it runs.

Checks: initialize, tools/list (every inputSchema and outputSchema a valid JSON Schema, on every
tool, macros included), answers validated against their outputSchema, a successful call, an
invalid-arguments call (a tool error, not a protocol error), a refused delete, a macro,
render_still's image block (a PNG) and its progress notifications, resources list and read, the
cancellation of a slow call (it never takes effect), a clean shutdown.
Prints one 'ok' or 'FAIL' line per check and a closing 'N passed, N failed' line; exits
non-zero on any failure.
"""

import asyncio
import base64
import json
import struct
import sys
import time

import jsonschema
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

passed, failed = 0, 0


def check(name, condition, detail=""):
    global passed, failed
    if condition:
        passed += 1
        print("ok   %s" % name)
    else:
        failed += 1
        print("FAIL %s %s" % (name, detail))


def field(obj, camel):
    """An attribute by its MCP (camelCase) name; newer SDKs spell it snake_case."""
    snake = "".join("_" + c.lower() if c.isupper() else c for c in camel)
    return getattr(obj, camel) if hasattr(obj, camel) else getattr(obj, snake)


def envelope(result):
    return field(result, "structuredContent") or json.loads(result.content[0].text)


def is_error(result):
    return bool(field(result, "isError"))


async def main(server, extra):
    params = StdioServerParameters(command=server, args=["--mock"] + extra)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check("initialize", field(init, "serverInfo").name == "vibe-blender", field(init, "serverInfo"))
            check("tools capability", init.capabilities.tools is not None)

            listed = await session.list_tools()
            names = {tool.name for tool in listed.tools}
            check("tools/list has the scene tools", {"object_move", "mesh_create_cube", "scene_snapshot"} <= names, sorted(names))
            check("tools/list has the macros", {"macro_build_and_place", "macro_ground_plane"} <= names, sorted(names))
            invalid_schemas = []
            for tool in listed.tools:
                try:
                    jsonschema.Draft202012Validator.check_schema(field(tool, "inputSchema"))
                except jsonschema.SchemaError as e:
                    invalid_schemas.append((tool.name, str(e)))
            check("every inputSchema is valid JSON Schema", not invalid_schemas, invalid_schemas)
            schemas = {tool.name: field(tool, "outputSchema") for tool in listed.tools}
            missing = sorted(name for name, schema in schemas.items() if not schema)
            check("every tool has an outputSchema", not missing, missing)
            invalid_outputs = []
            for name, schema in schemas.items():
                try:
                    jsonschema.Draft202012Validator.check_schema(schema or {})
                except jsonschema.SchemaError as e:
                    invalid_outputs.append((name, str(e)))
            check("every outputSchema is valid JSON Schema", not invalid_outputs, invalid_outputs)

            def conforms(name, result):
                errors = sorted(e.message for e in jsonschema.Draft202012Validator(schemas[name]).iter_errors(envelope(result)))
                check("%s answers by its outputSchema" % name, not errors, errors)

            # One answer of every read tool, and of the writes below, checked by its schema.
            for name, args in [("kernel_status", {}), ("scene_snapshot", {}), ("scene_telemetry", {}),
                               ("blender_errors", {}), ("scene_list_collections", {}), ("object_list", {}),
                               ("object_info", {"name": "Cube"}), ("scenegraph_find", {"name_glob": "Cu*"}),
                               ("object_audit_identity", {"name": "Cube"}), ("material_list", {})]:
                if name in schemas:
                    conforms(name, await session.call_tool(name, args))
            delete = next(t for t in listed.tools if t.name == "object_delete")
            check("annotations come from the registry hints", field(delete.annotations, "destructiveHint") is True, delete.annotations)

            created = await session.call_tool("mesh_create_cube", {"name": "Box", "location": [1, 2, 3]})
            conforms("mesh_create_cube", created)
            env = envelope(created)
            check("a successful call", not is_error(created) and env["ok"] and env["result"]["name"] == "Box", env)

            bad = await session.call_tool("object_move", {"name": "Box"})
            env = envelope(bad)
            check("invalid arguments are a tool error", is_error(bad) and env["error"]["code"] == "invalid_arguments", env)

            refused = await session.call_tool("object_delete", {"name": "Cube"})
            env = envelope(refused)
            check("a delete of a human's object is refused",
                  is_error(refused) and env["error"]["details"].get("reason") == "actuator_lock", env)

            own = await session.call_tool("object_delete", {"name": "Box"})
            check("the agent may delete its own object", not is_error(own), envelope(own))

            # A render comes back as an image block the model sees, beside the envelope (which
            # keeps the image's size, not its bytes).
            rendered = await session.call_tool("render_still", {"path": "look.png", "width": 64, "height": 48})
            conforms("render_still", rendered)
            images = [c for c in rendered.content if c.type == "image"]
            check("render_still returns one image block", not is_error(rendered) and len(images) == 1, rendered.content)
            if images:
                png = base64.b64decode(images[0].data)
                check("the image block is the PNG of the asked size",
                      field(images[0], "mimeType") == "image/png" and png[:8] == b"\x89PNG\r\n\x1a\n"
                      and struct.unpack(">II", png[16:24]) == (64, 48), (field(images[0], "mimeType"), png[:24]))
                meta = envelope(rendered)["result"]["_meta"]["image"]
                check("the envelope names the image without its bytes",
                      (meta["width"], meta["height"]) == (64, 48) and "data" not in meta, meta)

            # Macros are tools: their answer is an envelope too.
            ground = await session.call_tool("macro_ground_plane", {"name": "Ground"})
            conforms("macro_ground_plane", ground)
            env = envelope(ground)
            check("a macro runs as one tool", not is_error(ground) and env["result"]["macro"] == "ground_plane"
                  and len(env["result"]["steps"]) >= 1, env)

            # Progress: render.still's registry time class is `render`; asked with a progress
            # token, it reports seconds run against its deadline (the mock is delayed 1.5 s).
            notes = []

            async def on_progress(progress, total, message):
                notes.append((progress, total, message))

            slow_render = await session.call_tool("render_still", {"path": "slow.png", "width": 32, "height": 32},
                                                  progress_callback=on_progress)
            check("render_still with progress answers", not is_error(slow_render), envelope(slow_render))
            values = [p for p, _, _ in notes]
            check("render_still reports progress while it runs", len(notes) >= 2, notes)
            check("progress rises with every notification", all(a < b for a, b in zip(values, values[1:])), values)
            check("progress counts against the render deadline", bool(notes) and all(t and t > 0 and p <= t for p, t, _ in notes)
                  and len({t for _, t, _ in notes}) == 1, notes)
            quick = []

            async def on_quick(progress, total, message):
                quick.append(progress)

            await session.call_tool("scene_telemetry", {}, progress_callback=on_quick)
            check("a quick tool reports no progress", quick == [], quick)

            # Resources: the scene and Blender's errors, read through the pipeline.
            listed = await session.list_resources()
            uris = sorted(str(r.uri) for r in listed.resources)
            check("resources/list has the scene and the errors", uris == ["vibe://blender/errors", "vibe://scene/snapshot"], uris)
            snapshot = await session.read_resource("vibe://scene/snapshot")
            snap = json.loads(snapshot.contents[0].text)
            check("the scene snapshot resource is the snapshot tool's envelope",
                  snap["ok"] and any(o["name"] == "Ground" for o in snap["result"]["objects"])
                  and field(snapshot.contents[0], "mimeType") == "application/json", snap.get("error"))
            errors = json.loads((await session.read_resource("vibe://blender/errors")).contents[0].text)
            check("the errors resource is blender.errors' envelope", errors["ok"] and isinstance(errors["result"]["errors"], list), errors)
            try:
                await session.read_resource("vibe://nothing")
                check("an unknown resource is an error", False)
            except Exception as e:
                check("an unknown resource is an error", "vibe://nothing" in str(e), e)

            # Cancellation: the client gives up on a slow create (the mock holds it 3 s before
            # it runs) and sends notifications/cancelled; the server cancels the pipeline's
            # call, so the plane is never made, even after the 3 s have passed.
            started = time.monotonic()
            try:
                await session.call_tool("mesh_create_plane", {"name": "Slow"}, read_timeout_seconds=0.5)
                check("the slow call is abandoned by the client", False, "it answered")
            except Exception as e:
                check("the slow call is abandoned by the client", time.monotonic() - started < 2.5, repr(e))
            await asyncio.sleep(max(0.0, started + 3.5 - time.monotonic()))
            gone = envelope(await session.call_tool("object_info", {"name": "Slow"}))
            check("the cancelled call never took effect", not gone["ok"] and gone["error"]["code"] == "not_found", gone)
            alive = await session.call_tool("scene_telemetry", {})
            check("the session serves on after a cancel", not is_error(alive), envelope(alive))
    check("clean shutdown", True)
    print("%d passed, %d failed" % (passed, failed))
    return failed == 0


if __name__ == "__main__":
    sys.exit(0 if asyncio.run(main(sys.argv[1], sys.argv[2:])) else 1)
