"""Layers built by expressions the project writes (#39): the construction is found through them.

`nn.Linear(...).to(dtype=...)`, `.cuda()`, `.half()`, `.requires_grad_(...)`, a walrus, either arm
of a conditional; a container filled after it is made (`.append`/`.extend`/`.insert`,
`self.heads["k"] = ...`); an attribute named by a literal (`add_module`, `setattr`). Each shape is
checked twice in our own small Hugging Face model file: with an `nn.Linear` (a quantizer replaces
it at load time: the cast is reported) and with an `nn.LayerNorm` (no quantizer touches it: not
reported). The vLLM shapes follow a `quant_config` through the same expressions.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cli_runner import dtl

HF_MODEL = '''\
import torch
from torch import nn
from transformers import PreTrainedModel


class Block(nn.Module):
    def __init__(self, config, flag):
        super().__init__()
{build}

    def forward(self, hidden):
        return hidden.to({read}.weight.dtype)


class Model(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.block = Block(config, True)
'''

# shape -> (lines of `__init__` building the layer with LAYER, the layer expression read)
SHAPES = {
    "to-dtype": (["self.proj = LAYER.to(dtype=torch.float32)"], "self.proj"),
    "cuda": (["self.proj = LAYER.cuda()"], "self.proj"),
    "half": (["self.proj = LAYER.half()"], "self.proj"),
    "requires-grad": (["self.proj = LAYER.requires_grad_(False)"], "self.proj"),
    "chained": (["self.proj = LAYER.to(torch.float32).requires_grad_(False)"], "self.proj"),
    "walrus": (["self.proj = (made := LAYER)"], "self.proj"),
    "conditional-first-arm": (["self.proj = LAYER if flag else nn.Identity()"], "self.proj"),
    "conditional-second-arm": (["self.proj = nn.Identity() if flag else LAYER"], "self.proj"),
    "conditional-then-cast": (["self.proj = (nn.Identity() if flag else LAYER).to(torch.float32)"], "self.proj"),
    "append-in-loop": (["self.layers = nn.ModuleList()", "for _ in range(3):", "    self.layers.append(LAYER)"],
                       "self.layers[0]"),
    "append-local": (["self.layers = nn.ModuleList()", "for _ in range(3):", "    layer = LAYER",
                      "    self.layers.append(layer)"], "self.layers[0]"),
    "append-cast": (["self.layers = nn.ModuleList()", "self.layers.append(LAYER.to(torch.float32))"],
                    "self.layers[-1]"),
    "extend": (["self.layers = nn.ModuleList()", "self.layers.extend([nn.Identity(), LAYER])"], "self.layers[1]"),
    "extend-comprehension": (["self.layers = nn.ModuleList()", "self.layers.extend(LAYER for _ in range(2))"],
                             "self.layers[0]"),
    "insert": (["self.layers = nn.ModuleList([nn.Identity()])", "self.layers.insert(0, LAYER)"], "self.layers[0]"),
    "module-dict-item": (["self.heads = nn.ModuleDict()", 'self.heads["out"] = LAYER'], 'self.heads["out"]'),
    "module-dict-literal": (['self.heads = nn.ModuleDict({"out": LAYER})'], 'self.heads["out"]'),
    "add-module": (['self.add_module("proj", LAYER)'], "self.proj"),
    "setattr": (['setattr(self, "proj", LAYER)'], "self.proj"),
    "setattr-cast": (['setattr(self, "proj", LAYER.cuda())'], "self.proj"),
    "float": (["self.proj = LAYER.float()"], "self.proj"),
    "eval": (["self.proj = LAYER.eval()"], "self.proj"),
    # The construction bound to a local of `__init__` first: the local stands for its value.
    "local": (["proj = LAYER", "self.proj = proj"], "self.proj"),
    "local-cast": (["proj = LAYER.cuda()", "self.proj = proj"], "self.proj"),
    "local-then-cast": (["proj = LAYER", "self.proj = proj.to(torch.float32)"], "self.proj"),
    "local-conditional": (["proj = LAYER if flag else None", "self.proj = proj"], "self.proj"),
    "append-local-cast": (["self.layers = nn.ModuleList()", "for _ in range(3):", "    layer = LAYER",
                           "    self.layers.append(layer.requires_grad_(False))"], "self.layers[0]"),
    "sequential-local-cast": (["first = LAYER", "self.net = nn.Sequential(first.half(), nn.Identity())"],
                              "self.net[0]"),
    # A local container filled first, then handed to `self` (or wrapped in a module container).
    "local-list-wrapped": (["layers = []", "for _ in range(3):", "    layers.append(LAYER)",
                            "self.layers = nn.ModuleList(layers)"], "self.layers[0]"),
    "local-list-sequential": (["layers = [nn.Identity()]", "layers.append(LAYER)", "layers.append(nn.Identity())",
                               "self.net = nn.Sequential(*layers)"], "self.net[1]"),
    "local-comprehension-wrapped": (["layers = [LAYER for _ in range(2)]", "self.layers = nn.ModuleList(layers)"],
                                    "self.layers[1]"),
    "local-module-list": (["layers = nn.ModuleList()", "layers.extend([LAYER])", "self.layers = layers"],
                          "self.layers[0]"),
    "local-dict-wrapped": (["heads = {}", 'heads["out"] = LAYER', "self.heads = nn.ModuleDict(heads)"],
                           'self.heads["out"]'),
}

LINEAR, NORM = "nn.Linear(8, 8)", "nn.LayerNorm(8)"


def _model(shape: str, layer: str) -> str:
    lines, read = SHAPES[shape]
    build = "\n".join("        " + line.replace("LAYER", layer) for line in lines)
    return HF_MODEL.format(build=build, read=read)


def _findings(root: Path, files: dict[str, str]) -> list[dict]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    proc = dtl(root, "check", ".", "--no-cache", "--output-format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)["findings"]


def _cast_line(text: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if "hidden.to(" in line)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_linear_built_this_way_is_reported(tmp_path, shape):
    text = _model(shape, LINEAR)
    found = [f for f in _findings(tmp_path, {"model.py": text}) if f["line"] == _cast_line(text)]
    assert [f["code"] for f in found] == ["DTL001"], text
    assert "absent under GPTQ/AWQ/HQQ" in found[0]["message"]
    # The evidence names the construction the expression stands for.
    assert any("nn.Linear(...)" in step["message"] for step in found[0]["evidence"])


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_layer_norm_built_this_way_is_not_reported(tmp_path, shape):
    """The norm is found through the same expression (its class resolves: the norm, or the
    `nn.Identity` of the other arm or slot, neither a layer a quantizer reaches), and no
    quantizer touches it."""
    text = _model(shape, NORM)
    found = [f for f in _findings(tmp_path, {"model.py": text}) if f["line"] == _cast_line(text)]
    assert found == [], text
    explained = dtl(tmp_path, "explain", f"model.py:{_cast_line(text)}")
    resolved = {"torch.nn.LayerNorm", "torch.nn.Identity"} if "Identity" in text else {"torch.nn.LayerNorm"}
    assert any(f"class: {name}\n" in explained.stdout for name in resolved), explained.stdout + explained.stderr


def test_appended_slots_are_counted_in_order(tmp_path):
    """Appends outside a loop fill known positions: `[0]` is the norm, `[1]` and `[-1]` the linear."""
    text = _model("append-in-loop", LINEAR).replace(
        "        self.layers = nn.ModuleList()\n        for _ in range(3):\n            self.layers.append(nn.Linear(8, 8))",
        "        self.layers = nn.ModuleList()\n        self.layers.append(nn.LayerNorm(8))\n"
        "        self.layers.append(nn.Linear(8, 8))")
    reads = {"self.layers[0]": False, "self.layers[1]": True, "self.layers[-1]": True, "self.layers[2]": False}
    for read, reported in reads.items():
        variant = text.replace("hidden.to(self.layers[0]", f"hidden.to({read}")
        root = tmp_path / read.replace("[", "_").replace("]", "").replace("-", "m").replace(".", "_")
        found = [f for f in _findings(root, {"model.py": variant}) if f["line"] == _cast_line(variant)]
        assert bool(found) is reported, read


def test_plain_list_fill_is_not_a_submodule(tmp_path):
    """A layer appended to a plain list is no registered submodule: no quantizer replaces it."""
    text = _model("append-in-loop", LINEAR).replace("self.layers = nn.ModuleList()", "self.layers = []")
    assert [f for f in _findings(tmp_path, {"model.py": text}) if f["line"] == _cast_line(text)] == []


@pytest.mark.parametrize("read", ["self.net[0]", "self.net[2]"])
def test_slots_of_a_spliced_local_list_are_counted_in_order(tmp_path, read):
    """`nn.Sequential(*layers)`: `layers`' own slots, in order; only `[1]` is the linear, the
    others resolve to the `nn.Identity` put there."""
    text = _model("local-list-sequential", LINEAR).replace("hidden.to(self.net[1]", f"hidden.to({read}")
    assert [f for f in _findings(tmp_path, {"model.py": text}) if f["line"] == _cast_line(text)] == []
    explained = dtl(tmp_path, "explain", f"model.py:{_cast_line(text)}")
    assert "class: torch.nn.Identity\n" in explained.stdout, explained.stdout + explained.stderr


def test_a_local_plain_list_handed_over_is_not_a_submodule(tmp_path):
    """`self.layers = layers` with `layers = []`: a plain list, whatever it was filled with."""
    text = _model("local-list-wrapped", LINEAR).replace("self.layers = nn.ModuleList(layers)", "self.layers = layers")
    assert [f for f in _findings(tmp_path, {"model.py": text}) if f["line"] == _cast_line(text)] == []


def test_dict_item_keys_are_told_apart(tmp_path):
    text = _model("module-dict-item", LINEAR).replace(
        "        self.heads[\"out\"] = nn.Linear(8, 8)",
        "        self.heads[\"out\"] = nn.Linear(8, 8)\n        self.heads[\"norm\"] = nn.LayerNorm(8)")
    norm = text.replace('hidden.to(self.heads["out"]', 'hidden.to(self.heads["norm"]')
    assert [f["code"] for f in _findings(tmp_path / "out", {"model.py": text})] == ["DTL001"]
    assert _findings(tmp_path / "norm", {"model.py": norm}) == []


VLLM_LAYER = textwrap.dedent('''\
    import torch
    from vllm.model_executor.layers.linear import ColumnParallelLinear, ReplicatedLinear


    class Head(torch.nn.Module):
        def __init__(self, quant_config):
            super().__init__()
            self.proj = ColumnParallelLinear(8, 8, quant_config=QUANT).to(torch.float32)
            self.blocks = torch.nn.ModuleList()
            for _ in range(2):
                self.blocks.append(ReplicatedLinear(8, 8, quant_config=QUANT))

        def forward(self, x):
            y = x.to(self.proj.weight.dtype)
            z = x.to(self.blocks[0].weight.dtype)
            return y, z
''')


@pytest.mark.parametrize(("config", "reported"), [("quant_config", 2), ("None", 0)])
def test_vllm_config_is_followed_through_the_expression(tmp_path, config, reported):
    """A `quant_config` passed to the construction reaches the layer through `.to(...)` and
    `.append(...)`; `quant_config=None` leaves no backend to repack it."""
    text = VLLM_LAYER.replace("QUANT", config)
    found = _findings(tmp_path, {"pkg/head.py": text, "pkg/__init__.py": ""})
    assert [f["code"] for f in found] == ["DTL001"] * reported, found


LOCAL_CHAIN = textwrap.dedent('''\
    import torch
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    def project(x, quant_config):
        made = ColumnParallelLinear(8, 8, quant_config=QUANT)
        moved = made.to(torch.float32)
        return x.to(moved.weight.dtype)


    def scale(x):
        table = torch.ones(8)
        moved = table.to(torch.float32)
        return x.to(moved.dtype)
''')


@pytest.mark.parametrize(("config", "reported"), [("quant_config", [8]), ("None", [])])
def test_a_module_method_on_a_local_layer_is_the_layer(tmp_path, config, reported):
    """`moved = made.to(...)` with `made` a layer: `moved` is that layer (its config followed);
    the same call on a tensor local resolves to no layer."""
    found = _findings(tmp_path, {"pkg/run.py": LOCAL_CHAIN.replace("QUANT", config), "pkg/__init__.py": ""})
    assert [f["line"] for f in found if f["code"] == "DTL001"] == reported, found
