"""DTL005 unsound-input-dtype-helper: an input-dtype helper is wrong for some storage.

## What it does
Finds functions of the input-dtype helper's shape — they take a layer, read that layer's weight
dtype (`layer.weight.dtype`, `getattr(layer, "weight", None)`, `hasattr(layer, "weight")`) or
its `{{model_dtype}}`, and decide a dtype or None from it — and evaluates each one's own code over
every storage a quantization backend can leave behind (fp16, bf16, fp32, fp8 e4m3fn and e5m2,
int32, uint8, int8, no `.weight`) and both values of its fp8-input flag. A helper is reported
when, for some storage, every path of its code:
- returns an integer storage dtype (`torch.int32`, `torch.uint8`, `torch.int8`): the caller
  casts an activation to it;
- raises `AttributeError`: it reads `.weight` on a layer that has none;
- returns None for a packed storage while its flag says the input is fp8: the fp8 activation is
  kept, and reaches a kernel that takes only fp16/bf16 input.
The finding names the function and each wrong case ("int8 storage → returns torch.int8"). The
configured helper (`helper = "pkg.mod:func"`) is checked the same way. Each call of an unsound
helper whose result feeds a cast (`x.to(helper(...))`, or `v = helper(...)` then `x.to(v)` in
the same function or a function nested in it, across files through imports) is reported as a
lower-severity finding (a warning). Plain getters that decide nothing (`return
layer.weight.dtype`) are left to the rules that see their callers.

## Why is this bad?
A helper exists so that call sites stop guessing; a wrong helper makes every call site wrong at
once, and looks fixed. {{DTL005.upstream}}

## Example
```python
def kv_b_proj_input_dtype(layer, use_fp8_prefill):
    weight_dtype = layer.weight.dtype if hasattr(layer, "weight") else layer.{{model_dtype}}
    if weight_dtype == torch.int32:
        return layer.{{model_dtype}}
    if weight_dtype == torch.uint8:
        return None
    if weight_dtype == current_platform.fp8_dtype() and not use_fp8_prefill:
        return None
    return weight_dtype  # int8 storage: returns torch.int8
```

## Use instead
The shared helper, whose template handles every storage (`dtype-lint migrate` creates it):
```python
kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)
```
or the missing branch in the existing helper:
```python
    if (weight_dtype == torch.uint8 and use_fp8_prefill) or weight_dtype == torch.int8:
        return layer.{{model_dtype}}
```

## Fix safety
For the configured helper itself, when the wrong cases are plain returns of the weight dtype (the
function ends in `return <weight dtype variable>`), the fix inserts one branch right after that
variable is assigned, returning `{{model_dtype}}` for exactly the wrong cases. It is **safe**: the
patched function is evaluated again and must be sound and decide every other case as before.
A call site of another unsound helper is rewritten to call the configured helper when the two
are proven to agree on every case the old helper gets right (**safe**); that fix imports the
helper and creates it from the template where the project has none. When they cannot be proven
to agree (the old helper asks something the evaluator cannot know, such as its quant method's
class, on a case it gets right), its callers are left as they are and the old helper gets the
same one-branch fix where it is defined (**safe**, same proof): the smallest change that makes
every caller sound, and the one upstream reviewers can check line by line. No fix when the helper raises
`AttributeError` (its `.weight` read needs a fallback, not a branch), when it depends on what the
evaluator cannot know (a quant method, an import) where the configured helper would decide
otherwise, or when the call passes keywords; the finding says why. While the configured helper
is unsound, every fix that routes a site through it (DTL001, DTL004) is **unsafe** and names the
wrong case.

## Known limits
- Helpers are found by shape; a helper whose layer is not its first parameter, or that takes more
  than three, is not recognised, and neither is one nested in another function.
- Call sites in other files are followed for top-level functions only, through imports
  (`from m import f`, `import m as x; x.f(...)`); a method helper is followed within its class.
- What the evaluator cannot know (an import, `isinstance`, a quant method's attribute) is
  explored both ways; a case wrong on only some of those paths is not reported (the finding
  mentions it when the function is reported for another case).
- A result that reaches a cast through a container, an attribute or another function is not
  followed.
- Storages outside the evaluated set (int16, {{unevaluated_int4}}) are not
  checked.
- A helper is judged by its real callers: a call that hands it a layer no backend packs (a plain
  `nn.Linear`, a layer built without a config) is not reported, nor a module-level helper that is
  not the configured one and whose every caller does so — in its own file, and, one step, in the
  other files that import it (by name, or its module: `mod.helper(...)`), each layer resolved in
  its caller's file (dtype_lint/analysis/flow/foreign_calls.py); the definition's evidence names a
  caller in another file that makes it wrong. A helper called nowhere in the project is judged in
  the abstract (a public helper: its callers may be another project's). A method is judged by its
  own file's callers only; a caller's layer that is itself a parameter is taken as possibly
  packed; a file that starts calling the helper does not by itself invalidate cached findings.

## Default
Off: an opt-in rule. It runs only when `select` names its code (`--select DTL005`, or
`extend-select`, or `ALL`); a prefix such as `DTL` does not turn it on. Measured with zero
configuration on the trees it was not developed on (benchmarks/accuracy/triage/README.md): 12 of 12 findings TRUE
(one helper and its callers in vLLM 0.30.0, in aphrodite-engine 0.24.1 and in vLLM 0.34.0; sglang 0.5.23's 3 FALSE
findings, whose callers all pass a plain `nn.Linear`, are no longer reported now that a helper is
judged by its callers). Too few findings to turn a rule on (the bar is 95% over at least 30), so it
stays opt-in.

## Options
`helper`, `helper-template` (the configured helper and its template), `exempt-functions`,
`exempt-classes`.
"""

