"""DTL005 on a helper beyond the examples its module shows: one whose fp8 case asks the layer's
quant method, which the dtype evaluator cannot know, so its callers cannot be proven to agree with
the configured helper and the helper itself gets the missing branch. Checked as the rule's own
examples are (tests/rule_examples_check.py)."""

from __future__ import annotations

import pytest
from rule_examples_check import assert_invalid, assert_passes_prefilter

from dtype_lint.rule import Invalid
from dtype_lint.rules import RULES_BY_CODE

RULE = RULES_BY_CODE["DTL005"]
# The rule module's example shapes: upstream's helper (vLLM 0.28.0) and a caller feeding a cast.
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
_CALLER = """

class Attn:
    def prefill(self, kv_c, use_fp8_prefill):
        kv_dtype = kv_b_proj_input_dtype(self.kv_b_proj, use_fp8_prefill)
        if kv_dtype is not None:
            kv_c = kv_c.to(kv_dtype)
        return self.kv_b_proj(kv_c)
"""
_PATCH = ("    weight_dtype = weight.dtype if weight is not None else layer.params_dtype\n"
          "    if (weight_dtype == torch.uint8 and use_fp8_prefill) or weight_dtype == torch.int8:\n"
          "        return layer.params_dtype\n")
_QUANT_METHOD_SHAPE = _UPSTREAM_SHAPE.replace(
    "    if weight_dtype == current_platform.fp8_dtype() and not use_fp8_prefill:\n        return None\n",
    "    if weight_dtype == current_platform.fp8_dtype():\n"
    "        from pkg.quant import BlockFp8LinearMethod\n\n"
    "        # Block-FP8 quantizes its bf16 input itself.\n"
    "        if isinstance(getattr(layer, \"quant_method\", None), BlockFp8LinearMethod):\n"
    "            return None\n"
    "        if not use_fp8_prefill:\n"
    "            return None\n")

INVALID = [
    # Its fp8 case asks the quant method, which the evaluator cannot know: the callers cannot
    # be proven to agree with the configured helper, so the helper gets the branch in place.
    Invalid(
        _QUANT_METHOD_SHAPE + _CALLER, count=2,
        message_contains=("int8 storage → returns torch.int8",),
        expected_replacement=_QUANT_METHOD_SHAPE.replace(
            "    weight_dtype = weight.dtype if weight is not None else layer.params_dtype\n", _PATCH) + _CALLER,
    ),
]


@pytest.mark.parametrize("example", INVALID, ids=[f"invalid-{index}" for index in range(len(INVALID))])
def test_a_helper_asking_its_quant_method_gets_the_branch_in_place(example):
    assert_invalid(RULE, example)
    assert_passes_prefilter(example)
