"""What a cast converts: an activation, or a weight being rewritten.

`x.to(L.weight.dtype)` is the bug class when `x` is an activation; `weight = weight.to(dtype)` in a
loader or quantizer-adjacent helper converts a stored tensor instead. Both are reported where the
dtype is a quantizable layer's storage dtype, but the message must name what is converted: a
reviewer who reads "activation cast" at a weight rewrite stops trusting the report (issue #39)."""

from __future__ import annotations

import ast

from dtype_lint.analysis.index.class_index import dotted

ACTIVATION = "activation"
WEIGHT = "weight"

# Names of a layer's stored tensors, besides the ones holding "weight" (`qweight`, `weight_packed`).
_STORED_NAMES = frozenset({"data", "bias", "param", "parameter"})
# Calls that hand back (a view of) their receiver: `weight.t().to(...)` still converts the weight.
_VIEW_METHODS = frozenset({"t", "T", "contiguous", "view", "reshape", "transpose", "permute", "detach",
                           "clone", "flatten", "squeeze", "unsqueeze", "float", "half", "bfloat16"})
_PARAMETER_CTORS = frozenset({"nn.Parameter", "torch.nn.Parameter", "Parameter"})


def _stored_name(name: str) -> bool:
    """`weight`, `qweight`, `loaded_weight`, `weight_packed`; not the plural `topk_weights` or
    `attn_weights`, which are activations (routing and attention weights)."""
    lowered = name.lower()
    return lowered in ("weight", "qweight") or lowered.endswith("_weight") or lowered.startswith("weight_") \
        or lowered in _STORED_NAMES


def cast_sink(receiver: ast.expr, assigns: dict[str, list[ast.expr | None]] | None = None, depth: int = 0) -> str:
    """WEIGHT when `receiver` (what `.to()`/`.type()` is called on) is a stored weight: a name or
    attribute called for one (`weight`, `w.data`, `self.qweight`), a view of one (`weight.t()`), or
    a local bound only to such a tensor or to `nn.Parameter(...)`; else ACTIVATION."""
    while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) \
            and receiver.func.attr in _VIEW_METHODS:
        receiver = receiver.func.value
    if isinstance(receiver, ast.Subscript):  # a row of a weight is still the weight's storage
        receiver = receiver.value
    if isinstance(receiver, ast.Call) and dotted(receiver.func) in _PARAMETER_CTORS:
        return WEIGHT
    if isinstance(receiver, ast.Attribute):
        return WEIGHT if _stored_name(receiver.attr) else ACTIVATION
    if not isinstance(receiver, ast.Name):
        return ACTIVATION
    if _stored_name(receiver.id):
        return WEIGHT
    bound = (assigns or {}).get(receiver.id, [])
    if depth < 3 and bound and all(v is not None and not _self_reference(v, receiver.id)
                                   and cast_sink(v, assigns, depth + 1) == WEIGHT for v in bound):
        return WEIGHT
    return ACTIVATION


def _self_reference(value: ast.AST, name: str) -> bool:
    """`w = w.to(...)`: a rebinding that says nothing new about what `w` holds."""
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(value))
