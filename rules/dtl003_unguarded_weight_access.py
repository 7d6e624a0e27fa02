"""DTL003 unguarded-weight-access: `.weight` is read on a quantizable layer without a fallback.

## What it does
Flags reads of `L.weight` (and `getattr(L, "weight")` without a default) in forward-path code —
any function that is not storage code: quant methods and weight kernels (a class whose
`apply`, `apply_weights`, `create_weights`, `process_weights_after_loading`, `get_quant_method`
or `embedding` takes the layer, as a `layer` parameter or one annotated with a layer class:
`apply(self, x, linear: LinearBase)`), module-level functions named after one of those and
taking the layer (`apply_int4_linear(layer, x)`), weight loaders, `create_weights` and
`process_weights_after_loading` are exempt — when `L` resolves to a quantizable layer (the same
resolution as DTL001: a configured class or a subclass found across the scanned files, or a layer
constructed with `quant_config=`), unless a guard dominates the read:
- an enclosing `if hasattr(L, "weight"):` (or its `else` after `if not hasattr(...)`), also as
  one operand of an `and`;
- a conditional expression `L.weight... if hasattr(L, "weight") else ...`;
- an earlier `if not hasattr(L, "weight"): return` (or `raise`, `continue`, `break`) in the same
  or an enclosing block;
- an enclosing `try:` with an `except AttributeError` (or a bare/`Exception` handler);
- a backend check, used as any of the guards above: the layer's quant method tested against
  named classes, `isinstance(L.quant_method, UnquantizedLinearMethod)` or `isinstance(
  L.quant_method, Fp8LinearMethod)` (or `type(...) is`, or on `getattr(L, "quant_method",
  None)`), the quantization config tested against named classes or None (`isinstance(
  quant_config, Fp8Config)`, `quant_config is None`; the names of `config-params`). An unquantized
  method or no config leaves the plain `.weight`; a path that runs only for formats it names was
  written for them. A class that every backend shares names none (a configured storage-code root
  such as `LinearMethodBase` or `QuantizationConfig`, or a class declaring an abstract method); a
  class outside the scanned files is taken as a backend unless configuration names it a root;
- a check the rule cannot read on the layer itself: a method, of an object whose class does not
  resolve, handed the layer that is read (`self.fused_kernel.supports(self.o_proj)` with
  `fused_kernel` given by the caller);
- a predicate: a function (of the module, nested in the function, a method of the class, or
  imported from the project) whose every true or non-None result is itself such a check or is
  returned only after one (`if weight is None: return False` with `weight = getattr(L,
  "weight", None)`);
- a flag: a name or `self.X` attribute only ever set, in the function or in any method of the
  class, to such a check, a predicate's result, `getattr(L, "weight", None)`, `hasattr(...)`, a
  value assigned only where such a check holds, or false (`self.is_unquantized = isinstance(...)`,
  `self.use_fast = self.is_unquantized and ...`, `ok &= self.is_unquantized`, `self._scale =
  prep(layer)`), tested as `flag`, `flag is not None`, or in the negations above;
- for `self.weight` in a layer class's own methods: an `__init__` that raises (or asserts) unless
  its quant method is unquantized (or of a backend it names);
- a dormant path: a test that can only be true once `self.X` changes, where the class and its
  bases only ever set `self.X` to one falsy constant in their methods (`self.overlap_max_tokens =
  0`, `self.kernel = None`) and no statement of the file stores anything else into an attribute
  of that name: `if 0 < n <= self.overlap_max_tokens:`, `if self.kernel is not None:`. Whatever
  turns the path on lives elsewhere;
- a guard in the callers: a function or method (not `forward`, a dunder or a decorated one)
  whose every use in the file is a call dominated by one of these guards in the calling function,
  the callee's flags read on the object it is called on (`if self.self_attn.fast_decode:
  self.self_attn.forward_decode(x)`);
- `w = getattr(L, "weight", None)` checked for None is not a `.weight` read at all.
Not reported either: a read of a parameter of a private function or method (`_f`) when every
call of it in the file passes a layer that is never quantized (the engine's verdict on the
argument, followed through callers that pass their own parameter on); a wrapper's `weight`
property returning its base layer's `.weight` (it raises exactly when the base has none, so
`hasattr(wrapper, "weight")` stays right); and a read that only feeds a cast's or an
allocation's dtype (`x.to(L.weight.dtype)`, `torch.empty(n, dtype=L.weight.dtype)`, directly,
through a local alias or `typing.cast`, returned by a dtype getter, or a weight handed to a
function that casts with it), which DTL001 and DTL002 report, and whose fixes handle a missing
`.weight` too. The message names the storages that have no `.weight`.

## Why is this bad?
Not every quantized layer has a `.weight`: AWQ and GPTQ layers store `qweight`, `qzeros` and
`scales`; compressed-tensors WNA16 stores `weight_packed` (linear layers and embeddings); GGUF
stores `qweight`. On those, `layer.weight` raises `AttributeError` (`nn.Module.__getattr__`).
vLLM's MLA crashed that way on AWQ/GPTQ DeepSeek checkpoints (PR #34695), in code that read
`self.kv_b_proj.weight.dtype` to choose a cast.

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
A read is reported only when the storage model (dtype_lint/analysis/storage_model.py) finds a
backend that can reach the layer and registers no `weight` (`qweight`, `weight_packed`) or deletes
it; the message names them with their lines. A layer type every backend keeps `.weight` for (an
embedding in a tree where no backend quantizes embeddings that way) is not reported.

## Fix safety
No automatic fix: what the code should do for a layer without `.weight` (skip a fast path, use
`params_dtype`, refuse the configuration) depends on what it reads the weight for. The finding
names the layer and how it resolved.

## Known limits
The guards below are trusted; each can hide a real read (a false negative) where the trust is
wrong. docs/triage/rules-dtl003-005.md judges every finding on vLLM 0.27.1 (38 of 39 true) and
0.33.0 (20 of 21 true; the false one is a path closed by configuration values, which the rule
cannot read).
- `hasattr` guards are recognised on the same layer expression (`hasattr(self.kv_b_proj,
  "weight")`), not on an alias of it.
- A backend check trusts the path with every storage of the backends it names: a path for
  compressed-tensors (whose WNA16 layers have no `.weight`) or for an fp8 method that uses the
  fp8 weight as a dense one is not reported. A predicate imported from another module is read
  with its unquantized checks and `quant_config is None` tests only.
- A check the rule cannot read is trusted whatever it checks (a shape, a device) as long as it is
  handed the layer.
- A dormant path is trusted whatever the code that turns it on checks first, and a subclass in
  another file that sets the attribute is not seen.
- A guard in the callers is read in the file only: a public function or method also called from
  another module, or by name (`getattr(obj, name)()`), without the guard is not reported.
  Callers are followed one level.
- Storage code is recognised by its methods' names and the layer they take: a model class with an
  `apply(self, x, layer)` method, or a function `apply_*(layer, ...)`, is exempt like a kernel.
- A quant-method check (and a `hasattr` in a flag's value) counts whichever layer it names, and a
  flag counts when every assignment of it (in this class's methods, not its bases') is such a
  check: a flag also set elsewhere is not seen. A kernel type tested on a quant method's
  attribute (`isinstance(method.kernel, ...)`) is not a backend check.
- Reads in a class's own methods (`self.weight` inside a layer class) are reported like any other
  when the class is quantizable.
- Storage code is otherwise recognised by name (`exempt-functions`) and class (`exempt-classes`); a
  helper that prepares weights under another name is checked as forward-path code.
- The `.weight` of a layer reached through a container (`self.layers[i].weight`) resolves only
  when the container's element type is known.

## Default
Off: an opt-in rule. It runs only when `select` names its code (`--select DTL003`, or
`extend-select`, or `ALL`); a prefix such as `DTL` does not turn it on. Measured on trees it was not developed on (sglang 0.5.23: 16 of a seeded sample of 39 TRUE, 41%;
aphrodite-engine 0.24.1 unjudged), it is below the 95% bar.
It becomes a default rule once it is precise there (docs/triage/README.md).

## Options
The layer-resolution options of DTL001: `preset`, `quantizable`, `exempt-classes`,
`not-quantizable`, `exempt-functions`, `name-heuristics`, `name-patterns`.
"""

