"""DTL002 weight-dtype-allocation: a tensor is allocated in a quantizable layer's storage dtype.

## What it does
Flags allocations and kernel outputs whose dtype comes from a quantizable layer's weight:
`torch.empty(n, dtype=L.weight.dtype)`, `torch.zeros_like(x, dtype=L.weight.dtype)` and the other
`torch` factories, any call passing `out_dtype=`/`output_dtype=L.weight.dtype`, and
`L.weight.new_zeros(...)` (and `new_empty/ones/full/tensor`) without a `dtype=` — also through
local aliases, `getattr(L, "weight", None).dtype` and `hasattr` fallbacks, and `L.weight` (or its
dtype) passed into a project function (or a submodule, whose `forward` runs) that allocates with
it, or that hands it on to one that does (two calls down; a weight handed over is also reported where its dtype is taken in the same
file: the argument passing a kept `self.w.dtype` on), and a dtype an object stored from a layer's weight
(`self.dtype = self.proj.weight.dtype`, or `self.w = self.proj.weight`) read as an attribute chain
from `self` in another method or class (`torch.zeros(..., dtype=self.vision_tower.dtype)`), or a getter
returning one, as DTL001 reads it (`dtype=self.get_k_proj_weight_dtype()`). Layers resolve exactly as for DTL001
(quantizability read from the code, per construction site, guards respected:
docs/quantizability.md), and the same code is exempt (quant methods, weight loaders,
`process_weights_after_loading`), except, in a weight loader, an allocation in `L.weight.dtype`
installed as another parameter of `L` (a bias, a scale), as for DTL001. Storage code is also known by what it does with the allocation,
whatever the function is called: one that replaces a weight's storage (`L.weight.set_(...)`,
`L.weight.data = ...`), or that a `nn.Parameter(...)` wraps which is then registered or assigned as
a layer's weight (`layer.register_parameter("weight", P)`, `layer.weight = P`,
`setattr(layer, "weight", P)`), is not reported: a weight's dtype must be its storage's.

## Why is this bad?
{{DTL002.storages}}: a buffer allocated "like the weight" becomes an integer buffer that a float
kernel rejects or silently truncates into, or the allocation raises `AttributeError`. It is the
same confusion as DTL001 (vLLM issue #38658): the storage dtype of a weight is not the dtype of the
activations or outputs around it.

## Example
```python
out = torch.empty(n, self.o_proj.output_size, dtype=self.o_proj.weight.dtype)
```

## Use instead
```python
out = torch.empty(n, self.o_proj.output_size, dtype=self.o_proj.{{model_dtype}})
```
or the input dtype the layer expects, `get_layer_input_dtype(self.o_proj, fp8_input)`, with an
explicit choice for `None` (keep the model dtype).

## Which backends
A site is reported only when the storage model (dtype_lint/analysis/storage/storage_model.py) finds a
backend that can reach the layer and leaves a storage that is not the compute dtype: `qweight`
instead of `weight`, an integer or fp8 `weight`, {{repack}}. The message names up to two such
backends with their lines (`Fp8 (fp8.py:194 -> fp8_utils.py:1255) registers `weight` as
float8_e4m3fn`), the evidence each of them (SARIF related locations); `dtype-lint explain PATH:LINE`
shows them all. Where the tree's backends cannot be read (a project importing vLLM without
containing it), the shipped catalogue of vLLM 0.33.0 answers; failing that, the layer counts as
possibly packed.

## Fix safety
No automatic fix: the right dtype of a buffer depends on what it will hold (an activation, a
layer output, a dequantized weight), which the code does not say. The finding names the layer
and how it resolved; choose `{{model_dtype}}`, the activation's dtype, or the helper by hand.

## Known limits
Those of DTL001's layer resolution (docs/quantizability.md). A buffer made in `__init__` sees the
storage of a serialized checkpoint (fp8, int8, uint8, or no `.weight`), not {{after_loading}}, which
appears only after loading: the finding says "storage dtype" for both.

## Options
The layer-resolution options of DTL001: `preset`, `quantizable`, `exempt-classes`,
`not-quantizable`, `exempt-functions`, `config-params`, `name-heuristics`, `name-patterns`.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.flow.flows import NEW_LIKE
from dtype_lint.analysis.flow.recognisers import (
    FLOW_SITE_PATTERNS,
    alloc_dtype_keywords,
    storage_replacements,
    weight_dtype_source,
    weight_expr,
)
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.analysis.storage.weight_registration import weight_allocations
from dtype_lint.ecosystems.registry import family_of, model_dtype_attributes
from dtype_lint.rule import FixAvailability, Invalid, Rule, RuleContext, Valid, storage_dtypes

# An allocation's dtype read from an attribute chain ending in `.dtype` (the line may break after `(`), or from
# a getter named for a dtype called without arguments (`dtype=self.get_k_proj_weight_dtype()`).
STORED_DTYPE_ALLOC = r"\bdtype\s*=\s*self(?:(?:\.\w+)+\.dtype\b|(?:\.\w+)*\.\w*dtype\w*\(\s*\))"

# `t.new_zeros(...)` and friends take `t`'s dtype unless given one.

# The attribute a layer states its model dtype under (the examples' right answer).
_MODEL_DTYPE = model_dtype_attributes()[0]

_HEAD = """\
import torch
from vllm.model_executor.layers.linear import RowParallelLinear


