"""Values a weight loader installs as a layer's compute parameter: what stays a finding in storage code.

Weight loaders (`exempt-functions`: `*weight_loader*`, `load_weights`) are trusted because their
job is the storage format: what becomes `L.weight` (or `qweight`, `weight_packed`, ...) must take
the storage dtype. A loader that casts or allocates in `L.weight.dtype` and installs the result as
another parameter of the same layer that the layer computes with (`L.bias = nn.Parameter(b.to(
L.weight.dtype))`, `L.register_parameter("out_scale", ...)`, `setattr(L, "bias", ...)`) is not
storage code: under int8/uint8/fp8 storage the bias becomes an integer or fp8 tensor, and where a
backend keeps no `.weight` the read fails (issue #39). Only these installs are reported there.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.analysis.storage.weight_registration import _parameter_data, _weight_name


def _installs(nodes) -> list[tuple[ast.expr, str, ast.expr]]:
    """(owner, attribute name, value) for each `owner.name = V`, `owner.register_parameter("name",
    V)` and `setattr(owner, "name", V)` among a function's `nodes` (a single target only)."""
    found: list[tuple[ast.expr, str, ast.expr]] = []
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute):
            found.append((node.targets[0].value, node.targets[0].attr, node.value))
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "register_parameter" and len(node.args) == 2 \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.append((func.value, node.args[0].value, node.args[1]))
            elif dotted(func) == "setattr" and len(node.args) == 3 and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str):
                found.append((node.args[0], node.args[1].value, node.args[2]))
    return found


def _value_of(node: ast.expr, assigns: dict[str, list[ast.expr | None]]) -> ast.AST | None:
    """The expression an installed value stands for: `nn.Parameter(X)` unwrapped, a local bound
    once followed (`bias = t.to(dtype)`, `param = nn.Parameter(bias)`), two steps at most."""
    for _ in range(4):
        data = _parameter_data(node)
        if data is not None:
            node = data
            continue
        if isinstance(node, ast.Name):
            bound = assigns.get(node.id, [])
            if len(bound) != 1 or not isinstance(bound[0], ast.expr):
                return None
            node = bound[0]
            continue
        break
    return node


def compute_parameter_install(site: ast.Call, layer: ast.expr, nodes,
                              assigns: dict[str, list[ast.expr | None]]) -> str | None:
    """The name under which the function holding `nodes` installs the value of `site` (a cast or
    an allocation in `layer.weight.dtype`) as a parameter or attribute of `layer` itself that is
    not its weight (`bias`, `out_scale`): None when it does not, or installs it as a weight-named
    one (storage code)."""
    layer_text = ast.dump(layer)
    for owner, name, value in _installs(nodes):
        if _weight_name(name) or ast.dump(owner) != layer_text:
            continue
        if _value_of(value, assigns) is site:
            return name
    return None
