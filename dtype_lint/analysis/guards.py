"""Is this site reached only when the layer is unquantized, or its storage unpacked?

A cast to `L.weight.dtype` is harmless where a check that dominates it has already proven the
layer unquantized or its storage a plain float:
- a test on the quant method: `isinstance(L.quant_method, Unquantized...)`, `type(L.quant_method)
  is Unquantized...`, `L.quant_config is None`, or a flag holding one (`self.is_unquantized =
  isinstance(self.quant_method, UnquantizedLinearMethod)`, vLLM's GateLinear);
- a test on the storage that the dtype evaluator proves false for every packed storage (int32,
  uint8, int8, no `.weight`): `w.dtype == torch.bfloat16`, `getattr(L, "weight", None) is not None
  and L.weight.dtype in (torch.float16, torch.bfloat16)`.
The check dominates when the site is in the body of an `if` (or conditional expression, or a
later operand of `and`) whose test proves it, or follows an `if` whose test proves the opposite
and whose body leaves (`return`, `raise`, `continue`, `break`).
"""

from __future__ import annotations

import ast

from dtype_lint.dtypes.evaluator import guard_excludes_packed, guard_includes_packed
from dtype_lint.analysis.class_facts import ClassFacts
from dtype_lint.findings import Evidence
from dtype_lint.analysis.class_index import dotted


class _Flags:
    """The enclosing class's attributes (`self.X = value`) and methods, for flags and predicates."""

    def __init__(self, assigned: dict, methods: dict):
        self.assigned = assigned
        self.methods = methods


_NO_FLAGS = _Flags({}, {})

_LEAVES = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def dominating_guard(site: ast.AST, fn: ast.AST, parents: dict[int, ast.AST], layer: ast.expr,
                     aliases: dict[str, ast.expr], cls: ClassFacts | None, path: str) -> Evidence | None:
    """Evidence of a check that proves the layer unquantized wherever `site` runs, or None.
    `aliases`: the function's single-assignment locals; `cls`: facts of the enclosing class (its
    `self.X = value` flags and its predicate methods)."""
    flags = _Flags(cls.assigned if cls else {}, cls.methods if cls else {})
    node = site
    while id(node) in parents and node is not fn:
        parent = parents[id(node)]
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and _in(node, parent.body):
            if _proves_unquantized(parent.test, layer, aliases, flags):
                return _evidence(parent.test, path)
        if isinstance(parent, (ast.If, ast.IfExp)) and _in(node, parent.orelse):
            if _proves_quantized_or_packed(parent.test, layer, aliases, flags):
                return _evidence(parent.test, path)
            if isinstance(parent, ast.If) and _dispatches_to_quant_method(parent.body, layer, aliases):
                return Evidence(f"the branch of `{ast.unparse(parent.test)}` hands quantized layers to their "
                                f"quant method; this one runs for the others", path, parent.test.lineno)
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            for earlier in parent.values[: parent.values.index(node)] if node in parent.values else []:
                if _proves_unquantized(earlier, layer, aliases, flags):
                    return _evidence(earlier, path)
        for block in _blocks(parent):
            if node in block:
                for stmt in block[: block.index(node)]:
                    if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], _LEAVES) \
                            and _proves_quantized_or_packed(stmt.test, layer, aliases, flags):
                        return _evidence(stmt.test, path)
        node = parent
    return None


def _dispatches_to_quant_method(body: list[ast.stmt], layer: ast.expr, aliases) -> bool:
    """The body calls the layer's own quant method on it: `L.quant_method.apply(L, ...)`, or
    `qm.apply(L, ...)` with `qm = getattr(L, "quant_method", None)` (sglang's lm_head path)."""
    for stmt in body:
        for node in ast.walk(stmt):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "apply"
                    and node.args and _same(node.args[0], layer)):
                continue
            recv = node.func.value
            if isinstance(recv, ast.Name) and recv.id in aliases:
                recv = aliases[recv.id]
            if isinstance(recv, ast.Call) and dotted(recv.func) == "getattr" and len(recv.args) >= 2 \
                    and _same(recv.args[0], layer) and isinstance(recv.args[1], ast.Constant) \
                    and recv.args[1].value == "quant_method":
                return True
            if isinstance(recv, ast.Attribute) and recv.attr == "quant_method" and _same(recv.value, layer):
                return True
    return False


