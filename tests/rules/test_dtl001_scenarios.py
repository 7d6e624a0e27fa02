"""DTL001 on the longer programs it is tested on beyond the examples its module shows: guards read
through a negated predicate, `all(...)` and a storage flag (and the same code the other way
round), an alias with a `hasattr` fallback, a layer parameter of another function, a getter of
another object, a chain of model classes built in `__init__`, a helper taking
`layer: nn.Module`, and the guarded idiom of vLLM 0.27.1's MLA prefill. Checked as the rule's own
examples are (tests/rule_examples_check.py)."""

from __future__ import annotations

import pytest
from rule_examples_check import assert_invalid, assert_passes_prefilter, assert_valid

from dtype_lint.rule import Invalid, Valid
from dtype_lint.rules import RULES_BY_CODE

RULE = RULES_BY_CODE["DTL001"]
_IMPORT = "from vllm.model_executor.layers.quantization.utils.layer_input_dtype import get_layer_input_dtype\n"
_HEAD = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear, RowParallelLinear


class Attn:
    def __init__(self, kv_b_proj: ColumnParallelLinear, o_proj: RowParallelLinear):
        self.kv_b_proj = kv_b_proj
        self.o_proj = o_proj
"""
_FIXED_HEAD = _HEAD.replace("RowParallelLinear\n", "RowParallelLinear\n" + _IMPORT, 1)

_GUARDED = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear, UnquantizedLinearMethod


def is_quantized(layer) -> bool:
    return not isinstance(layer.quant_method, UnquantizedLinearMethod)


class Attn(torch.nn.Module):
    def __init__(self, hidden: int, quant_config):
        super().__init__()
        self.q_proj = ColumnParallelLinear(hidden, hidden, quant_config=quant_config)
        self.k_proj = ColumnParallelLinear(hidden, hidden, quant_config=quant_config)

    def plain(self, x):
        if is_quantized(self.q_proj):
            return self.q_proj(x)[0]
        return x.to(self.q_proj.weight.dtype)

    def grouped(self, x):
        if not all(isinstance(p.quant_method, UnquantizedLinearMethod) for p in (self.q_proj, self.k_proj)):
            return x
        return x.to(self.k_proj.weight.dtype)

    def bf16(self, x):
        bf16_weight = self.q_proj.weight.dtype == torch.bfloat16
        if bf16_weight:
            x = x.to(self.q_proj.weight.dtype)
        return x
"""
_GUARDED_WRONG_WAY = (_GUARDED.replace("if is_quantized(", "if not is_quantized(")
                      .replace("for p in (self.q_proj, self.k_proj)", "for p in (self.q_proj,)")
                      .replace("torch.bfloat16\n", "torch.int8\n"))
_GUARDED_WRONG_WAY_FIXED = (
    _GUARDED_WRONG_WAY.replace("UnquantizedLinearMethod\n", "UnquantizedLinearMethod\n" + _IMPORT, 1)
    .replace("return x.to(self.q_proj.weight.dtype)", "return x.to(get_layer_input_dtype(self.q_proj, True) or x.dtype)")
    .replace("return x.to(self.k_proj.weight.dtype)", "return x.to(get_layer_input_dtype(self.k_proj, True) or x.dtype)")
    .replace("            x = x.to(self.q_proj.weight.dtype)\n",
             "            q_proj_input_dtype = get_layer_input_dtype(self.q_proj, True)\n"
             "            if q_proj_input_dtype is not None:\n                x = x.to(q_proj_input_dtype)\n"))


_GETTER = """\
from torch import nn
from vllm.model_executor.layers.linear import ReplicatedLinear


class Drafter(nn.Module):
    def __init__(self, hidden, quant_config=None):
        super().__init__()
        self.context_proj = ReplicatedLinear(hidden, hidden, quant_config=quant_config)

    @property
    def context_dtype(self):
        return self.context_proj.weight.dtype


class Model(nn.Module):
    def __init__(self, hidden, quant_config=None):
        super().__init__()
        self.drafter = Drafter(hidden, quant_config)
        self.plain = Drafter(hidden)

    def forward(self, x, tied_weight):
        return x.to(dtype=self.drafter.context_dtype) @ tied_weight, x.to(dtype=self.plain.context_dtype)
"""


_CHAIN = """\
from torch import nn
from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding


class TextModel(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, quant_config=quant_config)


class CausalLM(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.model = TextModel(config, quant_config=quant_config)


class VisionLanguageModel(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.language_model = CausalLM(config, quant_config=quant_config)
        self.draft_model = CausalLM(config)

    def embed_images(self, image_embeds):
        draft = image_embeds.to(self.draft_model.model.embed_tokens.weight.dtype)
        return draft, image_embeds.to(self.language_model.model.embed_tokens.weight.dtype)
"""
_HOLDER = """\
from torch import nn
from vllm.model_executor.layers.linear import RowParallelLinear


def project(x, layer: nn.Module):
    return layer(x.to(layer.weight.dtype))


class Block(nn.Module):
    def __init__(self, hidden, quant_config=None):
        super().__init__()
        self.o_proj = RowParallelLinear(hidden, hidden, quant_config=quant_config)

    def forward(self, x):
        return project(x, self.o_proj)
"""
_HOLDER_FIXED = _HOLDER.replace("RowParallelLinear\n", "RowParallelLinear\n" + _IMPORT, 1).replace(
    "layer(x.to(layer.weight.dtype))", "layer(x.to(get_layer_input_dtype(layer, True) or x.dtype))")


