"""What the kernel's test cases share: calling a tool on `self.k` and checking its answer."""


class KernelCalls:
    """Mixed into a unittest.TestCase whose setUp makes `self.k` (a wire.Kernel)."""

    def call(self, tool, **params):
        return self.k.call(tool, params)

    def ok(self, tool, **params):
        answer = self.call(tool, **params)
        self.assertTrue(answer["ok"], "%s %r: %r" % (tool, params, answer))
        return answer["result"]

    def refused(self, tool, code, **params):
        answer = self.call(tool, **params)
        self.assertFalse(answer["ok"], "%s %r succeeded" % (tool, params))
        self.assertEqual(answer["error"]["code"], code, answer)
        return answer["error"]
