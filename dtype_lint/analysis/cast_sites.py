"""The two questions DTL001 asks of a cast besides the layer's storage: which weight dtype a cast's
argument reads (`L.weight.dtype`, an alias of it, or the weight tensor itself in `x.to(L.weight)`),
and whether the cast converts a layer's own stored parameter rather than an activation."""

from __future__ import annotations

import ast

from dtype_lint.analysis.flow.recognisers import WeightDtypeSource, weight_dtype_source, weight_expr
from dtype_lint.analysis.index.class_facts import FunctionScope

# A layer's quantization parameters (an `embed_scale` normaliser buffer is not one of them).
QUANT_SCALES = frozenset({"input_scale", "output_scale", "input_scale_inv", "k_scale", "v_scale", "q_scale",
                           "prob_scale", "smooth_scale", "act_scale", "input_global_scale", "alpha"})


def cast_weight_dtype(arg: ast.expr, scope: FunctionScope, call: ast.Call) -> WeightDtypeSource | None:
    """What weight dtype the cast `call`'s argument `arg` reads; for `.to(...)` also a weight tensor."""
    weight_dtype = weight_dtype_source(arg, scope)
    if weight_dtype is not None:
        return weight_dtype
    if call.func.attr == "to":  # type: ignore[attr-defined]  # a method cast: func is an Attribute
        weight_read = weight_expr(arg, scope)
        if weight_read is not None:
            return WeightDtypeSource(weight_read[0], "tensor")
    return None


def receiver_is_parameter(call: ast.Call, layer: ast.expr) -> bool:
    """`layer.weight.to(...)`, `param.data.to(...)`, `layer.weight_scale.to(...)`: casting a layer's
    stored parameters is not an activation cast. (A scale buffer of another module multiplied
    into activations, `self.embed_scale.to(...)`, is.)"""
    receiver = call.func.value  # type: ignore[attr-defined]  # a method cast: func is an Attribute
    last = (receiver.attr if isinstance(receiver, ast.Attribute)
            else receiver.id if isinstance(receiver, ast.Name) else "")
    if last in ("weight", "bias", "data") or "weight" in last:
        return True
    return last in QUANT_SCALES and isinstance(receiver, ast.Attribute) and ast.dump(receiver.value) == ast.dump(layer)
