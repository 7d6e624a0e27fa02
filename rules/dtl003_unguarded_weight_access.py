"""DTL003 unguarded-weight-access: `.weight` is read on a quantizable layer without a fallback.

## What it does
Flags reads of `L.weight` (and `getattr(L, "weight")` without a default) in any function,
`__init__` included (the message names it), that is not storage code (quant methods and weight
kernels: a class whose `apply`, `apply_weights`, `create_weights`, `process_weights_after_loading`,
`get_quant_method` or `embedding` takes the layer, as `layer` or annotated with a layer class;
module-level functions named after one of those taking the layer, `apply_int4_linear(layer, x)`;
weight loaders) when `L` resolves to a quantizable layer (as in DTL001), unless a guard dominates
the read (each guard it reads: docs/quantizability.md, "What DTL003 counts as a guard").
Not reported either: a read in a test module (`test_*.py`, `*_test.py`, `conftest.py`, a file
under a `test`/`tests` folder: a test builds its layer with the config it asserts on); a read in
a function a later `def` of the same name in the same class or module body replaces (it never
runs); the fallback arm of `if hasattr(self.X, "m"):` when every construction of `self.X` in its
class builds a class defining method `m` (that arm never runs); a read of `self.X` under one
outcome of a module-level flag (`_is_cpu = is_cpu()`, bound once) when `self.X` is built with a
config only under the other (`if _is_cpu: self.X = ReplicatedLinear(..., quant_config=...)`,
else `nn.Linear`); a read on `self` (`self.weight`, `self.proj.weight`) in a class whose every construction
in the project is in sight and leaves the layer without a config (analysis/storage/constructions.py: a
`ReplicatedLinear` subclass built only with `quant_config=None`); a read of a parameter of a private function or method (`_f`) when every
call of it in the file passes a layer that is never quantized (the engine's verdict on the
argument, followed through callers that pass their own parameter on); a wrapper's `weight`
property returning its base layer's `.weight` (it raises exactly when the base has none, so
`hasattr(wrapper, "weight")` stays right); and a read that only feeds a cast's or an
allocation's dtype (`x.to(L.weight.dtype)`, `torch.empty(n, dtype=L.weight.dtype)`, directly,
through a local alias or `typing.cast`, returned by a dtype getter, or a weight handed to a
function that casts with it), which DTL001 and DTL002 report, and whose fixes handle a missing
`.weight` too. The message names the storages that have no `.weight`.

## Why is this bad?
Not every quantized layer has a `.weight`: {{DTL003.storages}}

## Example
```python
if self.kv_b_proj.weight.dtype == torch.float8_e4m3fn:
    q = q.to(torch.float8_e4m3fn)
```

## Use instead
```python
weight = getattr(self.kv_b_proj, "weight", None)
if weight is not None and weight.dtype == torch.float8_e4m3fn:
    q = q.to(torch.float8_e4m3fn)
```
or, for the dtype an activation needs, the shared helper
(`get_layer_input_dtype(self.kv_b_proj, fp8_input)`), which handles a missing `.weight`.

## Which backends
A read is reported only when the storage model (dtype_lint/analysis/storage/storage_model.py) finds a
backend that can reach the layer and registers no `weight` (`qweight`, `weight_packed`) or deletes
it; the message names them with their lines. A layer type every backend keeps `.weight` for (an
embedding in a tree where no backend quantizes embeddings that way) is not reported.

## Fix safety
No automatic fix: what the code should do for a layer without `.weight` (skip a fast path, use
`{{model_dtype}}`, refuse the configuration) depends on what it reads the weight for. The finding
names the layer and how it resolved.

## Known limits
The guards below are trusted; each can hide a real read where the trust is wrong
(benchmarks/accuracy/triage/rules-dtl003-005.md judges every finding on vLLM 0.27.1 and 0.33.0).
- `hasattr` guards are recognised on the same layer expression (`hasattr(self.kv_b_proj,
  "weight")`), not on an alias of it.
- A backend check trusts the path with every storage of the backends it names: a path for
  {{no_weight_checked}} or for an fp8 method that uses the
  fp8 weight as a dense one is not reported. A predicate imported from another module is read
  with its unquantized checks and `quant_config is None` tests only.
- A check the rule cannot read is trusted whatever it checks (a shape, a device) as long as it is
  handed the layer.
- A dormant path is trusted whatever the code that turns it on checks first, and a subclass in
  another file that sets the attribute is not seen.
- A guard in the callers is read in the file only: a public function or method also called from
  another module, or by name (`getattr(obj, name)()`), without the guard is not reported.
  Callers are followed up to three levels.
- Storage code is recognised by its methods' names and the layer they take: a model class with an
  `apply(self, x, layer)` method, or a function `apply_*(layer, ...)`, is exempt like a kernel.
- A quant-method check (and a `hasattr` in a flag's value) counts whichever layer it names, and a
  flag counts when every assignment of it (in this class's methods, not its bases') is such a
  check: a flag also set elsewhere is not seen, except an attribute its class only sets to a
  false constant, whose stores elsewhere in the same file decide (on any object: stores in
  another module are not seen). A kernel type tested on an object the layer's quant method or
  scheme holds (`isinstance(L.quant_method.kernel, K)`) counts as a backend check for K, a
  concrete class.
- A parameter flag (`if gather_input:`) is read from the calls in the file that pass it: a call
  in another module passing True is not seen, nor a positional pass to `forward` through an object
  whose class does not resolve.
- A list of flags handed on element by element (`fused = [supports(l) for l in layers]`, then
  `for f, layer in zip(fused, layers): run(layer, f)`) is not read.
- Reads in a quantizable layer class's own methods (`self.weight`) are reported like any other;
  storage code is otherwise recognised by name (`exempt-functions`) and class (`exempt-classes`).
- The `.weight` of a layer reached through a container (`self.layers[i].weight`) resolves only
  when the container's element type is known.
- A class's constructions are followed only when it is built in at most 8 modules (its own
  and those importing it or its module), never subclassed there, and always called (a class
  registered as a value, `EntryClass = C`, or built by `C.from_config(...)` is not followed); a
  layer stored from a constructor parameter (`self.up_proj = up_proj`) is judged by the
  parameter's annotation, not by what the constructions pass for it.
- A method with no caller in the project is still judged: the `get_embed_and_head` of a
  speculative draft class, which the engine calls only on the target model, is reported like
  the target's (the call's receiver does not resolve, so the index cannot tell them apart).
- A test module is recognised by its path only; model code under a `test` folder is not
  checked.

## Default
Off: an opt-in rule, run only when `select` names its code (`--select DTL003`, `extend-select`,
`ALL`; not a prefix such as `DTL`). Measured with zero configuration against the verdicts of
benchmarks/accuracy/triage/rules-dtl003-005.md (every finding removed since that triage was judged FALSE there;
none was added): on the trees it was developed on, vLLM 0.27.1 33 of 34 TRUE (97%) and 0.33.0 18
of 19 (95%); on the others, vLLM 0.30.0 17 of 19 (89%), aphrodite-engine 0.24.1 16 of 18 (89%),
sglang 0.5.23 94 of 135 (70%), vllm-omni 0.30.0 5 of 5, vllm-ascend 0.23.0 0 of 2,
tpu-inference 0.32.0 none (its 17 findings, all FALSE, were in its tests), and vLLM 0.34.0 (held
out, issue #39) 21 of 24 (88%; 21 of 29 before flags set in another method were read): 153 of 203
(75%), below the 95% a default rule needs (benchmarks/accuracy/triage/README.md). Most of what is left: draft
models' `get_embed_and_head` (no caller the index can see), flags built from a constructor
parameter or from a sibling layer's storage, configs restricted by values, and platforms that
admit only backends keeping `.weight` (Known limits).

## Options
The layer-resolution options of DTL001: `preset`, `quantizable`, `exempt-classes`,
`not-quantizable`, `exempt-functions`, `name-heuristics`, `name-patterns`.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.function_walk import in_closure
from dtype_lint.analysis.guard_engine.file_guards import test_module
from dtype_lint.analysis.guard_engine.never_runs import shadowed_definitions
from dtype_lint.analysis.storage.constructions import never_reaches
from dtype_lint.analysis.storage.storage_model import ABSENT
from dtype_lint.analysis.storage.verdicts import why_storage
from dtype_lint.analysis.weight_reads import judged_weight_reads
from dtype_lint.core.findings import Evidence
from dtype_lint.ecosystems.registry import passages
from dtype_lint.rule import FixAvailability, Invalid, Rule, RuleContext, Valid

_HEAD = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


class Attn:
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        self.kv_b_proj = kv_b_proj
"""


