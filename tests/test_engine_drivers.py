"""A project that drives vLLM without writing code on its layers is not told to configure (#40).

unsloth, axolotl, llamafactory and gptqmodel import vLLM to generate with it (`from vllm import
LLM`, a sampler, a worker) and never touch `vllm.model_executor.layers`. Their sites are in Hugging
Face model code; every run used to warn that "none of the `vllm` preset's layer classes is defined
or imported here" and point at `preset = "generic"`, and doctor listed the preset's twelve classes
as missing from the tree. The warning (and doctor's list) stays for a project that writes code on
vLLM's layers (it imports from their package) without any of the preset's classes.
"""

from __future__ import annotations

from pathlib import Path

from cli_runner import dtl

WARNING = "none of the `vllm` preset's layer classes"

MODEL = """\
import torch
from torch import nn


class Router(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(8, 4)

    def forward(self, hidden):
        return self.gate(hidden.to(self.gate.weight.dtype))


class DrvModel(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.router = Router()
"""


def project(root: Path, engine_import: str) -> Path:
    files = {
        "pyproject.toml": '[project]\nname = "drv"\ndependencies = ["transformers", "vllm"]\n',
        "drv/__init__.py": "",
        "drv/model.py": "from transformers import PreTrainedModel\n\n" + MODEL,
        "drv/generate.py": f"{engine_import}\n\n\ndef generate(prompts):\n    return prompts\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_a_project_that_only_drives_vllm_gets_no_preset_warning(tmp_path: Path):
    root = project(tmp_path / "p", "from vllm import LLM, SamplingParams")
    proc = dtl(root, "check", ".", "--no-cache")
    assert proc.returncode == 1 and "drv/model.py:" in proc.stdout, proc.stdout + proc.stderr
    assert WARNING not in proc.stderr, proc.stderr
    doctor = dtl(root, "doctor", "--no-cache").stdout
    assert "not in the tree" not in doctor and "layer classes: not used here" in doctor, doctor


def test_a_project_on_vllms_layers_without_the_presets_classes_is_still_warned(tmp_path: Path):
    root = project(tmp_path / "p", "from vllm.model_executor.layers.layernorm import RMSNorm")
    proc = dtl(root, "check", ".", "--no-cache")
    assert WARNING in proc.stderr, proc.stderr
    doctor = dtl(root, "doctor", "--no-cache").stdout
    assert "not in the tree (12)" in doctor, doctor
