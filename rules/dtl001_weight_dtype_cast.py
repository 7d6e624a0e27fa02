"""DTL001 weight-dtype-cast: an activation is cast to a quantizable layer's storage dtype.

## What it does
Flags `x.to(L.weight.dtype)`, `x.to(dtype=L.weight.dtype)`, `x.to(device, L.weight.dtype)`, `x.type(L.weight.dtype)` and
`x.to(L.weight)`, also when the dtype is reached through a local alias (`w = L.weight.dtype`), `getattr(L, "weight", None).dtype`,
or a `hasattr` fallback (`L.weight.dtype if hasattr(L, "weight") else L.{{model_dtype}}`) or `typing.cast`; a `dtype`
getter that returns a layer's `.weight.dtype` (where it returns it), and a cast to another getter named for a dtype, of an object
(or of `self`), that returns one of its layers' `.weight.dtype` (`x.to(dtype=self.drafter.context_dtype)`: reported at the cast,
naming the getter; a method of the class with several returns judged at the one returning it; looked for in functions whose
text holds `weight`), or to an attribute an object stored a layer's `.weight.dtype` in (`self.dtype = self.projector.linear_1.weight.dtype`
in `__init__`, then `pixels.type(self.vision_tower.dtype)` in another method or class; or a weight, `self.w = L.weight`);
`L.weight` (or its dtype) passed into a project function (or a submodule, whose `forward` runs: `self.rope(L.weight, n)`)
that casts an activation to it, or hands it on to one that does; a weight handed over is also reported where its dtype is taken in the same file (the callee's `x.to(w.dtype)`, or the argument passing `self.w.dtype` on; docs/quantizability.md, section 4). Where what is converted is a stored weight instead
(`weight = weight.to(dtype)` in a helper, a view of a local bound to `M.weight`), the message says "weight cast" / "casts a weight to". Only where `L` may really be quantized: its class obtains a quant method from a
config (read from the code, or configured), a config may reach its construction, and no dominating check proves it
unquantized (docs/quantizability.md). Quant methods, weight kernels, weight loaders and `process_weights_after_loading`
are exempt (their job is the storage format) but for a loader's cast that becomes another parameter of `L` (`L.bias =
nn.Parameter(b.to(L.weight.dtype))`). With `name-heuristics = true`, unresolved `*_proj`-named layers are reported, with low confidence.

## Why is this bad?
A quantization backend may repack a layer's weight after loading: {{DTL001.storages}}

## Example
```python
kv_c_normed = kv_c_normed.to(self.kv_b_proj.weight.dtype)
```

## Use instead
```python
kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)
if kv_b_proj_input_dtype is not None:
    kv_c_normed = kv_c_normed.to(kv_b_proj_input_dtype)
```

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
The fix calls the configured helper (`helper = "pkg.mod:func"`), which returns the layer's input
dtype or None (keep the model dtype). It is **safe** when it provably keeps behaviour on every
unpacked storage (fp16, bf16, fp32, fp8) and changes only the packed ones it exists to fix
(int32, uint8, int8, no `.weight`): a guarded-alias idiom is proven by truth table before it is
rewritten; a plain cast passes `fp8_input=True` (`fp8-input-default`), which keeps fp8 casts.
With `fp8-input-default = false` fixes are **unsafe**. No fix is offered for `.to(tensor)` (it
also moves device), for receivers with side effects, and for aliases used outside casts; the
finding says why. A receiver is pure when it is a name, an attribute chain, a subscript of pure
parts, or a call of a known-pure torch function or tensor method with pure arguments
(`torch.rsqrt(torch.tensor(2.0))`, `mask.unsqueeze(-1)`; the lists are data in
`analysis/flow/pure_calls.py`).

A configured helper is evaluated from its own code, not trusted: a fix that replaces a plain cast
is safe only when the helper is proven to answer the weight's own dtype on every storage that is
not packed (float16, bfloat16, float32, float64, complex32/64/128, and fp8 with
`fp8_input=True`), as `x.to(L.weight.dtype)` did. A helper that DTL005 accepts but that answers
`{{model_dtype}}` for float storages, or that the evaluator cannot read, makes the fix **unsafe**,
and the fix says on which storages it would cast differently. The templates answer the weight's
own dtype on every floating and complex storage (complex weights are data, not packed integers).

No fix either in code that TorchScript scripts or torch.fx traces, from its own file or another file of the
project (the helper takes an `nn.Module` and branches on the weight's dtype, which neither compiles; under fx
the HF helper answers None and the graph silently loses the cast): the class, a module building it or a
subclass given to `torch.jit.script`, `@torch.jit.script`, `symbolic_trace`, a tracer's `.trace` or torch.ao's
`prepare_fx`. The finding says which code (`torch.jit.script(block)` in src/mypkg/export.py:11 may compile
`FooBlock`). `torch.compile`, `torch.export`, `torch.jit.trace`, `make_fx` and `torch.compiler.disable` run
the helper as Python and are fixed as usual.

## Known limits
A layer typed only as `nn.Module` is judged by the calls of its function in the same file, one
step (not by callers in other files); a parameter annotated with a quantizable class whose real
callers pass unquantized layers, layers attached from outside their
class, classes chosen at run time, and dtypes three calls away or returned by a call are not
resolved as a reviewer would; docs/quantizability.md lists each with the real site that showed it.

## Options
`preset`, `quantizable`, `exempt-classes`, `not-quantizable`, `exempt-functions`, `config-params`,
`name-heuristics`, `name-patterns`, `helper`, `helper-template`, `fp8-input-default`.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.cast_sites import cast_weight_dtype, receiver_is_parameter
from dtype_lint.analysis.flow.recognisers import (
    FIRST_PARAMETER,
    FLOW_SITE_PATTERNS,
    WeightDtypeSource,
    cast_dtype_args,
    weight_dtype_source,
)
from dtype_lint.analysis.flow.sinks import ACTIVATION, cast_sink
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.ecosystems.registry import family_of, model_dtype_attributes, optional
from dtype_lint.rule import FixAvailability, Invalid, Rule, RuleContext, Valid, storage_dtypes

# The attribute a layer states its model (compute) dtype under: what a `dtype` getter should return.
_MODEL_DTYPE = model_dtype_attributes()[0]

_HEAD = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear, RowParallelLinear


class Attn:
    def __init__(self, kv_b_proj: ColumnParallelLinear, o_proj: RowParallelLinear):
        self.kv_b_proj = kv_b_proj
        self.o_proj = o_proj
"""
_IMPORT = "from vllm.model_executor.layers.quantization.utils.layer_input_dtype import get_layer_input_dtype\n"
_FIXED_HEAD = _HEAD.replace("RowParallelLinear\n", "RowParallelLinear\n" + _IMPORT, 1)


