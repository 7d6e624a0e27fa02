"""The regression test each patch of a transformers series adds, in transformers' own layout.

A site patch routes a cast through `get_module_input_dtype`; its test builds the class whose
method it changes from a tiny config with seeded weights (nothing downloaded), replaces the
layer the cast reads (`self.wo`, `self.patch_embedding`, ...) with the storage a quantizer leaves
there, runs the changed method on CPU and asserts that the output is finite, keeps the
activation's dtype and is close to the unquantized twin (a deep copy of the module before the
layer was replaced). The storage is the one that shows the patched bug:

- "4bit": real bitsandbytes NF4 (`Linear4bit`, uint8 `Params4bit`, computing in float32): the
  release casts the activation to uint8, which destroys it (error about 100%) or fails the matmul;
- "fp8": a linear whose weight is stored in `float8_e4m3fn` and that computes in its input's
  dtype (what FP8 checkpoints' layers keep): for the sites whose guard skips only integer or
  8-bit integer storage (`is_floating_point`, `!= torch.int8 and != torch.uint8`), which bitsandbytes
  4-bit passes; the release casts the activation to fp8, and the CPU matmul raises.

The helper patch's test is a unit test of `get_module_input_dtype` over the storages (it fails at
import before the patch). What each class needs to be built and called is in `LAYER_CASES`, one
entry per class the series changes: a spec the generator refuses to guess. A changed class
without an entry gets no test, and the series README lists it (`missing`).

Every generated test is run against the release tree before and after the series
(:func:`run_tests`): it must fail on the release and pass on the patched tree
(tests/test_hf_regression.py, and the patch's Results section quotes the run).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class LayerCase:
    """How a test builds and calls one changed class."""

    cls: str  # the class whose method the patch changes
    config: str  # expression: its tiny config (the config classes are imported by name)
    build: str  # expression: the module, from `config`
    call: str  # expression: the changed method called on `module` (seeded inputs built inline)
    targets: tuple[str, ...]  # the layers the changed casts read, as attribute paths from the module
    storage: str = "4bit"  # "4bit" | "fp8"
    output: str = "out"  # expression: the tensor compared, from the call's result `out`
    imports: tuple[str, ...] = ()  # config class names imported from `transformers`
    compare: str = "layer"  # "layer": what targets[0] returns inside the call; "output": `output`


_T5 = dict(d_model=64, d_ff=128, dropout_rate=0.0)
_T5_ACT = "dense_act_fn=\"relu\""


def _t5(cls: str, config_cls: str, gated: bool = False, extra: str = "") -> LayerCase:
    act = "dense_act_fn=\"gelu_new\", is_gated_act=True" if gated else _T5_ACT
    kw = ", ".join(f"{k}={v}" for k, v in _T5.items())
    return LayerCase(cls, f"{config_cls}({kw}, {act}{extra})", f"{cls}(config)",
                     "module(torch.randn(2, 5, 64))", ("wo",), imports=(config_cls,))


def _vision_mlp(cls: str, config_cls: str, ff: str) -> LayerCase:
    return LayerCase(cls, f"{config_cls}(hidden_size=64, {ff}=128, dropout_rate=0.0, dense_act_fn=\"gelu_new\")",
                     f"{cls}(config)", "module(torch.randn(2, 5, 64))", ("wo",), imports=(config_cls,))


def _ffn(cls: str, config_cls: str, dim: str) -> LayerCase:
    return LayerCase(cls, f"{config_cls}({dim}=64, activation_dropout=0.0, activation_function=\"relu\")",
                     f"{cls}(config, ffn_dim=128)", "module(torch.randn(2, 5, 64))", ("fc2",), storage="fp8",
                     imports=(config_cls,))


_INDEX = "hidden_size=64, index_n_heads=32, index_head_dim=32, index_topk=4"
# hidden_states, q_resid (q_lora_rank 32), (cos, sin) of an identity rotation, an additive causal mask
_HIDDEN, _Q_RESID = "torch.randn(2, 6, 64)", "torch.randn(2, 6, 32)"
_ROPE = "(torch.ones(2, 6, 16), torch.zeros(2, 6, 16))"
_MASK = "torch.zeros(2, 6, 6).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float(\"-inf\"))"


def _indexer(cls: str, config_cls: str, call: str, extra: str = ", q_lora_rank=32", rope: int = 16) -> LayerCase:
    """A sparse-attention indexer: `weights_proj` scores the heads; the method returns top-k
    indices, so the test compares what `weights_proj` returns inside it."""
    return LayerCase(cls, f"{config_cls}({_INDEX}, qk_rope_head_dim={rope}{extra}, num_hidden_layers=1)", f"{cls}(config, layer_idx=0)",
                     call, ("weights_proj",), imports=(config_cls,))


_DSA_CALL = f"module({_HIDDEN}, {_Q_RESID}, {_ROPE}, {_MASK}, None)"


def _patch_embedder(cls: str, config_cls: str, config: str, call: str, target: str = "patch_embedding",
                    storage: str = "4bit", build: str = "") -> LayerCase:
    return LayerCase(cls, f"{config_cls}({config})", build or f"{cls}(config)", call, (target,),
                     storage=storage, imports=(config_cls,))


# One entry per class the transformers 5.23.0 series changes, keyed by the modeling module.
LAYER_CASES: dict[str, tuple[LayerCase, ...]] = {
    "transformers.models.t5.modeling_t5": (_t5("T5DenseActDense", "T5Config"),
                                          _t5("T5DenseGatedActDense", "T5Config", gated=True)),
    "transformers.models.mt5.modeling_mt5": (_t5("MT5DenseActDense", "MT5Config"),
                                            _t5("MT5DenseGatedActDense", "MT5Config", gated=True)),
    "transformers.models.umt5.modeling_umt5": (_t5("UMT5DenseActDense", "UMT5Config"),
                                              _t5("UMT5DenseGatedActDense", "UMT5Config", gated=True)),
    "transformers.models.udop.modeling_udop": (_t5("UdopDenseActDense", "UdopConfig"),
                                              _t5("UdopDenseGatedActDense", "UdopConfig", gated=True)),
    "transformers.models.pop2piano.modeling_pop2piano": (
        _t5("Pop2PianoDenseActDense", "Pop2PianoConfig"),
        _t5("Pop2PianoDenseGatedActDense", "Pop2PianoConfig", gated=True)),
    "transformers.models.longt5.modeling_longt5": (_t5("LongT5DenseActDense", "LongT5Config"),),
    "transformers.models.switch_transformers.modeling_switch_transformers": (
        _t5("SwitchTransformersDenseActDense", "SwitchTransformersConfig"),),
    "transformers.models.kosmos2_5.modeling_kosmos2_5": (
        _vision_mlp("Kosmos2_5VisionMlp", "Kosmos2_5VisionConfig", "intermediate_size"),),
    "transformers.models.pix2struct.modeling_pix2struct": (
        _vision_mlp("Pix2StructVisionMlp", "Pix2StructVisionConfig", "d_ff"),
        _vision_mlp("Pix2StructTextDenseGatedActDense", "Pix2StructTextConfig", "d_ff")),
    "transformers.models.nllb_moe.modeling_nllb_moe": (_ffn("NllbMoeDenseActDense", "NllbMoeConfig", "d_model"),),
    "transformers.models.seamless_m4t.modeling_seamless_m4t": (
        _ffn("SeamlessM4TFeedForwardNetwork", "SeamlessM4TConfig", "hidden_size"),),
    "transformers.models.seamless_m4t_v2.modeling_seamless_m4t_v2": (
        _ffn("SeamlessM4Tv2FeedForwardNetwork", "SeamlessM4Tv2Config", "hidden_size"),),
    "transformers.models.siglip2.modeling_siglip2": (
        LayerCase("Siglip2VisionEmbeddings",
                  "Siglip2VisionConfig(hidden_size=64, num_channels=3, patch_size=4, num_patches=16)",
                  "Siglip2VisionEmbeddings(config)",
                  "module(torch.rand(2, 16, 48), torch.tensor([[4, 4], [4, 4]]))", ("patch_embedding",),
                  imports=("Siglip2VisionConfig",)),),
    "transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe": (
        LayerCase("Ernie4_5_VLMoePatchEmbed", "None",
                  "Ernie4_5_VLMoePatchEmbed(patch_size=4, in_channels=4, embed_dim=64)",
                  "module(torch.rand(6, 64))", ("proj",)),),
    "transformers.models.neomme.modeling_neomme": (
        LayerCase("NeoMMEMultiVectorHead", "NeoMMEConfig(hidden_size=64, embedding_dim=32)",
                  "NeoMMEMultiVectorHead(config)",
                  "module(torch.randn(2, 5, 64), torch.ones(2, 5, dtype=torch.long))", ("proj",),
                  imports=("NeoMMEConfig",)),),
    "transformers.models.timesfm2_5.modeling_timesfm2_5": (
        LayerCase("TimesFm2_5ResidualBlock", "TimesFm2_5Config()",
                  "TimesFm2_5ResidualBlock(config, input_dims=64, hidden_dims=128, output_dims=64, use_bias=True)",
                  "module(torch.randn(2, 5, 64))", ("input_layer",), storage="fp8",
                  imports=("TimesFm2_5Config",)),),
    "transformers.models.deepseek_v32.modeling_deepseek_v32": (
        _indexer("DeepseekV32Indexer", "DeepseekV32Config", _DSA_CALL),),
    "transformers.models.glm_moe_dsa.modeling_glm_moe_dsa": (
        _indexer("GlmMoeDsaIndexer", "GlmMoeDsaConfig", _DSA_CALL),),
    "transformers.models.axk2.modeling_axk2": (_indexer("AXK2Indexer", "AXK2Config", _DSA_CALL),),
    "transformers.models.dots3_note.modeling_dots3_note": (
        _indexer("Dots3NoteTextIndexer", "Dots3NoteTextConfig", _DSA_CALL),),
    "transformers.models.hy_v4.modeling_hy_v4": (_indexer("HYV4Indexer", "HYV4Config", _DSA_CALL),),
    "transformers.models.mistral_large4.modeling_mistral_large4": (
        _indexer("MistralLarge4TextIndexer", "MistralLarge4TextConfig",
                 f"module({_HIDDEN}, {_ROPE}, {_MASK}, torch.arange(6).expand(2, 6), None)", extra=""),),
    "transformers.models.glm5_next.modeling_glm5_next": (
        _indexer("Glm5NextTextIndexer", "Glm5NextTextConfig",
                 f"module({_HIDDEN}, {_Q_RESID}, torch.ones(2, 6, dtype=torch.bool), None)",
                 extra=", q_lora_rank=32, index_kpool=2", rope=0),),
    "transformers.models.gemma4.modeling_gemma4": (
        _patch_embedder("Gemma4VisionPatchEmbedder", "Gemma4VisionConfig",
                        "hidden_size=64, patch_size=4, position_embedding_size=8",
                        "module(torch.rand(2, 6, 48), torch.randint(0, 8, (2, 6, 2)), torch.zeros(2, 6, dtype=torch.bool))",
                        target="input_proj", storage="fp8"),),
    "transformers.models.gemma4_unified.modeling_gemma4_unified": (
        _patch_embedder("Gemma4UnifiedVisionEmbedder", "Gemma4UnifiedVisionConfig",
                        "patch_size=2, pooling_kernel_size=2, model_patch_size=4, mm_embed_dim=64, mm_posemb_size=8, output_proj_dims=64",
                        "module(torch.rand(2, 6, 48), torch.randint(0, 8, (2, 6, 2)))", target="patch_dense",
                        storage="fp8",
                        build="Gemma4UnifiedVisionEmbedder(config, Gemma4UnifiedTextConfig(hidden_size=64))"),
        LayerCase("Gemma4UnifiedMultimodalEmbedder", "Gemma4UnifiedVisionConfig(output_proj_dims=64)",
                  "Gemma4UnifiedMultimodalEmbedder(config, Gemma4UnifiedTextConfig(hidden_size=64))",
                  "module(torch.randn(2, 6, 64))", ("embedding_projection",), storage="fp8",
                  imports=("Gemma4UnifiedVisionConfig", "Gemma4UnifiedTextConfig"))),
    "transformers.models.cosmos3_edge.modeling_cosmos3_edge": (
        _patch_embedder("Cosmos3EdgeVisionEmbeddings", "Cosmos3EdgeVisionConfig",
                        "hidden_size=64, num_channels=3, patch_size=4, num_patches=16, spatial_merge_size=2",
                        "module(torch.rand(16, 48), torch.tensor([[1, 4, 4]]))"),),
    "transformers.models.muse_glimmer.modeling_muse_glimmer": (
        _patch_embedder("MuseGlimmerVisionPatchEmbedder", "MuseGlimmerVisionConfig",
                        "hidden_size=64, patch_size=4, patch_temporal=2, pos_emb_height=4, pos_emb_width=4",
                        "module(torch.rand(16, 96), torch.tensor([[1, 4, 4]]))"),),
    "transformers.models.muse_spark.modeling_muse_spark": (
        _patch_embedder("MuseSparkVisionPatchEmbedder", "MuseSparkVisionConfig",
                        "hidden_size=64, patch_size=4, patch_temporal=2, pos_emb_height=4, pos_emb_width=4",
                        "module(torch.rand(16, 96), torch.tensor([[1, 4, 4]]))"),),
}


HELPER_TEST_PATH = "tests/utils/test_get_module_input_dtype.py"
_LICENSE = """\
# Copyright 2026 The HuggingFace Team. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""

