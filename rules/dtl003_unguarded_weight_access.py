"""DTL003 unguarded-weight-access: `.weight` is read on a quantizable layer without a fallback.

## What it does
Flags reads of `L.weight` (and `getattr(L, "weight")` without a default) in any function,
`__init__` included (the message names it), that is not storage code (quant methods and weight
kernels: a class whose `apply`, `apply_weights`, `create_weights`, `process_weights_after_loading`,
`get_quant_method` or `embedding` takes the layer, as `layer` or annotated with a layer class;
module-level functions named after one of those taking the layer, `apply_int4_linear(layer, x)`;
weight loaders) when `L` resolves to a quantizable layer (as in DTL001), unless a guard dominates
the read:
- `if hasattr(L, "weight"):` (or the `else` of its negation, an operand of `and`, a conditional
  expression), or an earlier `if not hasattr(L, "weight"): return` (`raise`, `continue`, `break`);
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
- a check the rule cannot read on the layer itself: a method of an object whose class does not
  resolve, handed the layer read (`self.fused_kernel.supports(self.o_proj)`);
- a predicate method of an object a local builds, read like an imported predicate: `kernel =
  get_kernel()` (the class its return annotation names) or `kernel = Kernel(...)`, then `if
  kernel.can_run(self.o_proj): self.kernel = kernel`, where `can_run` returns False unless the
  layer's method is unquantized; the flag `self.kernel is not None` then guards the read;
- a predicate: a function (of the module, nested, a method of the class, or imported, also through
  lazy PEP 562 exports) whose every true or non-None result is such a check or follows one (`if
  getattr(L, "weight", None) is None: return False`); a negated one, false only after such a
  check (`return not isinstance(L.quant_method, Unquantized...)`), in `if not f(L):` or the `else`;
  one returning `(verdict, reason)` tuples, read as `ok, _ = f(L)` or `f(L)[0]`;
- `all(<check> for v in (A, B))`; a flag computed on first use (`LazyValue(lambda: <check>)`);
- an earlier read of the same `L.weight` on every path here (a statement, a test, a flag from it):
  that read is the finding (not one feeding a cast's dtype: its fix removes it);
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
  whose every use in the file is a call dominated by one of these guards in the calling function
  (or, up to three levels up, in every call of that function),
  the callee's flags read on the object it is called on (`if self.self_attn.fast_decode:
  self.self_attn.forward_decode(x)`);
- `w = getattr(L, "weight", None)` checked for None is not a `.weight` read at all, and
  `isinstance(getattr(L, "weight", None), torch.Tensor)` (any class None is not an instance of)
  guards what follows it like `... is not None`;
- in the callers, also an earlier read of the same layer's `.weight` on every path to the call
  (the layer in the caller's terms: `self.X` through the object called on, a parameter through
  the argument): a dispatch that reads `w = self.weight`, tests `w.dtype` and then calls
  `self._gemm_bf16(x)`; the caller's read raises first and is the finding.
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
A read is reported only when the storage model (dtype_lint/analysis/storage/storage_model.py) finds a
backend that can reach the layer and registers no `weight` (`qweight`, `weight_packed`) or deletes
it; the message names them with their lines. A layer type every backend keeps `.weight` for (an
embedding in a tree where no backend quantizes embeddings that way) is not reported.

## Fix safety
No automatic fix: what the code should do for a layer without `.weight` (skip a fast path, use
`params_dtype`, refuse the configuration) depends on what it reads the weight for. The finding
names the layer and how it resolved.

## Known limits
The guards below are trusted; each can hide a real read where the trust is wrong
(docs/triage/rules-dtl003-005.md judges every finding on vLLM 0.27.1 and 0.33.0).
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
  Callers are followed up to three levels.
- Storage code is recognised by its methods' names and the layer they take: a model class with an
  `apply(self, x, layer)` method, or a function `apply_*(layer, ...)`, is exempt like a kernel.
- A quant-method check (and a `hasattr` in a flag's value) counts whichever layer it names, and a
  flag counts when every assignment of it (in this class's methods, not its bases') is such a
  check: a flag also set elsewhere is not seen. A kernel type tested on a quant method's
  attribute (`isinstance(method.kernel, ...)`) is not a backend check.
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
docs/triage/rules-dtl003-005.md (every finding removed since that triage was judged FALSE there;
none was added): on the trees it was developed on, vLLM 0.27.1 33 of 34 TRUE (97%) and 0.33.0 18
of 19 (95%); on the others, vLLM 0.30.0 17 of 19 (89%), aphrodite-engine 0.24.1 16 of 18 (89%),
sglang 0.5.23 94 of 135 (70%), vllm-omni 0.30.0 5 of 5, vllm-ascend 0.23.0 0 of 2,
tpu-inference 0.32.0 none (its 17 findings, all FALSE, were in its tests): 132 of 179 (74%),
below the 95% a default rule needs (docs/triage/README.md). Most of what is left: draft
models' `get_embed_and_head` (no caller the index can see), flags built from a constructor
parameter or from a sibling layer's storage, configs restricted by values, and platforms that
admit only backends keeping `.weight` (Known limits).

## Options
The layer-resolution options of DTL001: `preset`, `quantizable`, `exempt-classes`,
`not-quantizable`, `exempt-functions`, `name-heuristics`, `name-patterns`.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.flow.recognisers import feeds_dtype_site, weight_read
from dtype_lint.analysis.guard_engine.file_guards import test_module
from dtype_lint.analysis.guard_engine.never_runs import shadowed_definitions
from dtype_lint.analysis.storage.constructions import never_reaches
from dtype_lint.analysis.storage.storage_model import ABSENT, why_storage
from dtype_lint.core.findings import Evidence
from dtype_lint.rule import FixAvailability, Invalid, Rule, RuleContext, Valid

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
_OPAQUE_ELSEWHERE = _OPAQUE.replace("self.fused_kernel.supports(self.o_proj)", "self.fused_kernel.ready()")  # not the layer
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
# Fast-path guards (fixtures/shapes/servelm/models/fused.py): a negated predicate, `all`, a lazy flag.
_FAST_PATHS = """\
from vllm.model_executor.layers.linear import ColumnParallelLinear, UnquantizedLinearMethod
def is_quantized(layer):
    return not isinstance(layer.quant_method, UnquantizedLinearMethod)
