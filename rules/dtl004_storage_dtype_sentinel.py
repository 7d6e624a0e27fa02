"""DTL004 storage-dtype-sentinel: a branch tests a layer's storage dtype against packed dtypes by hand.

## What it does
Flags comparisons of a quantizable layer's storage dtype (`L.weight.dtype`, directly, through a
local alias or a `hasattr` fallback) with a packed or quantized dtype — `torch.int32`,
`torch.uint8`, `torch.int8`, the `torch.float8_*` dtypes, `current_platform.fp8_dtype()`, a
module constant holding one, or membership in a tuple or set of them — outside the configured
helper and outside functions of the helper's shape (those are DTL005's), when the branch is a
hand copy of the input-dtype decision (dtype_lint/analysis/storage/storage_dispatch.py): it derives an
activation's or a buffer's dtype from the storage dtype (a cast to it, an allocation with it), or
its fall-through (the final `else`, or what follows the `if`) hands the raw `L.weight` to a kernel
(`torch.mm(x, L.weight.t())`, `x @ w`), as if every other storage were unpacked. A kernel
dispatch on the storage format whose fall-through hands the layer to its own code (`L(x)`, its
quant method), and a flag that records the format (`is_int8 = L.weight.dtype == torch.int8`),
ask the storage question the right way and are not reported, unless the dtype it tests is a
container several backends' formats share for that layer ({{shared_container}}):
then the arm it picks runs one format's kernel on the others — unless the same test also requires
a parameter (`and hasattr(L, "weight_scale_inv")`, `getattr(L, "x", None) is not None`) that at
most one of those backends registers with its `weight` (the storage model reads which parameters
each method registers; one whose only parameter read is `weight` counts as having any). One finding per
statement: a guard comparing against two sentinels is one finding. What the other side holds is
decided by the dtype evaluator, so `_FP8 = current_platform.fp8_dtype()` at module level counts.
Layers resolve as for DTL001; storage code (quant methods, weight loaders,
`process_weights_after_loading`) is exempt.

## Why is this bad?
Each such branch re-implements, by hand, the decision the shared input-dtype helper makes in one
place, and hand copies drift. {{DTL004.drift}} A new backend means finding every copy.

## Example
```python
w = self.kv_b_proj.weight.dtype if hasattr(self.kv_b_proj, "weight") else self.kv_b_proj.{{model_dtype}}
if (use_fp8_prefill or w != current_platform.fp8_dtype()) and w != torch.uint8:
    kv_c_normed = kv_c_normed.to(w)
```

## Use instead
```python
kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)
if kv_b_proj_input_dtype is not None:
    kv_c_normed = kv_c_normed.to(kv_b_proj_input_dtype)
```

## Fix safety
When the branch is an `if` whose one statement casts an activation to the same layer's storage
dtype, the dtype evaluator compares the branch with the configured helper over every storage ×
flag; only when they agree on every unpacked storage (fp16, bf16, fp32, the platform's fp8) is
the rewrite to the helper offered, and it is **safe** — the same rewrite and proof as DTL001's
idiom fix (the storages where they differ, int32, uint8, int8 and no `.weight`, are the bug
being fixed). It is **unsafe** while the configured helper is itself unsound (DTL005). Other
branches (a kernel choice, a fast path) get no fix: they need the layer's quant method, not its
storage dtype, and the finding says so.

## Known limits
- Test modules (`test_*.py`, `*_test.py`, files under a `test`/`tests` folder) are not checked: a
  test that asserts a backend's storage dtype asks the question on purpose.
- Ambiguity is asked of the container dtypes only (`uint8`, `int32`): a branch on fp8 or int8
  that picks a kernel is taken as deliberate, whichever fp8 or int8 format reaches the layer.
- A fall-through is read in the branch's own block: a raw weight handed to a kernel in a caller,
  or through a helper call, is not seen, and such a dispatch is taken as correct.
- Only `==`, `!=`, `is`, `is not`, `in` and `not in` comparisons are seen; `is_fp8(w)`,
  `w.itemsize == 1` and `not w.is_floating_point` are not.
- A storage dtype passed in as a parameter, or read from another object than the layer, is not
  recognised; the layer must resolve as for DTL001.
- A sentinel spelled through something the evaluator cannot read (a function call, a class
  attribute) is not recognised.
- Severity is warning: a branch on the storage dtype is sometimes deliberate (picking a kernel),
  and is then better written on the layer's quant method.

## Default
Off: an opt-in rule. It runs only when `select` names its code (`--select DTL004`, or
`extend-select`, or `ALL`); a prefix such as `DTL` does not turn it on. Measured with zero
configuration on the trees it was not developed on (benchmarks/accuracy/triage/README.md): 6 of 6 findings TRUE
(sglang 0.5.23's 3, vLLM 0.30.0's, aphrodite-engine's and vLLM 0.34.0's 1 each; before the dispatch test above,
none of sglang's 11 was worth acting on). Precise where it fires, but six findings are too few to
turn a rule on (the bar is 95% over at least 30), so it stays opt-in.

## Options
The layer-resolution options of DTL001 (`preset`, `quantizable`, `exempt-classes`,
`not-quantizable`, `exempt-functions`, `name-heuristics`, `name-patterns`), and `helper`,
`helper-template`, `fp8-input-default` for the rewrite.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.flow.recognisers import WeightDtypeSource, cast_dtype_args, weight_dtype_source
from dtype_lint.analysis.guard_engine.dominance import statement_blocks
from dtype_lint.analysis.sentinel_compare import (
    all_sentinels,
    is_test_code,
    may_compare_in_blanked,
    required_params,
    sentinel_compare,
    statement_of,
)
from dtype_lint.analysis.storage.storage_dispatch import ambiguous_storage, hand_copy_reason
from dtype_lint.core.text_facts import could_be_helper_shaped, function_text
from dtype_lint.dtypes.evaluator import ModuleGlobals, helper_shape
from dtype_lint.ecosystems.registry import model_dtype_attributes, passages
from dtype_lint.fix.planner import Site
from dtype_lint.rule import FixAvailability, Invalid, Rule, RuleContext, Valid

# The attribute a layer states its model dtype under (the examples' helper returns it).
_MODEL_DTYPE = model_dtype_attributes()[0]

_DTYPE = ("dtype",)  # what a candidate holding a comparison to judge spells (needs_whole_tree)
_HEAD = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear
from vllm.platforms import current_platform


class Attn:
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        self.kv_b_proj = kv_b_proj
"""
_ALIAS = ("        w = self.kv_b_proj.weight.dtype if hasattr(self.kv_b_proj, \"weight\") "
          f"else self.kv_b_proj.{_MODEL_DTYPE}\n")