from __future__ import annotations

import ast
import os

from dtype_lint.analysis.flow.foreign_calls import calls_elsewhere
from dtype_lint.analysis.flow.recognisers import WEIGHT_SITE_PATTERNS
from dtype_lint.analysis.helper_calls import callers_here, def_name_node, fed_cast, may_be_packed
from dtype_lint.analysis.helper_functions import KnownHelper
from dtype_lint.core.findings import Evidence
from dtype_lint.ecosystems.registry import model_dtype_attributes
from dtype_lint.fix.helper_repair import missing_branch_fix, route_blocker, route_fix
from dtype_lint.rule import FixAvailability, Invalid, Rule, RuleContext, Valid

# The attribute a layer states its model dtype under (an ecosystem's word): what a sound helper
# returns for a packed or missing weight, and what marks a function that may be a helper.
_MODEL_DTYPE = model_dtype_attributes()[0]
_UPSTREAM_SHAPE = f"""\
import torch
from vllm.platforms import current_platform


def kv_b_proj_input_dtype(layer, use_fp8_prefill):
    weight = getattr(layer, "weight", None)
    weight_dtype = weight.dtype if weight is not None else layer.{_MODEL_DTYPE}
    if weight_dtype == torch.int32:
        return layer.{_MODEL_DTYPE}
    if weight_dtype == torch.uint8:
        return None
    if weight_dtype == current_platform.fp8_dtype() and not use_fp8_prefill:
        return None
    return weight_dtype
"""
_SOUND = _UPSTREAM_SHAPE.replace(
    "    if weight_dtype == torch.uint8:\n        return None\n",
    f"    if weight_dtype == torch.uint8:\n        return layer.{_MODEL_DTYPE} if use_fp8_prefill else None\n"
    f"    if not weight_dtype.is_floating_point:\n        return layer.{_MODEL_DTYPE}\n")
_CALLER = """

class Attn:
    def prefill(self, kv_c, use_fp8_prefill):
        kv_dtype = kv_b_proj_input_dtype(self.kv_b_proj, use_fp8_prefill)
        if kv_dtype is not None:
            kv_c = kv_c.to(kv_dtype)
        return self.kv_b_proj(kv_c)
"""
_CONFIGURED = {"helper": "pkg.layer_input_dtype:kv_b_proj_input_dtype"}
_PATCH = (f"    weight_dtype = weight.dtype if weight is not None else layer.{_MODEL_DTYPE}\n"
          "    if (weight_dtype == torch.uint8 and use_fp8_prefill) or weight_dtype == torch.int8:\n"
          f"        return layer.{_MODEL_DTYPE}\n")
