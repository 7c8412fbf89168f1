"""The kernel's code gate: agent code parsed under the nesting rules, then checked node by node
against the policy (the rules and tables are in code_policy.py).

The bridge's Rust gate (vibe-exec `code::gate`, tables in `code::policy`) is the first line; this
is the second, so a bridge bug or a kernel reached by another client still cannot run a blocked
pattern. It mirrors the Rust policy: the same tables, the same rule names. Both are filters that
explain refusals early, not the boundary: Python and the bpy API have too many ways to reach
files, processes and evaluators for any text check to close them. The boundary is the operating
system's jail around the kernel.
"""

import ast
import re

from .code_policy import (ATTRIBUTE, DUNDER_METHODS_ALLOWED, IMPORT, IMPORT_ALLOWLIST, MAX_AST_DEPTH, MAX_NESTING,
                          MAX_SOURCE_BYTES, NAME, STAR_IMPORT_ALLOWLIST, STRING_PATH_METHODS, format_reaches_attributes,
                          identifier_rule, is_dunder, norm, operator_rule, path_rule, string_rule)


class GateViolation(Exception):
    def __init__(self, rule, detail, node=None, line=None):
        line = getattr(node, "lineno", 0) if line is None else line
        super().__init__("%s at line %d: %s" % (rule, line, detail))
        self.rule, self.detail, self.line = rule, detail, line


def dotted(node):
    """The dotted path of a Name / Attribute chain, normalized (iterative: chains may be long)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(norm(node.attr))
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(norm(node.id))
    parts.reverse()
    return parts


# ---------------------------------------------------------------- nesting

_BRACKETS_AND_STRINGS = re.compile(r"[#'\"()\[\]{}]")


def nesting_violation(code, limit=MAX_NESTING):
    """The line where brackets first nest deeper than `limit` (strings and comments skipped), or
    None. Linear in the input; an unterminated string ends the scan (the parser refuses it)."""
    depth, pos = 0, 0
    search = _BRACKETS_AND_STRINGS.search
    while True:
        m = search(code, pos)
        if m is None:
            return None
        c, i = m.group(), m.start()
        if c == "#":
            end = code.find("\n", i)
            if end < 0:
                return None
            pos = end + 1
        elif c in "'\"":
            quote = c * 3 if code.startswith(c * 3, i) else c
            j = i + len(quote)
            while True:
                k = code.find(quote, j)
                if k < 0:
                    return None
                b = k
                while b > j and code[b - 1] == "\\":
                    b -= 1
                if (k - b) % 2 == 0:
                    break
                j = k + 1
            pos = k + len(quote)
        elif c in "([{":
            depth += 1
            if depth > limit:
                return code.count("\n", 0, i) + 1
            pos = i + 1
        else:
            depth = max(0, depth - 1)
            pos = i + 1


def parse(code):
    """ast.parse with the nesting rules: deep input is refused with `nesting_too_deep`, never a
    RecursionError or MemoryError out of CPython's parser."""
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        raise GateViolation("source_too_large", "%d bytes of code; MAX_SOURCE_BYTES = %d" % (size, MAX_SOURCE_BYTES),
                            line=1)
    line = nesting_violation(code)
    if line is not None:
        raise GateViolation("nesting_too_deep", "brackets nest deeper than MAX_NESTING = %d levels; split the "
                            "expression into named steps" % MAX_NESTING, line=line)
    try:
        return ast.parse(code, filename="<agent>", mode="exec")
    except ValueError as e:  # null bytes (a SyntaxError from 3.12 on)
        raise SyntaxError(str(e)) from None
    except (RecursionError, MemoryError):
        raise GateViolation("nesting_too_deep", "the code is nested too deeply for the parser; split long "
                            "chains and nested expressions into named steps", line=0) from None


def compile_checked(tree):
    try:
        return compile(tree, "<agent>", "exec")
    except (RecursionError, MemoryError):
        raise GateViolation("nesting_too_deep", "the code is nested too deeply to compile; split long chains "
                            "and nested expressions into named steps", line=0) from None


# ---------------------------------------------------------------- the checker

def _is_name(node, name):
    return isinstance(node, ast.Name) and norm(node.id) == name