_IMPORT = "from vllm.model_executor.layers.quantization.utils.layer_input_dtype import get_layer_input_dtype\n"
_DISPATCH = _HEAD + ("    def f(self, x):\n        if self.kv_b_proj.weight.dtype == current_platform.fp8_dtype():\n"
                     "            return fp8_gemm(x, self.kv_b_proj.weight)\n"
                     "        self.use_int8 = self.kv_b_proj.weight.dtype == torch.int8\n        return self.kv_b_proj(x)\n")


class StorageDtypeSentinel(Rule):
    code = "DTL004"
    name = "storage-dtype-sentinel"
    summary = "branch compares a quantizable layer's storage dtype with int32/uint8/int8/fp8 outside the helper"
    default_enabled = False  # opt-in until precise off vLLM: benchmarks/accuracy/triage/README.md
    patterns = (r"\b(?:int32|uint8|int8|float8_e\w+|fp8_dtype)\b",)
    facts = frozenset({"candidates", "layers", "fixes", "tree", "imports"})
    # Its layer verdict may follow the callers of a function through every function of the file:
    # a file is parsed whole for this rule only where a comparison it judges may lie
    # (`needs_whole_tree`).
    regions = "on-demand"
    fix_availability = FixAvailability.SOMETIMES
    fix_note = "safe when the branch guards a cast and is proven equal to the helper / none with reason"
    severity = "warning"
    in_migration = True  # DTL004's guard rewrite is DTL001's rewrite

    VALID = [
        # Comparing with an unpacked dtype is not a sentinel.
        Valid(_HEAD + "    def f(self, x):\n        if self.kv_b_proj.weight.dtype == torch.bfloat16:\n"
              "            x = x * 2\n        return x\n"),
        # The helper's own shape is DTL005's business.
        Valid("import torch\n\ndef input_dtype(layer, fp8_input):\n    wd = layer.weight.dtype\n"
              f"    if wd == torch.int32:\n        return layer.{_MODEL_DTYPE}\n    return wd\n",
              ),
        # Quant methods own the storage format.
        Valid("import torch\nfrom vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase\n"
              "class M(QuantizeMethodBase):\n    def apply(self, layer, x):\n"
              "        if layer.weight.dtype == torch.uint8:\n            return x\n        return x * 2\n"),
        # A kernel dispatch on the storage format whose fall-through hands the layer to its own
        # quant method: the storage question asked the right way.
        Valid(_DISPATCH),
        # The fused arm also needs a parameter that at most one backend's int32 format registers
        # with its `weight` (`hasattr(L, "weight_scale_inv")`): the dtype no longer stands for
        # several formats there.
        Valid(_DISPATCH.replace("== current_platform.fp8_dtype()",
                                "== torch.int32 and hasattr(self.kv_b_proj, \"weight_scale_inv\")")),
        # A plain torch layer is never repacked.
        Valid("import torch\nfrom torch import nn\nclass V(nn.Module):\n    def __init__(self):\n"
              "        self.proj = nn.Linear(2, 2)\n    def f(self, x):\n"
              "        return x if self.proj.weight.dtype == torch.int8 else x * 2\n"),
    ]
    INVALID = [
        # vLLM 0.27.1's MLA guard: proven equal to the helper on every unpacked storage, rewritten.
        Invalid(
            _HEAD + "    def prefill(self, kv, use_fp8_prefill):\n" + _ALIAS
            + "        if (use_fp8_prefill or w != current_platform.fp8_dtype()) and w != torch.uint8:\n"
            "            kv = kv.to(w)\n        return self.kv_b_proj(kv)\n",
            expected_replacement=_HEAD.replace("ColumnParallelLinear\n", "ColumnParallelLinear\n" + _IMPORT, 1)
            .replace("from vllm.platforms import current_platform\n", "")
            + "    def prefill(self, kv, use_fp8_prefill):\n"
            "        kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)\n"
            "        if kv_b_proj_input_dtype is not None:\n            kv = kv.to(kv_b_proj_input_dtype)\n"
            "        return self.kv_b_proj(kv)\n",
            message_contains=("self.kv_b_proj", "torch.uint8", "current_platform.fp8_dtype()"),
        ),
        # A kernel choice on the storage dtype, through a module constant, whose fall-through hands
        # the raw weight to a float matmul (int8, int32, uint8 land there): reported, no fix.
        Invalid(
            _HEAD.replace("\n\nclass", "\n_FP8 = current_platform.fp8_dtype()\n\n\nclass", 1)
            + "    def f(self, x):\n        weight = self.kv_b_proj.weight\n"
            "        if weight.dtype in (_FP8, torch.float8_e5m2):\n            return fp8_gemm(x, weight)\n"
            "        return x @ weight.t()\n",
            message_contains=("torch.float8_e4m3fn, torch.float8_e5m2", "fall-through hands the raw"),
        ),
        # The same dispatch on int32, which several backends' formats share (one repack's int32
        # words under three configs).
        Invalid(_DISPATCH.replace("== current_platform.fp8_dtype()", "== torch.int32"),
                message_contains=("int32 is the storage of several formats",)),
        # A guard that skips the fp16 cast the helper would make: not proven, not rewritten.
        Invalid(
            _HEAD + "    def f(self, kv):\n" + _ALIAS
            + "        if w != torch.uint8 and w != torch.float16:\n            kv = kv.to(w)\n        return kv\n",
            message_contains=("with torch.uint8 outside",),
        ),
    ]

    # A storage dtype compared is a `.dtype` read in the function's own code (directly, or in what
    # a local it compares was assigned): a candidate without the word holds no comparison to judge.
    def needs_whole_tree(self, ctx: RuleContext) -> bool:
        """A comparison of a storage dtype with a sentinel that `check` would judge: in a function
        kept whole in the reduced tree (module constants are all there), or possibly in a blanked
        body that names a dtype and a module constant that may be a sentinel
        (`may_compare_in_blanked`)."""
        module, _func = ctx.config.helper_spec
        if (ctx.source.module and ctx.source.module == module) or is_test_code(ctx.source.path):
            return False
        if may_compare_in_blanked(ctx.tree, ctx.source.text, ctx.imports):
            return True
        globals_ = ModuleGlobals(ctx.tree, ctx.imports)
        return any(sentinel_compare(node, c.scope, globals_) is not None
                   for c in ctx.candidates_naming(_DTYPE) for node in c.walk.of(ast.Compare))

    def check(self, ctx: RuleContext) -> None:
        module, _func = ctx.config.helper_spec
        if ctx.source.module and ctx.source.module == module:
            return  # the helper's own file
        if is_test_code(ctx.source.path):
            return  # a test asserting a storage dtype checks the backend on purpose
        globals_ = ModuleGlobals(ctx.tree, ctx.imports)
        for c in ctx.candidates_naming(_DTYPE):
            if could_be_helper_shaped(function_text(ctx.source.lines, c.fn)) and helper_shape(c.fn) is not None:
                continue
            done: set[int] = set()
            for node in c.walk.of(ast.Compare):
                hit = sentinel_compare(node, c.scope, globals_)
                if hit is None:
                    continue
                wds, _sentinels = hit
                stmt = statement_of(node, c.parents)
                if id(stmt) in done:
                    continue
                block = next((b for b in statement_blocks(c.parents.get(id(stmt))) if any(s is stmt for s in b)), None)
                why = hand_copy_reason(stmt, wds.layer, c.scope, block, ctx.imports)
                if why is None and not isinstance(stmt, ast.If):
                    continue  # a flag recording the format: what reads it decides
                verdict = ctx.layer_verdict(wds.layer, c, site=node)
                if verdict is None:
                    continue
                if why is None:  # a kernel dispatch: wrong only if its dtype stands for several formats
                    why = _ambiguity(ctx, wds.layer, c, all_sentinels(stmt, wds, c.scope, globals_),
                                     required_params(stmt, wds.layer))
                    if why is None:
                        continue
                done.add(id(stmt))
                sentinels = all_sentinels(stmt, wds, c.scope, globals_)
                fix, reason = _rewrite(ctx, stmt, wds, c)
                layer = ast.unparse(wds.layer)
                confidence, evidence = verdict
                report_node = stmt.test if isinstance(stmt, (ast.If, ast.While)) else node
                ctx.report(report_node,
                           f"branch compares `{layer}`'s storage dtype with {', '.join(sentinels)} outside "
                           f"`{ctx.fixes.func}`: a hand copy of the input-dtype decision, which drifts from the "
                           f"helper as backends change ({passages()['backends_change']}): "
                           f"{why}",
                           fix=fix, no_fix_reason=reason, confidence=confidence,
                           evidence=evidence)


