"""DTL005 unsound-input-dtype-helper: an input-dtype helper is wrong for some storage.

## What it does
Finds functions of the input-dtype helper's shape — they take a layer, read that layer's weight
dtype (`layer.weight.dtype`, `getattr(layer, "weight", None)`, `hasattr(layer, "weight")`) or
its `params_dtype`, and decide a dtype or None from it — and evaluates each one's own code over
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
once, and looks fixed. vLLM 0.28.0's `_get_kv_b_proj_input_dtype` (PR #38771) maps int32 to
`params_dtype`, uint8 to None and fp8 to None without fp8 prefill, then falls through to
`return weight_dtype`: a `kv_b_proj` with `torch.int8` storage (compressed-tensors or Quark
W8A8-INT8) gets its latent cast to int8, truncating it.

It also keeps an fp8 activation for an NVFP4 (uint8) `kv_b_proj` during fp8 prefill, and that
combination is reachable upstream. MLA decides fp8 prefill from the KV-cache dtype, the user's
`use_prefill_query_quantization` and the prefill backend, never from `kv_b_proj`'s
quantization (`determine_prefill_query_data_type`: vLLM 0.28.0
`model_executor/layers/attention/mla_attention.py:2023-2041`, 0.33.0 `:2357-2374`, gated by
`backend_supports_prefill_query_quantization`: 0.28.0 `:1613-1638`, 0.33.0 `:1903-1928`,
SM100 with the FLASHINFER, TRTLLM_RAGGED or TOKENSPEED_MLA prefill backend). On that path the
chunked-context workspace is allocated in the query dtype (0.28.0 `:2155`, 0.33.0 `:2493`) and
filled without dequantization (`cp_gather_cache`: 0.28.0 `:2638` and `:2747`, 0.33.0 `:3028` and
`:3143`), so `kv_c_normed` is fp8; `use_fp8_prefill` (0.28.0 `:2601`, 0.33.0 `:2979`) makes the
helper return None for uint8 storage, the cast is skipped (0.28.0 `:2650`, 0.33.0 `:3040`), the
fp8 latent enters `kv_b_proj` (0.28.0 `:2653`, 0.33.0 `:3043`), and every NVFP4 linear kernel
quantizes its input with `scaled_fp4_quant`, which
asserts fp16/bf16 input (`_custom_ops.py`: 0.28.0 `:1563`, 0.33.0 `:1566`). ModelOpt NVFP4
quantizes every `LinearBase` not excluded, `kv_b_proj` included (0.33.0
`quantization/modelopt.py:228-256`), and its checkpoints usually ship an fp8 KV cache. vLLM
0.27.1's inline guard (`mla_attention.py:2363-2373`, `:2526-2534`) skips the cast for uint8 the
same way.

What it finds in vLLM: 0.28.0 — `_get_kv_b_proj_input_dtype`
(`mla_attention.py:365`): "uint8 storage, fp8_input=True → returns None (keeps the fp8
activation); int8 storage → returns torch.int8", and, as warnings, its three call sites that
feed the `kv_c_normed` cast (`mla_attention.py:2602` and `:2707`, and
`models/kimi_k3/nvidia/mla.py:771`, which imports it). 0.33.0 — the same function
(`mla_attention.py:379`, which now also returns ModelOpt FP8_PB_WO's `quant_method.input_dtype`
for fp8 storage: an unknown to the evaluator, so fp8 is not reported) with the same two cases,
and its call sites `mla_attention.py:2980`, `:3103` and `kimi_k3/nvidia/mla.py:851`. In 0.28.0
the call sites are rewritten to the configured helper (proven to agree on every case upstream
gets right); in 0.33.0 they cannot be (the ModelOpt case), so the fix is the two-line branch in
`_get_kv_b_proj_input_dtype` itself (docs/upstream/vllm-0.33.0/ holds it as a patch). 0.27.1 has
no such function.

## Example
```python
def kv_b_proj_input_dtype(layer, use_fp8_prefill):
    weight_dtype = layer.weight.dtype if hasattr(layer, "weight") else layer.params_dtype
    if weight_dtype == torch.int32:
        return layer.params_dtype
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
        return layer.params_dtype
```

## Fix safety
For the configured helper itself, when the wrong cases are plain returns of the weight dtype (the
function ends in `return <weight dtype variable>`), the fix inserts one branch right after that
variable is assigned, returning `params_dtype` for exactly the wrong cases. It is **safe**: the
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
- Storages outside the evaluated set (int16, int4 in int32 words other than Marlin's) are not
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
configuration on the trees it was not developed on (docs/triage/README.md): 8 of 8 findings TRUE
(one helper and its callers in vLLM 0.30.0 and in aphrodite-engine 0.24.1; sglang 0.5.23's 3 FALSE
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
from dtype_lint.analysis.flow.recognisers import WEIGHT_SITE_PATTERNS, cast_dtype_args
from dtype_lint.analysis.helper_functions import KnownHelper
from dtype_lint.core.findings import Edit, Evidence, Fix
from dtype_lint.dtypes.evaluator import AFTER_ERROR, Case, Table, alternatives, evaluate_helper, unsound_cases
from dtype_lint.fix.helper_template import helper_table
from dtype_lint.rule import FixAvailability, Invalid, Rule, RuleContext, Valid

_UPSTREAM_SHAPE = """\
import torch
from vllm.platforms import current_platform