def _in(node: ast.AST, body) -> bool:
    return node is body or (isinstance(body, list) and node in body)


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    out = [getattr(node, f) for f in ("body", "orelse", "finalbody") if isinstance(getattr(node, f, None), list)]
    out += [h.body for h in getattr(node, "handlers", None) or []]
    return out


def _evidence(test: ast.AST, path: str) -> Evidence:
    return Evidence(f"guarded by `{ast.unparse(test)}`, which proves the layer unquantized or its storage a float",
                    path, test.lineno)


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _unquantized_class(node: ast.AST) -> bool:
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and all(_unquantized_class(e) for e in node.elts)
    name = dotted(node) or ""
    return name.rsplit(".", 1)[-1].startswith("Unquantized")


def _proves_unquantized(test: ast.AST, layer: ast.expr, aliases, flags, depth: int = 0, own_flag: bool = False) -> bool:
    if depth > 4:
        return False
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        if any(_proves_unquantized(v, layer, aliases, flags, depth + 1, own_flag) for v in test.values):
            return True
    if isinstance(test, ast.Call) and dotted(test.func) == "isinstance" and len(test.args) == 2:
        obj, cls = test.args
        if isinstance(obj, ast.Attribute) and obj.attr == "quant_method" and _same(obj.value, layer):
            return _unquantized_class(cls)
        # In a flag of the layer's own class, computed in `__init__` from the local that becomes
        # `self.quant_method` (vLLM's `use_fused_embedding`).
        if own_flag and isinstance(obj, ast.Name) and "quant_method" in obj.id:
            return _unquantized_class(cls)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right, op = test.left, test.comparators[0], test.ops[0]
        if isinstance(op, (ast.Is, ast.Eq)) and isinstance(left, ast.Call) and dotted(left.func) == "type" \
                and left.args and isinstance(left.args[0], ast.Attribute) and left.args[0].attr == "quant_method" \
                and _same(left.args[0].value, layer):
            return _unquantized_class(right)
        if isinstance(op, (ast.Is, ast.Eq)) and isinstance(left, ast.Attribute) and left.attr == "quant_config" \
                and _same(left.value, layer) and isinstance(right, ast.Constant) and right.value is None:
            return True
    if isinstance(test, ast.Name) and test.id in aliases:
        return _proves_unquantized(aliases[test.id], layer, aliases, flags, depth + 1)
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and isinstance(test.func.value, ast.Name) \
            and test.func.value.id == "self" and isinstance(layer, ast.Name) and layer.id == "self" \
            and test.func.attr in flags.methods:
        return _predicate_proves_unquantized(flags.methods[test.func.attr], layer, flags)
    if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self" \
            and flags.assigned.get(test.attr):
        # A flag of the class: every value it is given must prove it (about `self`'s layers).
        own = isinstance(layer, ast.Name) and layer.id == "self"
        return all(_proves_unquantized(v, layer, aliases, _NO_FLAGS, depth + 1, own) for v in flags.assigned[test.attr])
    return guard_excludes_packed(test, layer, aliases)


def _predicate_proves_unquantized(fn: ast.FunctionDef, layer: ast.expr, flags: _Flags) -> bool:
    """A method of the layer's class that returns a true value only after an early
    `return False` for quantized layers (sglang's `_use_triton_embedding`)."""
    for stmt in fn.body:
        if isinstance(stmt, ast.Return):
            return False  # returns before any check
        if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Return):
            ret = stmt.body[-1].value
            falsy = ret is None or (isinstance(ret, ast.Constant) and not ret.value)
            if not falsy:
                return False
            if _proves_quantized_or_packed(stmt.test, layer, {}, _Flags(flags.assigned, {})):
                return True
    return False


def _proves_quantized_or_packed(test: ast.AST, layer: ast.expr, aliases, flags) -> bool:
    """The test holds whenever the layer is quantized or packed (its body leaves, so what follows
    runs only on unquantized layers): `not <proves unquantized>`, or the evaluator shows it true
    for every packed storage."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _proves_unquantized(test.operand, layer, aliases, flags)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(_proves_quantized_or_packed(v, layer, aliases, flags) for v in test.values) or \
            guard_includes_packed(test, layer, aliases)
    return guard_includes_packed(test, layer, aliases)