# The storages a test puts in place of a layer; the text is part of each generated test file.
_STORAGE_HELPERS = '''

def _linear_4bit(linear):
    """`linear` as bitsandbytes 4-bit leaves it: an NF4 `Linear4bit` (uint8 `Params4bit`) computing in float32."""
    import bitsandbytes as bnb

    quantized = bnb.nn.Linear4bit(
        linear.in_features,
        linear.out_features,
        bias=linear.bias is not None,
        compute_dtype=torch.float32,
        quant_type="nf4",
    )
    quantized.weight = bnb.nn.Params4bit(linear.weight.data.clone(), requires_grad=False, quant_type="nf4")
    if linear.bias is not None:
        quantized.bias = nn.Parameter(linear.bias.data.clone(), requires_grad=False)
    return quantized.to("cpu")


class _Fp8StorageLinear(nn.Linear):
    """A linear whose weight is stored in float8_e4m3fn and that computes in its input's dtype, as
    the layers of FP8 checkpoints do (the weight passes `is_floating_point`, but is no compute dtype)."""

    def forward(self, input):
        return nn.functional.linear(input, self.weight.to(input.dtype), self.bias)


def _linear_fp8(linear):
    stored = _Fp8StorageLinear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    stored.weight = nn.Parameter(linear.weight.data.to(torch.float8_e4m3fn), requires_grad=False)
    if linear.bias is not None:
        stored.bias = nn.Parameter(linear.bias.data.clone(), requires_grad=False)
    return stored


def _replace(module, path, make):
    """Replace the submodule at dotted `path` with `make(submodule)`; return the replaced original."""
    *parents, name = path.split(".")
    owner = module
    for part in parents:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    return original
'''