class Mlp:
    def __init__(self, quant_config):
        self.up = ColumnParallelLinear(8, 8, quant_config=quant_config)
        self.down = ColumnParallelLinear(8, 8, quant_config=quant_config)
        self.fused = Lazy(lambda: isinstance(self.up.quant_method, UnquantizedLinearMethod))
    def forward(self, x):
        if is_quantized(self.up):
            return self.up(x)[0]
        y = x @ self.up.weight.t() if self.fused.value else x
        if all(isinstance(p.quant_method, UnquantizedLinearMethod) for p in (self.up, self.down)):
            return y @ self.down.weight
"""
_FAST_PATHS_RE_READ = _FAST_PATHS + "    def rows(self):\n        n = self.down.weight.shape[0]\n        return self.down.weight[:n]\n"
_FAST_PATHS_WRONG = (_FAST_PATHS.replace("if is_quantized(self.up):", "if not is_quantized(self.up):")
                     .replace("(self.up, self.down)", "(self.up,)").replace("Lazy(lambda: isinstance(", "Lazy(all, (")
                     + "    def rows(self, c):\n        n = c and self.down.weight.shape[0]\n"
                     "        return self.down.weight[:n]\n")
# Later-bound fast paths (fixtures/shapes/servelm/models/dispatch.py): a private kernel called only
# after the caller's own read of the same `.weight`; a kernel object kept only where its
# `can_run(layer)` predicate held; a plain-tensor `isinstance` on `getattr(L, "weight", None)`; a
# method a later `def` replaces; a subclass the project builds only without a config.
_DISPATCH = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear, ReplicatedLinear, UnquantizedLinearMethod
class Reduce:
    def can_run(self, linear):
        if not isinstance(linear.quant_method, UnquantizedLinearMethod):
            return False
        return linear.input_size % 64 == 0
def get_reduce() -> Reduce:
    return Reduce()
class Gate(ReplicatedLinear):
    def forward(self, x):
        return x @ self.weight.t()
class Block(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config)
        self.gate = Gate(8, 2, quant_config=None)
        self.fused = None
        kernel = get_reduce()
        if kernel.can_run(self.proj):
            self.fused = kernel
        self.bf16 = isinstance(getattr(self.proj, "weight", None), torch.Tensor) and self.proj.weight.dtype == torch.bfloat16
    def dispatch(self, x):
        if self.proj.weight.dtype == torch.bfloat16:
            return self._dense(x)
        return self.proj(x)[0]
    def _dense(self, x):
        return x @ self.proj.weight.t()
    def forward(self, x):
        if self.fused is not None:
            return x @ self.proj.weight.t()
        return self.proj(x)[0]
    def rows(self):
        return self.proj.weight.shape[0]
    def rows(self):
        return self.proj.output_size
"""
# Each guard dropped: the kernel called unguarded too, a check that says nothing of the storage,
# `isinstance(..., object)`, the later `def` renamed, the gate also built with a config.
_DISPATCH_BROKEN = (_DISPATCH.replace("    def _dense", "    def warm(self, x):\n        return self._dense(x)\n"
                                      "    def _dense")
                    .replace("if not isinstance(linear.quant_method, UnquantizedLinearMethod):", "if linear is None:")
                    .replace("torch.Tensor) and self.proj", "object) and self.proj")
                    .replace("    def rows(self):\n        return self.proj.output_size", "    def cols(self):\n        return 0")
                    .replace("quant_config=None)\n        self.fused", "quant_config=quant_config)\n        self.fused"))
