"""Allocations that become a layer's weight: storage code known by what it does, not by its name.

`P = nn.Parameter(torch.empty(src.shape, dtype=src.dtype))` then `layer.register_parameter("weight",
P)` (or `layer.weight = P`, `setattr(layer, "weight", P)`) builds a layer's weight: its dtype must
be the storage dtype, so an allocation in `L.weight.dtype` there is right, whatever the function
is called (issue #39: a weight swapped in with `del layer.weight` and `register_parameter`). An
allocation merely near a parameter (a buffer, a scale) is not one of these."""

from __future__ import annotations

import ast

from dtype_lint.analysis.index.class_index import dotted

_PARAMETER_CTORS = frozenset({"nn.Parameter", "torch.nn.Parameter", "Parameter", "nn.parameter.Parameter",
                              "torch.nn.parameter.Parameter"})


def _weight_name(name: object) -> bool:
    """`weight`, `qweight`, `weight_packed`: the names a layer's weight is stored under."""
    return isinstance(name, str) and "weight" in name and not name.endswith("weights")


def _parameter_data(node: ast.AST) -> ast.expr | None:
    """The tensor `nn.Parameter(X, ...)` wraps (`X` or `data=X`), else None."""
    if not (isinstance(node, ast.Call) and dotted(node.func) in _PARAMETER_CTORS):
        return None
    if node.args:
        return node.args[0]
    return next((kw.value for kw in node.keywords if kw.arg == "data"), None)


def _registered_values(nodes) -> list[ast.expr]:
    """The values a function makes a layer's weight: `X.register_parameter("weight", V)`,
    `X.weight = V`, `setattr(X, "weight", V)`."""
    values: list[ast.expr] = []
    for node in nodes:
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "register_parameter" and len(node.args) == 2 \
                    and isinstance(node.args[0], ast.Constant) and _weight_name(node.args[0].value):
                values.append(node.args[1])
            elif dotted(func) == "setattr" and len(node.args) == 3 and isinstance(node.args[1], ast.Constant) \
                    and _weight_name(node.args[1].value):
                values.append(node.args[2])
        elif isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Attribute) and _weight_name(t.attr) for t in node.targets):
                values.append(node.value)
    return values


def weight_allocations(nodes, assigns: dict[str, list[ast.AST]]) -> set[int]:
    """ids of the expressions among a function's `nodes` that become a layer's registered weight:
    the tensor a `nn.Parameter(...)` wraps, where that parameter (directly, or through a local
    bound only to it) is registered or assigned as a layer's weight. `assigns`: the function's
    local assignments (FunctionScope.assigns), to follow `P = nn.Parameter(buf)` and `buf = ...`."""
    found: set[int] = set()
    for value in _registered_values(nodes):
        parameter = _through_local(value, assigns)
        data = _parameter_data(parameter) if parameter is not None else None
        if data is None:
            continue
        found.add(id(data))
        allocation = _through_local(data, assigns)
        if allocation is not None:
            found.add(id(allocation))
    return found


def _through_local(node: ast.expr, assigns: dict[str, list[ast.AST]]) -> ast.AST | None:
    """`node` itself, or the one value a local `node` names is bound to."""
    if isinstance(node, ast.Name):
        bound = assigns.get(node.id, [])
        return bound[0] if len(bound) == 1 else None
    return node