# The relative error of a replaced layer's output against the unquantized twin: NF4 costs about
# 10% on these random layers, fp8 storage (rounded weights, compared with the twin holding the
# same rounded weights) almost nothing; the release's uint8/fp8 cast costs about 100% or raises.
MAX_ERROR = {"4bit": 0.3, "fp8": 1e-3}


@dataclass(frozen=True)
class SiteTest:
    path: str
    text: str
    classes: tuple[str, ...]
    storages: tuple[str, ...]


def _changed_classes(before: str, lines: set[int]) -> list[str]:
    tree = ast.parse(before)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(node.lineno <= line <= (node.end_lineno or node.lineno)
                                                  for line in lines):
            out.append(node.name)
    return out


def modeling_module(path: str) -> str:
    """The runtime module of a changed file: a `modular_x.py` source stands for `modeling_x.py`."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    parts[-1] = re.sub(r"^modular_", "modeling_", parts[-1])
    return ".".join(parts)


def plan_tests(changes) -> tuple[list[LayerCase], list[str]]:
    """(the cases covering the changed classes of these file changes, the classes none covers).
    A class changed in both `modular_x.py` and `modeling_x.py` is one case: the test runs the
    generated module, which the modular source regenerates."""
    cases: list[LayerCase] = []
    missing: list[str] = []
    seen: set[tuple[str, str]] = set()
    for ch in changes:
        if ch.test or ch.before is None or not ch.findings:
            continue
        module = modeling_module(ch.path)
        for cls in _changed_classes(ch.before.decode("utf-8"), {f.span.line for f in ch.findings}):
            if (module, cls) in seen:
                continue
            seen.add((module, cls))
            case = next((c for c in LAYER_CASES.get(module, ()) if c.cls == cls), None)
            if case is None:
                missing.append(f"{module}.{cls}")
            else:
                cases.append(case)
    return cases, missing


def _module_of_case(case: LayerCase) -> str:
    return next(m for m, cs in LAYER_CASES.items() if case in cs)


def test_path(cases: list[LayerCase]) -> str:
    module = _module_of_case(cases[0])
    model = module.split(".")[2]
    return f"tests/models/{model}/test_modeling_{model}_quantized_input.py"


def site_test(cases: list[LayerCase]) -> SiteTest:
    """One test file for the cases of one patch (one model directory)."""
    modules: dict[str, list[str]] = {}
    configs: set[str] = set()
    for case in cases:
        modules.setdefault(_module_of_case(case), []).append(case.cls)
        configs.update(case.imports)
    imports = [f"    from transformers import {', '.join(sorted(configs))}"] if configs else []
    for module, classes in modules.items():
        imports.append(f"    from {module} import {', '.join(classes)}")
    classes = [c.cls for c in cases]
    doc = (f'"""Quantized layers inside {", ".join(f"`{c}`" for c in classes)}: the input keeps its dtype.\n\n'
           "A quantizer replaces the layer when the model is loaded, and its weight's dtype is then a storage\n"
           "dtype (uint8 under bitsandbytes 4-bit, float8_e4m3fn in FP8 checkpoints): casting the activation\n"
           "to it destroys it or breaks the matmul. Each test replaces the layer in a tiny module with seeded\n"
           "weights and compares the output with the unquantized module's.\n"
           '"""\n')
    body = [_LICENSE + doc, "import copy", "import unittest", "",
            "from transformers import is_torch_available",
            "from transformers.testing_utils import require_bitsandbytes, require_torch", "", "",
            "if is_torch_available():", "    import torch", "    from torch import nn", "", *imports,
            _STORAGE_HELPERS]
    for case in cases:
        body.append(_case_class(case))
    return SiteTest(test_path(cases), "\n".join(body).rstrip() + "\n", tuple(classes),
                    tuple(sorted({c.storage for c in cases})))


