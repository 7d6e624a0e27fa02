"""The Hugging Face backend family (#22): our own model code in transformers' shapes, zero config.

A plain `nn.Linear` attribute of a model file that subclasses `PreTrainedModel` is replaced by the
quantizers at load time; the finding names what each leaves in `.weight`. Partial guards narrow
the storages; skips (`_keep_in_fp32_modules`, lm_head) narrow the quantizers. The real trees and
the real quantizers are tested in tests/test_hf_verify.py (slow).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from cli_runner import dtl

from dtype_lint.ecosystems.hf.family import LINEAR, LINEAR_SUBCLASS, reaching
from dtype_lint.ecosystems.hf.helper import HF_HELPER_SOURCE

MODEL = textwrap.dedent('''\
    import torch
    from torch import nn
    from transformers import PreTrainedModel


    class DenseActDense(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.wi = nn.Linear(64, 128)
            self.wo = nn.Linear(128, 64)
            self.proj = nn.Linear(64, 64)
            self.norm = nn.LayerNorm(64)
            self.conv = nn.Conv2d(3, 8, 2)

        def forward(self, hidden_states):
            h = self.wi(hidden_states)
            if self.wo.weight.dtype != torch.int8:
                h = h.to(self.wo.weight.dtype)
            x = hidden_states.to(self.proj.weight.dtype)
            if (dt := self.proj.weight.dtype).is_floating_point:
                x = x.to(dt)
            if self.proj.weight.dtype in (torch.float16, torch.bfloat16):
                x = x.to(self.proj.weight.dtype)
            y = x.to(self.norm.weight.dtype)
            z = x.to(self.conv.weight.dtype)
            clip = torch.finfo(self.wi.weight.dtype).max
            return self.wo(h), y, z, clip


    class Model(PreTrainedModel):
        _keep_in_fp32_modules = ["wo"]

        def __init__(self, config):
            super().__init__(config)
            self.block = DenseActDense(config)
            self.lm_head = nn.Linear(64, 128)

        def forward(self, x):
            return self.lm_head(x.to(self.lm_head.weight.dtype))
''')


def _check(tmp_path: Path, text: str) -> dict[int, dict]:
    (tmp_path / "model.py").write_text(text)
    proc = dtl(tmp_path, "check", ".", "--no-cache", "--output-format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    return {f["line"]: f for f in json.loads(proc.stdout)["findings"]}


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_hf_model_file_zero_config(tmp_path):
    found = _check(tmp_path, MODEL)
    # Unguarded cast to an nn.Linear's dtype: every quantizer of transformers, in HF words.
    proj = found[_line(MODEL, "x = hidden_states.to(self.proj")]
    assert proj["code"] == "DTL001"
    assert "uint8 under bitsandbytes 4-bit" in proj["message"] and "int8 under bitsandbytes 8-bit" in proj["message"]
    assert "absent under GPTQ/AWQ/HQQ" in proj["message"] and "Marlin" not in proj["message"]
    # `is_floating_point` misses fp8 and raises without `.weight`.
    partial = found[_line(MODEL, "x = x.to(dt)")]
    assert "float8_e4m3fn" in partial["message"] and "uint8" not in partial["message"]
    # `!= torch.int8` on a `_keep_in_fp32_modules` layer: only the quantizers that ignore the
    # list reach it (HQQ, GPTQ), and the guard raises there.
    wo = found[_line(MODEL, "h = h.to(self.wo")]
    assert "GPTQ/HQQ" in wo["message"] and "bitsandbytes" not in wo["message"]
    # A float-dtype guard keeps out every storage but the missing `.weight`, on which it raises.
    floats = found[_line(MODEL, "x = x.to(self.proj.weight.dtype)")]
    assert "absent under GPTQ/AWQ/HQQ" in floats["message"] and "int8" not in floats["message"]
    clip = found[_line(MODEL, "torch.finfo")]
    assert "finfo" in clip["message"]
    # A norm, a Conv2d (no transformers quantizer replaces it), the lm_head (skipped by default by
    # all but GGUF, which does not load this architecture): clean.
    for needle in ("y = x.to", "z = x.to", "self.lm_head(x.to"):
        assert _line(MODEL, needle) not in found, needle


def test_not_an_hf_model_file(tmp_path):
    """The same code without an HF model base: plain torch layers, never quantized."""
    found = _check(tmp_path, MODEL.replace("from transformers import PreTrainedModel", "PreTrainedModel = object"))
    assert not found


def test_engine_file_borrowing_an_hf_class_is_left_to_the_engine(tmp_path):
    text = MODEL.replace("from transformers import PreTrainedModel",
                         "from transformers import PreTrainedModel\nfrom vllm.config import VllmConfig")
    assert not _check(tmp_path, text)


def test_which_quantizers_reach_what():
    tf = frozenset({"transformers"})
    names = {q.name for q in reaching(tf, LINEAR_SUBCLASS, "proj", {})}
    assert names == {"GPTQ", "HQQ"}  # transformers' bnb, AWQ, FP8 replace only the exact type
    diffusers = {q.name for q in reaching(frozenset({"diffusers"}), LINEAR_SUBCLASS, "proj", {})}
    assert {"bitsandbytes 4-bit", "layerwise casting"} <= diffusers
    assert "layerwise casting" not in {q.name for q in reaching(frozenset({"diffusers"}), LINEAR, "norm_out", {})}
    kept = {q.name for q in reaching(tf, LINEAR, "wo", {"_keep_in_fp32_modules": ["wo"]})}
    assert kept == {"GPTQ", "HQQ"}
    assert {q.name for q in reaching(tf, LINEAR, "q_proj", {}, "transformers.models.llama.modeling_llama")} >= {"GGUF"}


def test_helper_template_decides_per_quantizer():
    import torch

    namespace: dict = {}
    exec(HF_HELPER_SOURCE, namespace)
    helper = namespace["get_module_input_dtype"]
    linear = torch.nn.Linear(4, 4).to(torch.bfloat16)
    assert helper(linear) is torch.bfloat16
    linear.weight.data = linear.weight.data.to(torch.float8_e4m3fn)
    assert helper(linear) is None  # fp8 storage: keep the activation's dtype
    linear.weight = torch.nn.Parameter(torch.zeros(4, 4, dtype=torch.uint8), requires_grad=False)
    assert helper(linear) is None
    linear.compute_dtype = torch.float16  # bitsandbytes 4-bit states its compute dtype
    assert helper(linear) is torch.float16
    del linear.weight
    linear.compute_dtype = None
    assert helper(linear) is None  # GPTQ/HQQ: no `.weight`


DIFFUSERS_MODEL = textwrap.dedent('''\
    import torch
    from torch import nn
    from diffusers import ModelMixin


    class TimestepEmbedding(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear_1 = nn.Linear(64, 64)
            self.linear_2 = nn.Linear(64, 64)


    class Transformer(ModelMixin):
        def __init__(self):
            super().__init__()
            self.time_embedder = TimestepEmbedding()

        def forward(self, timestep):
            time_embedder_dtype = next(iter(self.time_embedder.parameters())).dtype
            if timestep.dtype != time_embedder_dtype and time_embedder_dtype != torch.int8:
                timestep = timestep.to(time_embedder_dtype)
            return self.time_embedder.linear_1(timestep)
''')


def test_first_parameter_of_a_diffusers_block(tmp_path):
    """diffusers' Wan shape: the first parameter is `time_embedder.linear_1.weight`; `!= torch.int8`
    misses bitsandbytes 4-bit's uint8 and layerwise casting's fp8."""
    found = _check(tmp_path, DIFFUSERS_MODEL)
    site = found[_line(DIFFUSERS_MODEL, "timestep = timestep.to")]
    assert "uint8 under bitsandbytes 4-bit" in site["message"] and "float8_e4m3fn under layerwise casting" in site["message"]
    assert "int8 under bitsandbytes 8-bit" not in site["message"]


SEQUENTIAL = textwrap.dedent('''\
    import torch
    from torch import nn
    from diffusers import ModelMixin


    class TimestepEmbedder(ModelMixin):
        def __init__(self):
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(256, 64), nn.SiLU(), nn.Linear(64, 64))

        def forward(self, t_freq):
            weight_dtype = self.mlp[0].weight.dtype
            if weight_dtype.is_floating_point:
                t_freq = t_freq.to(weight_dtype)
            return self.mlp(t_freq)
''')


def test_sequential_item(tmp_path):
    """diffusers' z_image shape: `self.mlp[0]` is the Sequential's first nn.Linear; the
    `is_floating_point` guard leaves layerwise casting's fp8."""
    found = _check(tmp_path, SEQUENTIAL)
    site = found[_line(SEQUENTIAL, "t_freq = t_freq.to")]
    assert "float8_e4m3fn under layerwise casting" in site["message"] and "uint8" not in site["message"]


