"""A project built on Lightning Fabric that quantizes with its bitsandbytes precision plugin.

`tinyfab` (our own code): `net.py`'s `Scorer` casts its input to `self.fc.weight.dtype`, `Stack`
builds `Scorer`s in an `nn.ModuleList`; `train.py` makes a `Fabric` with a `BitsandbytesPrecision`
plugin and builds a `Stack` under `fabric.init_module()` (or hands it to `fabric.setup`). In
lightning 2.5.5 the plugin turns every `torch.nn.Linear` so built or set up into a bitsandbytes
`Linear4bit` (uint8 `.weight`) or, under `"int8"`, `Linear8bitLt` (int8). Before the quantizer
census knew the plugin (ecosystems/quantizers/applications_fabric.py), the project checked clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_project import fix_project, json_findings, run_on_each_project, write_tree

NET = """\
import torch
from torch import nn


class Scorer(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x.to(self.fc.weight.dtype)))


class Stack(nn.Module):
    def __init__(self, width: int = 16, depth: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList(Scorer(width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x
"""

# `{plugin}`: the plugin's construction (or None); `{build}`: how the model reaches the Fabric.
TRAIN = """\
import lightning as L
import torch
from lightning.fabric.plugins import BitsandbytesPrecision

from tinyfab.net import Stack


def entry(quantize: str | None = None) -> None:
    plugins = None
    if quantize:
        plugins = {plugin}
    fabric = L.Fabric(accelerator="cpu", devices=1, plugins=plugins)
    fabric.launch(run, quantize)


def run(fabric, quantize):
{build}
    return model
"""

UNDER_INIT = "    with fabric.init_module(empty_init=True):\n        model = Stack()\n    model = fabric.setup_module(model)"
SETUP_ONLY = "    model = Stack(width=16)\n    model = fabric.setup(model)"
NF4 = 'BitsandbytesPrecision("nf4", dtype=torch.bfloat16)'
SITE = ("src/tinyfab/net.py", 11, "DTL001")


def project(tmp_path: Path, plugin: str, build: str = UNDER_INIT, name: str = "proj") -> Path:
    return write_tree(tmp_path / name, {
        "pyproject.toml": '[project]\nname = "tinyfab"\nversion = "0"\n',
        "src/tinyfab/__init__.py": "",
        "src/tinyfab/net.py": NET,
        "src/tinyfab/train.py": TRAIN.format(plugin=plugin, build=build),
    })


def where(found: dict) -> tuple[str, int, str]:
    return Path(found["path"]).as_posix().rsplit("proj/", 1)[-1], found["line"], found["code"]


def test_a_model_built_under_init_module_of_an_nf4_fabric_is_reported_uint8(tmp_path: Path):
    found = json_findings(project(tmp_path, NF4))
    assert [where(f) for f in found] == [SITE], found
    assert found[0]["confidence"] == "high", found
    message = found[0]["message"]
    assert "uint8 under bitsandbytes 4-bit" in message and "8-bit" not in message, message
    evidence = " ".join(step["message"] for step in found[0]["evidence"])
    assert "`fabric.init_module(...)` applies Lightning Fabric's `BitsandbytesPrecision` (4-bit) to `Stack`" \
        in evidence, evidence
    assert "lightning 2.5.5" in evidence, evidence


def test_the_int8_mode_names_int8(tmp_path: Path):
    found = json_findings(project(tmp_path, 'BitsandbytesPrecision(mode="int8", dtype=torch.float16)'))
    assert [where(f) for f in found] == [SITE], found
    assert "int8 under bitsandbytes 8-bit" in found[0]["message"], found[0]["message"]
    assert "uint8" not in found[0]["message"], found[0]["message"]


def test_int8_training_keeps_a_float16_weight_and_makes_no_finding(tmp_path: Path):
    """`int8-training` is bitsandbytes' `Linear8bitLt` with `has_fp16_weights=True`: the weight
    stays float16, the plugin's compute dtype; a cast to it is harmless. `int8` packs it."""
    training = project(tmp_path, 'BitsandbytesPrecision("int8-training", torch.float16)', name="training")
    assert json_findings(training) == []
    inference = project(tmp_path, 'BitsandbytesPrecision("int8", torch.float16)', name="proj")
    assert [where(f) for f in json_findings(inference)] == [SITE]


def test_a_plain_fabric_without_the_plugin_makes_no_finding(tmp_path: Path):
    """The same project, its Fabric given no plugin: nothing; given the plugin: the site."""
    assert json_findings(project(tmp_path, "None", name="plain")) == []
    assert [where(f) for f in json_findings(project(tmp_path, NF4))] == [SITE]


def test_a_plugin_made_but_never_constructed_into_the_fabric_is_no_fabric_application(tmp_path: Path):
    """`Fabric(plugins=...)` names another object: the plugin reaches no Fabric of its function,
    which is said with low confidence, never passed silently."""
    root = project(tmp_path, NF4)
    train = root / "src/tinyfab/train.py"
    train.write_text(train.read_text(encoding="utf-8").replace("plugins=plugins", "plugins=[]"), encoding="utf-8")
    found = json_findings(root)
    assert [where(f) for f in found] == [SITE], found
    assert found[0]["confidence"] == "low", found
    assert "handed to no `Fabric(plugins=...)`" in found[0]["message"], found[0]["message"]


def test_a_model_only_handed_to_fabric_setup_is_reported(tmp_path: Path):
    found = json_findings(project(tmp_path, NF4, SETUP_ONLY))
    assert [where(f) for f in found] == [SITE], found
    assert found[0]["confidence"] == "high", found
    evidence = " ".join(step["message"] for step in found[0]["evidence"])
    assert "`fabric.setup(...)` applies Lightning Fabric's `BitsandbytesPrecision` (4-bit) to `Stack`" in evidence


def test_a_mode_the_text_cannot_tell_names_both_storages(tmp_path: Path):
    found = json_findings(project(tmp_path, "BitsandbytesPrecision(quantize[4:], torch.bfloat16)"))
    assert [where(f) for f in found] == [SITE], found
    message = found[0]["message"]
    assert "uint8 under bitsandbytes 4-bit, int8 under bitsandbytes 8-bit" in message, message


def test_a_factory_built_model_is_low_confidence_with_the_reason(tmp_path: Path):
    root = project(tmp_path, NF4, "    with fabric.init_module():\n        model = make(quantize)")
    found = json_findings(root)
    assert [where(f) for f in found] == [SITE], found
    assert found[0]["confidence"] == "low", found
    assert "`make(...)` returns" in found[0]["message"], found[0]["message"]


def test_ignore_modules_is_low_confidence_with_the_reason(tmp_path: Path):
    """Which layers `ignore_modules` keeps float (prefixes of their names in the model) is not told
    from the class: the site stays reported, with low confidence."""
    root = project(tmp_path, 'BitsandbytesPrecision("nf4", torch.bfloat16, ignore_modules={"blocks.0"})', SETUP_ONLY)
    found = json_findings(root)
    assert [(where(f), f["confidence"]) for f in found] == [(SITE, "low")], found
    assert "`ignore_modules`" in found[0]["message"], found[0]["message"]


# ---- the fix, run: a float layer and a real bitsandbytes 4-bit layer on CPU ---------------------

RUN_FIXED = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, sys.argv[1])
from tinyfab.net import Scorer

torch.manual_seed(0)
scorer = Scorer(16).eval()
x = torch.randn(3, 16)
linear = scorer.fc
out = {}
with torch.no_grad():
    reference = torch.tanh(linear(x))
    out["float"] = scorer(x).tolist() == reference.tolist()
    for kind in ("bnb-4bit", "bnb-8bit"):
        try:
            scorer.fc = bnb_layer(linear, kind)
        except ImportError as e:
            out[kind] = {"unavailable": str(e)}
            continue
        try:
            got = scorer(x)
            out[kind] = {"dtype": str(got.dtype), "error": ((got.float() - reference).norm() / reference.norm()).item()}
        except Exception as e:
            out[kind] = {"raises": f"{type(e).__name__}: {e}"}
        scorer.fc = linear
print(json.dumps(out))
"""


def test_the_fix_routes_the_cast_through_the_helper_and_runs(tmp_path: Path):
    original, fixed = project(tmp_path, NF4, name="original"), project(tmp_path, NF4, name="fixed")
    fix_project(fixed)
    net = (fixed / "src/tinyfab/net.py").read_text(encoding="utf-8")
    assert "x.to(get_module_input_dtype(self.fc) or x.dtype)" in net, net
    assert (fixed / "src/tinyfab/module_input_dtype.py").is_file()
    assert json_findings(fixed) == []
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    before, after = run_on_each_project(RUN_FIXED, [original / "src", fixed / "src"])
    assert before["float"] and after["float"]  # a float layer: the fix changes nothing
    for kind, tolerance in (("bnb-4bit", 0.5), ("bnb-8bit", 0.2)):
        assert after[kind].get("dtype") == "torch.float32" and after[kind]["error"] < tolerance, (kind, after)
    # the original cast its input to uint8 (4-bit: garbage or an error) or int8 (8-bit: an error)
    assert "raises" in before["bnb-8bit"], before
    assert "raises" in before["bnb-4bit"] or before["bnb-4bit"]["error"] > 0.5, before