def _callee_name(func):
    if isinstance(func, ast.Name):
        return norm(func.id)
    if isinstance(func, ast.Attribute):
        return norm(func.attr)
    return None


class _Checker:
    """Walks the tree with an explicit stack (any input answers, no recursion), in source order,
    and raises GateViolation at the first node the policy forbids."""

    def __init__(self):
        self.skip = set()  # ids of nodes a parent already judged (type in type(x), super().__init__)
        self.bindings = {}  # name -> dotted path of the module or plain chain it is bound to
        self.suspends = False  # the code makes generators or coroutines (finalizers that run its code)

    def check(self, tree):
        stack = [(tree, 0, None, False)]
        while stack:
            node, depth, parent, in_annotation = stack.pop()
            if depth > MAX_AST_DEPTH:
                raise GateViolation("nesting_too_deep", "the syntax tree is deeper than MAX_AST_DEPTH = %d; split "
                                    "long chains and nested expressions into named steps" % MAX_AST_DEPTH, node)
            if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.AsyncFunctionDef)):
                self.suspends = True
            if id(node) not in self.skip:
                method = getattr(self, "visit_" + type(node).__name__, None)
                if method is not None:
                    method(node, parent, in_annotation)
            annotations = (getattr(node, "annotation", None), getattr(node, "returns", None))
            children = list(ast.iter_child_nodes(node))
            for child in reversed(children):
                stack.append((child, depth + 1, node,
                              in_annotation or any(child is a for a in annotations if a is not None)))

    # ------------------------------------------------ imports and bindings

    def check_import(self, module, names, node):
        parts = module.split(".")
        if parts[0] not in IMPORT_ALLOWLIST:
            raise GateViolation("import_not_allowed", "import of %r (allowed: %s)"
                                % (module, ", ".join(sorted(IMPORT_ALLOWLIST))), node)
        for part in parts[1:] + names:
            if part == "*":
                if module not in STAR_IMPORT_ALLOWLIST:
                    raise GateViolation("import_not_allowed", "from %s import *: a star import hides what it "
                                        "binds (allowed from: %s)" % (module, ", ".join(sorted(STAR_IMPORT_ALLOWLIST))),
                                        node)
                continue
            found = identifier_rule(part, IMPORT)
            if found is not None:
                raise GateViolation("import_not_allowed", "%s in an import from %s: %s (%s)"
                                    % (part, module, found[1], found[0]), node)

    def visit_Import(self, node, parent, in_annotation):
        for alias in node.names:
            module = norm(alias.name)
            self.check_import(module, [], node)
            path = module.split(".")
            if alias.asname:
                self.bindings[norm(alias.asname)] = path
            else:
                self.bindings[path[0]] = [path[0]]

    def visit_ImportFrom(self, node, parent, in_annotation):
        module = norm(node.module or "")
        if node.level:
            raise GateViolation("import_not_allowed", "relative import", node)
        names = [norm(a.name) for a in node.names]
        self.check_import(module, names, node)
        for alias, name in zip(node.names, names):
            self.bindings[norm(alias.asname) if alias.asname else name] = module.split(".") + [name]

    def resolve(self, expr):
        """The dotted path a plain Name / Attribute chain stands for through the bindings."""
        links = []
        while isinstance(expr, ast.Attribute):
            links.append(norm(expr.attr))
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        path = self.bindings.get(norm(expr.id))
        return None if path is None else path + links[::-1]

    def check_store(self, target):
        targets = [target]
        while targets:
            t = targets.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                targets.extend(t.elts)
            elif isinstance(t, ast.Starred):
                targets.append(t.value)
            elif isinstance(t, ast.Attribute):
                if norm(t.attr) == "bl_rna":
                    raise GateViolation("module_patch", "bl_rna is Blender's description of a class, read through "
                                        "every instance of it (the kernel's reads too)", t)
                base = t
                while isinstance(base, ast.Attribute):
                    base = base.value
                through_type = isinstance(base, ast.Call) and _is_name(base.func, "type")
                path = self.resolve(t)
                patched = path is not None and not (path[0] == "bpy" and len(path) > 2
                                                    and path[1] in ("context", "data"))
                if patched or through_type:
                    raise GateViolation("module_patch", "assigning to an attribute of a module or a class patches "
                                        "it for the kernel too (bpy.context.* and bpy.data.* stay writable)", t)

    def visit_Assign(self, node, parent, in_annotation):
        for target in node.targets:
            self.check_store(target)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = norm(node.targets[0].id)
            path = self.resolve(node.value)
            if path is None:
                self.bindings.pop(name, None)
            else:
                self.bindings[name] = path

    def visit_AugAssign(self, node, parent, in_annotation):
        self.check_store(node.target)

    def visit_AnnAssign(self, node, parent, in_annotation):
        self.check_store(node.target)

    def visit_Delete(self, node, parent, in_annotation):
        for target in node.targets:
            self.check_store(target)

    def visit_For(self, node, parent, in_annotation):
        self.check_store(node.target)

    def visit_comprehension(self, node, parent, in_annotation):
        self.check_store(node.target)  # `[0 for C.attr in [v]]` stores like a for loop

    visit_AsyncFor = visit_For

    def visit_With(self, node, parent, in_annotation):
        for item in node.items:
            if item.optional_vars is not None:
                self.check_store(item.optional_vars)

    visit_AsyncWith = visit_With

    # ------------------------------------------------ definitions

    def visit_FunctionDef(self, node, parent, in_annotation):
        name = norm(node.name)
        if not is_dunder(name):
            return
        in_class_body = isinstance(parent, ast.ClassDef) and node in parent.body
        if in_class_body and name in DUNDER_METHODS_ALLOWED:
            return
        if not in_class_body:
            why = "%s defined outside a class body" % name
        elif name == "__del__":
            why = "__del__ runs when the object is collected, after the call returned"
        else:
            why = "%s hooks attribute lookup, class creation or pickling (allowed: %s)" % (
                name, ", ".join(sorted(DUNDER_METHODS_ALLOWED)))
        raise GateViolation("dunder_definition", why, node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node, parent, in_annotation):
        for base in node.bases:
            if isinstance(base, ast.Starred):
                raise GateViolation("metaclass_denied", "bases unpacked at run time", node)
        for keyword in node.keywords:
            if keyword.arg is None:
                why = "class keywords unpacked at run time"
            elif norm(keyword.arg) == "metaclass":
                why = "metaclass= runs code of its own when the class is built"
            else:
                why = "class keyword %s= reaches __init_subclass__" % keyword.arg
            raise GateViolation("metaclass_denied", why, node)
        found = identifier_rule(norm(node.name), NAME)
        if found is not None:
            raise GateViolation(found[0], "class %s: %s" % (node.name, found[1]), node)

    # ------------------------------------------------ expressions

    def visit_Name(self, node, parent, in_annotation):
        name = norm(node.id)
        if name == "type" and isinstance(node.ctx, ast.Load):
            raise GateViolation("dynamic_attribute", "type is allowed only as type(x): three-argument type() "
                                "builds a class from run-time names", node)
        found = identifier_rule(name, NAME)
        if found is not None:
            raise GateViolation(found[0], "name %s: %s" % (name, found[1]), node)

    def visit_Attribute(self, node, parent, in_annotation):
        name = norm(node.attr)
        if name in ("format", "format_map"):
            receiver = node.value
            literal = receiver.value if isinstance(receiver, ast.Constant) and isinstance(receiver.value, str) else None
            if literal is None or format_reaches_attributes(norm(literal)):
                raise GateViolation("dynamic_attribute", ".%s looks attributes up from its format string: only a "
                                    "literal format string without `.` or `[` in a field is allowed (or use an "
                                    "f-string)" % name, node)
        else:
            found = identifier_rule(name, ATTRIBUTE)
            if found is not None:
                raise GateViolation(found[0], "attribute .%s: %s" % (name, found[1]), node)
        if name in STRING_PATH_METHODS:
            self.check_string_path(name, node, parent)
        # The chain as written and through the bindings (`o = bpy.ops; o.wm.append`).
        for path in (dotted(node), self.resolve(node)):
            if path is not None and operator_rule(path):
                raise GateViolation("operator_denied", "%s touches files, quits, loads or evaluates code (the "
                                    "wm.context_* and wm.properties_* operators run data paths as Python)"
                                    % ".".join(path), node)

    def check_string_path(self, name, node, parent):
        """x.path_resolve("a.b") and the like: called on the spot, with a literal path that passes
        the attribute rules word by word."""
        called = isinstance(parent, ast.Call) and parent.func is node
        path = None
        if called and not any(isinstance(a, ast.Starred) for a in parent.args) \
                and all(k.arg is not None for k in parent.keywords):
            given = parent.args[:1] or [k.value for k in parent.keywords if k.arg in ("path", "attr", "property")]
            if len(given) == 1 and isinstance(given[0], ast.Constant) and isinstance(given[0].value, str):
                path = norm(given[0].value)
        if path is None:
            raise GateViolation("dynamic_attribute", ".%s looks attributes up by a run-time string: call it on the "
                                "spot with a literal path (x.%s(\"location\"))" % (name, name), node)
        found = path_rule(path)
        if found is not None:
            raise GateViolation(found[0], ".%s(%r): %s" % (name, path, found[1]), node)

    def visit_Call(self, node, parent, in_annotation):
        func = node.func
        callee = _callee_name(func)

        def keyword(*names):
            return any(k.arg is None or k.arg in names for k in node.keywords)

        if _is_name(func, "type"):
            if len(node.args) != 1 or node.keywords or isinstance(node.args[0], ast.Starred):
                raise GateViolation("dynamic_attribute", "type() with more than one argument builds a class from "
                                    "run-time names", node)
            self.skip.add(id(func))
            return
        dynamic = (callee == "Type"
                   or (callee in ("Enum", "IntEnum", "Flag", "IntFlag", "StrEnum")
                       and (len(node.args) > 1 or keyword("names")))
                   or (callee == "wraps" and (len(node.args) > 1 or keyword("assigned", "updated")))
                   or (callee == "update_wrapper" and (len(node.args) > 2 or keyword("assigned", "updated"))))
        if dynamic:
            raise GateViolation("dynamic_attribute", "%s(...) here copies attributes or builds a class by run-time "
                                "names" % callee, node)
        if (isinstance(func, ast.Call) and _is_name(func.func, "type")
                and (len(node.args) >= 3 or any(isinstance(a, ast.Starred) for a in node.args))):
            # type(cls)('X', (), {...}) is three-argument type() through the metaclass (kernel only)
            raise GateViolation("dynamic_attribute", "calling type(x) with three arguments builds a class from "
                                "run-time names", node)
        # super().__init__(...): the one special attribute a class may reach.
        if (isinstance(func, ast.Attribute) and norm(func.attr) == "__init__"
                and isinstance(func.value, ast.Call) and _is_name(func.value.func, "super")):
            self.skip.add(id(func))
        # As written and through the bindings (`add = bpy.ops.node.add_node; add(settings=...)`);
        # other aliases meet the kernel's run-time guard (kernel_state.NoEvaluation).
        node_operator = any(path is not None and "ops" in path and len(path) >= 2 and path[-2] == "node"
                            for path in (dotted(func), self.resolve(func)))
        if node_operator and keyword("settings"):
            path = self.resolve(func) or dotted(func)
            raise GateViolation("string_evaluation", "bpy.ops.node.%s(settings=...) evaluates each setting's value "
                                "as Python" % path[-1], node)

    def visit_MatchClass(self, node, parent, in_annotation):
        # `case C(attr=p)` reads C's attribute `attr` by name: the attribute rules apply.
        for attr in node.kwd_attrs:
            found = identifier_rule(norm(attr), ATTRIBUTE)
            if found is not None:
                raise GateViolation(found[0], "pattern attribute %s: %s" % (attr, found[1]), node)

    def visit_Constant(self, node, parent, in_annotation):
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(value, str):
            return
        found = string_rule(norm(value))
        if found is not None:
            raise GateViolation(found[0], found[1], node)
        if in_annotation:
            raise GateViolation("string_evaluation", "a string annotation is evaluated by typing helpers "
                                "(get_type_hints, singledispatch)", node)


def check(tree):
    """Raises GateViolation for the first node the policy forbids; else the checker, which says
    whether the code makes generators or coroutines."""
    checker = _Checker()
    checker.check(tree)
    return checker