def test_first_parameter_of_a_sequential_and_new_zeros(tmp_path):
    """`next(self.time_embedding.parameters())` of an `nn.Sequential` is its first nn.Linear's
    weight; `t.new_zeros(..., dtype=L.weight.dtype)` allocates in HF code (esmfold2's one-hot)."""
    text = SEQUENTIAL.replace("self.mlp[0].weight.dtype", "next(self.mlp.parameters()).dtype") + textwrap.dedent('''\

        def one_hot(self, binned):
            return binned.new_zeros(4, dtype=self.mlp[0].weight.dtype)
    ''').replace("\n", "\n    ").rstrip() + "\n"
    found = _check(tmp_path, text)
    assert "float8_e4m3fn under layerwise casting" in found[_line(text, "t_freq = t_freq.to")]["message"]
    alloc = found[_line(text, "new_zeros")]
    assert alloc["code"] == "DTL002" and "uint8 under bitsandbytes 4-bit" in alloc["message"]


def test_a_method_only_init_calls_runs_before_quantization(tmp_path):
    """swinv2: a buffer built in `__init__` (through a helper method only `__init__` calls) in the
    first layer's dtype is made before any quantizer replaced the layer."""
    text = textwrap.dedent('''\
        import torch
        from torch import nn
        from transformers import PreTrainedModel


        class Attention(PreTrainedModel):
            def __init__(self, config):
                super().__init__(config)
                self.mlp = nn.Sequential(nn.Linear(2, 512), nn.ReLU(), nn.Linear(512, 4))
                self.table = self.make_table()

            def make_table(self):
                return torch.zeros(4, 2).to(next(self.mlp.parameters()).dtype)

            def forward(self, x):
                return x.to(next(self.mlp.parameters()).dtype)
    ''')
    found = _check(tmp_path, text)
    assert _line(text, "torch.zeros(4, 2)") not in found
    assert _line(text, "return x.to(") in found