class UnguardedWeightAccess(Rule):
    code = "DTL003"
    name = "unguarded-weight-access"
    summary = "`.weight` read on a quantizable layer with no `hasattr`/`getattr` fallback ({{no_weight_short}} have none)"
    default_enabled = False  # opt-in until precise off vLLM: benchmarks/accuracy/triage/README.md
    patterns = (r"\.weight\b", r"getattr\(\s*[^,()]+,(?:\s|#[^\n]*)*[\"']weight[\"']\s*\)")
    facts = frozenset({"candidates", "layers", "flows", "guards", "tree"})
    # Not "on-demand": asked on the reduced tree (a read it judges has a layer verdict), vLLM's
    # model files said yes for about half of them, and the question cost more than the whole
    # parses it spared (benchmarks/results/select-all/on-demand.md).
    fix_availability = FixAvailability.NONE
    fix_note = "what to do without `.weight` is a human choice"

    VALID = [
        Valid(_HEAD + "    def f(self, q):\n        if hasattr(self.kv_b_proj, \"weight\"):\n"
              "            if self.kv_b_proj.weight.dtype == torch.float8_e4m3fn:\n                q = q.float()\n"
              "        return q\n"),
        Valid(_HEAD + "    def f(self, q):\n        if not hasattr(self.kv_b_proj, \"weight\"):\n            return q\n"
              "        for _ in range(2):\n            q = q * self.kv_b_proj.weight.shape[0]\n        return q\n"),
        Valid(_HEAD + "    def f(self):\n        return self.kv_b_proj.weight.shape if hasattr(self.kv_b_proj, \"weight\") else None\n"),
        Valid(_HEAD + "    def f(self):\n        w = getattr(self.kv_b_proj, \"weight\", None)\n"
              "        return w is not None and w.dtype == torch.int8\n"),
        Valid(_HEAD + "    def f(self, q):\n        try:\n            n = self.kv_b_proj.weight.shape[0]\n"
              "        except AttributeError:\n            n = 0\n        return n\n"),
        Valid(_HEAD + "    def f(self):\n        return hasattr(self.kv_b_proj, \"weight\") and self.kv_b_proj.weight.is_contiguous()\n"),
        # A flag only ever set from an unquantized check, through a local `&=`.
        Valid("""
            from vllm.model_executor.layers.linear import ReplicatedLinear, UnquantizedLinearMethod
            class Gate(ReplicatedLinear):
                def __init__(self, n, quant_config):
                    super().__init__(n, n, quant_config=quant_config)
                    self.is_unquantized = isinstance(self.quant_method, UnquantizedLinearMethod)
                    fast = n % 8 == 0
                    fast &= self.is_unquantized
                    self.use_fast = fast
                def forward(self, x):
                    if not self.use_fast:
                        return super().forward(x)
                    return x @ self.weight.t()
            """),
        # A predicate imported or defined in the module, through a flag and `is not None`.
        Valid(_HEAD + "def ready(layer):\n    weight = getattr(layer, 'weight', None)\n"
              "    if weight is None or weight.dtype != torch.bfloat16:\n        return False\n    return True\n"
              "def prep(layer):\n    w = getattr(layer, 'weight', None)\n    if w is None:\n        return None\n"
              "    return w.abs().amax()\n"
              "class Block(Attn):\n    def __init__(self, kv_b_proj: ColumnParallelLinear):\n"
              "        super().__init__(kv_b_proj)\n        self.fast = ready(self.kv_b_proj)\n"
              "        self._scale = None\n    def load(self):\n        self._scale = prep(self.kv_b_proj)\n"
              "    def forward(self, x):\n        if self.fast:\n            x = x @ self.kv_b_proj.weight.t()\n"
              "        if self._scale is not None:\n            x = x * self.kv_b_proj.weight.shape[0]\n        return x\n"),
        # A private helper whose every caller passes a layer built without a quantization config.
        Valid("from vllm.model_executor.layers.linear import ReplicatedLinear\n"
              "def _res(proj: ReplicatedLinear, x):\n    return x @ proj.weight.t()\n"
              "class Block:\n    def __init__(self):\n        self.res_proj = ReplicatedLinear(8, 1, quant_config=None)\n"
              "    def forward(self, x):\n        return _res(self.res_proj, x)\n"),
        # An annotated attribute: its construction (here without a config) says more than `X | None`.
        Valid("from vllm.model_executor.layers.linear import ReplicatedLinear\n"
              "class Pool(ReplicatedLinear):\n    pass\n"
              "class Block:\n    def __init__(self):\n"
              "        self.pooler: Pool | None = Pool(8, 8, quant_config=None)\n"
              "    def _cols(self, layer: Pool, x):\n        return x @ layer.weight.t()\n"
              "    def forward(self, x):\n        return self.pooler.weight.sum() + self._cols(self.pooler, x)\n"),
        # A wrapper forwarding its base layer's `.weight`.
        Valid(_HEAD + "class WithLoRA:\n    def __init__(self, base: ColumnParallelLinear):\n        self.base = base\n"
              "    @property\n    def weight(self):\n        return self.base.weight\n"),
        # A layer class that refuses quantization in its __init__.
        Valid("import torch\nfrom vllm.model_executor.layers.linear import QKVParallelLinear, UnquantizedLinearMethod\n"
              "class Fused(QKVParallelLinear):\n    def __init__(self, quant_config):\n"
              "        super().__init__(8, 2, 4, quant_config=quant_config)\n"
              "        if not isinstance(self.quant_method, UnquantizedLinearMethod):\n"
              "            raise ValueError('cannot be quantized')\n"
              "    def forward(self, x):\n        return torch.nn.functional.linear(x, self.weight)\n"),
        # Storage code owns the format.
        Valid(_HEAD + "    def process_weights_after_loading(self):\n        self.kv_b_proj.weight.data.mul_(2)\n"),
        # DTL001's site: its fix handles the missing `.weight`.
        Valid(_HEAD + "    def f(self, x):\n        w = self.kv_b_proj.weight.dtype\n        return x.to(w)\n",
              ),
        # Plain torch layers always have `.weight`.
        Valid("from torch import nn\nclass V(nn.Module):\n    def __init__(self):\n        self.proj = nn.Linear(2, 2)\n"
              "    def f(self):\n        return self.proj.weight.t()\n"),
    ]
    INVALID = [
        Invalid(_HEAD + "    def f(self, q):\n        if self.kv_b_proj.weight.dtype == torch.float8_e4m3fn:\n"
                "            q = q.float()\n        return q\n",
                message_contains=("self.kv_b_proj.weight", "registers `qweight`, not `weight`")),
        Invalid(_HEAD + "    def f(self, x):\n        return torch.matmul(x, self.kv_b_proj.weight.t())\n"),
        Invalid(_HEAD + "    def f(self):\n        return getattr(self.kv_b_proj, \"weight\").shape\n"),
        # A guard on another layer does not count; the early return comes after the read.
        Invalid(_HEAD + "    def f(self, other, q):\n        if hasattr(other, \"weight\"):\n"
                "            q = q * self.kv_b_proj.weight.shape[0]\n        return q\n"),
        # A flag that is also set from something else says nothing about the quant method.
        Invalid("from vllm.model_executor.layers.linear import ReplicatedLinear, UnquantizedLinearMethod\n"
                "class Gate(ReplicatedLinear):\n    def __init__(self, n, quant_config):\n"
                "        super().__init__(n, n, quant_config=quant_config)\n"
                "        self.use_fast = isinstance(self.quant_method, UnquantizedLinearMethod)\n"
                "    def enable(self):\n        self.use_fast = True\n"
                "    def forward(self, x):\n        if self.use_fast:\n            return x @ self.weight.t()\n"
                "        return super().forward(x)\n"),
        Invalid(_HEAD + "    def f(self, q):\n        n = self.kv_b_proj.weight.shape[0]\n"
                "        if not hasattr(self.kv_b_proj, \"weight\"):\n            return q\n        return q * n\n"),
    ]

    def check(self, ctx: RuleContext) -> None:
        if test_module(ctx.source.path):
            return  # a test reads the storage of the config it builds on purpose
        shadowed = None
        for function, node, layer in judged_weight_reads(ctx):
            if shadowed is None:
                shadowed = shadowed_definitions(ctx.tree)
            if id(function.fn) in shadowed:
                continue  # a later `def` of the same name replaces this one: it never runs
            # The engine's verdict also drops reads dominated by a check that proves the layer
            # unquantized (a quant-method dispatch, a storage test).
            verdict = ctx.layer_verdict(layer, function, site=node, need=ABSENT)
            if verdict is None or ctx.guards.weight_present(node, function, layer):
                continue
            if never_reaches(ctx, node, layer, function):
                continue  # the constructions that run with this read leave the layer unquantized
            confidence, evidence = verdict
            text = ast.unparse(layer)
            # A short first line (Ruff's style); which backends drop `.weight`, and the remedy,
            # go in the evidence. `__init__` is called out: it is not a forward path (but a closure
            # defined there, a hook or a callback, runs later).
            where = ("" if function.fn.name != "__init__" else
                     " (in a closure defined in `__init__`)" if in_closure(function.fn, function.parents, node)
                     else " (in `__init__`)")
            # The storages without `.weight` where the evidence names no backend: an ecosystem's words.
            backends = why_storage(evidence, passages()["no_weight"])
            remedy = Evidence(f"{backends}: AttributeError there; guard the read with "
                              f"`hasattr({text}, \"weight\")` or read `getattr({text}, \"weight\", None)`",
                              ctx.source.path, node.lineno)
            first = backends.split("; ")[0] + (" (and more)" if "; " in backends else "")
            ctx.report(node, f"`{text}.weight` read outside storage code{where} with no `hasattr`/`getattr` "
                             f"fallback: {first}",
                       confidence=confidence, evidence=(remedy, *evidence),
                       no_fix_reason="what a layer without `.weight` should do here depends on why it is read")
