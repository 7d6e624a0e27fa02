"""A dtype read through a method of the site's own class that returns a layer's `.weight.dtype` on
one of several paths: `self.get_k_proj_weight_dtype()`, returning `self.k_proj.scales.dtype` when the
layer has a `qweight` (GPTQ/AWQ) and `self.k_proj.weight.dtype` otherwise (bitsandbytes' uint8 or
int8 among them). The shape of optimum-habana's qwen attention classes, written here in our own
words. Before, only a getter with one `return` was read, and only by DTL001: a KV buffer allocated
in such a getter's dtype (DTL002) or an activation cast to it (DTL001) passed silently.

The verdict is taken at the `return` of the weight's dtype, after the method's own checks: a method
that returns it only where it is a float dtype is no site."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_project import json_findings, run_on_quantized_layers, write_tree

MODEL = """\
import torch
from torch import nn
from transformers import PreTrainedModel


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.k_proj = nn.Linear(8, 8)

    def get_k_proj_weight_dtype(self):
        if hasattr(self.k_proj, "qweight"):
            return self.k_proj.scales.dtype
        return self.k_proj.weight.dtype

    def allocate_kv_cache(self, shape):
        self.k_cache = torch.zeros(shape, dtype=self.get_k_proj_weight_dtype())

    def forward(self, x):
        return self.k_proj(x.to(self.get_k_proj_weight_dtype()))


class TinyModel(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.attn = Attention()
"""

# The weight's dtype returned only where the layer has a float one.
FLOAT_ONLY = """\
    def get_k_proj_weight_dtype(self):
        if getattr(self.k_proj, "weight", None) is not None and \\
                self.k_proj.weight.dtype in (torch.float16, torch.bfloat16, torch.float32):
            return self.k_proj.weight.dtype
        return torch.bfloat16
"""
GETTER = MODEL[MODEL.index("    def get_k_proj_weight_dtype"):MODEL.index("    def allocate_kv_cache")].rstrip("\n") + "\n"

ALLOC = ("DTL002", "proj/model.py", 17)
CAST = ("DTL001", "proj/model.py", 20)


def _project(root: Path, model: str = MODEL) -> Path:
    return write_tree(root, {"pyproject.toml": '[project]\nname = "proj"\nversion = "0"\n', "proj/__init__.py": "",
                             "proj/model.py": model})


def _sites(root: Path, *args: str) -> list[tuple[str, str, int]]:
    return sorted((f["code"], f["path"], f["line"]) for f in json_findings(root, *args))


def test_the_allocation_and_the_cast_through_the_getter_are_reported(tmp_path):
    assert _sites(_project(tmp_path)) == [CAST, ALLOC]


def test_the_message_names_the_getter_and_where_it_returns_the_weights_dtype(tmp_path):
    found = {f["line"]: f for f in json_findings(_project(tmp_path))}
    assert "allocates in `self.get_k_proj_weight_dtype()`, which returns `self.k_proj.weight.dtype`" \
        in found[ALLOC[2]]["message"], found[ALLOC[2]]["message"]
    assert any("`get_k_proj_weight_dtype` returns `self.k_proj.weight.dtype`" in e["message"] and e["line"] == 14
               for e in found[ALLOC[2]]["evidence"]), found[ALLOC[2]]["evidence"]


def test_a_getter_that_returns_the_weights_dtype_only_when_it_is_a_float_one_is_no_site(tmp_path):
    assert _sites(_project(tmp_path, MODEL.replace(GETTER, FLOAT_ONLY))) == []


def test_a_single_return_getter_now_counts_for_allocations_too(tmp_path):
    one = "    def get_k_proj_weight_dtype(self):\n        return self.k_proj.weight.dtype\n"
    assert _sites(_project(tmp_path, MODEL.replace(GETTER, one))) == [("DTL001", "proj/model.py", 18),
                                                                      ("DTL002", "proj/model.py", 15)]


def test_a_layer_no_quantizer_reaches_is_no_site(tmp_path):
    """Control: without the model class, no quantizer of the project reaches `k_proj`."""
    model = MODEL[:MODEL.index("class TinyModel")].replace("from transformers import PreTrainedModel\n", "")
    assert _sites(_project(tmp_path, model)) == []


RUN_GETTER = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, sys.argv[1])
from proj.model import Attention

out = {}
for kind in ("float", "bnb-4bit", "bnb-8bit"):
    attn = Attention()
    if kind != "float":
        attn.k_proj = bnb_layer(attn.k_proj, kind)
    attn.allocate_kv_cache((2, 4))
    out[kind] = str(attn.k_cache.dtype)
print(json.dumps(out))
"""


def test_the_buffer_really_takes_the_packed_storage_dtype(tmp_path):
    """Why the finding is true: with a real bitsandbytes layer on CPU the layer has no `qweight`,
    so the getter returns the packed weight's dtype and the KV buffer is uint8 or int8."""
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    model = MODEL[:MODEL.index("class TinyModel")].replace("from transformers import PreTrainedModel\n", "")
    got = run_on_quantized_layers(RUN_GETTER, _project(tmp_path, model))
    assert got == {"float": "torch.float32", "bnb-4bit": "torch.uint8", "bnb-8bit": "torch.int8"}, got