def test_the_layer_of_a_block_defined_in_another_file(tmp_path):
    """diffusers #13464 (Ernie-Image before the fix, never released: diffusers commit dc8d903217):
    `sample.to(self.time_embedding.linear_1.weight.dtype)`, the block's class defined in the
    package's shared `embeddings.py`; GGUF (uint8) is what the report hit."""
    package = tmp_path / "diffusers"
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models" / "__init__.py").write_text("")
    (package / "models" / "embeddings.py").write_text(textwrap.dedent('''\
        from torch import nn


        class TimestepEmbedding(nn.Module):
            def __init__(self, in_channels, time_embed_dim):
                super().__init__()
                self.linear_1 = nn.Linear(in_channels, time_embed_dim)
                self.linear_2 = nn.Linear(time_embed_dim, time_embed_dim)
    '''))
    model = textwrap.dedent('''\
        import torch
        from torch import nn

        from .embeddings import TimestepEmbedding
        from .modeling_utils import ModelMixin


        class ImageTransformer(ModelMixin):
            def __init__(self, hidden_size):
                super().__init__()
                self.time_embedding = TimestepEmbedding(hidden_size, hidden_size)

            def forward(self, hidden_states, sample):
                sample = sample.to(self.time_embedding.linear_1.weight.dtype)
                return self.time_embedding(sample)
    ''')
    (package / "models" / "modeling_utils.py").write_text("from torch import nn\n\n\nclass ModelMixin(nn.Module):\n    pass\n")
    (package / "models" / "transformer_image.py").write_text(model)
    proc = dtl(tmp_path, "check", ".", "--no-cache", "--output-format", "json")
    found = {(f["path"], f["line"]): f for f in json.loads(proc.stdout)["findings"]}
    site = found[("diffusers/models/transformer_image.py", _line(model, "sample = sample.to"))]
    assert "uint8 under bitsandbytes 4-bit/GGUF" in site["message"]
    assert "get_module_input_dtype(self.time_embedding.linear_1)" in site["message"]