def _ambiguity(ctx: RuleContext, layer: ast.expr, c, sentinels: list[str],
               required: frozenset[str] = frozenset()) -> str | None:
    qualname = ctx.layers.resolve(layer, c.scope).qualname
    found = ambiguous_storage(ctx.layers.storage_model.storages_for(qualname), sentinels, required) \
        if qualname else None
    if found is None:
        return None
    dtype, methods = found
    shown = ", ".join(f"`{m}`" for m in methods[:3]) + (f" and {len(methods) - 3} more" if len(methods) > 3 else "")
    return f"{dtype} is the storage of several formats here ({shown}): the branch cannot tell them apart"


def _rewrite(ctx: RuleContext, stmt: ast.stmt, wds: WeightDtypeSource, c):
    """The helper rewrite when the branch guards one cast to this layer's storage dtype and the
    evaluator proves the branch equal to the helper (fixplan's idiom form)."""
    if not (isinstance(stmt, ast.If) and len(stmt.body) == 1 and not stmt.orelse):
        return None, "no fix: the branch does not guard a cast (decide it from the layer's quant method, not its storage dtype)"
    body = stmt.body[0]
    call = body.value if isinstance(body, ast.Assign) else None
    layer = ast.dump(wds.layer)
    if isinstance(call, ast.Call):
        for arg in cast_dtype_args(call):
            cast_wds = weight_dtype_source(arg, c.scope)
            if cast_wds is not None and ast.dump(cast_wds.layer) == layer:
                fix, reason = ctx.fixes.idiom(Site(call, arg, cast_wds, c.fn, c.scope, c.parents))
                if fix is not None or reason:
                    return fix, reason
                return None, "no fix: the guarded cast is not in the shape the helper rewrite handles"
    return None, "no fix: the branch does not guard a cast to this layer's storage dtype"