_IMPORT = "from vllm.model_executor.layers.quantization.utils.layer_input_dtype import get_layer_input_dtype\n"


class UnsoundInputDtypeHelper(Rule):
    code = "DTL005"
    name = "unsound-input-dtype-helper"
    summary = "an input-dtype helper returns an integer storage dtype (or raises, or keeps fp8) for some storage"
    default_enabled = False  # opt-in until precise off vLLM: benchmarks/accuracy/triage/README.md
    patterns = WEIGHT_SITE_PATTERNS + tuple(rf"\.{name}\b" for name in model_dtype_attributes())
    marker = "dtype"
    facts = frozenset({"functions", "helpers", "fixes", "layers"})
    fix_availability = FixAvailability.SOMETIMES
    fix_note = ("safe: the missing branch in the configured helper; callers rewritten to the configured helper "
                "where proven to agree, else the missing branch in the unsound helper itself; all proven by the "
                "evaluator / none with reason")
    reads_helper_callers = True
    in_migration = True  # the migration fixes an unsound helper in place

    VALID = [
        Valid(_SOUND + _CALLER),
        # A getter decides nothing: its callers are DTL001's business.
        Valid(f"def weight_dtype(layer):\n    return layer.weight.dtype if hasattr(layer, 'weight') else layer.{_MODEL_DTYPE}\n"),
        # Quant methods own the storage format.
        Valid("import torch\nfrom vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase\n"
              "class M(QuantizeMethodBase):\n    def storage(self, layer, packed):\n"
              "        if layer.weight.dtype == torch.int32:\n            return torch.int32\n"
              f"        return layer.{_MODEL_DTYPE}\n"),
        # Beyond the evaluator: no answer, no finding.
        Valid("import torch\ndef f(layer, flag):\n    for x in (1, 2):\n        pass\n    return layer.weight.dtype\n"),
    ]
    INVALID = [
        # Upstream's shape: int8 falls through; an fp8 input into a uint8 storage is kept. Its call site
        # feeds a cast: rewritten to the configured helper, which agrees everywhere else.
        Invalid(
            _UPSTREAM_SHAPE + _CALLER, count=2,
            message_contains=("kv_b_proj_input_dtype",),
            expected_replacement=(_UPSTREAM_SHAPE.replace("import torch\n", "import torch\n" + _IMPORT, 1)
                                  + _CALLER.replace("kv_dtype = kv_b_proj_input_dtype(",
                                                    "kv_dtype = get_layer_input_dtype(")),
        ),
        # The configured helper itself: the missing cases become one plain branch.
        Invalid(
            _UPSTREAM_SHAPE, settings=_CONFIGURED,
            message_contains=("int8 storage → returns torch.int8",
                              "uint8 storage, fp8_input=True → returns None (keeps the fp8 activation)"),
            expected_replacement=_UPSTREAM_SHAPE.replace(
                f"    weight_dtype = weight.dtype if weight is not None else layer.{_MODEL_DTYPE}\n", _PATCH),
        ),
        # Reads `.weight` with no fallback: AttributeError on a layer without one; no plain-branch fix.
        Invalid(
            "import torch\n\ndef input_dtype(layer, fp8_input):\n    wd = layer.weight.dtype\n"
            f"    if wd == torch.int32:\n        return layer.{_MODEL_DTYPE}\n    return wd\n",
            settings={"helper": "pkg.m:input_dtype"},
            message_contains=("no `.weight` → raises AttributeError", "int8 storage → returns torch.int8"),
        ),
    ]

    def check(self, ctx: RuleContext) -> None:
        functions = {id(c.fn): c for c in ctx.every_function}
        # This file's calls of its helpers, judged only once a helper here may be reported: most
        # files with a helper-shaped function have no unsound one, and judging every call's layer
        # was a sixth of the rule (vLLM 0.34.0).
        callers: dict[str, list[bool]] | None = None
        for fn, _class_q, h in ctx.helpers.defined:
            function = functions.get(id(fn))
            if (function is not None and ctx.is_exempt(function)) or h.table is None or not h.unsound or not h.decides:
                continue
            if callers is None:
                callers = callers_here(ctx)
            here = callers.get(h.name, [])
            # Its callers in other files too (one step, through imports): a helper whose every
            # caller in the project hands it a layer no backend packs (a plain nn.Linear) is wrong
            # for no real layer. No caller found anywhere: judged in the abstract, as a public helper.
            elsewhere = [] if h.configured or _class_q is not None or any(here) else \
                calls_elsewhere(ctx.layers.project, h.qualname, ctx.layers.module, ctx.layers.config_params)
            if not h.configured and (here or elsewhere) and not any(here) \
                    and not any(c.may_be_packed for c in elsewhere):
                continue
            if h.configured:
                fix, reason = missing_branch_fix(ctx.source, fn, h)
            elif blocker := route_blocker(ctx.fixes, ctx.config.template, h):
                # Its callers cannot be routed to the configured helper: the one automatic fix
                # left is the missing branch where it is defined.
                fix, reason = missing_branch_fix(ctx.source, fn, h)
                reason = reason and f"{blocker}; {reason}"
            else:
                fix, reason = None, _no_fix_reason(h)
            # The callers in other files that make it wrong for a real layer (only read when none here does).
            callers_seen = tuple(Evidence(f"called from {os.path.basename(c.path)} with `{c.layer}`, which a "
                                          "backend may pack", c.path, c.line)
                                 for c in elsewhere if c.may_be_packed)[:2]
            ctx.report(def_name_node(ctx.source, fn), _definition_message(h), scope=_scope_of(h), fix=fix,
                       no_fix_reason=reason, expression=f"def {fn.name}", kind="definition",
                       evidence=callers_seen)
        for c in ctx.every_function:
            if not ctx.helpers.may_call_helper(c.fn) or ctx.is_exempt(c):
                continue
            for node in c.walk.of(ast.Call):
                h = ctx.helpers.called(node, c.scope)
                if h is None or h.table is None or not h.unsound or not h.decides:
                    continue
                cast = fed_cast(node, c)
                if cast is None or not may_be_packed(ctx, node, c):
                    continue
                fix, reason = route_fix(ctx.source, ctx.fixes, ctx.config.template, node, h)
                here = h.path == ctx.source.path
                ctx.report(node, _call_message(h, cast), fix=fix, kind="call",
                           no_fix_reason=reason, severity="warning",
                           evidence=(Evidence(f"`{h.name}` is defined {'here' if here else 'in ' + h.qualname}",
                                              h.path, h.line),))


def _scope_of(h: KnownHelper) -> str:
    return h.qualname.rsplit(".", 1)[-1] if "." in h.qualname else h.qualname


def _definition_message(h: KnownHelper) -> str:
    which = "the configured helper" if h.configured else "input-dtype helper"
    msg = (f"{which} `{h.name}` is wrong for some storage: " + "; ".join(h.wrong_cases())
           + "; an activation cast to an integer dtype is truncated, a missing `.weight` raises, an fp8 "
           f"activation reaches a kernel that takes fp16/bf16 only; return `layer.{_MODEL_DTYPE}` there")
    if h.maybe_unsound:
        msg += " (also possibly: " + "; ".join(h.maybe_wrong_cases()) + ")"
    return msg


def _no_fix_reason(h: KnownHelper) -> str:
    if not h.configured:
        return ("not the configured helper: route its callers through the configured one "
                "(each call site that feeds a cast is reported, with a fix where proven)")
    return ""


def _call_message(h: KnownHelper, cast: ast.Call) -> str:
    return (f"`{h.name}(...)` feeds the cast at line {cast.lineno}, and `{h.name}` is wrong for some storage: "
            + "; ".join(h.wrong_cases()))
