"""The kernel builds its tool table from the registry it ships (registry.json): what each tool
changes and needs is the registry's, and a tool the registry does not have cannot register."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bpy  # noqa: E402,F401

from vibe_kernel import tools, wire  # noqa: E402,F401  (wire imports every tool family)


class RegistryTableTest(unittest.TestCase):
    def test_the_table_is_the_shipped_registrys(self):
        path = os.path.join(os.path.dirname(tools.__file__), "registry.json")
        with open(path) as f:
            shipped = json.load(f)["tools"]
        self.assertEqual(set(tools.TOOLS), set(shipped))
        for name, (_, mutates, capabilities) in tools.TOOLS.items():
            self.assertEqual(mutates, shipped[name]["mutates"], name)
            self.assertEqual(capabilities, frozenset(shipped[name]["capabilities"]), name)
        tools.check_complete()

    def test_a_tool_outside_the_registry_cannot_register(self):
        with self.assertRaises(LookupError):
            tools.tool("object.explode")

    def test_a_kernel_missing_a_registry_tool_does_not_start(self):
        kept = tools.TOOLS.pop("object.info")
        try:
            with self.assertRaises(LookupError) as raised:
                wire.Kernel()
            self.assertIn("object.info", str(raised.exception))
        finally:
            tools.TOOLS["object.info"] = kept


if __name__ == "__main__":
    unittest.main()