def test_first_parameter_fix_gives_the_helper_the_layer_holding_it(tmp_path):
    """diffusers' Wan family: `next(iter(self.time_embedder.parameters())).dtype` under `!= torch.int8`
    is routed through `get_module_input_dtype(self.time_embedder.linear_1)`, the layer whose weight
    that first parameter is; the guard's storage test and the alias it no longer needs go."""
    (tmp_path / "model.py").write_text(DIFFUSERS_MODEL)
    proc = dtl(tmp_path, "check", ".", "--no-cache", "--fix")
    assert proc.returncode in (0, 1), proc.stderr
    fixed = (tmp_path / "model.py").read_text()
    assert ("        time_embedder_input_dtype = get_module_input_dtype(self.time_embedder.linear_1)\n"
            "        if time_embedder_input_dtype is not None and timestep.dtype != time_embedder_input_dtype:\n"
            "            timestep = timestep.to(time_embedder_input_dtype)\n") in fixed
    assert "parameters()" not in fixed and "torch.int8" not in fixed
    assert not _check(tmp_path, fixed)  # clean after the fix


HOISTED = textwrap.dedent('''\
    import torch
    from torch import nn
    from diffusers import ModelMixin


    class Block(ModelMixin):
        def __init__(self):
            super().__init__()
            self.to_q = nn.Linear(64, 64)
            self.time_proj = nn.Identity()
            self.time_embedding = nn.Sequential(nn.Linear(64, 64), nn.SiLU())
            self.to_q_custom = nn.Linear(64, 64)

        def forward(self, h, t):
            query = self.to_q_custom(h).to(self.to_q.weight.dtype)
            temb = self.time_embedding(self.time_proj(t).to(dtype=next(self.time_embedding.parameters()).dtype))
            other = [self.to_q_custom(x).to(self.to_q.weight.dtype) for x in h]
            return query, temb, other
''')


def test_a_cast_whose_receiver_is_a_call_gets_the_receiver_named_first(tmp_path):
    """diffusers' custom-diffusion processors and Wan-Animate 2: `f(x).to(L.weight.dtype)` cannot
    take `or f(x).dtype` (f would run twice); the receiver is named on the line before, where it
    runs first anyway. Inside a comprehension it may run zero or many times: no fix."""
    (tmp_path / "model.py").write_text(HOISTED)
    proc = dtl(tmp_path, "check", ".", "--no-cache", "--fix")
    assert proc.returncode in (0, 1), proc.stderr
    fixed = (tmp_path / "model.py").read_text()
    assert ("        to_q_custom_out = self.to_q_custom(h)\n"
            "        query = to_q_custom_out.to(get_module_input_dtype(self.to_q) or to_q_custom_out.dtype)\n"
            "        time_proj_out = self.time_proj(t)\n"
            "        temb = self.time_embedding(time_proj_out.to(dtype=get_module_input_dtype(self.time_embedding[0]) "
            "or time_proj_out.dtype))\n") in fixed
    assert "other = [self.to_q_custom(x).to(self.to_q.weight.dtype) for x in h]" in fixed
    assert list(_check(tmp_path, fixed)) == [_line(fixed, "other = [")]


def test_a_hand_written_fallback_becomes_the_helper_or_the_fallback(tmp_path):
    """diffusers' Wan-Animate: `dt` is the weight dtype under `is_floating_point`, else the hidden
    states' dtype; fp8 passes the test. The `if`/`else` becomes `dt = helper(L) or fallback`."""
    text = (DIFFUSERS_MODEL.split("    class Transformer")[0] + textwrap.dedent('''\
        class Embedding(ModelMixin):
            def __init__(self):
                super().__init__()
                self.time_embedder = TimestepEmbedding()

            def forward(self, timestep, encoder_hidden_states):
                if self.time_embedder.linear_1.weight.dtype.is_floating_point:
                    time_embedder_dtype = self.time_embedder.linear_1.weight.dtype
                else:
                    time_embedder_dtype = encoder_hidden_states.dtype

                return self.time_embedder.linear_1(timestep.to(time_embedder_dtype))
    '''))
    assert "float8_e4m3fn under layerwise casting" in _check(tmp_path, text)[_line(text, "timestep.to(")]["message"]
    proc = dtl(tmp_path, "check", ".", "--no-cache", "--fix")
    assert proc.returncode in (0, 1), proc.stderr
    fixed = (tmp_path / "model.py").read_text()
    assert ("        time_embedder_dtype = get_module_input_dtype(self.time_embedder.linear_1) or "
            "encoder_hidden_states.dtype\n\n        return self.time_embedder.linear_1(timestep.to(time_embedder_dtype))\n") in fixed
    assert "is_floating_point" not in fixed and not _check(tmp_path, fixed)


