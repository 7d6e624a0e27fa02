"""DTL003 reads a flag set in one method (or by another class, or by a caller) and read in
another (issue #39): an `assert` on an attribute set only after an unquantized-method check, a
kernel check on the layer's quant method read through a predicate and a flag, an attribute its
class leaves false and another class turns on from a predicate, a parameter every caller passes
only after a check held, and an `__init__` whose class is built only after a check. Each with the
twin that breaks it. Checked as the rule's own examples are (tests/rule_examples_check.py)."""

from __future__ import annotations

import pytest
from rule_examples_check import assert_invalid, assert_passes_prefilter, assert_valid

from dtype_lint.rule import Invalid, Valid
from dtype_lint.rules import RULES_BY_CODE

RULE = RULES_BY_CODE["DTL003"]

# `_padded` is set only after the unquantized-method check; `rows` asserts it first.
_ASSERTED = """\
import torch
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, UnquantizedEmbeddingMethod


class MarkovHead(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.w2 = ParallelLMHead(64, 8, quant_config=quant_config)
        self._padded: torch.Tensor | None = None

    def align(self) -> None:
        if not isinstance(self.w2.quant_method, UnquantizedEmbeddingMethod):
            return
        self._padded = torch.zeros(64, 8)

    def rows(self) -> int:
        assert self._padded is not None
        return self.w2.weight.shape[0]
"""
# A predicate true only for one kernel of the projection's quant method, kept as a flag, tested
# (through a local) before the only call of the private method that reads the weight.
_KERNEL_CHECK = """\
import torch
from vllm.model_executor.layers.linear import QKVParallelLinear
from vllm.model_executor.kernels.linear.mxfp8 import FusedMxfp8LinearKernel


def _supports_fused_front(attn: "Attention") -> bool:
    if attn.head_dim != 128:
        return False
    kernel = getattr(attn.qkv_proj.quant_method, "kernel", None)
    if not isinstance(kernel, FusedMxfp8LinearKernel):
        return False
    return attn.num_heads % 16 == 0


class Attention(torch.nn.Module):
    def __init__(self, hidden: int, quant_config):
        super().__init__()
        self.head_dim = 128
        self.num_heads = 16
        self.qkv_proj = QKVParallelLinear(hidden, 128, 16, quant_config=quant_config)
        self.use_fused_front = _supports_fused_front(self)

    def _fused_front(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.qkv_proj.weight
        return torch.ops.mxfp8.front(x, weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fused = self.use_fused_front and x.shape[0] >= 64
        if fused:
            return self._fused_front(x)
        return self.qkv_proj(x)[0]
"""
# The MLP leaves `fuse_act_quant` false; the decoder layer turns it on from a kernel check.
_TURNED_ON_ELSEWHERE = """\
import torch
from vllm.model_executor.layers.linear import MergedColumnParallelLinear, RowParallelLinear
from vllm.model_executor.kernels.linear.mxfp8 import RocmMxfp8LinearKernel


def _takes_mxfp8_input(proj: torch.nn.Module) -> bool:
    kernel = getattr(getattr(proj, "scheme", None), "mx_linear", None)
    if kernel is None:
        kernel = getattr(getattr(proj, "quant_method", None), "kernel", None)
    return isinstance(kernel, RocmMxfp8LinearKernel) and kernel.supports_quantized_input(proj)


class MLP(torch.nn.Module):
    def __init__(self, hidden: int, quant_config):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden, [hidden] * 2, quant_config=quant_config)
        self.down_proj = RowParallelLinear(hidden, hidden, quant_config=quant_config)
        # Set by the decoder layer.
        self.fuse_act_quant = False

    def _quantizes_in_gemm(self, tokens: int) -> bool:
        rows, cols = self.down_proj.weight.shape
        return tokens <= 64 and rows % cols == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up, _ = self.gate_up_proj(x)
        if self.fuse_act_quant and not self._quantizes_in_gemm(gate_up.shape[0]):
            gate_up = torch.ops.mx.quantize(gate_up)
        return self.down_proj(gate_up)[0]


class DecoderLayer(torch.nn.Module):
    def __init__(self, hidden: int, quant_config):
        super().__init__()
        self.mlp = MLP(hidden, quant_config)
        self.mlp.fuse_act_quant = _takes_mxfp8_input(self.mlp.down_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)
"""
# `gather_input` defaults to False; the one caller passes it only where `can_fuse_gather` held.
_PARAMETER = """\
import torch
from vllm.model_executor.layers.linear import QKVParallelLinear, UnquantizedLinearMethod


class Attention(torch.nn.Module):
    def __init__(self, hidden: int, quant_config):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(hidden, 64, 8, quant_config=quant_config)

    def can_fuse_gather(self, x: torch.Tensor) -> bool:
        return isinstance(self.qkv_proj.quant_method, UnquantizedLinearMethod) and x.is_contiguous()

    def forward(self, hidden_states: torch.Tensor, gather_input: bool = False) -> torch.Tensor:
        if gather_input:
            return torch.ops.sp.all_gather_matmul(hidden_states, self.qkv_proj.weight)
        return self.qkv_proj(hidden_states)[0]


class DecoderLayer(torch.nn.Module):
    def __init__(self, hidden: int, quant_config):
        super().__init__()
        self.self_attn = Attention(hidden, quant_config)
        self.sequence_parallel = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gather_input = self.sequence_parallel and x.shape[0] > 8
        if gather_input and not self.self_attn.can_fuse_gather(x):
            x = torch.ops.sp.all_gather(x)
            gather_input = False
        return self.self_attn(hidden_states=x, gather_input=gather_input)
"""
# `__init__` runs only where `create` builds the class, after the unquantized-method check.
_BUILT_AFTER_CHECK = """\
import torch
from torch import nn
from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod, VocabParallelEmbedding


class ReplicatedTable:
    # A full copy of an embedding table.

    @classmethod
    def create(cls, embed: nn.Module) -> "ReplicatedTable | None":
        if not isinstance(embed, VocabParallelEmbedding):
            return None
        if embed.tp_size == 1 or not isinstance(embed.quant_method, UnquantizedEmbeddingMethod):
            return None
        return cls(embed)

    def __init__(self, embed: VocabParallelEmbedding) -> None:
        weight = embed.weight.data
        self.table = weight.new_empty(weight.shape)
"""