from __future__ import annotations

import ast
import functools
import os

from dtype_lint.analysis.storage_model import ABSENT, why_storage
from dtype_lint.analysis.dormant import dormant_attributes, enabled_in_file, truth
from dtype_lint.analysis.class_index import dotted
from dtype_lint.analysis.layers import NONE
from dtype_lint.analysis.recognisers import cast_dtype_args
from dtype_lint.rule import Invalid, Rule, RuleContext, Valid

_HEAD = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


class Attn:
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        self.kv_b_proj = kv_b_proj
"""
# Kernel plumbing: a kernel class whose `apply` takes the layer by annotation, and a module-level
# `apply_<format>_linear(layer, ...)`, own the storage they read (storage code, for every rule).
_KERNEL = """\
import torch
from vllm.model_executor.layers.linear import LinearBase


class FusedReduceKernel:
    def can_run(self, linear: LinearBase) -> bool:
        return linear.weight.ndim == 2 and linear.weight.is_contiguous()

    def apply(self, x: torch.Tensor, linear: LinearBase) -> torch.Tensor:
        return torch.mm(x, linear.weight.t())


def apply_int4_linear(layer: LinearBase, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.int4.gemm(x, layer.weight, layer.weight_scale)
"""
# The same reads in a class and a function that are not storage code by their methods or names.
_NOT_KERNEL = """\
import torch
from vllm.model_executor.layers.linear import LinearBase


class Projector:
    def run(self, x: torch.Tensor, linear: LinearBase) -> torch.Tensor:
        return torch.mm(x, linear.weight.t())


def project(layer: LinearBase, x: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, layer.weight.t())
"""
# A capability check the rule cannot read, on the very layer read: the kernel object arrives from
# the caller, its class unknown.
_OPAQUE = """\
import torch
from vllm.model_executor.layers.linear import RowParallelLinear


class Attention(torch.nn.Module):
    def __init__(self, hidden: int, quant_config, fused_kernel):
        super().__init__()
        self.o_proj = RowParallelLinear(hidden, hidden, quant_config=quant_config)
        self.fused_kernel = fused_kernel

    def project(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused_kernel is not None and self.fused_kernel.supports(self.o_proj):
            return self.fused_kernel(x, self.o_proj.weight)
        return self.o_proj(x)[0]
"""
# The same call, but it does not look at the layer.
_OPAQUE_ELSEWHERE = _OPAQUE.replace("self.fused_kernel.supports(self.o_proj)", "self.fused_kernel.ready()")
# A dormant path: the class only ever sets `overlap_max_tokens` to 0; another module turns it on.
_DORMANT = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


class DeltaAttention(torch.nn.Module):
    def __init__(self, hidden: int, quant_config):
        super().__init__()
        self.in_proj = ColumnParallelLinear(hidden, 4 * hidden, quant_config=quant_config)
        self.overlap_max_tokens = 0
        self.side_stream = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        if 0 < n <= self.overlap_max_tokens and self.side_stream is not None:
            return torch.ops.overlap.gemm(x, self.in_proj.weight, self.side_stream)
        return self.in_proj(x)[0]
"""
# The class turns it on itself: the path is live, and nothing checks the quant method.
_LIVE = _DORMANT + """\

    def enable_overlap(self, stream) -> None:
        self.side_stream = stream
        self.overlap_max_tokens = 256
"""
# Backend-specific paths: a flag from a function of the quant config true only for no config or a
# named config, checked by the caller before it calls the fast path; a named quant method.
_BACKENDS = """\
import torch
from vllm.model_executor.layers.linear import LinearMethodBase, MergedColumnParallelLinear, QKVParallelLinear
from vllm.model_executor.layers.quantization.fp8 import Fp8Config, Fp8LinearMethod


def _fast_decode_supported(quant_config) -> bool:
    if torch.cuda.device_count() != 1 or not (quant_config is None or isinstance(quant_config, Fp8Config)):
        return False
    return True


class Attention(torch.nn.Module):
    def __init__(self, hidden: int, quant_config):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(hidden, 64, 8, quant_config=quant_config)
        self.fast_decode = _fast_decode_supported(quant_config)

    def forward_decode(self, x: torch.Tensor) -> torch.Tensor:
        w = self.qkv_proj.weight
        return torch.ops.decode.qkv(x, w, getattr(self.qkv_proj, "weight_scale", None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.qkv_proj(x)[0]


class DecoderLayer(torch.nn.Module):
    def __init__(self, hidden: int, quant_config):
        super().__init__()
        self.self_attn = Attention(hidden, quant_config)
        self.gate_up_proj = MergedColumnParallelLinear(hidden, [hidden, hidden], quant_config=quant_config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.self_attn.fast_decode:
            return self.self_attn.forward_decode(x)
        return self.self_attn(x)

    def block_shape_ok(self) -> bool:
        if not isinstance(self.gate_up_proj.quant_method, Fp8LinearMethod):
            return False
        return self.gate_up_proj.weight.shape[0] % 128 == 0
"""
# An unguarded call of the fast path, and a check naming the base every linear method shares.
_BACKENDS_BROKEN = _BACKENDS.replace(
    "        return self.self_attn(x)\n",
    "        return self.self_attn(x)\n\n    def warmup(self, x: torch.Tensor) -> torch.Tensor:\n"
    "        return self.self_attn.forward_decode(x)\n").replace(
    "isinstance(self.gate_up_proj.quant_method, Fp8LinearMethod)",
    "isinstance(self.gate_up_proj.quant_method, LinearMethodBase)")
_NO_WEIGHT = "AWQ/GPTQ (`qweight`), compressed-tensors WNA16 (`weight_packed`) and GGUF layers have no `.weight`"
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_DTYPE_KEYWORDS = ("dtype", "out_dtype", "output_dtype")


class UnguardedWeightAccess(Rule):
    code = "DTL003"
    name = "unguarded-weight-access"
    summary = "`.weight` read on a quantizable layer with no `hasattr`/`getattr` fallback (AWQ/GPTQ have none)"
    default_enabled = False  # opt-in until precise off vLLM: docs/triage/README.md
    patterns = (r"\.weight\b", r"getattr\(\s*[^,()]+,(?:\s|#[^\n]*)*[\"']weight[\"']\s*\)")
    facts = frozenset({"candidates", "functions", "layers", "flows"})

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
        Valid("from vllm.model_executor.layers.linear import ReplicatedLinear, UnquantizedLinearMethod\n"
              "class Gate(ReplicatedLinear):\n    def __init__(self, n, quant_config):\n"
              "        super().__init__(n, n, quant_config=quant_config)\n"
              "        self.is_unquantized = isinstance(self.quant_method, UnquantizedLinearMethod)\n"
              "        fast = n % 8 == 0\n        fast &= self.is_unquantized\n        self.use_fast = fast\n"
              "    def forward(self, x):\n        if not self.use_fast:\n            return super().forward(x)\n"
              "        return x @ self.weight.t()\n"),
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
        Valid(_KERNEL),
        Valid(_OPAQUE),
        Valid(_DORMANT),
        Valid(_BACKENDS),
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
        Invalid(_NOT_KERNEL, count=2),
        Invalid(_OPAQUE_ELSEWHERE, message_contains=("self.o_proj.weight",)),
        Invalid(_LIVE, message_contains=("self.in_proj.weight",)),
        # `forward_decode` is also called unguarded; `LinearMethodBase` names no backend.
        Invalid(_BACKENDS_BROKEN, count=2),
    ]

    def check(self, ctx: RuleContext) -> None:
        # What follows is read only for the few reads on a quantizable layer, not for every file.
        class_flags = _ClassFlags(ctx.tree, lambda: _imported_predicates(ctx),
                                  _Backends(ctx.config.all_config_params, _concrete_classes(ctx)))
        by_name = _CallSites(ctx)
        late = _LateGuards(ctx, class_flags)
        for c in ctx.candidates:
            flags = None  # the function's guards, read only once one of its reads is on a quantizable layer
            for node in c.nodes:
                layer = _weight_read(node)
                if layer is None:
                    continue
                if _feeds_dtype_site(node, c) or _flows_on(ctx, node, c):
                    continue
                if c.fn.name == "weight" and isinstance(c.parents.get(id(node)), ast.Return):
                    continue  # a wrapper's `weight` property forwarding its base's: raises exactly as the base
                # The engine's verdict also drops reads dominated by a check that proves the layer
                # unquantized (a quant-method dispatch, a storage test).
                verdict = ctx.layer_verdict(layer, c, site=node, need=ABSENT)
                if verdict is None:
                    continue
                if flags is None:
                    known = class_flags.of(c.fn)
                    flags = known.with_flags(_function_flags(c.fn, known))
                if _guarded(node, layer, c.parents, flags):
                    continue
                if "self" in flags.flags and isinstance(layer, ast.Name) and layer.id == c.scope.self_name:
                    continue  # a layer class whose __init__ refuses quantization
                if _callers_pass_unquantized(ctx, c, layer, by_name):
                    continue
                if late.guarded(c, flags, node, layer):
                    continue
                confidence, evidence = verdict
                text = ast.unparse(layer)
                ctx.report(node, f"`{text}.weight` is read with no `hasattr`/`getattr` fallback; {why_storage(evidence, _NO_WEIGHT)}, "
                           f"so this raises AttributeError on them: guard it with `hasattr({text}, \"weight\")` "
                           f"or read `getattr({text}, \"weight\", None)`",
                           scope=c.scope_name, confidence=confidence, evidence=evidence,
                           no_fix_reason="what a layer without `.weight` should do here depends on why it is read")


def _unresolved_method(ctx: RuleContext, call: ast.Call, c) -> bool:
    """`recv.m(...)` where `recv` is neither `self`/`cls` nor a name this file imports (a module's
    functions can be read), and its class does not resolve (`self.kernel = None` in `__init__`,
    set by other code)."""
    f = call.func
    if not isinstance(f, ast.Attribute):
        return False
    recv = f.value
    root = recv
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(recv, ast.Name) and (recv.id in ("self", "cls") or recv.id in ctx.imports):
        return False
    if isinstance(root, ast.Name) and root.id in ctx.imports:
        return False  # `pkg.mod.f(...)`: a module's function
    return ctx.layers.resolve(recv, c.scope).qualname is None


_PREDICATES: dict[tuple, frozenset[str]] = {}  # (path, mtime, size) -> the module's predicate functions


def _imported_predicates(ctx: RuleContext) -> frozenset[str]:
    """Names this file imports that are predicates in their own (project) module, e.g.
    `from vllm.model_executor.layers.hpc.gated_mla import hpc_gated_mla_supported`."""
    index = ctx.project.index
    out = set()
    for local, target in ctx.imports.items():
        module, _, name = index.canonical(target).rpartition(".")
        header = index.modules.get(module)
        if header is None or name in header.classes:
            continue
        if name in _module_predicates(header.path, ctx.project.load_file, ctx.config.all_config_params):
            out.add(local)
    return frozenset(out)


def _module_predicates(path: str, load_file, configs: tuple[str, ...]) -> frozenset[str]:
    try:
        st = os.stat(path)
        key = (path, st.st_mtime_ns, st.st_size, configs)
    except OSError:
        return frozenset()
    if key not in _PREDICATES:
        text = load_file(path) if load_file is not None else None
        try:
            tree = ast.parse(text) if text else None
        except (SyntaxError, ValueError, RecursionError):
            tree = None
        _PREDICATES[key] = frozenset(
            n.name for n in (tree.body if tree else []) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and _is_predicate(n, _Known(backends=_Backends(configs))))
    return _PREDICATES[key]


class _LateGuards:
    """The guards that cost more to see, looked for only where a read would be reported: a check
    the rule cannot read, a dormant path (dtype_lint/analysis/dormant.py), a guard in every caller."""

    def __init__(self, ctx: RuleContext, class_flags: "_ClassFlags"):
        self.ctx = ctx
        self.callers = _CallerGuards(ctx, class_flags)
        self._enabled: frozenset[str] | None = None
        self._at_read: dict[int, _Known] = {}

    def guarded(self, c, flags: "_Known", node: ast.AST, layer: ast.expr) -> bool:
        known = self._at_read.get(id(c.fn))
        if known is None:
            known = self._at_read[id(c.fn)] = flags.at_read(
                lambda call: _unresolved_method(self.ctx, call, c), self._dormant(c))
        return _guarded(node, layer, c.parents, known) or self.callers.every_call_guarded(c)

    def _dormant(self, c) -> dict[str, object]:
        if not (c.class_qualname and c.scope.self_name):
            return {}
        if self._enabled is None:
            self._enabled = enabled_in_file(self.ctx.tree)
        found = dormant_attributes(self.ctx.project, c.class_qualname, self._enabled)
        return {f"{c.scope.self_name}.{a}": v for a, v in found.items()}


_NO_LAYER = ast.Name(id="<no layer>")  # a guard in a caller speaks of no particular layer


class _CallerGuards:
    """Guards in the callers: a function or method whose every use in its file is a call that a
    guard dominates in the calling function (`if self.attn.fast_decode: self.attn.forward_decode(
    ...)`, with `fast_decode` a flag of the callee's class, read on the object called)."""

    def __init__(self, ctx: RuleContext, class_flags: "_ClassFlags"):
        self.ctx, self.class_flags = ctx, class_flags
        self._memo: dict[int, bool] = {}
        self._parents: dict[int, ast.AST] | None = None

    def _parent_map(self) -> dict[int, ast.AST]:
        if self._parents is None:
            self._parents = {id(child): node for node in ast.walk(self.ctx.tree) for child in ast.iter_child_nodes(node)}
        return self._parents

    def every_call_guarded(self, c) -> bool:
        if id(c.fn) not in self._memo:
            self._memo[id(c.fn)] = self._decide(c)
        return self._memo[id(c.fn)]

    def _decide(self, c) -> bool:
        fn = c.fn
        method = c.class_qualname is not None
        # Called implicitly (`module(x)` runs `forward`, an attribute read runs a property, a
        # decorator may register it): not every call is in sight.
        if fn.name.startswith("__") or fn.name == "forward" or c.scope_name.count(".") > int(method):
            return False
        if any(dotted(d) not in ("staticmethod", "classmethod") for d in fn.decorator_list):
            return False
        parents = self._parent_map()
        uses = [n for n in ast.walk(self.ctx.tree)
                if (isinstance(n, ast.Attribute) and method and n.attr == fn.name)
                or (isinstance(n, ast.Name) and not method and n.id == fn.name and isinstance(n.ctx, ast.Load))]
        calls = 0
        for use in uses:
            call = parents.get(id(use))
            if not (isinstance(call, ast.Call) and call.func is use):
                return False  # handed on as a value: called where the rule cannot see
            caller = self._caller_of(call)
            if caller is None or caller.fn is fn:
                return False
            known = self.class_flags.of(caller.fn)
            known = known.with_flags(_function_flags(caller.fn, known))
            if method:
                receiver = self._receiver_class(use.value, caller)
                if receiver is None:
                    return False  # an object of unknown class: it may be this one
                if c.class_qualname not in self.ctx.layers.index.mro(receiver):
                    continue  # another class's method of the same name
                if not (isinstance(use.value, ast.Name) and use.value.id == caller.scope.self_name):
                    # The callee's flags, read on the object it is called on.
                    theirs = self.class_flags.of(fn).flags
                    known = known.with_flags(f"{ast.unparse(use.value)}.{f[5:]}" for f in theirs
                                             if f.startswith("self."))
            if not _guarded(call, _NO_LAYER, caller.parents, known):
                return False
            calls += 1
        return calls > 0

    def _caller_of(self, call: ast.Call):
        """The innermost function of the file holding the call."""
        best = None
        for o in self.ctx.functions:
            if o.fn.lineno <= call.lineno and call.end_lineno <= o.fn.end_lineno and id(call) in o.parents:
                if best is None or o.fn.lineno > best.fn.lineno:
                    best = o
        return best

    def _receiver_class(self, receiver: ast.expr, caller) -> str | None:
        if isinstance(receiver, ast.Name) and receiver.id == caller.scope.self_name:
            return caller.class_qualname
        return self.ctx.layers.resolve(receiver, caller.scope).qualname


class _CallSites:
    """The calls of each private function or method of this file (`_f(...)`, `self._f(...)`), with
    the candidate function each call is in."""

    def __init__(self, ctx: RuleContext):
        self._ctx = ctx

    @functools.cached_property
    def calls(self) -> dict[str, list[tuple[ast.Call, object]]]:
        calls: dict[str, list[tuple[ast.Call, object]]] = {}
        for c in self._ctx.functions:
            for node in c.nodes:
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.id if isinstance(f, ast.Name) else (
                        f.attr if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                        and f.value.id in ("self", "cls") else None)
                    if name and name.startswith("_") and not name.startswith("__"):
                        calls.setdefault(name, []).append((node, c))
        return calls


def _callers_pass_unquantized(ctx: RuleContext, c, layer: ast.expr, sites: _CallSites, depth: int = 0) -> bool:
    """`layer` is a parameter of a private function (or method) of this file, and every call of it
    here passes a layer that is never quantized (built with `quant_config=None`, say): only those
    calls can reach it, so its annotation's class says too much."""
    if depth > 3 or not isinstance(layer, ast.Name) or layer.id not in c.scope.params:
        return False
    fn = c.fn
    if not fn.name.startswith("_") or fn.name.startswith("__"):
        return False
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    is_method = c.class_qualname is not None and params[:1] in (["self"], ["cls"])
    if is_method:
        params = params[1:]
    calls = sites.calls.get(fn.name, [])
    if not calls:
        return False
    for call, caller in calls:
        arg = next((k.value for k in call.keywords if k.arg == layer.id), None)
        if arg is None and layer.id in params:
            i = params.index(layer.id)
            arg = call.args[i] if i < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:i + 1]) \
                else None
        if arg is None:
            return False
        scope = caller.scope
        if isinstance(arg, ast.Name) and arg.id not in scope.params and arg.id not in scope.assigns:
            # A free variable of a nested function: the enclosing function's local.
            outer = _enclosing(ctx, caller)
            if outer is not None and arg.id in outer.scope.assigns:
                caller, scope = outer, outer.scope
        inst = ctx.layers.resolve(arg, scope)
        known = inst.qualname is not None or inst.config == NONE
        if known and ctx.layers.quantizable(inst, ast.unparse(arg), None, ABSENT) is None:
            continue  # resolved, and never quantized
        if not _callers_pass_unquantized(ctx, caller, arg, sites, depth + 1):
            return False
    return True