def _case_class(case: LayerCase) -> str:
    make = "_linear_4bit" if case.storage == "4bit" else "_linear_fp8"
    decorators = "@require_torch\n@require_bitsandbytes\n" if case.storage == "4bit" else "@require_torch\n"
    what = ("bitsandbytes 4-bit" if case.storage == "4bit" else "fp8 storage")
    targets = " and ".join(f"`{t}`" for t in case.targets)
    name = "_and_".join(t.replace(".", "_") for t in case.targets)
    lines = [f"        _replace(module, \"{t}\", {make})" for t in case.targets]
    if case.storage == "fp8":
        # The twin holds the same rounded weights in the compute dtype: only the cast differs.
        lines += [f"        _replace(twin, \"{t}\", _round_to_fp8)" for t in case.targets]
    config_line = f"        config = {case.config}\n" if case.config != "None" else ""
    twin_call = case.call.replace("module(", "twin(", 1).replace("module.", "twin.", 1)
    if case.compare == "layer":
        # What the layer the cast feeds returns, inside the changed method (its own output may be
        # indices or a sum in which the layer's share is small).
        target = case.targets[0]
        run = (f"        expected = _outputs_of(twin, \"{target}\", lambda: {twin_call})\n"
               f"        output = _outputs_of(module, \"{target}\", lambda: {case.call})\n")
        checked = f"what `{target}` returns inside the call"
    else:
        run = (f"        out = {twin_call}\n        expected = {case.output}\n"
               f"        torch.manual_seed(1)\n"
               f"        out = {case.call}\n        output = {case.output}\n")
        checked = "the output"
    return f'''

{decorators}class {case.cls}QuantizedInputTest(unittest.TestCase):
    def test_{name}_in_{case.storage}(self):
        """{case.cls} with {targets} in {what}: {checked} is finite, keeps the
        activation dtype and is close to the unquantized module's."""
        torch.manual_seed(0)
{config_line}        module = {case.build}.eval()
        twin = copy.deepcopy(module)
{chr(10).join(lines)}
        torch.manual_seed(1)
        with torch.no_grad():
{_indent(run)}
        self.assertEqual(output.dtype, expected.dtype)
        self.assertTrue(torch.isfinite(output).all())
        error = ((output.float() - expected.float()).norm() / expected.float().norm()).item()
        self.assertLess(error, {MAX_ERROR[case.storage]})
'''


