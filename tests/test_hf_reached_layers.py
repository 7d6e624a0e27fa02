"""A layer class in a sibling module of a Hugging Face model is HF model code (#40, first shape).

flash-linear-attention 0.6.0 keeps its layers in `fla/layers/` and its `PreTrainedModel`
subclasses in `fla/models/`: `fla/layers/rodimus.py:391` casts the attention output to
`self.o_proj.weight.dtype`, an `nn.Linear` that bitsandbytes packs when the model is loaded
quantized (uint8 under 4-bit, int8 under 8-bit). At 9b82479 the family decided "HF model code"
file by file, so the layer's file (no model class in it) was read as vLLM-style code and passed.

Our own project of that shape: `xpkg/models/modeling_x.py` builds, through `XModel` and a
`nn.ModuleList` of blocks, the attention classes of `xpkg/layers/attn.py`. Reported: the cast in
the attention a model builds (and in the base class whose subclass it builds). Silent: a layer
class no model builds, a fully guarded cast, a layer only a plain `nn.Module` builds. A layer the
model keeps in fp32 (`_keep_in_fp32_modules`) is still packed by the quantizers that ignore the
list (GPTQ/HQQ/GGUF): reported with those storages only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_project import fix_project, json_findings, write_tree

ATTN = "xpkg/layers/attn.py"

FILES = {
    "pyproject.toml": '[project]\nname = "xpkg"\nversion = "0.1"\n',
    "xpkg/__init__.py": "",
    "xpkg/layers/__init__.py": "",
    "xpkg/models/__init__.py": "",
    "xpkg/tools/__init__.py": "",
    ATTN: '''\
import torch
from torch import nn


class XAttention(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        return self.o_proj(x.to(self.o_proj.weight.dtype))


class BaseMixer(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.up = nn.Linear(hidden, hidden)

    def forward(self, x):
        return self.up(x.to(dtype=self.up.weight.dtype))


class GatedMixer(BaseMixer):
    def __init__(self, hidden):
        super().__init__(hidden)
        self.gate = nn.Linear(hidden, hidden)

    def gated(self, x):
        return self.gate(x.to(self.gate.weight.dtype))


class GuardedAttention(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.o_proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        if hasattr(self.o_proj, "weight") and self.o_proj.weight.dtype in (torch.float16, torch.bfloat16,
                                                                           torch.float32):
            x = x.to(self.o_proj.weight.dtype)
        return self.o_proj(x)


class UnusedAttention(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.o_proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        return self.o_proj(x.to(self.o_proj.weight.dtype))


class PlainAttention(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.o_proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        return self.o_proj(x.to(self.o_proj.weight.dtype))
''',
    "xpkg/models/modeling_x.py": '''\
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from xpkg.layers.attn import GatedMixer, GuardedAttention, XAttention


class XConfig(PretrainedConfig):
    model_type = "x"


class XBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = XAttention(config.hidden_size)
        self.mixer = GatedMixer(config.hidden_size)
        self.guarded = GuardedAttention(config.hidden_size)


class XPreTrainedModel(PreTrainedModel):
    config_class = XConfig
    _keep_in_fp32_modules = ["gate"]


class XModel(XPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.layers = nn.ModuleList([XBlock(config) for _ in range(config.num_hidden_layers)])
''',
    # A plain module builds PlainAttention: no `from_pretrained` quantizes it.
    "xpkg/tools/plain_model.py": '''\
from torch import nn

from xpkg.layers.attn import PlainAttention


class PlainModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = PlainAttention(8)
''',
}


def project(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "proj", FILES)


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    lines = [number for number, line in enumerate(text.splitlines(), 1) if needle in line]
    return lines[occurrence - 1]


def test_layers_an_hf_model_builds_in_a_sibling_module_are_reported_and_nothing_else(tmp_path: Path):
    # 9b82479: no finding (the layer's file holds no model class).
    root = project(tmp_path)
    found = json_findings(root)
    attn = FILES[ATTN]
    got = sorted((Path(f["path"]).as_posix(), f["line"], f["code"]) for f in found)
    assert got == sorted([
        (ATTN, line_of(attn, "self.o_proj(x.to(self.o_proj.weight.dtype))", 1), "DTL001"),
        (ATTN, line_of(attn, "self.up(x.to(dtype=self.up.weight.dtype))"), "DTL001"),
        (ATTN, line_of(attn, "self.gate(x.to(self.gate.weight.dtype))"), "DTL001"),
    ]), found
    by_line = {f["line"]: f for f in found}
    first = by_line[line_of(attn, "self.o_proj(x.to(self.o_proj.weight.dtype))", 1)]
    words = [e["message"] for e in first["evidence"]]
    # The evidence says why: which model class builds it, through which classes, and where.
    built = next(e for e in first["evidence"] if e["message"].startswith("built by"))
    assert built["message"] == ("built by `XModel` (Hugging Face model code): "
                                "`XModel` → `XBlock` → `XAttention`"), words
    assert Path(built["path"]).as_posix() == "xpkg/models/modeling_x.py"
    assert built["line"] == line_of(FILES["xpkg/models/modeling_x.py"], "self.attn = XAttention")
    assert "bitsandbytes 4-bit" in first["message"] and "GPTQ" in first["message"], first["message"]
    # An inherited method: the model builds the subclass.
    inherited = by_line[line_of(attn, "self.up(x.to(dtype=self.up.weight.dtype))")]
    assert any("as its subclass `GatedMixer`" in e["message"] for e in inherited["evidence"]), inherited
    # `_keep_in_fp32_modules = ["gate"]` on the model: the quantizers that honour it skip `gate`,
    # GPTQ/HQQ (which ignore the list) still pack it.
    kept = by_line[line_of(attn, "self.gate(x.to(self.gate.weight.dtype))")]
    assert "GPTQ/HQQ" in kept["message"] and "bitsandbytes" not in kept["message"], kept["message"]


def test_the_fix_of_a_reached_layer_keeps_a_float_input_on_a_packed_weight(tmp_path: Path):
    """The fixed layer, run: on a uint8 (bitsandbytes 4-bit), int8 (8-bit), int32 (packed) or fp8
    weight the original casts the activation to that storage dtype, the fixed one keeps the
    activation's; without `.weight` (GPTQ/AWQ/HQQ) the original raises, the fixed one runs; on
    float and complex weights both cast to the weight's dtype."""
    import importlib
    import sys

    import torch

    original: dict = {}
    exec(compile(FILES[ATTN], ATTN, "exec"), original)
    root = project(tmp_path)
    fix_project(root)
    fixed = (root / ATTN).read_text(encoding="utf-8")
    assert "get_module_input_dtype(self.o_proj)" in fixed, fixed
    assert json_findings(root) == []
    sys.path.insert(0, str(root))
    try:
        attn = importlib.import_module("xpkg.layers.attn")

        class Recorder(torch.nn.Module):  # what reaches the layer: the quantized module's forward
            def __init__(self, dtype):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.zeros(2, 2, dtype=dtype), requires_grad=False)

            def forward(self, x):
                return x

        # Packed or fp8 storage: keep the activation's dtype; a float or complex weight: its dtype,
        # as the original cast gives.
        for dtype, want in ((torch.uint8, torch.bfloat16), (torch.int8, torch.bfloat16),
                            (torch.int32, torch.bfloat16), (torch.float8_e4m3fn, torch.bfloat16),
                            (torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16),
                            (torch.float32, torch.float32), (torch.complex64, torch.complex64)):
            layer, before = attn.XAttention(2), original["XAttention"](2)
            layer.o_proj = before.o_proj = Recorder(dtype)
            assert layer(torch.ones(2, 2, dtype=torch.bfloat16)).dtype == want, dtype
            assert before(torch.ones(2, 2, dtype=torch.bfloat16)).dtype == dtype, dtype
        layer, before = attn.XAttention(2), original["XAttention"](2)
        layer.o_proj = before.o_proj = torch.nn.Identity()  # GPTQ/AWQ/HQQ: no `.weight` at all
        assert layer(torch.ones(2, 2, dtype=torch.bfloat16)).dtype == torch.bfloat16
        with pytest.raises(AttributeError):
            before(torch.ones(2, 2, dtype=torch.bfloat16))
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == "xpkg" or m.startswith("xpkg.")]:
            del sys.modules[name]
