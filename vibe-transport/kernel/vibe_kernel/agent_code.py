"""python.exec: agent code, gated again here (code_gate.py), under a deadline, atomic, and held
to the actuator lock (lock.py)."""

import traceback

import bpy

from . import lock, snapshot
from .envelope import Refusal, escape_surrogates, redact_paths, sanitize
from .tools import req_str, tool

# Whether agent code not proven read-only has run in this process. Objects such code makes can
# outlive its call: stashed on a module or in a container of one (`[bpy][0].hook = map(...)`,
# a class with a mutating `__len__`), where later code reaches them by reading alone, and a
# read (`list(bpy.hook)`, `print(...)`, an attribute) runs what they hold. The proof of
# read_only.py is about the code's own text, so it holds only while no such object can exist:
# once this is set, python.exec takes a rollback point and the lock's inventories, unless the
# code also reaches nothing such an object can be on (read_only.reaches_no_leftovers: it
# imports nothing but math and mathutils).
WRITING_CODE_RAN = False


@tool("python.exec")
def python_exec(k, params):
    """Agent code, gated again here, under a deadline, atomic: a failed or interrupted run, or
    one that broke the actuator lock (see lock.py), is rolled back to the state before it (a file
    snapshot headless, the last undo step in the GUI; see snapshot.Guard), inside a transaction too.
    Code that provably only reads (read_only.reads_only) has nothing to take back: it runs
    without the rollback point and the lock's inventories, as long as no other agent code ran
    in this process (WRITING_CODE_RAN) or it reaches nothing such code could leave behind
    (read_only.reaches_no_leftovers: built-ins, math and mathutils only)."""
    from . import code_gate, codeexec, deadline, read_only

    global WRITING_CODE_RAN
    code = req_str(params, "code")
    deadline_ms = k.call_deadline_ms
    if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, (int, float)) or not 0 < deadline_ms < 1e9:
        deadline_ms = 15000  # a frame's deadline_ms that is no sane number (NaN, infinite, negative)
    deadline_s = max(0.05, deadline_ms / 1000.0 * 0.8)
    try:
        tree = code_gate.parse(code)
        if read_only.reads_only(tree) and (not WRITING_CODE_RAN or read_only.reaches_no_leftovers(tree)):
            return read_only_run(k, tree, deadline_s)
        # What a failed run returns to: a file snapshot headless, the last undo step in the GUI.
        guard = snapshot.Guard(k)
    except SyntaxError as e:
        raise Refusal("invalid_arguments", "SyntaxError: %s (line %s)" % (e.msg, e.lineno), field="code",
                      reason="syntax", line=e.lineno or 0, column=e.offset or 0)
    except code_gate.GateViolation as v:
        raise gate_refusal(v)
    before = lock.inventory(k)
    before_blocks = lock.blocks(k)
    record = lock.record_by_name(k.shared)

    def restore():
        rolled_back = guard.restore()
        k.state.seen.clear()
        lock.restore_record(k.shared, record)
        return rolled_back

    # Agent code may delete, rename or undo anything: start and end with an empty identity cache.
    k.state.identity.clear()
    WRITING_CODE_RAN = True  # before it runs: a run that fails may have stashed objects too
    try:
        stdout, truncated = codeexec.run(code, deadline_s, tree, watch=True)
    except code_gate.GateViolation as v:
        raise gate_refusal(v)
    except codeexec.KernelStateChanged as changed:
        rolled_back = restore()
        k.state.log_console("python.exec", "kernel state: " + str(changed))
        raise Refusal("contract_violation",
                      "agent code changed the kernel's own state (%s): put back; %s" % (
                          changed, taken_back(rolled_back, "its changes to the scene are still there")),
                      reason="security_block", rule="kernel_state", changed=changed.changed,
                      rolled_back=rolled_back)
    except deadline.Interrupted as interrupted:
        raise interrupted_refusal(interrupted, deadline_s, restore())
    except codeexec.AgentError as failure:
        raise failed_refusal(k, failure.message, restore())
    except Exception as exc:  # noqa: BLE001 - the kernel's own failure around the run: still atomic
        rolled_back = restore()
        raise failed_refusal(k, "".join(traceback.format_exception_only(type(exc), exc)), rolled_back)
    else:
        after = lock.inventory(k)
        after_blocks = lock.blocks(k)
        agent_modifiers = {(o, m) for o, m, session in record["modifiers"] if session == k.state.session_id}
        broken = (lock.violations(before, after) + lock.part_violations(before, after, agent_modifiers)
                  + lock.block_violations(before_blocks, after_blocks))
        if broken:
            rolled_back = restore()
            k.state.log_console("python.exec", "actuator lock: " + lock.describe(broken))
            raise Refusal("contract_violation",
                          "actuator lock: agent code may not delete, rename or unlink data it did not create (%s); "
                          "%s" % (lock.describe(broken), taken_back(rolled_back, "its changes are still there")),
                          reason="actuator_lock", violations=broken, rolled_back=rolled_back)
        # No protected object was touched: everything else is the agent's (what it made, and its
        # own objects under the names it gave them). The other data-blocks it made are its too.
        protected = {record["uid"] for record in before.values() if not record["created"]}
        had = {record["uid"] for record in before.values()}
        made = sorted(name for name, record in after.items() if record["uid"] not in had or name not in before)
        for name, record in after.items():
            # Only what is not marked yet (one name lookup per new object, not per object).
            if not record["created"] and record["uid"] not in protected:
                lock.mark_created(k, bpy.data.objects[name], "object")
        had = {(b["kind"], b["name"]) for b in before_blocks}
        for block in after_blocks:
            if (block["kind"], block["name"]) not in had:
                data = getattr(bpy.data, lock.KIND_ATTRIBUTES[block["kind"]])[block["name"]]
                lock.mark_created(k, data, block["kind"])
    finally:
        k.state.identity.clear()
        guard.close()
    return exec_answer(stdout, truncated, made)