VALID = [
    # Guards read through a negated predicate, an `all(...)` over a group of layers, and a
    # flag derived from a storage check (where it holds, the weight exists and is bf16).
    Valid(_GUARDED),
]
INVALID = [
    # A chain through model classes built in `__init__`: the embedding gets the config at the
    # end of it (and the same chain through a model built without one is clean).
    Invalid(_CHAIN, message_contains=("self.language_model.model.embed_tokens.weight.dtype",),
            expected_replacement=_CHAIN.replace("from torch import nn\n", "from torch import nn\n" + _IMPORT, 1)
            .replace("image_embeds.to(self.language_model.model.embed_tokens.weight.dtype)",
                     "image_embeds.to(get_layer_input_dtype(self.language_model.model.embed_tokens, True) "
                     "or image_embeds.dtype)")),
    # A helper taking `layer: nn.Module`: its caller passes a quantizable layer (one step).
    Invalid(_HOLDER, expected_replacement=_HOLDER_FIXED, message_contains=("`layer.weight.dtype`",)),
    # A getter of another object returning its layer's storage dtype: reported at the cast.
    Invalid(_GETTER, message_contains=("`self.drafter.context_dtype`", "context_proj.weight.dtype")),
    # The same guards, the other way round: the cast runs where the layer may be quantized.
    Invalid(_GUARDED_WRONG_WAY, expected_replacement=_GUARDED_WRONG_WAY_FIXED, count=3),
    # Through an alias with a hasattr fallback.
    Invalid(
        _HEAD + "    def f(self, x):\n        w = (\n            self.kv_b_proj.weight.dtype\n"
        "            if hasattr(self.kv_b_proj, \"weight\")\n            else self.kv_b_proj.params_dtype\n        )\n"
        "        x = x.to(w)\n        return x\n",
        expected_replacement=_FIXED_HEAD + "    def f(self, x):\n        w = get_layer_input_dtype(self.kv_b_proj, True)\n"
        "        if w is not None:\n            x = x.to(w)\n        return x\n",
        message_contains=("`w`",),
    ),
    # A local name for the layer, annotated parameter of another function.
    Invalid(
        "from vllm.model_executor.layers.linear import LinearBase\n"
        "def run(layer: LinearBase, x):\n    y = x.to(layer.weight.dtype)\n    return layer(y)\n",
        expected_replacement="from vllm.model_executor.layers.linear import LinearBase\n" + _IMPORT +
        "def run(layer: LinearBase, x):\n    y = x.to(get_layer_input_dtype(layer, True) or x.dtype)\n    return layer(y)\n",
    ),
    # The guarded idiom of vLLM 0.27.1's MLA prefill: the helper is called where the dtype
    # was read, in the loop (which may run zero times, and calls the layer).
    Invalid(
        _HEAD + "    def prefill(self, chunks, use_fp8_prefill):\n"
        "        for c in chunks:\n"
        "            kv = c[..., :4]\n"
        "            w_dtype = (\n                self.kv_b_proj.weight.dtype\n"
        "                if hasattr(self.kv_b_proj, \"weight\")\n                else self.kv_b_proj.params_dtype\n            )\n"
        "            # packed weights stay in the model dtype\n"
        "            if (\n                use_fp8_prefill or w_dtype != torch.float8_e4m3fn\n"
        "            ) and w_dtype != torch.uint8:\n"
        "                kv = kv.to(self.kv_b_proj.weight.dtype)\n"
        "            yield self.kv_b_proj(kv)\n",
        expected_replacement=_FIXED_HEAD + "    def prefill(self, chunks, use_fp8_prefill):\n"
        "        for c in chunks:\n"
        "            kv = c[..., :4]\n"
        "            kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)\n"
        "            if kv_b_proj_input_dtype is not None:\n"
        "                kv = kv.to(kv_b_proj_input_dtype)\n"
        "            yield self.kv_b_proj(kv)\n",
    ),
]


@pytest.mark.parametrize("example", VALID, ids=[f"valid-{index}" for index in range(len(VALID))])
def test_a_guarded_cast_is_not_reported(example):
    assert_valid(RULE, example)


@pytest.mark.parametrize("example", INVALID, ids=[f"invalid-{index}" for index in range(len(INVALID))])
def test_the_cast_is_reported_and_fixed_as_declared(example):
    assert_invalid(RULE, example)
    assert_passes_prefilter(example)