def _enclosing(ctx: RuleContext, c):
    """The function of the file that `c`'s function is nested in (the innermost), or None."""
    best = None
    for o in ctx.functions:
        if o.fn is not c.fn and o.fn.lineno < c.fn.lineno and c.fn.end_lineno <= o.fn.end_lineno \
                and any(n is c.fn for n in ast.walk(o.fn)):
            if best is None or o.fn.lineno > best.fn.lineno:
                best = o
    return best


def _weight_read(node: ast.AST) -> ast.expr | None:
    """The layer of `L.weight` (a load) or `getattr(L, "weight")` (no default)."""
    if isinstance(node, ast.Attribute) and node.attr == "weight" and isinstance(node.ctx, ast.Load):
        return node.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 2 and not node.keywords and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == "weight"):
        return node.args[0]
    return None


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a).replace("Store()", "Load()") == ast.dump(b).replace("Store()", "Load()")


class _Known:
    """What guards mean here: `flags`, names and `self.X` attributes that, when true (or not
    None), say the layer has a plain `.weight`; `predicates`, functions whose result is true (not
    None) only then (`supports(layer)` that returns False unless unquantized); `backends`, how
    a backend check reads in this module (see `_backend_check`); at a read,
    `opaque(call)`: the call is a method of an object whose class the engine cannot resolve (a
    check on the layer that the rule cannot read counts as one, see `_opaque_check`), and
    `dormant`: `self.X` text -> the one falsy constant its class ever gives it (dtype_lint/analysis/dormant.py:
    a test true only once other code changes it guards a path the class never takes)."""

    __slots__ = ("flags", "predicates", "backends", "opaque", "dormant")

    def __init__(self, flags: frozenset[str] = frozenset(), predicates: frozenset[str] = frozenset(),
                 backends: "_Backends | None" = None, opaque=None, dormant: dict | None = None):
        self.flags, self.predicates, self.backends = flags, predicates, backends or _NO_BACKENDS
        self.opaque, self.dormant = opaque, dormant or {}

    def with_flags(self, more) -> "_Known":
        return _Known(self.flags | frozenset(more), self.predicates, self.backends, self.opaque, self.dormant)

    def at_read(self, opaque, dormant: dict) -> "_Known":
        """What is known at a read: also the unresolved calls and the dormant attributes there."""
        return _Known(self.flags, self.predicates, self.backends, opaque, dormant)