def read_only_run(k, tree, deadline_s):
    """python.exec of code that only reads: the same run and answers, nothing to take back."""
    from . import code_gate, codeexec, deadline

    try:
        stdout, truncated = codeexec.run(None, deadline_s, tree)
    except code_gate.GateViolation as v:
        raise gate_refusal(v)
    except deadline.Interrupted as interrupted:
        raise interrupted_refusal(interrupted, deadline_s, True)
    except codeexec.AgentError as failure:
        raise failed_refusal(k, failure.message, True)
    return exec_answer(stdout, truncated, [])


def taken_back(rolled_back, otherwise):
    """How a refusal ends: the call taken back, or what taking it back left."""
    return "the call was rolled back" if rolled_back else "taking the call back failed: " + otherwise


def gate_refusal(violation):
    return Refusal("contract_violation", "security block: %s" % violation, reason="security_block", field="code",
                   rule=violation.rule, line=violation.line)


def interrupted_refusal(interrupted, deadline_s, rolled_back):
    why = ("python.exec was cancelled and interrupted" if interrupted.cancelled else
           "python.exec ran past its deadline of %.2f s and was interrupted" % deadline_s)
    return Refusal("timeout", why, cancelled=True, rolled_back=rolled_back,
                   partial_effects="none: rolled back" if rolled_back else "kept: they could not be taken back")


def failed_refusal(k, message, rolled_back):
    message = sanitize(message)
    k.state.log_console("python.exec", message)
    return Refusal("execution_failed", message, reason="mutation_failed", rolled_back=rolled_back)


def exec_answer(stdout, truncated, made):
    """What the code printed goes back to the agent and the bridge: escaped (an unpaired
    surrogate would halt the bridge's JSON parser; CappedOutput escapes them as they are
    written) and with absolute paths cut to their last component, as error messages are."""
    return {"stdout": redact_paths(escape_surrogates(stdout)), "truncated": truncated, "created": made}
