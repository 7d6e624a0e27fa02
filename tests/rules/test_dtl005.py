"""DTL005 across files: a helper defined in one module, its call sites in another; fix safety
follows the helper's own code; cached findings follow the helper when it changes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from cli_runner import dtl

from dtype_lint.api import check_source

UNSOUND = textwrap.dedent("""\
    import torch


    def input_dtype(layer, fp8_input):
        weight = getattr(layer, "weight", None)
        wd = weight.dtype if weight is not None else layer.params_dtype
        if wd == torch.int32:
            return layer.params_dtype
        if wd == torch.uint8:
            return layer.params_dtype if fp8_input else None
        if wd in (torch.float8_e4m3fn, torch.float8_e5m2) and not fp8_input:
            return None
        return wd
""")
SOUND = UNSOUND.replace("    return wd\n", "    if not wd.is_floating_point:\n        return layer.params_dtype\n    return wd\n")
assert SOUND != UNSOUND
# A model file that never spells `.weight`: only its import of the helper makes it a suspect.
CALLER = textwrap.dedent("""\
    from pkg.helpers import input_dtype


    class Attn:
        def forward(self, x, fp8):
            dt = input_dtype(self.proj, fp8)

            def inner(y):
                return y.to(dt) if dt is not None else y

            return inner(x)
""")
PYPROJECT = '[tool.dtype-lint]\npreset = "generic"\nhelper = "pkg.layer_input_dtype:get_layer_input_dtype"\n'


def project(tmp_path: Path, helper: str) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helpers.py").write_text(helper)
    (tmp_path / "pkg" / "model.py").write_text(CALLER)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    return tmp_path


def findings(root: Path, *args: str) -> list[dict]:
    proc = dtl(root, "check", ".", "--output-format", "json", "--select", "DTL005", *args)
    return json.loads(proc.stdout)["findings"]


def test_call_site_in_another_file_is_a_warning_with_the_case(tmp_path):
    root = project(tmp_path, UNSOUND)
    got = {(Path(f["path"]).name, f["line"]): f for f in findings(root, "--no-cache")}
    assert set(got) == {("helpers.py", 4), ("model.py", 6)}
    definition, call = got["helpers.py", 4], got["model.py", 6]
    assert "int8 storage → returns torch.int8" in definition["message"]
    assert "feeds the cast at line 9" in call["message"] and "int8 storage → returns torch.int8" in call["message"]
    assert call["evidence"][0]["line"] == 4 and call["evidence"][0]["path"].endswith("helpers.py")
    # The call site is the lower-severity finding.
    gh = dtl(root, "check", ".", "--output-format", "github", "--select", "DTL005", "--no-cache").stdout
    levels = {line.split(" file=")[0] for line in gh.splitlines() if "model.py" in line}
    assert levels == {"::warning"}
    # The configured helper (the torch template, not yet created) agrees with `input_dtype` on
    # every storage it gets right: the call is rewritten to it, safely.
    assert call["fix"]["applicability"] == "safe"
    assert call["fix"]["imports"] == [["pkg.layer_input_dtype", "get_layer_input_dtype"]]


def test_cached_call_site_follows_the_helper(tmp_path):
    root = project(tmp_path, UNSOUND)
    assert len(findings(root)) == 2
    (root / "pkg" / "helpers.py").write_text(SOUND)  # the model file itself is unchanged
    assert findings(root) == []


def test_fix_routes_every_caller_and_creates_the_helper(tmp_path):
    root = project(tmp_path, UNSOUND)
    proc = dtl(root, "check", ".", "--select", "DTL005", "--fix", "--no-cache")
    assert proc.returncode == 1  # the definition itself is not the configured helper: left
    model = (root / "pkg" / "model.py").read_text()
    assert "dt = get_layer_input_dtype(self.proj, fp8)" in model
    assert "from pkg.layer_input_dtype import get_layer_input_dtype" in model
    assert (root / "pkg" / "layer_input_dtype.py").exists()
    assert [Path(f["path"]).name for f in findings(root, "--no-cache")] == ["helpers.py"]


def test_a_fix_through_an_unsound_configured_helper_is_unsafe(tmp_path):
    """DTL001's fix would route the cast through the configured helper; that helper returns
    torch.int8 for int8 storage, so the fix is unsafe and says so."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "layer_input_dtype.py").write_text(UNSOUND.replace("def input_dtype", "def get_layer_input_dtype"))
    (tmp_path / "pkg" / "model.py").write_text(
        "from torch import nn\n\n\nclass M(nn.Module):\n    def __init__(self, proj):\n        self.proj = proj\n\n"
        "    def forward(self, x):\n        x = x.to(self.proj.weight.dtype)\n        return x\n")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT + 'name-heuristics = true\nname-patterns = ["proj"]\n'
                                             'extend-select = ["DTL005"]\n')
    proc = dtl(tmp_path, "check", ".", "--output-format", "json", "--no-cache")
    got = json.loads(proc.stdout)["findings"]
    cast = next(f for f in got if f["code"] == "DTL001")
    assert cast["fix"]["applicability"] == "unsafe"
    assert "`get_layer_input_dtype` is unsound (DTL005): int8 storage → returns torch.int8" in cast["fix"]["unsafe_reason"]
    helper = next(f for f in got if f["code"] == "DTL005")
    assert helper["message"].startswith("the configured helper `get_layer_input_dtype`")
    assert helper["fix"]["applicability"] == "safe"


PLAIN_CALLERS = '''\
import torch
from torch import nn


def linear_compute_dtype(module: nn.Module) -> torch.dtype:
    return torch.bfloat16 if module.weight.dtype == torch.float8_e4m3fn else module.weight.dtype


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.action_in_proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.action_in_proj(x.to(dtype=linear_compute_dtype(self.action_in_proj)))
'''


def test_a_helper_whose_callers_pass_plain_torch_layers_is_not_reported():
    """Judged by its real callers: every one hands it an `nn.Linear`, which no backend packs."""
    on = {"select": ["DTL005"]}
    assert check_source(PLAIN_CALLERS, settings=on) == []
    quantized = PLAIN_CALLERS.replace(
        "from torch import nn\n", "from torch import nn\nfrom vllm.model_executor.layers.linear import ReplicatedLinear\n"
    ).replace("nn.Linear(4, 4)", "ReplicatedLinear(4, 4, quant_config=qc)").replace("def __init__(self):", "def __init__(self, qc):")
    assert sorted(f.span.line for f in check_source(quantized, settings=on)) == [6, 16]