class _Backends:
    """How a backend check reads in one module: the names of the quantization-config parameters
    (`quant_config`, the preset's `config-params`), and `concrete(name)`: the class is a backend of
    its own, not an abstract base that every backend shares (`LinearMethodBase`,
    `QuantizationConfig`). Without `concrete`, only `Unquantized*` classes are backends."""

    __slots__ = ("configs", "_concrete")

    def __init__(self, configs: tuple[str, ...] = (), concrete=None):
        self.configs, self._concrete = configs, concrete

    def names_backends(self, node: ast.AST) -> bool:
        """`K` or `(K1, K2)`: every class named is a concrete backend."""
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        return bool(elts) and all(self._one(e) for e in elts)

    def _one(self, node: ast.AST) -> bool:
        name = dotted(node)
        if not name:
            return False
        if "Unquantized" in name.rsplit(".", 1)[-1]:
            return True
        return self._concrete is not None and self._concrete(name)


_NO_BACKENDS = _Backends()


def _concrete_classes(ctx: RuleContext):
    """`concrete(name)` for this file: the class, resolved through its imports, is neither a
    configured root of storage code (the preset's `QuantizeMethodBase`, `LinearMethodBase`...) nor
    a class declaring an abstract method (`@abstractmethod`, or a body that only raises
    `NotImplementedError`). A class outside the project is taken as concrete unless configured."""
    index = ctx.project.index

    def concrete(name: str) -> bool:
        q = index.resolve(ctx.source.module, name, ctx.imports)
        if index.configured(q, "exempt") is not None:
            return False
        cf = ctx.project.class_facts(q)
        return cf is None or not any(_abstract(m) for m in cf.methods.values())
    return concrete


