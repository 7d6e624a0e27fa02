"""A layer's weight handed first to a call, before another argument: `cast_like(self.q_proj.weight,
hidden)` where `cast_like` casts `hidden` to the weight's dtype, and a submodule called with it,
`self.rope(self.k_proj.weight, n)`, whose `forward` rebuilds a cache in `x.dtype` (the shape of
optimum-habana's `update_sincos_cache`, written here in our own words).

Before, neither was read: the rules' patterns matched a weight handed as the last argument only
(`\\.weight\\s*\\)`), so a file whose only site was one of these passed the prefilter untouched,
and a call of a submodule was followed into no `forward`. With every rule on, the file was parsed
whole and DTL001 reported the first shape: what a rule found depended on the rules beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import json_findings, run_on_quantized_layers, write_tree

from dtype_lint.core.config import Config
from dtype_lint.core.prefilter import for_rules
from dtype_lint.run.file_analysis import enabled_rules

ROPE = """\
import torch
from torch import nn


class Rope(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, seq_len):
        t = torch.arange(seq_len, device=x.device, dtype=torch.float32)
        self.cache = torch.outer(t, t).to(x.dtype)
        return self.cache
"""

MODEL = """\
from torch import nn
from transformers import PreTrainedModel

from proj.rope import Rope


def cast_like(weight, hidden):
    return hidden.to(weight.dtype)


class TinyModel(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.q_proj = nn.Linear(8, 8)
        self.k_proj = nn.Linear(8, 8)
        self.rope = Rope(8)

    def forward(self, hidden):
        hidden = cast_like(self.q_proj.weight, hidden)
        return self.q_proj(hidden)

    def refresh(self, n):
        self.rope(self.k_proj.weight, n)
"""


def _project(root: Path, model: str = MODEL, rope: str = ROPE) -> Path:
    return write_tree(root, {"pyproject.toml": '[project]\nname = "proj"\nversion = "0"\n', "proj/__init__.py": "",
                             "proj/model.py": model, "proj/rope.py": rope})


def _sites(root: Path, *args: str) -> list[tuple[str, str, int]]:
    return sorted((f["code"], f["path"], f["line"]) for f in json_findings(root, *args))


CALL = ("DTL001", "proj/model.py", 19)  # cast_like(self.q_proj.weight, hidden)
CAST = ("DTL001", "proj/model.py", 8)  # hidden.to(weight.dtype), in the same file: reported there too
MODULE_CALL = ("DTL001", "proj/model.py", 23)  # self.rope(self.k_proj.weight, n)


def test_both_shapes_are_reported_where_nothing_else_names_a_weight(tmp_path):
    assert _sites(_project(tmp_path)) == [CAST, CALL, MODULE_CALL]


def test_what_dtl001_reports_does_not_depend_on_the_rules_beside_it(tmp_path):
    root = _project(tmp_path)
    assert _sites(root, "--select", "DTL001") == _sites(root, "--select", "DTL001,DTL003") == [CAST, CALL, MODULE_CALL]


def test_the_message_names_the_forward_that_runs(tmp_path):
    found = json_findings(_project(tmp_path))
    message = next(f["message"] for f in found if f["line"] == MODULE_CALL[2])
    assert "`self.k_proj.weight` is passed to `Rope.forward`" in message, message
    assert "uint8 under bitsandbytes 4-bit" in message, message


def test_a_forward_that_reads_only_the_shape_is_no_site(tmp_path):
    """Control: the same call, the submodule's `forward` taking only `x.shape` and `x.device`."""
    rope = ROPE.replace("torch.outer(t, t).to(x.dtype)", "torch.outer(t, t)[: x.shape[0]]")
    assert _sites(_project(tmp_path, rope=rope)) == [CAST, CALL]


def test_a_layer_no_quantizer_reaches_is_no_site(tmp_path):
    """Control: a plain `nn.Module` (no model class, no quantizer in the project) is never repacked."""
    model = MODEL.replace("from transformers import PreTrainedModel\n", "").replace(
        "TinyModel(PreTrainedModel)", "TinyModel(nn.Module)").replace("super().__init__(config)", "super().__init__()")
    assert _sites(_project(tmp_path, model=model)) == []


def test_the_cached_answer_follows_an_edit_of_the_submodule(tmp_path):
    """`rope.py` is one of the reads of `model.py`'s analysis: once its `forward` stops casting, a
    warm run of the project, and a run on `model.py` alone, stop reporting the call."""
    root = _project(tmp_path)

    def cached(*paths: str) -> list[tuple[str, str, int]]:
        run = dtl(root, "check", *paths, "--output-format", "json", "--exit-zero")
        assert run.returncode == 0, run.stderr
        return sorted((f["code"], f["path"], f["line"]) for f in json.loads(run.stdout)["findings"])

    assert cached(".") == cached("proj/model.py") == [CAST, CALL, MODULE_CALL]
    rope = root / "proj" / "rope.py"
    rope.write_text(rope.read_text().replace("torch.outer(t, t).to(x.dtype)", "torch.outer(t, t)"))
    assert cached(".") == [CAST, CALL]
    assert cached("proj/model.py") == [CAST, CALL]


@pytest.mark.parametrize("line", [
    "isinstance(self.q_proj.weight, object)",  # a builtin: hands the weight to no cast
    "set_weight_attrs(self.q_proj.weight, {})",  # vLLM's attribute setter
    "init.normal_(self.q_proj.weight, std=0.02)",  # a dotted callee: torch's init, a kernel
    "pack(layer.weight, 4)",  # one name before `.weight`: a storage function's own layer
    "f(x, self.q_proj.weight, 4)",  # handed second: not read (docs/quantizability.md, known limits)
])
def test_the_prefilter_passes_over_other_weights_handed_on(line):
    assert not for_rules(tuple(enabled_rules(Config()))).might_match(f"def g(self, x):\n    return {line}\n")


@pytest.mark.parametrize("line", ["cast_like(self.q_proj.weight, x)", "self.rope(\n        self.k_proj.weight, n)",
                                  "f(model.layers.weight , x)"])
def test_the_prefilter_passes_a_weight_handed_first(line):
    assert for_rules(tuple(enabled_rules(Config()))).might_match(f"def g(self, x):\n    return {line}\n")


RUN_ROPE = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, sys.argv[1])
from proj.rope import Rope

linear = torch.nn.Linear(8, 8)
out = {}
for kind in ("float", "bnb-4bit", "bnb-8bit"):
    layer = linear if kind == "float" else bnb_layer(linear, kind)
    out[kind] = str(Rope(8)(layer.weight, 4).dtype)
print(json.dumps(out))
"""


def test_the_reported_call_really_rebuilds_the_cache_in_the_storage_dtype(tmp_path):
    """Why the finding is true: with a real bitsandbytes layer on CPU, the cache `refresh` rebuilds
    takes the packed weight's dtype (uint8 under 4-bit, int8 under 8-bit), not the compute dtype."""
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    root = _project(tmp_path)
    got = run_on_quantized_layers(RUN_ROPE, root)
    assert got == {"float": "torch.float32", "bnb-4bit": "torch.uint8", "bnb-8bit": "torch.int8"}, got

