"""A branch on a layer's storage dtype: a kernel dispatch, or a hand copy of the input-dtype
decision (DTL004 asks this).

A branch that picks a kernel by the storage format (`if L.weight.dtype == torch.uint8:
fp4_path(...)`, a flag `is_int8 = L.weight.dtype == torch.int8`) and falls back to the layer
itself (`L(x)`, its quant method) asks the storage question the way it must be asked: whatever a
backend stores, the fallback hands it to the code that owns it. It is a hand copy worth reporting
when:
- it **re-derives a dtype** from the storage: the branch casts an activation to the layer's
  storage dtype or allocates with it (the MLA prefill's `if ... w != torch.uint8: kv.to(w)`);
- or its **fall-through treats the other storages as unpacked**: the `else` (or what follows the
  `if` in its block) hands the raw `L.weight` to a kernel (`F.linear(x, L.weight)`,
  `torch.mm(x, L.weight.t())`), so int8, int32, uint8 or a missing `.weight` reach a float kernel;
- or it tests a **container dtype several formats share**: `uint8` (or `int32`) is the storage of
  the layer under two or more backends (two 4-bit formats' nibbles alike), so the arm it picks runs
  one format's kernel on the others (`ambiguous_storage`, asked of the storage model).
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.flow.recognisers import alloc_dtype_keywords, cast_dtype_args, weight_dtype_source
from dtype_lint.analysis.guard_engine.dominance import same_expression
from dtype_lint.dtypes.storage_formats import shared_containers

# Views of a tensor that keep its storage: `L.weight.t()` is still the raw weight.
_VIEWS = frozenset({"t", "T", "data", "contiguous", "view", "transpose", "reshape", "permute", "mT", "detach"})


def hand_copy_reason(stmt: ast.stmt, layer: ast.expr, scope, block: list[ast.stmt] | None, imports) -> str | None:
    """Why the branch `stmt` on `layer`'s storage dtype is a hand copy worth reporting (see the
    module docstring), or None for a kernel dispatch with a correct fallback. `block`: the
    statements `stmt` stands in (for what follows it)."""
    if _rederives_dtype(stmt, layer, scope, imports):
        return "it derives an activation's or a buffer's dtype from the storage dtype"
    if isinstance(stmt, ast.If):
        after = block[block.index(stmt) + 1:] if block is not None and any(s is stmt for s in block) else []
        raw = _raw_weight_use([*_else_arms(stmt), *after], layer, scope)
        if raw is not None:
            return (f"its fall-through hands the raw `{ast.unparse(layer)}.weight` to `{raw}`, as if every other "
                    f"storage were unpacked")
    return None


# Byte and word containers of packed sub-byte formats: one such dtype is the storage of formats
# that have nothing else in common (uint8: two 4-bit formats' nibbles; int32: two backends' packed
# words), read from the storage formats' table (the ecosystems' formats.py name them).
CONTAINER_DTYPES = shared_containers()


def ambiguous_storage(storages, sentinels: list[str],
                      required: frozenset[str] = frozenset()) -> tuple[str, list[str]] | None:
    """(dtype, the quant methods that leave it) when a container dtype the branch tests is the
    storage of the layer under two or more backends' methods: a branch on that dtype picks one
    format's kernel for all of them. `storages`: the storage model's answer for the layer type
    (storage_model.Storage, typed dispatches only). `required`: parameters the branch also
    requires the layer to have (`hasattr(L, "weight_scale_inv")`): a method whose registered
    parameters lack one cannot take that arm (one whose only parameter read is `weight` may have
    any: its scales were registered where the model does not read)."""
    for sentinel in sentinels:
        name = sentinel.rsplit(".", 1)[-1]
        if name not in CONTAINER_DTYPES:
            continue
        methods = sorted({s.method for s in storages or () if s.typed and s.dtype == name
                          and (set(s.params) <= {"weight"} or required <= set(s.params))})
        # Formats are methods, not configs: two configs handing a layer the same method (vLLM
        # 0.34.0's W4AFP8Config and Fp8Config both give `Fp8LinearMethod`) leave one format.
        if len(methods) >= 2:
            return name, methods
    return None


def _else_arms(stmt: ast.If) -> list[ast.stmt]:
    """The final `else` of an `if`/`elif` chain (the arm no storage test chose)."""
    while len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If):
        stmt = stmt.orelse[0]
    return stmt.orelse


def _rederives_dtype(stmt: ast.stmt, layer: ast.expr, scope, imports) -> bool:
    for node in ast.walk(stmt):
        if not isinstance(node, ast.Call):
            continue
        dtypes = [*cast_dtype_args(node), *(k.value for k in alloc_dtype_keywords(node, imports))]
        for arg in dtypes:
            source = weight_dtype_source(arg, scope)
            if source is not None and same_expression(source.layer, layer):
                return True
    return False


def _raw_weight_use(body: list[ast.stmt], layer: ast.expr, scope) -> str | None:
    """The callee a statement of `body` hands the raw weight of `layer` to (`x @ L.weight.t()`
    counts as a matmul), else None."""
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and _is_raw_weight(node, layer, scope):
                return "@"
            if not isinstance(node, ast.Call):
                continue
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if _is_raw_weight(arg, layer, scope):
                    return ast.unparse(node.func)
    return None


def _is_raw_weight(expr: ast.expr, layer: ast.expr, scope, depth: int = 0) -> bool:
    """`L.weight`, a view of it (`.t()`, `.data`), or a local holding one (`w = L.weight`)."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.MatMult):
        return _is_raw_weight(expr.right, layer, scope, depth) or _is_raw_weight(expr.left, layer, scope, depth)
    while True:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _VIEWS:
            expr = expr.func.value
        elif isinstance(expr, ast.Attribute) and expr.attr in _VIEWS:
            expr = expr.value
        else:
            break
    if isinstance(expr, ast.Name) and scope is not None and depth < 3:
        values = scope.assigns.get(expr.id, [])
        return len(values) == 1 and values[0] is not None and _is_raw_weight(values[0], layer, scope, depth + 1)
    return isinstance(expr, ast.Attribute) and expr.attr == "weight" and same_expression(expr.value, layer)
