"""The user's own project, end to end (#40): an engine in TensorRT-LLM's PyTorch-backend shape.

`fixtures/journeys/trt_engine` is `minitrt`, ours: a `Linear` whose `__init__` asks the
module-level `get_quant_method(quant_config)` for its quant method, the config a plain dataclass
of the same tree, and quant methods that create int32-packed (W4A16) or fp8 weights. Two casts
to a `Linear`'s weight dtype are planted (`# planted`); the LayerNorm cast beside one is not a site.

At 33e5fec the tool found `Linear` quantizable, then "backends that can be handed it: 0", and
passed every site: not knowing the backends read as "no backend" (it failed open). Now each
planted site is reported with low confidence and the reason, without a fix (no helper is proven
to run on layers whose backends are unknown), and `explain` and `doctor` say the same. Where the
tree does say which backends the layer gets (a config subclass whose quant method is known), the
tool judges from them as before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cli_runner import dtl
from tiny_project import tree_bytes

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "journeys" / "trt_engine"
MODEL = "minitrt/models/modeling_tiny.py"
REASON = "which backends reach it cannot be told"
# Words of another ecosystem (vLLM's backends and preset) that this engine's output must not use.
FOREIGN_WORDS = ("Marlin", "NVFP4", "AWQ", "vllm preset", "`vllm` preset")


def project(tmp_path: Path) -> Path:
    root = tmp_path / "engine"
    shutil.copytree(FIXTURE, root)
    return root


def planted(root: Path) -> list[int]:
    lines = (root / MODEL).read_text(encoding="utf-8").splitlines()
    return [i for i, line in enumerate(lines, 1) if line.rstrip().endswith("# planted")]


def check(root: Path, *args: str) -> tuple[list[dict], str]:
    proc = dtl(root, "check", ".", "--no-cache", "--output-format", "json", *args)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return json.loads(proc.stdout)["findings"], proc.stderr


def test_check_reports_the_planted_sites_with_low_confidence_and_the_reason(tmp_path: Path):
    # 33e5fec: no finding at all ("backends that can be handed it: 0": every site passed)
    root = project(tmp_path)
    found, stderr = check(root)
    assert sorted((f["path"], f["line"]) for f in found) == [(MODEL, line) for line in planted(root)], found
    assert len(planted(root)) == 2
    for finding in found:
        assert finding["code"] == "DTL001" and finding["confidence"] == "low", finding
        assert REASON in finding["message"], finding["message"]
        assert any(REASON in e["message"] and e["path"].endswith("quantization/config.py")
                   for e in finding["evidence"]), finding["evidence"]
        assert finding["fix"] is None and "backends that reach this layer are not known" in finding["no_fix_reason"]
        assert not any(word in finding["message"] for word in FOREIGN_WORDS), finding["message"]
    assert not any(word in stderr for word in FOREIGN_WORDS), stderr


def test_fix_leaves_the_engine_as_it_was(tmp_path: Path):
    root = project(tmp_path)
    before = tree_bytes(root)
    proc = dtl(root, "check", ".", "--fix", "--no-cache")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert tree_bytes(root) == before


def test_explain_agrees_with_check(tmp_path: Path):
    root = project(tmp_path)
    for line in planted(root):
        proc = dtl(root, "explain", f"{MODEL}:{line}")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "minitrt.modules.linear.Linear" in proc.stdout
        assert REASON in proc.stdout, proc.stdout
        assert "DTL001/DTL002: reported with low confidence" in proc.stdout, proc.stdout
        assert not any(word in proc.stdout for word in FOREIGN_WORDS), proc.stdout
    # The LayerNorm read on the line above the first planted site is not quantizable.
    norm = dtl(root, "explain", f"{MODEL}:{planted(root)[0] - 1}").stdout
    assert "torch.nn.LayerNorm" in norm and "not quantizable" in norm, norm


def test_doctor_agrees_with_check(tmp_path: Path):
    root = project(tmp_path)
    found, _ = check(root)
    proc = dtl(root, "doctor", "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"findings: {len(found)} (0 with a fix)" in out, out
    assert "  minitrt.modules.linear.Linear [code]\n" in out
    assert f"      backends: {REASON}" in out and "its sites are reported with low confidence" in out, out
    assert "every site is skipped" not in out


def test_a_tree_that_says_which_backends_reach_the_layer_is_judged_by_them(tmp_path: Path):
    """A config subclass whose quant method the model reads (it creates a float weight): the
    backends are known and none repacks, so nothing is reported, as before."""
    root = project(tmp_path)
    (root / "minitrt/quantization/plain.py").write_text(
        "import torch\n"
        "from torch import nn\n\n"
        "from .config import QuantConfig\n\n\n"
        "class PlainMethod:\n"
        "    def create_weights(self, layer, in_features, out_features, dtype):\n"
        "        layer.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype))\n\n\n"
        "class PlainConfig(QuantConfig):\n"
        "    def get_quant_method(self, layer, prefix=''):\n"
        "        return PlainMethod()\n", encoding="utf-8")
    found, _ = check(root)
    assert not [f for f in found if REASON in f["message"]], found
