"""Code that only reads: the proof, on the syntax tree, that agent code changes nothing in
Blender (such code runs without a rollback point; see agent_code.py)."""

import ast

from . import confine

# Builtins that code proven read-only may call: positional arguments only (no `key=` or `file=`,
# the two ways to hand a builtin a callable or a writable object), none of them calls back into
# code the agent wrote (read-only code cannot define any) or writes to its arguments.
READ_ONLY_CALLS = frozenset(["abs", "all", "any", "bool", "chr", "divmod", "enumerate", "float", "format",
                             "frozenset", "hash", "int", "isinstance", "len", "list", "max", "min", "ord",
                             "print", "range", "repr", "reversed", "round", "set", "sorted", "str", "sum",
                             "tuple", "zip"])
# Node types code proven read-only may contain. Left out on purpose: function and class
# definitions, lambdas, decorators and `with` (ways to run code of its own from inside Blender
# or a builtin), augmented assignment (`v += d` writes through a Vector that wraps an object's
# location), `match`, `await`, `yield`, and f-string format specs are expressions like any other.
READ_ONLY_NODES = (ast.Module, ast.Expr, ast.Assign, ast.For, ast.While, ast.If, ast.Break, ast.Continue,
                   ast.Pass, ast.Import, ast.ImportFrom, ast.alias, ast.Try, ast.ExceptHandler, ast.Raise,
                   ast.Assert, ast.Delete, ast.Global, ast.Nonlocal, ast.Name, ast.Constant, ast.JoinedStr,
                   ast.FormattedValue, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Attribute,
                   ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.ListComp, ast.SetComp,
                   ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.Call, ast.Starred, ast.NamedExpr,
                   ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def reads_only(tree):
    """Whether the code provably changes nothing in Blender: it calls no function but the
    builtins of READ_ONLY_CALLS (by their own names, which it never rebinds), stores only into
    plain names, and contains no node outside READ_ONLY_NODES. Attribute reads stay allowed:
    Blender's properties do not change the scene when read (an add-on's pointer property, as
    Cycles' `obj.cycles`, makes its empty group of defaults on the first read: not in the
    scene's fingerprint). Such code runs without a rollback point and without the actuator
    lock's inventories (agent_code.python_exec): there is nothing to take back. The proof is
    about the code's own text: an object that earlier agent code left behind runs its own code
    when read, so agent_code uses it only while no code that may write has run. A filter of the
    same kind as the gate, conservative by construction: anything it cannot tell is treated as
    code that may write. `reaches_no_leftovers` says when it holds after such code too."""
    if confine.GATE_OFF:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, READ_ONLY_NODES):
            return False
        # Stores and deletes through an attribute or an item (a starred target's value is one).
        if isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
            return False
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and node.id in READ_ONLY_CALLS:
            return False
        if isinstance(node, (ast.Global, ast.Nonlocal)) and any(n in READ_ONLY_CALLS for n in node.names):
            return False
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[0]) in READ_ONLY_CALLS:
            return False
        if isinstance(node, ast.ExceptHandler) and node.name in READ_ONLY_CALLS:
            return False
        if isinstance(node, ast.Call):
            if node.keywords or not (isinstance(node.func, ast.Name) and node.func.id in READ_ONLY_CALLS):
                return False
    return True


# What read-only code may import and still reach nothing earlier agent code could have left
# behind: modules made of built-in functions, C types and numbers (their views are made per run,
# and nothing in them takes a Python attribute).
LEFTOVER_FREE_MODULES = ("math", "mathutils")


def reaches_no_leftovers(tree):
    """Whether code proven read-only (`reads_only`) reaches nothing that code which wrote before
    it in this process could have left there to run when read. Earlier code can stash an object
    that runs its own code when iterated or printed (a lazy `map`, an instance of a class of its
    own) where a later call reads it: on a function's attributes, in a container a module or a
    class holds, on a class's `bl_rna` (see agent_code.WRITING_CODE_RAN). Code that imports
    nothing but `math` and `mathutils` (their views hold built-in functions and C types, which
    take no Python attribute) reaches only built-ins and its own values: it keeps the fast path
    after writing code ran. `bpy` does not qualify: Blender's data leads through its classes to
    Python objects that take attributes (a method read through an instance reads its function's
    attributes, a class holds sets and dicts that can be changed in place), which the kernel
    state check compares only in part; such code takes the rollback point."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name not in LEFTOVER_FREE_MODULES for alias in node.names):
            return False
        if isinstance(node, ast.ImportFrom) and (node.level or node.module not in LEFTOVER_FREE_MODULES):
            return False
    return True