def kv_b_proj_input_dtype(layer, use_fp8_prefill):
    weight = getattr(layer, "weight", None)
    weight_dtype = weight.dtype if weight is not None else layer.params_dtype
    if weight_dtype == torch.int32:
        return layer.params_dtype
    if weight_dtype == torch.uint8:
        return None
    if weight_dtype == current_platform.fp8_dtype() and not use_fp8_prefill:
        return None
    return weight_dtype
"""
_SOUND = _UPSTREAM_SHAPE.replace(
    "    if weight_dtype == torch.uint8:\n        return None\n",
    "    if weight_dtype == torch.uint8:\n        return layer.params_dtype if use_fp8_prefill else None\n"
    "    if not weight_dtype.is_floating_point:\n        return layer.params_dtype\n")
_CALLER = """

class Attn:
    def prefill(self, kv_c, use_fp8_prefill):
        kv_dtype = kv_b_proj_input_dtype(self.kv_b_proj, use_fp8_prefill)
        if kv_dtype is not None:
            kv_c = kv_c.to(kv_dtype)
        return self.kv_b_proj(kv_c)
"""
_QUANT_METHOD_SHAPE = _UPSTREAM_SHAPE.replace(
    "    if weight_dtype == current_platform.fp8_dtype() and not use_fp8_prefill:\n        return None\n",
    "    if weight_dtype == current_platform.fp8_dtype():\n"
    "        from pkg.quant import BlockFp8LinearMethod\n\n"
    "        # Block-FP8 quantizes its bf16 input itself.\n"
    "        if isinstance(getattr(layer, \"quant_method\", None), BlockFp8LinearMethod):\n"
    "            return None\n"
    "        if not use_fp8_prefill:\n"
    "            return None\n")
_CONFIGURED = {"helper": "pkg.layer_input_dtype:kv_b_proj_input_dtype"}
_PATCH = ("    weight_dtype = weight.dtype if weight is not None else layer.params_dtype\n"
          "    if (weight_dtype == torch.uint8 and use_fp8_prefill) or weight_dtype == torch.int8:\n"
          "        return layer.params_dtype\n")
_IMPORT = "from vllm.model_executor.layers.quantization.utils.layer_input_dtype import get_layer_input_dtype\n"


class UnsoundInputDtypeHelper(Rule):
    code = "DTL005"
    name = "unsound-input-dtype-helper"
    summary = "an input-dtype helper returns an integer storage dtype (or raises, or keeps fp8) for some storage"
    default_enabled = False  # opt-in until precise off vLLM: docs/triage/README.md
    patterns = WEIGHT_SITE_PATTERNS + (r"\.params_dtype\b",)
    marker = "dtype"
    facts = frozenset({"functions", "helpers", "fixes", "layers"})
    fix_availability = FixAvailability.SOMETIMES
    fix_note = ("safe: the missing branch in the configured helper; callers rewritten to the configured helper "
                "where proven to agree, else the missing branch in the unsound helper itself; all proven by the "
                "evaluator / none with reason")
    reads_helper_callers = True

    VALID = [
        Valid(_SOUND + _CALLER),
        # A getter decides nothing: its callers are DTL001's business.
        Valid("def weight_dtype(layer):\n    return layer.weight.dtype if hasattr(layer, 'weight') else layer.params_dtype\n"),
        # Quant methods own the storage format.
        Valid("import torch\nfrom vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase\n"
              "class M(QuantizeMethodBase):\n    def storage(self, layer, packed):\n"
              "        if layer.weight.dtype == torch.int32:\n            return torch.int32\n"
              "        return layer.params_dtype\n"),
        # Beyond the evaluator: no answer, no finding.
        Valid("import torch\ndef f(layer, flag):\n    for x in (1, 2):\n        pass\n    return layer.weight.dtype\n"),
    ]
    INVALID = [
        # Upstream's shape: int8 falls through; an fp8 input into NVFP4 is kept. Its call site
        # feeds a cast: rewritten to the configured helper, which agrees everywhere else.
        Invalid(
            _UPSTREAM_SHAPE + _CALLER, count=2,
            message_contains=("kv_b_proj_input_dtype",),
            expected_replacement=(_UPSTREAM_SHAPE.replace("import torch\n", "import torch\n" + _IMPORT, 1)
                                  + _CALLER.replace("kv_dtype = kv_b_proj_input_dtype(",
                                                    "kv_dtype = get_layer_input_dtype(")),
        ),
        # Its fp8 case asks the quant method, which the evaluator cannot know: the callers cannot
        # be proven to agree with the configured helper, so the helper gets the branch in place.
        Invalid(
            _QUANT_METHOD_SHAPE + _CALLER, count=2,
            message_contains=("int8 storage → returns torch.int8",),
            expected_replacement=_QUANT_METHOD_SHAPE.replace(
                "    weight_dtype = weight.dtype if weight is not None else layer.params_dtype\n", _PATCH) + _CALLER,
        ),
        # The configured helper itself: the missing cases become one plain branch.
        Invalid(
            _UPSTREAM_SHAPE, settings=_CONFIGURED,
            message_contains=("int8 storage → returns torch.int8",
                              "uint8 storage, fp8_input=True → returns None (keeps the fp8 activation)"),
            expected_replacement=_UPSTREAM_SHAPE.replace(
                "    weight_dtype = weight.dtype if weight is not None else layer.params_dtype\n", _PATCH),
        ),
        # Reads `.weight` with no fallback: AttributeError on AWQ/GPTQ; no plain-branch fix.
        Invalid(
            "import torch\n\ndef input_dtype(layer, fp8_input):\n    wd = layer.weight.dtype\n"
            "    if wd == torch.int32:\n        return layer.params_dtype\n    return wd\n",
            settings={"helper": "pkg.m:input_dtype"},
            message_contains=("no `.weight` → raises AttributeError", "int8 storage → returns torch.int8"),
        ),
    ]

    def check(self, ctx: RuleContext) -> None:
        functions = {id(c.fn): c for c in ctx.every_function}
        callers = _callers_here(ctx)
        for fn, _class_q, h in ctx.helpers.defined:
            function = functions.get(id(fn))
            if (function is not None and ctx.is_exempt(function)) or h.table is None or not h.unsound or not h.decides:
                continue
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
                fix, reason = _helper_fix(ctx, fn, h)
            elif blocker := _route_blocker(ctx, h):
                # Its callers cannot be routed to the configured helper: the one automatic fix
                # left is the missing branch where it is defined.
                fix, reason = _helper_fix(ctx, fn, h)
                reason = reason and f"{blocker}; {reason}"
            else:
                fix, reason = None, _no_fix_reason(h)
            # The callers in other files that make it wrong for a real layer (only read when none here does).
            callers_seen = tuple(Evidence(f"called from {os.path.basename(c.path)} with `{c.layer}`, which a "
                                          "backend may pack", c.path, c.line)
                                 for c in elsewhere if c.may_be_packed)[:2]
            ctx.report(_name_node(ctx, fn), _definition_message(h), scope=_scope_of(h), fix=fix,
                       no_fix_reason=reason, expression=f"def {fn.name}", kind="definition",
                       evidence=callers_seen)
        for c in ctx.every_function:
            if not ctx.helpers.may_call_helper(c.fn) or ctx.is_exempt(c):
                continue
            for node in c.walk.of(ast.Call):
                h = ctx.helpers.called(node, c.scope)
                if h is None or h.table is None or not h.unsound or not h.decides:
                    continue
                cast = _fed_cast(node, c)
                if cast is None or not _may_be_packed(ctx, node, c):
                    continue
                fix, reason = _route_fix(ctx, node, h)
                here = h.path == ctx.source.path
                ctx.report(node, _call_message(h, cast), fix=fix, kind="call",
                           no_fix_reason=reason, severity="warning",
                           evidence=(Evidence(f"`{h.name}` is defined {'here' if here else 'in ' + h.qualname}",
                                              h.path, h.line),))


def _layer_arg(call: ast.Call) -> ast.expr | None:
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in ("layer", "module", "linear")), None)


def _may_be_packed(ctx: RuleContext, call: ast.Call, c) -> bool:
    """Can the layer this call hands the helper have a storage the helper decides wrongly? False
    only when the layer resolves and no backend gives it a non-compute storage (a plain
    `nn.Linear`, a layer built without a quant config)."""
    arg = _layer_arg(call)
    if arg is None:
        return True
    inst = ctx.layers.resolve(arg, c.scope)
    if inst.qualname is None and inst.config != "none":
        return True  # unresolved: the helper's own verdict stands
    return ctx.layer_verdict(arg, c, site=call) is not None


def _callers_here(ctx: RuleContext) -> dict[str, list[bool]]:
    """Helper name → for each call of it in this file, whether the layer it passes may be packed."""
    out: dict[str, list[bool]] = {}
    names = {fn.name for fn, _q, _h in ctx.helpers.defined}
    if not names:
        return out
    for c in ctx.every_function:
        if not ctx.helpers.may_call_helper(c.fn):
            continue  # no line of it names a helper of this file
        for node in c.walk.of(ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in names:
                out.setdefault(node.func.id, []).append(_may_be_packed(ctx, node, c))
    return out


def _scope_of(h: KnownHelper) -> str:
    return h.qualname.rsplit(".", 1)[-1] if "." in h.qualname else h.qualname


def _definition_message(h: KnownHelper) -> str:
    which = "the configured helper" if h.configured else "input-dtype helper"
    msg = (f"{which} `{h.name}` is wrong for some storage: " + "; ".join(h.wrong_cases())
           + "; an activation cast to an integer dtype is truncated, a missing `.weight` raises, an fp8 "
           "activation reaches a kernel that takes fp16/bf16 only; return `layer.params_dtype` there")
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


def _name_node(ctx: RuleContext, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
    """The function's name on its `def` line, for the finding's span."""
    line = ctx.source.line(fn.lineno)
    raw = line.encode("utf-8")
    start = raw.find(f"def {fn.name}".encode()) + 4
    if start < 4:
        start = fn.col_offset
    node = ast.Name(id=fn.name)
    node.lineno = node.end_lineno = fn.lineno
    node.col_offset, node.end_col_offset = start, start + len(fn.name.encode("utf-8"))
    return node


def _fed_cast(call: ast.Call, c) -> ast.Call | None:
    """The cast this call's result feeds: as the cast's dtype (alone or in `... or x.dtype`), or
    through a local name assigned from it and cast to in this function or one nested in it."""
    parents = c.parents
    node, parent = call, parents.get(id(call))
    while isinstance(parent, (ast.BoolOp, ast.keyword)):
        node, parent = parent, parents.get(id(parent))
    if isinstance(parent, ast.Call) and any(a is node or a is getattr(node, "value", None)
                                            for a in cast_dtype_args(parent)):
        return parent
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return None
    name = parent.targets[0].id
    for sub in ast.walk(c.fn):
        if isinstance(sub, ast.Call):
            for arg in cast_dtype_args(sub):
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(arg)):
                    return sub
    return None


def _helper_fix(ctx: RuleContext, fn, h: KnownHelper) -> tuple[Fix | None, str]:
    """One branch returning `params_dtype` for exactly the wrong cases, inserted after the
    assignment of the variable the function finally returns; proven by evaluating the result."""
    if any(v == AFTER_ERROR for _c, v in h.unsound):
        return None, "the helper reads `.weight` without a fallback (`getattr(layer, \"weight\", None)`): not a plain branch"
    last = fn.body[-1]
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Name)):
        return None, "the helper does not end in `return <weight dtype>`: add the missing case by hand"
    var = last.value.id
    assigns = [s for s in fn.body if isinstance(s, ast.Assign) and len(s.targets) == 1
               and isinstance(s.targets[0], ast.Name) and s.targets[0].id == var]
    every = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Store)]
    if len(assigns) != 1 or len(every) != 1:
        return None, f"`{var}` is not assigned once at the top of the helper: add the missing case by hand"
    layer = fn.args.posonlyargs + fn.args.args
    layer = [a.arg for a in layer if a.arg not in ("self", "cls")][0]
    flags_in_table = h.table.flags
    parts = []
    by_storage: dict[str | None, set[bool]] = {}
    for case, _v in h.unsound:
        by_storage.setdefault(case.storage, set()).add(case.flag)
    for storage, flags in by_storage.items():
        test = f"{var} == torch.{storage}"
        if len(flags) < len(flags_in_table):
            flag_test = h.flag_param if True in flags else f"not {h.flag_param}"
            test = f"({test} and {flag_test})"
        parts.append(test)
    if len(parts) == 1 and parts[0].startswith("("):
        parts[0] = parts[0][1:-1]
    assign = assigns[0]
    src = ctx.source
    indent = src.indent_of(assign.lineno)
    unit = src.indent_of(fn.body[0].lineno)[len(src.indent_of(fn.lineno)):] or "    "
    nl = src.newline
    text = f"{indent}if {' or '.join(parts)}:{nl}{indent}{unit}return {layer}.params_dtype{nl}"
    at = src.offset(assign.end_lineno + 1, 0) if assign.end_lineno < len(src.lines) else len(src.text)
    patched = src.text[:at] + text + src.text[at:]
    why = _still_wrong(patched, fn.name, fn.lineno, h.table)
    if why:
        return None, why
    return Fix(f"return `{layer}.params_dtype` for the wrong cases (proven by the dtype evaluator)", True,
               (Edit(at, at, text),)), ""


def _still_wrong(patched: str, name: str, line: int, before: Table) -> str:
    try:
        tree = ast.parse(patched)
    except SyntaxError:
        return "the branch would not parse here"
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.name == name and n.lineno == line), None)
    try:
        after = evaluate_helper(fn, tree) if fn is not None else None
    except Exception as e:  # noqa: BLE001 - whatever the evaluator refuses, the fix is off
        return f"the patched helper cannot be evaluated ({e})"
    if after is None or unsound_cases(after):
        return "the branch would not make the helper sound"
    wrong = {c for c, _ in unsound_cases(before)}
    if any(after.get(c) != v for c, v in before.rows if c not in wrong):
        return "the branch would change a case the helper gets right"
    return ""


def _route_blocker(ctx: RuleContext, h: KnownHelper, has_flag: bool = True) -> str:
    """Why calls of `h` cannot become calls of the configured helper ("" when they can): some
    case `h` gets right is decided otherwise (or not surely) by the configured helper."""
    planner = ctx.fixes
    if planner.helper_wrong_cases:
        return f"the configured helper `{planner.func}` is unsound too"
    cfg = helper_table(planner.module, planner.func, ctx.config.template, planner.helper_path)
    if cfg is None:
        return f"`{planner.func}` is beyond the dtype evaluator"
    default = planner.flag_default == "True"
    wrong = {c for c, _ in h.unsound}
    for case, value in h.table.rows:
        if case in wrong:
            continue
        theirs = cfg.get(case if has_flag else Case(case.storage, default))
        if len(alternatives(value)) > 1 or value != theirs:
            return f"`{h.name}` and `{planner.func}` decide {case.describe()} differently ({value} vs {theirs})"
    return ""


def _route_fix(ctx: RuleContext, call: ast.Call, h: KnownHelper) -> tuple[Fix | None, str]:
    """Call the configured helper instead, when it decides every case `h` gets right the same way."""
    planner = ctx.fixes
    if h.configured:
        return None, f"fix `{h.name}` itself (reported at its definition)"
    if call.keywords or any(isinstance(a, ast.Starred) for a in call.args) or not 1 <= len(call.args) <= 2:
        return None, f"`{h.name}` is called with keywords or other arguments: route it to `{planner.func}` by hand"
    has_flag = len(call.args) == 2
    blocker = _route_blocker(ctx, h, has_flag)
    if blocker:
        return None, (f"{blocker}; route it by hand, or take the fix offered where `{h.name}` is defined "
                      "(its missing cases as one branch)")
    edits = [Edit(*ctx.source.node_offsets(call.func), planner.name)]
    if not has_flag:
        _, end = ctx.source.node_offsets(call.args[0])
        edits.append(Edit(end, end, f", {planner.flag_default}"))
    return planner.helper_fix(f"call `{planner.func}` instead of `{h.name}` (they agree on every storage "
                              f"`{h.name}` gets right)", edits, True), ""