def _indent(block: str) -> str:
    return "\n".join("    " + line if line else line for line in block.rstrip("\n").split("\n"))


_ROUND_FP8 = '''

def _outputs_of(module, path, call):
    """What the submodule at `path` returns during `call()` (its first call): seeded inputs, so the
    module and its twin see the same ones."""
    layer = module.get_submodule(path)
    seen = []
    handle = layer.register_forward_hook(lambda _layer, _args, result: seen.append(result))
    try:
        torch.manual_seed(1)
        call()
    finally:
        handle.remove()
    return seen[0]


def _round_to_fp8(linear):
    """The twin of an fp8-stored layer: the same rounded weight, kept in the compute dtype."""
    linear.weight.data = linear.weight.data.to(torch.float8_e4m3fn).to(linear.weight.dtype)
    return linear
'''
_STORAGE_HELPERS += _ROUND_FP8


def helper_test(module: str, func: str) -> SiteTest:
    """The unit test of the helper the first patch adds: each storage a quantizer leaves."""
    doc = (f'"""`{func}`: the dtype a module\'s forward expects of its input, whatever a quantizer left.\n'
           '"""\n')
    text = _LICENSE + doc + f'''
import unittest

from transformers import is_torch_available
from transformers.testing_utils import require_bitsandbytes, require_torch


if is_torch_available():
    import torch
    from torch import nn

    from {module} import {func}


@require_torch
class GetModuleInputDtypeTest(unittest.TestCase):
    def _linear(self, dtype):
        return nn.Linear(64, 32).to(dtype)

    def test_float_weight_is_the_input_dtype(self):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            with self.subTest(dtype=dtype):
                self.assertEqual({func}(self._linear(dtype)), dtype)

    def test_storage_dtypes_keep_the_activation(self):
        for dtype in (torch.float8_e4m3fn, torch.int8, torch.uint8):
            with self.subTest(dtype=dtype):
                linear = nn.Linear(64, 32)
                linear.weight = nn.Parameter(linear.weight.data.to(dtype), requires_grad=False)
                self.assertIsNone({func}(linear))

    def test_no_weight_keeps_the_activation(self):
        class QWeightOnly(nn.Module):  # GPTQ/AWQ/HQQ layers keep packed tensors under other names
            def __init__(self):
                super().__init__()
                self.register_buffer("qweight", torch.zeros(8, 32, dtype=torch.int32))

        self.assertIsNone({func}(QWeightOnly()))

    @require_bitsandbytes
    def test_bitsandbytes_4bit_is_its_compute_dtype(self):
        import bitsandbytes as bnb

        linear = bnb.nn.Linear4bit(64, 32, compute_dtype=torch.bfloat16, quant_type="nf4")
        linear.weight = bnb.nn.Params4bit(torch.randn(32, 64), requires_grad=False, quant_type="nf4")
        linear = linear.to("cpu")
        self.assertEqual(linear.weight.dtype, torch.uint8)
        self.assertEqual({func}(linear), torch.bfloat16)
'''
    return SiteTest(HELPER_TEST_PATH, text, (func,), ("unit",))