# A cast to a `self` attribute chain ending in a name holding `dtype` (`.type(\n  self.tower.dtype\n)` too).
# Gated: `x.to(self.dtype)` is a site only where a class may store or get that name from a weight.
STORED_DTYPE_CAST = r"\.(?:to|type)\(\s*(?:dtype\s*=\s*)?self(?:\.\w+)*\.\w*dtype\b"


class WeightDtypeCast(Rule):
    code = "DTL001"
    name = "weight-dtype-cast"
    summary = "activation cast to a quantizable layer's storage dtype (`.weight.dtype`)"
    # `next(iter(M.parameters())).dtype`: a module's first parameter (Hugging Face code); `x.type(self.tower.dtype)`:
    # a dtype an object stored from a layer's weight (`self.dtype = self.proj.weight.dtype`), read elsewhere.
    patterns = FLOW_SITE_PATTERNS + (r"parameters\(\)\)+\s*\.\s*dtype", STORED_DTYPE_CAST)
    marker = ("weight", "parameters()", ".dtype")
    pattern_gates = {STORED_DTYPE_CAST: "self-attribute-read"}
    facts = frozenset({"candidates", "layers", "fixes", "flows", "loaders"})
    fix_availability = FixAvailability.SOMETIMES
    fix_note = "safe / none with reason"
    regions = "sites"
    dtype_site = True

    VALID = [
        # Vision towers: plain torch layers are never repacked.
        Valid("import torch.nn as nn\nclass V(nn.Module):\n    def __init__(self):\n        self.proj = nn.Conv2d(3, 8, 2)\n"
              "    def forward(self, x):\n        return self.proj(x.to(self.proj.weight.dtype))\n"),
        # Weight loaders own the storage format.
        Valid(_HEAD + "    def weight_loader(self, param, w):\n        param.data.copy_(w.to(self.kv_b_proj.weight.dtype))\n"),
        # Casting to something that is not a weight dtype.
        Valid(_HEAD + f"    def f(self, x):\n        return x.to(self.kv_b_proj.{_MODEL_DTYPE})\n"),
        # A layer built with quant_config=None is never quantized.
        Valid("from vllm.model_executor.layers.linear import ReplicatedLinear\nclass G:\n    def __init__(self):\n"
              "        self.gate = ReplicatedLinear(8, 8, quant_config=None)\n"
              "    def forward(self, x):\n        return self.gate(x.to(self.gate.weight.dtype))\n"),
        # Already fixed code is clean (idempotence).
        Valid(_FIXED_HEAD + "    def f(self, x):\n        kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, True)\n"
              "        if kv_b_proj_input_dtype is not None:\n            x = x.to(kv_b_proj_input_dtype)\n        return x\n"),
    ]
    INVALID = [
        Invalid(
            _HEAD + "    def f(self, x):\n        x = x.to(self.kv_b_proj.weight.dtype)\n        return x\n",
            expected_replacement=_FIXED_HEAD + "    def f(self, x):\n"
            "        kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, True)\n"
            "        if kv_b_proj_input_dtype is not None:\n            x = x.to(kv_b_proj_input_dtype)\n        return x\n",
            message_contains=("self.kv_b_proj",),
        ),
        Invalid(
            _HEAD + "    def f(self, x):\n        return self.o_proj(x.to(dtype=self.o_proj.weight.dtype))\n",
            expected_replacement=_FIXED_HEAD + "    def f(self, x):\n"
            "        return self.o_proj(x.to(dtype=get_layer_input_dtype(self.o_proj, True) or x.dtype))\n",
        ),
        Invalid(
            _HEAD + "    def f(self, x, dev):\n        return x.to(dev, getattr(self.kv_b_proj, \"weight\", None).dtype)\n",
            expected_replacement=_FIXED_HEAD + "    def f(self, x, dev):\n"
            "        return x.to(dev, get_layer_input_dtype(self.kv_b_proj, True) or x.dtype)\n",
        ),
        Invalid(_HEAD + "    def f(self, x):\n        return x.type(self.kv_b_proj.weight.dtype)\n", expected_replacement=_FIXED_HEAD
                + "    def f(self, x):\n        return x.type(get_layer_input_dtype(self.kv_b_proj, True) or x.dtype)\n"),
        # A weight handed first to a function that casts to its dtype: reported at the call and at the cast.
        Invalid(_HEAD + "    def f(self, x):\n        return like(self.kv_b_proj.weight, x)\n\n\ndef like(w, x):\n"
                "    return x.to(w.dtype)\n", message_contains=("self.kv_b_proj",), count=2),
        # `.to(tensor)` also moves the device: reported, not fixed.
        Invalid(_HEAD + "    def f(self, x):\n        return x.to(self.kv_b_proj.weight)\n",
                message_contains=("device",)),
    ]

    def check(self, ctx: RuleContext) -> None:
        for function in ctx.candidates:
            self._dtype_getter(ctx, function)
        for function, node in ctx.calls():
            ctx.report_flows(function, node, "cast", "casts an activation to")
            self._finfo(ctx, function, node)
            for arg in cast_dtype_args(node):
                weight_dtype = cast_weight_dtype(arg, function.scope, node)
                if weight_dtype is None:
                    self._through_getter(ctx, function, node, arg)
                    continue
                if receiver_is_parameter(node, weight_dtype.layer):
                    continue
                verdict = ctx.layer_verdict(weight_dtype.layer, function, site=node, form=weight_dtype.form)
                if verdict is None:
                    continue
                confidence, evidence = verdict
                planner = ctx.fixes_for(evidence)
                holder = ""
                if weight_dtype.form == FIRST_PARAMETER:  # the helper is given the first parameter's layer
                    # only a family's verdict reaches here (layer_verdict drops this form otherwise)
                    family = family_of(evidence)
                    assert family is not None
                    holder = optional(family, "family", "first_parameter_holder")(
                        ctx.layers, weight_dtype.layer, function.scope, ctx.source.segment(weight_dtype.layer))
                if weight_dtype.form == FIRST_PARAMETER and not holder:
                    fix, reason = None, (f"the first parameter belongs to a layer inside `{ast.unparse(weight_dtype.layer)}`; "
                                         f"route the cast through `{planner.func}` of that layer by hand")
                else:
                    from dtype_lint.fix.planner import Site  # only where a site is reported: the planner's imports

                    fix, reason = planner.plan(Site(node, arg, weight_dtype, function.fn, function.scope, function.parents,
                                                    holder))
                sink = cast_sink(node.func.value, function.scope.assigns)
                ctx.report(node, self._message(weight_dtype, ast.unparse(weight_dtype.layer), planner, evidence,
                                               holder, sink),
                           fix=fix, no_fix_reason=reason, confidence=confidence, evidence=evidence)
                break
        ctx.report_loader_installs("cast")  # a loader's bias or scale in the storage dtype

    @staticmethod
    def _through_getter(ctx: RuleContext, function, node: ast.Call, arg: ast.expr) -> None:
        """`x.to(dtype=model.context_dtype)`: a getter of another object (or of `self`) that
        returns one of its layers' `.weight.dtype`; reported at the cast, naming the getter."""
        held = ctx.held_dtype(arg, function, node)
        if held is None or receiver_is_parameter(node, held[0]):
            return
        layer, returns, verb, (confidence, evidence) = held
        text = ast.unparse(layer)
        sink = cast_sink(node.func.value, function.scope.assigns)  # type: ignore[attr-defined]  # a method cast
        ctx.report(node, f"{sink} cast to `{ast.unparse(arg)}`, which {verb} `{text}.weight.dtype`, the storage "
                         f"dtype of a quantizable layer {storage_dtypes(evidence)}; use "
                         f"`{ctx.fixes_for(evidence).suggested_call(text)}`",
                   confidence=confidence, evidence=(returns, *evidence),
                   no_fix_reason="the dtype comes from a getter; route the cast (or the getter) through the helper by hand"
                   if verb == "returns" else
                   "the dtype comes from an attribute; route the cast (or the stored value) through the helper by hand")

    @staticmethod
    def _finfo(ctx: RuleContext, function, node: ast.Call) -> None:
        """`torch.finfo(L.weight.dtype)` in Hugging Face model code (transformers #45672, Gemma4
        audio): TypeError on a quantizer's uint8/int8 storage, an fp8 range under FP8 layers,
        AttributeError without `.weight`. Reported where the HF family decided the layer."""
        if dotted(node.func) not in ("torch.finfo", "finfo") or len(node.args) != 1:
            return
        weight_dtype = weight_dtype_source(node.args[0], function.scope)
        verdict = ctx.layer_verdict(weight_dtype.layer, function, site=node) if weight_dtype is not None else None
        if verdict is None or weight_dtype is None or family_of(verdict[1]) is None:
            return
        confidence, evidence = verdict
        layer = ast.unparse(weight_dtype.layer)
        ctx.report(node, f"`torch.finfo` of `{layer}.weight.dtype`, the storage dtype of a quantizable layer "
                   f"{storage_dtypes(evidence)}: TypeError on integer storage, the wrong range on fp8; "
                   f"take the activation's dtype", confidence=confidence, evidence=evidence,
                   no_fix_reason="the activation whose range is meant is not known here; use its `.dtype`")

    @staticmethod
    def _dtype_getter(ctx: RuleContext, function) -> None:
        """A `dtype` getter (property or method) of a module that returns a quantizable layer's
        `.weight.dtype`: callers cast activations to it (`pixels.to(self.visual.dtype)`)."""
        if function.fn.name != "dtype" or not function.class_qualname:
            return
        body = [s for s in function.fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            return
        weight_dtype = weight_dtype_source(body[0].value, function.scope)
        verdict = ctx.layer_verdict(weight_dtype.layer, function, site=body[0]) if weight_dtype is not None else None
        if verdict is None or weight_dtype is None:
            return
        confidence, evidence = verdict
        layer = ast.unparse(weight_dtype.layer)
        ctx.report(body[0].value, f"`dtype` returns `{layer}.weight.dtype`, the storage dtype of a quantizable layer "
                   f"{storage_dtypes(evidence)}; its callers cast activations to it: "
                   f"return the compute dtype (`{layer}.{_MODEL_DTYPE}`)",
                   confidence=confidence, evidence=evidence,
                   no_fix_reason="what the callers need is the compute dtype; change the getter by hand")

    @staticmethod
    def _message(weight_dtype: WeightDtypeSource, layer: str, planner, evidence=(), holder: str = "",
                 sink: str = ACTIVATION) -> str:
        via = f" through `{weight_dtype.alias}`" if weight_dtype.alias else ""
        # `.to(tensor)` takes the tensor's device too, which is why it has no automatic fix.
        what = (f"the dtype and device of `{layer}.weight`" if weight_dtype.form == "tensor"
                else f"`{layer}.weight.dtype`")
        if holder:  # `next(iter(M.parameters())).dtype`: name the layer that parameter belongs to
            what, layer = f"`{holder}.weight.dtype` (the first parameter of `{layer}`)", holder
        return (f"{sink} cast to {what}{via}, the storage dtype of a quantizable layer "
                f"{storage_dtypes(evidence)}; use `{planner.suggested_call(layer)}`")