def _abstract(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    if any((dotted(d) or "").rsplit(".", 1)[-1] == "abstractmethod" for d in fn.decorator_list):
        return True
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return dotted(exc) == "NotImplementedError"


_NOTHING = _Known()


def _is_hasattr(test: ast.AST, layer: ast.AST | None) -> bool:
    """`hasattr(L, "weight")` (of any layer when `layer` is None: a flag's value)."""
    return (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr"
            and len(test.args) == 2 and isinstance(test.args[1], ast.Constant) and test.args[1].value == "weight"
            and (layer is None or _same(test.args[0], layer)))


def _is_getattr_weight(value: ast.AST) -> bool:
    """`getattr(L, "weight", None)`: true (not None) only when the layer has `.weight`."""
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr"
            and len(value.args) == 3 and isinstance(value.args[1], ast.Constant) and value.args[1].value == "weight"
            and isinstance(value.args[2], ast.Constant) and value.args[2].value is None)


def _quant_method(node: ast.AST) -> bool:
    """`X.quant_method` or `getattr(X, "quant_method", ...)`."""
    if isinstance(node, ast.Attribute) and node.attr == "quant_method":
        return True
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "quant_method")


def _quant_config(node: ast.AST, backends: _Backends) -> bool:
    """A quantization config by its parameter's name: `quant_config`, `self.quant_config`."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name is not None and name in backends.configs


def _backend_check(test: ast.AST, backends: _Backends) -> bool:
    """A test true only for named backends: `isinstance(X.quant_method, K)` (or on `getattr(X,
    "quant_method", None)`, or `type(X.quant_method) is K`) for any class K, `isinstance(
    quant_config, C)`, or `quant_config is None`. An `Unquantized*` method or no config leaves the
    plain `.weight`; a path that runs only for quantization formats it names was written for them
    (their `.weight`, packed or absent, is what its author handles), so any such check is
    trusted."""
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" \
            and len(test.args) == 2:
        return (_quant_method(test.args[0]) or _quant_config(test.args[0], backends)) \
            and backends.names_backends(test.args[1])
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.Eq)):
        left, right = test.left, test.comparators[0]
        if isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "type" \
                and len(left.args) == 1 and _quant_method(left.args[0]):
            return backends.names_backends(right)
        return isinstance(test.ops[0], ast.Is) and _quant_config(left, backends) \
            and isinstance(right, ast.Constant) and right.value is None
    return False


def _none_test(test: ast.AST, op) -> str | None:
    """`X is None` / `X is not None` (op: ast.Is / ast.IsNot) -> the text of X."""
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], op)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        return ast.unparse(test.left)
    return None


def _callee(call: ast.AST) -> str | None:
    if isinstance(call, ast.Call):
        f = call.func
        if isinstance(f, ast.Name):
            return f.id
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("self", "cls"):
            return f"self.{f.attr}"
    return None


def _implies_weight(test: ast.AST, layer: ast.AST | None, known: _Known = _NOTHING) -> bool:
    """`test` true ⇒ the layer has a plain `.weight`: `hasattr(L, "weight")`, an unquantized check
    of a quant method, a flag or a predicate's result (see `_Known`); as the test, one of its
    `and`s, every one of its `or`s, or the negation of a no-weight test."""
    if _is_hasattr(test, layer) or _backend_check(test, known.backends):
        return True
    if known.dormant and truth(test, known.dormant) is False:
        return True  # a dormant path
    if isinstance(test, (ast.Name, ast.Attribute)) and ast.unparse(test) in known.flags:
        return True
    if _none_test(test, ast.IsNot) in known.flags:
        return True
    if _callee(test) in known.predicates or _opaque_check(test, layer, known):
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _implies_no_weight(test.operand, layer, known)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return all(_implies_weight(v, layer, known) for v in test.values)
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(
        _implies_weight(v, layer, known) for v in test.values)


def _opaque_check(test: ast.AST, layer: ast.AST | None, known: _Known) -> bool:
    """`obj.supports(L)`: a method, of an object whose class the engine cannot resolve, handed the
    very layer that is read. The rule cannot read what it checks; a test on the layer itself,
    written by someone who knew which layers take this path, is trusted as a guard (a predicate
    the rule can read is judged by what it returns instead)."""
    return (layer is not None and known.opaque is not None and isinstance(test, ast.Call)
            and any(_same(a, layer) for a in [*test.args, *(k.value for k in test.keywords)])
            and known.opaque(test))


def _implies_no_weight(test: ast.AST, layer: ast.AST | None, known: _Known = _NOTHING) -> bool:
    """`test` false ⇒ the layer has a plain `.weight`: the negation of a guard, `flag is None`,
    `quant_config is not None`, alone, in an `or`, or as every one of an `and`'s operands."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _implies_weight(test.operand, layer, known)
    if _none_test(test, ast.Is) in known.flags:
        return True
    if known.dormant and truth(test, known.dormant) is True:
        return True  # what runs where it is false is a dormant path
    if _none_test(test, ast.IsNot) is not None and _quant_config(test.left, known.backends):
        return True  # `quant_config is not None`
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return all(_implies_no_weight(v, layer, known) for v in test.values)
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(
        _implies_no_weight(v, layer, known) for v in test.values)


