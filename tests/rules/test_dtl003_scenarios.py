"""DTL003 on the longer programs it is tested on beyond the examples its module shows: storage
code recognised by the layer its methods take, checks the rule cannot read, dormant paths,
backend-specific paths, fast-path guards, later-bound fast paths and paths that never meet a
quantized layer, each with the twin that breaks it. Checked as the rule's own examples are
(tests/rule_examples_check.py)."""

from __future__ import annotations

import pytest
from rule_examples_check import assert_invalid, assert_passes_prefilter, assert_valid

from dtype_lint.rule import Invalid, Valid
from dtype_lint.rules import RULES_BY_CODE

RULE = RULES_BY_CODE["DTL003"]

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


VALID = [
    Valid(_KERNEL),
    Valid(_OPAQUE),
    Valid(_DORMANT),
    Valid(_BACKENDS),
    Valid(_FAST_PATHS),
    Valid(_OTHER_ARM),
    Valid(_DISPATCH.replace("self.proj.weight.dtype == torch.bfloat16:", "hasattr(self.proj, 'weight'):")),
]
INVALID = [
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


@pytest.mark.parametrize("example", VALID, ids=[f"valid-{index}" for index in range(len(VALID))])
def test_a_guarded_or_dormant_read_is_not_reported(example):
    assert_valid(RULE, example)


@pytest.mark.parametrize("example", INVALID, ids=[f"invalid-{index}" for index in range(len(INVALID))])
def test_the_twin_that_breaks_the_guard_is_reported(example):
    assert_invalid(RULE, example)
    assert_passes_prefilter(example)
