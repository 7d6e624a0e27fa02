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


# Tensor methods that return their tensor converted (or itself): what they convert is what the
# cast converts, so `w.data.to(torch.float32).to(dtype)` casts the weight `w`.
_CONVERSIONS = frozenset({"to", "float", "half", "bfloat16", "double", "type", "contiguous", "clone", "detach"})


def _converted_tensor(receiver: ast.expr) -> ast.expr:
    """The tensor a cast's receiver is made of, through conversions and `torch.nn.init` calls
    (`nn.init.orthogonal_(w)` fills `w` in place and returns it): an initialiser that writes a
    weight back in its own dtype (`L.weight.data = nn.init.orthogonal_(L.weight.data.float())
    .to(dtype)`) casts the weight, not an activation."""
    while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
        func = receiver.func
        if func.attr in _CONVERSIONS:
            receiver = func.value
        elif func.attr.endswith("_") and isinstance(func.value, ast.Attribute) and func.value.attr == "init" \
                and receiver.args:
            receiver = receiver.args[0]
        else:
            break
    return receiver


def receiver_is_parameter(call: ast.Call, layer: ast.expr) -> bool:
    """`layer.weight.to(...)`, `param.data.to(...)`, `layer.weight_scale.to(...)`: casting a layer's
    stored parameters is not an activation cast. (A scale buffer of another module multiplied
    into activations, `self.embed_scale.to(...)`, is.)"""
    direct = call.func.value  # type: ignore[attr-defined]  # a method cast: func is an Attribute
    receiver = _converted_tensor(direct)
    if receiver is not direct:
        # Through conversions only a parameter read as such counts (`L.weight.data.float()`):
        # `attn_weights.float()` or a local named `data` may be an activation.
        return isinstance(receiver, ast.Attribute) and receiver.attr in ("weight", "bias", "data")
    last = (receiver.attr if isinstance(receiver, ast.Attribute)
            else receiver.id if isinstance(receiver, ast.Name) else "")
    if last in ("weight", "bias", "data") or "weight" in last:
        return True
    return last in QUANT_SCALES and isinstance(receiver, ast.Attribute) and ast.dump(receiver.value) == ast.dump(layer)