def test_a_hand_written_helper_with_a_compute_dtype_elif_becomes_the_helper(tmp_path):
    """diffusers' z_image: the weight dtype if it is a float, elif the module's `compute_dtype`.
    fp8 passes the first test; the `if`/`elif` becomes the helper's guarded cast and both aliases
    go, as nothing else reads them."""
    text = SEQUENTIAL.replace(
        "        if weight_dtype.is_floating_point:\n            t_freq = t_freq.to(weight_dtype)\n",
        "        compute_dtype = getattr(self.mlp[0], \"compute_dtype\", None)\n"
        "        if weight_dtype.is_floating_point:\n            t_freq = t_freq.to(weight_dtype)\n"
        "        elif compute_dtype is not None:\n            t_freq = t_freq.to(compute_dtype)\n")
    assert "elif compute_dtype" in text
    (tmp_path / "model.py").write_text(text)
    proc = dtl(tmp_path, "check", ".", "--no-cache", "--fix")
    assert proc.returncode in (0, 1), proc.stderr
    fixed = (tmp_path / "model.py").read_text()
    assert ("    def forward(self, t_freq):\n"
            "        mlp_input_dtype = get_module_input_dtype(self.mlp[0])\n"
            "        if mlp_input_dtype is not None:\n"
            "            t_freq = t_freq.to(mlp_input_dtype)\n"
            "        return self.mlp(t_freq)\n") in fixed
    assert not _check(tmp_path, fixed)


def test_an_alias_read_by_casts_of_calls_is_redefined_and_each_receiver_named(tmp_path):
    """diffusers' Cosmos3: `dt = next(self.time_embedder.parameters()).dtype`, then
    `self.time_embedder(self.time_proj(t).to(dt))` for two inputs: the alias becomes the helper
    of the first parameter's layer, each receiver gets a name of its own."""
    text = DIFFUSERS_MODEL.split("    class Transformer")[0] + textwrap.dedent('''\
        class Transformer(ModelMixin):
            def __init__(self):
                super().__init__()
                self.time_embedder = TimestepEmbedding()
                self.time_proj = nn.Identity()

            def forward(self, tv, ts):
                time_embedder_dtype = next(self.time_embedder.parameters()).dtype
                ev = self.time_embedder.linear_1(self.time_proj(tv).to(time_embedder_dtype))
                es = self.time_embedder.linear_1(self.time_proj(ts).to(time_embedder_dtype))
                return ev, es
    ''')
    (tmp_path / "model.py").write_text(text)
    proc = dtl(tmp_path, "check", ".", "--no-cache", "--fix")
    assert proc.returncode in (0, 1), proc.stderr
    fixed = (tmp_path / "model.py").read_text()
    assert ("        time_embedder_dtype = get_module_input_dtype(self.time_embedder.linear_1)\n"
            "        time_proj_out = self.time_proj(tv)\n"
            "        ev = self.time_embedder.linear_1(time_proj_out.to(time_embedder_dtype or time_proj_out.dtype))\n"
            "        time_proj_out_2 = self.time_proj(ts)\n"
            "        es = self.time_embedder.linear_1(time_proj_out_2.to(time_embedder_dtype or time_proj_out_2.dtype))\n"
            ) in fixed
    assert not _check(tmp_path, fixed)


def test_only_the_classes_naming_a_skip_list_are_read_for_it(tmp_path: Path, monkeypatch):
    # The skip lists of a file's model classes narrow the quantizers of every site in it; a class
    # whose text names no skip list declares none, and is not parsed to learn it.
    from tiny_project import json_findings, record_class_parses

    unrelated = "".join(f"\n\nclass Unrelated{i}(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                        f"        self.scale = {i}\n        self.shift = {i}\n        self.bias = None\n\n"
                        "    def forward(self, x):\n        x = x * self.scale\n        x = x + self.shift\n"
                        "        x = x - 1\n        return x\n" for i in range(3))
    (tmp_path / "model.py").write_text(MODEL + unrelated)
    parsed = record_class_parses(monkeypatch)
    found = {f["line"]: f for f in json_findings(tmp_path)}
    wo = found[_line(MODEL, "h = h.to(self.wo")]
    assert "GPTQ/HQQ" in wo["message"] and "bitsandbytes" not in wo["message"]  # the list was read
    assert not any(name.startswith("Unrelated") for name in parsed), parsed
