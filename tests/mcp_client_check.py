"""Drives `mcp_server --mock` with the official MCP Python SDK's stdio client.

    python tests/mcp_client_check.py path/to/mcp_server

Checks: initialize, tools/list (every inputSchema a valid JSON Schema), a successful call, an
invalid-arguments call (a tool error, not a protocol error), a refused delete, a clean shutdown.
Prints a closing 'N passed, N failed' line and exits non-zero on any failure.
"""

import asyncio
import base64
import json
import struct
import sys

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
    check("clean shutdown", True)
    print("%d passed, %d failed" % (passed, failed))
    return failed == 0


if __name__ == "__main__":
    sys.exit(0 if asyncio.run(main(sys.argv[1], sys.argv[2:])) else 1)