VALID = [Valid(_ASSERTED), Valid(_KERNEL_CHECK), Valid(_TURNED_ON_ELSEWHERE), Valid(_PARAMETER), Valid(_BUILT_AFTER_CHECK),
         # A reset to False where the check failed also leaves the local true only where it held.
         Valid(_PARAMETER.replace("if gather_input and not self.self_attn.can_fuse_gather(x):",
                                  "if not self.self_attn.can_fuse_gather(x):"))]
INVALID = [
    # An assert on something that does not follow the check; an attribute also set unconditionally.
    Invalid(_ASSERTED.replace("assert self._padded is not None", "assert self._padded is None or True")),
    Invalid(_ASSERTED.replace("        self._padded = torch.zeros(64, 8)\n",
                              "        self._padded = torch.zeros(64, 8)\n\n    def reset(self) -> None:\n"
                              "        self._padded = torch.ones(64, 8)\n")),
    # The kernel check on the attention object, and a kernel read off the layer itself.
    Invalid(_KERNEL_CHECK.replace("isinstance(kernel, FusedMxfp8LinearKernel)", "isinstance(attn, FusedMxfp8LinearKernel)")),
    Invalid(_KERNEL_CHECK.replace('getattr(attn.qkv_proj.quant_method, "kernel", None)',
                                  'getattr(attn.qkv_proj, "kernel", None)')),
    # Also turned on unconditionally elsewhere; or not false in its own class.
    Invalid(_TURNED_ON_ELSEWHERE.replace(
        "        self.mlp.fuse_act_quant = _takes_mxfp8_input(self.mlp.down_proj)\n",
        "        self.mlp.fuse_act_quant = _takes_mxfp8_input(self.mlp.down_proj)\n"
        "        self.mlp.fuse_act_quant = hidden > 1024\n")),
    Invalid(_TURNED_ON_ELSEWHERE.replace("        self.fuse_act_quant = False", "        self.fuse_act_quant = hidden > 1024")),
    # The reset tests something else; no reset; a caller passing True.
    Invalid(_PARAMETER.replace("if gather_input and not self.self_attn.can_fuse_gather(x):",
                               "if gather_input and not x.is_contiguous():")),
    Invalid(_PARAMETER.replace("            gather_input = False\n", "            pass\n")),
    Invalid(_PARAMETER + "\n\ndef gathered(layer: DecoderLayer, x: torch.Tensor) -> torch.Tensor:\n"
            "    return layer.self_attn(x, True)\n"),
    # Also built without the check.
    Invalid(_BUILT_AFTER_CHECK + "\n\ndef replicate(embed: VocabParallelEmbedding) -> ReplicatedTable:\n"
            "    return ReplicatedTable(embed)\n"),
]


@pytest.mark.parametrize("example", VALID, ids=[f"valid-{index}" for index in range(len(VALID))])
def test_a_flag_set_elsewhere_guards_the_read(example):
    assert_valid(RULE, example)


@pytest.mark.parametrize("example", INVALID, ids=[f"invalid-{index}" for index in range(len(INVALID))])
def test_the_twin_that_breaks_the_flag_is_reported(example):
    assert_invalid(RULE, example)
    assert_passes_prefilter(example)
