"""The calls a fix may evaluate twice: torch functions and tensor methods without side effects.

The `or x.dtype` rewrite of a cast (`x.to(helper(L, True) or x.dtype)`) evaluates the receiver a
second time, so it is offered only for a pure receiver. Names, attribute chains and subscripts of
pure parts always were; issue #39 showed casts of `torch.rsqrt(torch.tensor(2.0))` and
`same_entity.unsqueeze(-1)` refused as "side effects". These tables are data: a call is pure when
its function is listed here and every argument is pure (`is_pure` in recognisers.py)."""

from __future__ import annotations

# `torch.<name>(...)`: builds or computes a new tensor from its arguments, touching no state
# (no `out=`, no in-place `_` variant, no random generator).
PURE_TORCH_FUNCTIONS = frozenset({
    "tensor", "as_tensor", "scalar_tensor", "zeros", "ones", "full", "empty", "arange", "linspace",
    "zeros_like", "ones_like", "full_like", "empty_like",
    "rsqrt", "sqrt", "exp", "log", "abs", "neg", "tanh", "sigmoid", "sin", "cos", "pow", "reciprocal",
    "cat", "stack", "where", "unsqueeze", "squeeze", "reshape", "transpose", "permute", "flatten",
    "finfo", "iinfo",
})

# `<tensor>.<name>(...)`: a view or a new tensor of the receiver, the receiver left as it was.
PURE_TENSOR_METHODS = frozenset({
    "unsqueeze", "squeeze", "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "t",
    "contiguous", "expand", "expand_as", "flatten", "unflatten", "narrow", "select", "detach", "clone",
    "float", "half", "bfloat16", "double", "int", "long", "bool", "abs", "neg", "sqrt", "rsqrt", "exp",
    "log", "sum", "mean", "amax", "amin", "size", "dim",
})
