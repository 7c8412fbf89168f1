"""What the kernel's test cases share: a kernel that runs agent code, calling a tool on `self.k`
and checking its answer."""

from vibe_kernel.wire import Kernel


def code_kernel(session):
    """A kernel that offers code_exec, as a jailed or opted-in one does (wire.offered_features),
    configured for `session` with scene.read, scene.write and code_exec."""
    k = Kernel()
    k.state.features.add("code_exec")
    k.state.configure({"session_id": session, "capabilities": ["scene.read", "scene.write", "code_exec"]})
    return k


class KernelCalls:
    """Mixed into a unittest.TestCase whose setUp makes `self.k` (a wire.Kernel)."""

    def call(self, tool, **params):
        return self.k.call(tool, params)

    def ok(self, tool, **params):
        answer = self.call(tool, **params)
        self.assertTrue(answer["ok"], "%s %r: %r" % (tool, params, answer))
        return answer["result"]

    def exec_error(self, code, error_code):
        """python.exec of `code` fails with `error_code`; its error (`refused` takes `code` for
        the error code, which python.exec needs for its parameter)."""
        answer = self.call("python.exec", code=code)
        self.assertFalse(answer["ok"], "%r ran: %r" % (code, answer))
        self.assertEqual(answer["error"]["code"], error_code, answer)
        return answer["error"]

    def refused(self, tool, code, **params):
        answer = self.call(tool, **params)
        self.assertFalse(answer["ok"], "%s %r succeeded" % (tool, params))
        self.assertEqual(answer["error"]["code"], code, answer)
        return answer["error"]