# Paths that never meet a quantized layer: the layer is one only under one outcome of a module-level
# flag and is read under the other; the fallback of a `hasattr` check every construction passes.
_OTHER_ARM = """\
import torch
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
_on_cpu = not torch.cuda.is_available()
class Text(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.lm_head = ParallelLMHead(8, 8, quant_config=quant_config)
    def get_head(self):
        return getattr(self.lm_head, "weight", None)
class Experts(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        if _on_cpu:
            self.pre = ReplicatedLinear(8, 8, quant_config=quant_config)
        else:
            self.pre = torch.nn.Linear(8, 8)
        self.text = Text(quant_config)
    def forward(self, x):
        if _on_cpu:
            return self.pre(x)[0]
        return x @ self.pre.weight.t()
    def head(self):
        if hasattr(self.text, "get_head"):
            return self.text.get_head()
        return self.text.lm_head.weight
"""
_NO_WEIGHT = "AWQ/GPTQ (`qweight`), compressed-tensors WNA16 (`weight_packed`) and GGUF layers have no `.weight`"


class UnguardedWeightAccess(Rule):
    code = "DTL003"
    name = "unguarded-weight-access"
    summary = "`.weight` read on a quantizable layer with no `hasattr`/`getattr` fallback (AWQ/GPTQ have none)"
    default_enabled = False  # opt-in until precise off vLLM: docs/triage/README.md
    patterns = (r"\.weight\b", r"getattr\(\s*[^,()]+,(?:\s|#[^\n]*)*[\"']weight[\"']\s*\)")
    facts = frozenset({"candidates", "layers", "flows", "guards", "tree"})
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
        Valid(_KERNEL),
        Valid(_OPAQUE),
        Valid(_DORMANT),
        Valid(_BACKENDS),
        Valid(_FAST_PATHS),
        Valid(_OTHER_ARM),
        Valid(_DISPATCH.replace("self.proj.weight.dtype == torch.bfloat16:", "hasattr(self.proj, 'weight'):")),
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
        Invalid(_FAST_PATHS_RE_READ), Invalid(_FAST_PATHS_WRONG, count=4),  # the first read in `rows` only
        # `dispatch`'s own first read is the finding (not `_dense`'s re-read); the broken twin adds
        # `_dense`, `forward`, the `isinstance(..., object)` chain, `rows` and `Gate.forward`.
        Invalid(_DISPATCH, message_contains=("self.proj.weight",)),
        # The read on the flag's other outcome; a method the built class does not define.
        Invalid(_OTHER_ARM.replace("        if _on_cpu:\n            return", "        if not _on_cpu:\n            return")
                .replace('hasattr(self.text, "get_head")', 'hasattr(self.text, "get_tail")'), count=2),
        Invalid(_DISPATCH_BROKEN, count=6),
    ]

    def check(self, ctx: RuleContext) -> None:
        if test_module(ctx.source.path):
            return  # a test reads the storage of the config it builds on purpose
        shadowed = None
        for function in ctx.candidates:
            for node in function.walk.of(ast.Attribute, ast.Call):  # what weight_read recognises
                layer = weight_read(node)
                if layer is None:
                    continue
                if feeds_dtype_site(node, function.fn, function.parents) or _flows_on(ctx, node, function):
                    continue
                if function.fn.name == "weight" and isinstance(function.parents.get(id(node)), ast.Return):
                    continue  # a wrapper's `weight` property forwarding its base's: raises exactly as the base
                if shadowed is None:
                    shadowed = shadowed_definitions(ctx.tree)
                if id(function.fn) in shadowed:
                    break  # a later `def` of the same name replaces this one: it never runs
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
                # go in the evidence. `__init__` is called out: it is not a forward path.
                where = " (in `__init__`)" if function.fn.name == "__init__" else ""
                remedy = Evidence(f"{why_storage(evidence, _NO_WEIGHT)}: AttributeError there; guard the read with "
                                  f"`hasattr({text}, \"weight\")` or read `getattr({text}, \"weight\", None)`",
                                  ctx.source.path, node.lineno)
                backends = why_storage(evidence, _NO_WEIGHT)
                first = backends.split("; ")[0] + (" (and more)" if "; " in backends else "")
                ctx.report(node, f"`{text}.weight` read outside storage code{where} with no `hasattr`/`getattr` "
                                 f"fallback: {first}",
                           confidence=confidence, evidence=(remedy, *evidence),
                           no_fix_reason="what a layer without `.weight` should do here depends on why it is read")


def _flows_on(ctx: RuleContext, node: ast.AST, function) -> bool:
    """The weight is handed to a project function that casts or allocates with it: DTL001/DTL002
    report the call (its message names the missing `.weight` too)."""
    call = function.parents.get(id(node))
    if isinstance(call, ast.keyword):
        call = function.parents.get(id(call))
    if not isinstance(call, ast.Call):
        return False
    return any(flow.arg is node for flow in ctx.flows.flows(call, function.scope))