# --- running the tests against a release tree -------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    passed: bool
    message: str  # the first line of the failure or error, "" when passed


def run_tests(tree: Path, test_paths: list[str], timeout: int = 900) -> dict[str, dict[str, Outcome]]:
    """Run the test files (relative to `tree`) with `tree` first on sys.path, so `transformers` is
    the tree's copy (the installed package's dependencies serve it). Returns file -> test id ->
    outcome; a file whose tests were not collected maps to {"<collection>": failure}."""
    with tempfile.TemporaryDirectory(prefix="dtype-lint-hf-tests-") as tmp:
        report = Path(tmp) / "junit.xml"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        # -p no:cacheprovider: write nothing into the tree; rootdir = the tree: its tests/ layout.
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               "--continue-on-collection-errors", "--rootdir", str(tree), f"--junitxml={report}", *test_paths]
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
        if not report.is_file():
            raise RuntimeError(f"pytest wrote no report (exit {proc.returncode}):\n{proc.stdout[-2000:]}"
                               f"{proc.stderr[-2000:]}")
        return _parse_junit(report.read_text(encoding="utf-8"), test_paths, tree)


def _parse_junit(xml: str, test_paths: list[str], tree: Path) -> dict[str, dict[str, Outcome]]:
    out: dict[str, dict[str, Outcome]] = {p: {} for p in test_paths}
    by_module = {p.replace("/", ".").removesuffix(".py"): p for p in test_paths}
    for case in ElementTree.fromstring(xml).iter("testcase"):
        classname = case.get("classname", "")
        name = case.get("name", "")
        path = next((p for m, p in by_module.items() if classname == m or classname.startswith(m + ".")), None)
        if path is None:
            path = next((p for p in test_paths if PurePosixPath(p).stem in classname or PurePosixPath(p).stem in name),
                        None)
        if path is None:
            continue
        problem = next(iter(case.findall("failure") + case.findall("error")), None)
        skipped = case.find("skipped")
        test_id = f"{classname.rsplit('.', 1)[-1]}.{name}" if "." in classname else name
        if problem is not None:
            text = (problem.get("message") or problem.text or "").strip().splitlines()
            out[path][test_id] = Outcome(False, (text[0] if text else "failed")[:160])
        elif skipped is not None:
            out[path][test_id] = Outcome(False, "skipped: " + (skipped.get("message") or "")[:140])
        else:
            out[path][test_id] = Outcome(True, "")
    return out


def result_lines(before: dict[str, Outcome], after: dict[str, Outcome], label: str) -> list[str]:
    """A patch's Results section: each test on the release and with the patch."""
    lines = ["The new test on CPU, on the release's code and with this patch:", ""]
    for test_id in sorted(set(before) | set(after)):
        b, a = before.get(test_id), after.get(test_id)
        lines.append(f"    {test_id}")
        lines.append(f"      {label}: {'passed' if b and b.passed else 'FAILED: ' + (b.message if b else 'not run')}")
        lines.append(f"      patched: {'passed' if a and a.passed else 'FAILED: ' + (a.message if a else 'not run')}")
    return lines