def _falsy(value: ast.AST | None) -> bool:
    return value is None or (isinstance(value, ast.Constant) and not value.value)


class _Assign:
    """One assignment to a would-be flag: its value, whether it is `&=`, and the tests that hold
    wherever it runs (enclosing `if`s, and the negations of earlier `if ...: return`s)."""

    __slots__ = ("value", "anded", "tests", "scope")

    def __init__(self, value, anded, tests, scope=None):
        self.value, self.anded, self.tests, self.scope = value, anded, tests, scope

    def flag(self, known: _Known) -> bool:
        if _falsy(self.value) or _is_getattr_weight(self.value) or _implies_weight(self.value, None, known):
            return True
        return any(_implies_weight(t, None, known) for t in self.tests)


_NOT = ast.Not()


def _walk_block(body: list[ast.stmt], tests: tuple, visit) -> None:
    """Call `visit(stmt, tests)` for every statement, `tests` being what holds there; nested
    functions and classes are not entered."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        visit(stmt, tests)
        if isinstance(stmt, ast.If):
            _walk_block(stmt.body, tests + (stmt.test,), visit)
            _walk_block(stmt.orelse, tests + (ast.UnaryOp(op=_NOT, operand=stmt.test),), visit)
            if stmt.body and isinstance(stmt.body[-1], _EXITS):
                tests = tests + (ast.UnaryOp(op=_NOT, operand=stmt.test),)
        else:
            for field in ("body", "orelse", "finalbody"):
                _walk_block(getattr(stmt, field, None) or [], tests, visit)
            for h in getattr(stmt, "handlers", None) or []:
                _walk_block(h.body, tests, visit)
            for case in getattr(stmt, "cases", None) or []:
                _walk_block(case.body, tests, visit)


def _assignments_of(fn, self_name: str | None, attrs: dict, local: dict) -> None:
    def visit(stmt, tests):
        pairs: list[tuple[ast.AST, ast.AST | None, bool]] = []
        if isinstance(stmt, ast.Assign):
            pairs = [(t, stmt.value, False) for t in stmt.targets]
        elif isinstance(stmt, ast.AnnAssign):
            pairs = [(stmt.target, stmt.value, False)]
        elif isinstance(stmt, ast.AugAssign):
            pairs = [(stmt.target, stmt.value, isinstance(stmt.op, ast.BitAnd))]
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            for n in ast.walk(stmt.target if isinstance(stmt, (ast.For, ast.AsyncFor)) else stmt):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    local.setdefault(n.id, []).append(_Assign(ast.Name("?"), False, (), id(fn)))
        for target, value, anded in pairs:
            a = _Assign(value, anded, tests, id(fn))
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == self_name:
                attrs.setdefault(f"self.{target.attr}", []).append(a)
            elif isinstance(target, ast.Name):
                local.setdefault(target.id, []).append(a)
            elif isinstance(target, (ast.Tuple, ast.List)):
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        local.setdefault(n.id, []).append(_Assign(ast.Name("?"), False, (), id(fn)))
    _walk_block(fn.body, (), visit)


def _flags_of(assigns: dict[str, list[_Assign]], known_for) -> frozenset[str]:
    """Names whose every assignment is a flag value (one that is false, or true only when the
    layer has `.weight`); `x &= <flag>` makes `x` one whatever it was. Constant false values alone
    say nothing (the real value is set elsewhere). `known_for(assign)`: what is known there."""
    flags: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, values in assigns.items():
            if name in flags:
                continue
            anded = [a for a in values if a.anded]
            derived = any(not _falsy(a.value) for a in values)
            if (anded and any(a.flag(known_for(a, flags)) for a in anded)) or (
                    not anded and derived and all(a.flag(known_for(a, flags)) for a in values)):
                flags.add(name)
                changed = True
    return frozenset(flags)


def _function_flags(fn, known: _Known) -> frozenset[str]:
    """The local flags of one function (given what is known around it)."""
    local: dict[str, list[_Assign]] = {}
    _assignments_of(fn, None, {}, local)
    return _flags_of(local, lambda _a, fl: known.with_flags(fl))


def _is_predicate(fn, known: _Known) -> bool:
    """Every value `fn` returns is false (or None), or true only when the layer has `.weight`:
    a return value that implies it, or a return dominated by such a test."""
    flags = _function_flags(fn, known)
    here = known.with_flags(flags)
    returns: list[tuple[ast.Return, tuple]] = []
    _walk_block(fn.body, (), lambda stmt, tests: returns.append((stmt, tests)) if isinstance(stmt, ast.Return) else None)
    real = [(r, t) for r, t in returns if not _falsy(r.value)]
    if not real:
        return False
    return all(_implies_weight(r.value, None, here) or any(_implies_weight(x, None, here) for x in t)
               or (isinstance(r.value, ast.Name) and r.value.id in flags) for r, t in real)


class _ClassFlags:
    """For each function of the file, what is known there: the flags of its class (`self.X` set
    only to guard values in the class's methods: `self.is_unquantized = isinstance(
    self.quant_method, UnquantizedLinearMethod)`, `self.allow_fast = self.is_unquantized and ...`,
    `self._scale = prep(layer)` where `prep` returns None unless the weight exists), and the
    predicates it may call (module functions, nested functions, the class's own methods)."""

    def __init__(self, tree: ast.Module, imported, backends: _Backends):
        # Computed on demand, per class: most files hold no read the rule would report, and
        # reading every class's flags cost more than all the rest of the rule.
        self._by_fn: dict[int, _Known] = {}
        self._nothing = _Known(backends=backends)
        self._tree, self._imported, self._backends = tree, imported, backends
        self._module_preds: frozenset[str] | None = None
        self._owners: dict[int, ast.AST] | None = None  # function -> its class, or the module
        self._done: set[int] = set()

    def _owner(self, fn: ast.AST) -> ast.AST | None:
        if self._owners is None:
            owners = self._owners = {}
            for node in self._tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    owners[id(node)] = self._tree
            for cls in ast.walk(self._tree):
                if isinstance(cls, ast.ClassDef):
                    for m in cls.body:
                        if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            owners[id(m)] = cls
        return self._owners.get(id(fn))

    def _preds(self) -> frozenset[str]:
        if self._module_preds is None:
            self._module_preds = frozenset(
                n.name for n in self._tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and _is_predicate(n, self._nothing)) | self._imported()
        return self._module_preds

    def _settle(self, owner: ast.AST) -> None:
        if id(owner) in self._done:
            return
        self._done.add(id(owner))
        preds, backends = self._preds(), self._backends
        if isinstance(owner, ast.ClassDef):
            self._class(owner, preds, backends)
            return
        for node in owner.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._by_fn[id(node)] = _Known(frozenset(), preds | _nested_predicates(node, preds, backends), backends)

    def _class(self, cls: ast.ClassDef, module_preds: frozenset[str], backends: _Backends) -> None:
        methods = [m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        preds = module_preds | frozenset(f"self.{m.name}" for m in methods
                                         if _is_predicate(m, _Known(frozenset(), module_preds, backends)))
        nested = {id(m): _nested_predicates(m, preds, backends) for m in methods}
        attrs: dict[str, list[_Assign]] = {}
        locals_: dict[int, dict[str, list[_Assign]]] = {}
        for m in methods:
            locals_[id(m)] = {}
            _assignments_of(m, m.args.args[0].arg if m.args.args else None, attrs, locals_[id(m)])
        flags: frozenset[str] = frozenset()
        method_flags: dict[int, frozenset[str]] = {}
        for _ in range(8):  # locals feed attributes and attributes feed locals
            for m in methods:
                base = _Known(flags, preds | nested[id(m)], backends)
                method_flags[id(m)] = _flags_of(locals_[id(m)], lambda _a, fl, base=base: base.with_flags(fl))
            new = _flags_of(attrs, lambda a, fl: _Known(flags | fl | method_flags.get(a.scope, frozenset()),
                                                        preds | nested.get(a.scope, frozenset()), backends))
            if new == flags:
                break
            flags = new
        if any(_refuses_quantization(m, self._nothing) for m in methods if m.name == "__init__"):
            flags = flags | {"self"}  # every instance is unquantized (or of a named backend)
        for m in methods:
            self._by_fn[id(m)] = _Known(flags, preds | nested[id(m)], backends)

    def of(self, fn: ast.AST) -> _Known:
        owner = self._owner(fn)
        if owner is not None:
            self._settle(owner)
        return self._by_fn.get(id(fn), self._nothing)


def _nested_predicates(fn, known_preds: frozenset[str], backends: _Backends) -> frozenset[str]:
    return frozenset(n.name for n in ast.walk(fn) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and n is not fn and _is_predicate(n, _Known(frozenset(), known_preds, backends)))


def _refuses_quantization(init: ast.FunctionDef | ast.AsyncFunctionDef, known: _Known) -> bool:
    """`__init__` raises unless its quant method is unquantized (or of a backend it names): `if not
    isinstance(self.quant_method, UnquantizedLinearMethod): raise ...` (or an `assert` of the
    check)."""
    for stmt in init.body:
        if isinstance(stmt, ast.If) and _implies_no_weight(stmt.test, None, known) and stmt.body \
                and isinstance(stmt.body[-1], ast.Raise):
            return True
        if isinstance(stmt, ast.Assert) and _backend_check(stmt.test, known.backends):
            return True
    return False


def _catches_attribute_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("AttributeError", "Exception", "BaseException") for n in names)


def _guarded(node: ast.AST, layer: ast.AST, parents: dict[int, ast.AST], known: _Known) -> bool:
    """A guard (see `_implies_weight`) dominates the read: an enclosing `if`/conditional, an
    earlier operand of `and`, an earlier `if not <guard>: return`, or a `try` that catches it."""
    child, parent = node, parents.get(id(node))
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)):
            if child in _as_list(parent.body) and _implies_weight(parent.test, layer, known):
                return True
            if child in _as_list(parent.orelse) and _implies_no_weight(parent.test, layer, known):
                return True
        elif isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            idx = next(i for i, v in enumerate(parent.values) if v is child)
            if any(_implies_weight(v, layer, known) for v in parent.values[:idx]):
                return True
        elif isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or):
            idx = next(i for i, v in enumerate(parent.values) if v is child)
            if any(_implies_no_weight(v, layer, known) for v in parent.values[:idx]):
                return True
        elif isinstance(parent, (ast.Try, getattr(ast, "TryStar", ast.Try))) and child in parent.body:
            if any(_catches_attribute_error(h) for h in parent.handlers):
                return True
        if isinstance(child, ast.stmt):
            for block in _blocks(parent):
                if child in block:
                    for earlier in block[: block.index(child)]:
                        if (isinstance(earlier, ast.If) and _implies_no_weight(earlier.test, layer, known)
                                and earlier.body and isinstance(earlier.body[-1], _EXITS)):
                            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
        child, parent = parent, parents.get(id(parent))
    return False


def _as_list(x) -> list:
    return x if isinstance(x, list) else [x]


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    out = [getattr(node, f, None) for f in ("body", "orelse", "finalbody")]
    out += [h.body for h in getattr(node, "handlers", None) or []]
    out += [c.body for c in getattr(node, "cases", None) or []]
    return [b for b in out if isinstance(b, list)]


def _flows_on(ctx: RuleContext, node: ast.AST, c) -> bool:
    """The weight is handed to a project function that casts or allocates with it: DTL001/DTL002
    report the call (its message names the missing `.weight` too)."""
    call = c.parents.get(id(node))
    if isinstance(call, ast.keyword):
        call = c.parents.get(id(call))
    if not isinstance(call, ast.Call):
        return False
    return any(f.arg is node for f in ctx.flows.flows(call, c.scope))


def _is_typing_cast(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (ast.unparse(node.func) in ("cast", "typing.cast")) and len(node.args) == 2


def _feeds_dtype_site(node: ast.AST, c) -> bool:
    """`L.weight.dtype` used as a cast's or an allocation's dtype, directly, through a local name
    or `typing.cast`, or returned by a dtype getter (DTL001/DTL002 report those, and their fixes
    handle a missing `.weight`)."""
    parents = c.parents
    up = parents.get(id(node))
    if not (isinstance(up, ast.Attribute) and up.attr == "dtype"):
        return _is_cast_arg(node, parents)  # `.to(L.weight)`
    expr: ast.AST = up
    while True:
        parent = parents.get(id(expr))
        if _is_typing_cast(parent) and parent.args[1] is expr:
            expr = parent
            continue
        if isinstance(parent, ast.Return):
            return True
        if isinstance(parent, (ast.IfExp, ast.BoolOp)) or (isinstance(parent, ast.keyword)):
            if isinstance(parent, ast.keyword):
                call = parents.get(id(parent))
                return isinstance(call, ast.Call) and (parent.arg in _DTYPE_KEYWORDS or parent.value in cast_dtype_args(call))
            expr = parent
            continue
        break
    if _is_cast_arg(expr, parents):
        return True
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        return bool(names) and _name_feeds_dtype_site(names, c)
    return False


def _is_cast_arg(expr: ast.AST, parents) -> bool:
    call = parents.get(id(expr))
    return isinstance(call, ast.Call) and any(a is expr for a in cast_dtype_args(call))


def _name_feeds_dtype_site(names: set[str], c) -> bool:
    for sub in ast.walk(c.fn):
        if not isinstance(sub, ast.Call):
            continue
        args = list(cast_dtype_args(sub)) + [k.value for k in sub.keywords if k.arg in _DTYPE_KEYWORDS]
        if any(isinstance(n, ast.Name) and n.id in names for a in args for n in ast.walk(a)):
            return True
    return False