class Block:
    def __init__(self, o_proj: RowParallelLinear):
        self.o_proj = o_proj
"""


class WeightDtypeAllocation(Rule):
    code = "DTL002"
    name = "weight-dtype-allocation"
    summary = "tensor allocated in a quantizable layer's storage dtype (`dtype=L.weight.dtype`)"
    # `dtype=self.vision_tower.dtype`: a dtype another object stored from a layer's weight (a
    # chain of at least one attribute: `dtype=self.dtype` and `self.<model dtype>` are too common to read).
    patterns = FLOW_SITE_PATTERNS + (STORED_DTYPE_ALLOC,)
    marker = ("weight", ".dtype")  # candidate functions: those whose text names either
    facts = frozenset({"candidates", "layers", "flows", "imports", "loaders"})
    fix_availability = FixAvailability.NONE
    fix_note = "the buffer's dtype is a human choice"
    regions = "sites"
    dtype_site = True

    VALID = [
        Valid(_HEAD + f"    def f(self, n):\n        return torch.empty(n, dtype=self.o_proj.{_MODEL_DTYPE})\n"),
        # Casts are DTL001's; DTL002 does not report them twice.
        Valid(_HEAD + "    def f(self, x):\n        return torch.relu(x).sum()\n"),
        Valid("import torch\nimport torch.nn as nn\nclass V(nn.Module):\n    def __init__(self):\n"
              "        self.proj = nn.Linear(4, 4)\n    def f(self, n):\n"
              "        return torch.zeros(n, dtype=self.proj.weight.dtype)\n"),
        # The allocation becomes the weight's own storage (a dispose helper), here or in a callee.
        Valid(_HEAD + "    def dispose(self):\n"
              "        self.o_proj.weight.set_(torch.empty(0, dtype=self.o_proj.weight.dtype))\n"),
        Valid(_HEAD + "    def dispose(self):\n        _empty_storage(self.o_proj.weight)\n"
              "def _empty_storage(t):\n    t.data = torch.empty(0, device=t.device, dtype=t.dtype)\n"),
        Valid(_HEAD + "    def process_weights_after_loading(self, n):\n"
              "        return torch.empty(n, dtype=self.o_proj.weight.dtype)\n"),
    ]
    INVALID = [
        Invalid(_HEAD + "    def f(self, n):\n        return torch.empty(n, dtype=self.o_proj.weight.dtype)\n",
                message_contains=("self.o_proj", "torch.empty")),
        Invalid(_HEAD + "    def f(self, x):\n        return torch.zeros_like(x, dtype=self.o_proj.weight.dtype)\n"),
        Invalid(_HEAD + "    def f(self, a, b):\n        w = getattr(self.o_proj, \"weight\", None).dtype\n"
                "        return torch.mm(a, b, out_dtype=w)\n", message_contains=("out_dtype", "`w`")),
        # `new_*` takes the tensor's dtype: here the weight's storage dtype.
        Invalid(_HEAD + "    def f(self, x):\n        w = self.o_proj.weight\n"
                "        return torch.addmm(w.new_zeros(1), x, w.t())\n", message_contains=("new_zeros", "self.o_proj")),
    ]

    def check(self, ctx: RuleContext) -> None:
        # Per function: allocations that become a weight's storage; only a file that replaces a
        # tensor's storage (`.set_(`, `.data =`) can have one, so the others skip the extra walk.
        # (Tested on the text: neither holds a line break, so a line holds one where the text does;
        # a test per line split the file into lines for it.)
        text = ctx.source.text
        replaces = "set_(" in text or ".data" in text
        replaced: dict[int, set[int]] = {}
        registered: dict[int, set[int]] = {}
        # Allocations a `nn.Parameter(...)` wraps that is then registered as a layer's weight:
        # storage code by what it does (analysis/storage/weight_registration.py), whatever it is named.
        registers = "Parameter" in ctx.source.text
        for function, node in ctx.calls():
            # Both read only the function's calls and assignments: its walk's events of those
            # classes, in walk order, not every node tested for them.
            if replaces and id(function) not in replaced:
                replaced[id(function)] = storage_replacements(
                    function.walk.of(ast.Call, ast.Assign),
                    lambda t, scope=function.scope: weight_expr(t, scope) is not None)
            if registers and id(function) not in registered:
                registered[id(function)] = weight_allocations(function.walk.of(ast.Call, ast.Assign),
                                                              function.scope.assigns)
            if id(node) in registered.get(id(function), ()):
                continue  # `P = nn.Parameter(torch.empty(..., dtype=src.dtype))` registered as a weight
            if id(node) in replaced.get(id(function), ()):
                continue  # `L.weight.set_(torch.empty(0, dtype=L.weight.dtype))`: the weight's own storage
            ctx.report_flows(function, node, "alloc", "allocates a tensor in")
            self._like_weight(ctx, function, node)
            # `t.new_zeros(..., dtype=L.weight.dtype)`: in HF code (esmfold2's one-hot), where the family
            # decided the layer; elsewhere a tensor method's dtype is left as before.
            tensor_method = isinstance(node.func, ast.Attribute) and node.func.attr in NEW_LIKE
            keywords = [kw for kw in node.keywords if kw.arg == "dtype"] if tensor_method else []
            for kw in alloc_dtype_keywords(node, ctx.imports) + keywords:
                weight_dtype = weight_dtype_source(kw.value, function.scope)
                if weight_dtype is None and kw not in keywords:
                    self._stored(ctx, function, node, kw)
                verdict = ctx.layer_verdict(weight_dtype.layer, function, site=node) if weight_dtype is not None else None
                if verdict is None or weight_dtype is None or (kw in keywords and family_of(verdict[1]) is None):
                    continue
                confidence, evidence = verdict
                via = f" through `{weight_dtype.alias}`" if weight_dtype.alias else ""
                ctx.report(
                    node,
                    f"`{dotted(node.func) or 'call'}(..., {kw.arg}=...)` allocates in "
                    f"`{ast.unparse(weight_dtype.layer)}.weight.dtype`{via}, the storage dtype of a quantizable layer "
                    f"{storage_dtypes(evidence)}; choose the buffer's dtype explicitly",
                    confidence=confidence, evidence=evidence,
                    no_fix_reason="the right dtype depends on what the buffer holds; choose it by hand",
                )
        ctx.report_loader_installs("alloc")  # a loader's bias or scale in the storage dtype

    @staticmethod
    def _stored(ctx: RuleContext, function, node: ast.Call, kw: ast.keyword) -> None:
        """`torch.zeros(n, dtype=self.tower.dtype)` where the object stored a layer's weight dtype
        (`self.dtype = self.proj.weight.dtype`) or its weight (`self.w = self.proj.weight`, read as
        `self.w.dtype`) in another method: the same value flow through an attribute as DTL001's; and
        a getter of it as DTL001 reads one (`dtype=self.get_k_proj_weight_dtype()`)."""
        held = ctx.held_dtype(kw.value, function, node)
        if held is None:
            return
        layer, held_where, verb, (confidence, evidence) = held
        ctx.report(
            node,
            f"`{dotted(node.func) or 'call'}(..., {kw.arg}=...)` allocates in `{ast.unparse(kw.value)}`, which {verb} "
            f"`{ast.unparse(layer)}.weight.dtype`, the storage dtype of a quantizable layer "
            f"{storage_dtypes(evidence)}; choose the buffer's dtype explicitly",
            confidence=confidence, evidence=(held_where, *evidence),
            no_fix_reason="the right dtype depends on what the buffer holds; choose it by hand",
        )

    @staticmethod
    def _like_weight(ctx: RuleContext, function, node: ast.Call) -> None:
        """`w.new_zeros(...)` with `w = L.weight` and no `dtype=`: a buffer in the storage dtype."""
        callee = node.func
        if not (isinstance(callee, ast.Attribute) and callee.attr in NEW_LIKE) or any(kw.arg == "dtype" for kw in node.keywords):
            return
        w = weight_expr(callee.value, function.scope)
        if w is None:
            return
        verdict = ctx.layer_verdict(w[0], function, site=node)
        if verdict is None:
            return
        confidence, evidence = verdict
        ctx.report(
            node,
            f"`{ast.unparse(callee.value)}.{callee.attr}(...)` allocates like `{ast.unparse(w[0])}.weight`, in the storage "
            f"dtype of a quantizable layer {storage_dtypes(evidence)}; pass the "
            f"buffer's dtype explicitly",
            confidence=confidence, evidence=evidence,
            no_fix_reason="the right dtype depends on what the buffer holds; choose it by hand",
        )
