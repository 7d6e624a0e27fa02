"""Issue #40's journey of a project mixing families: one installable package (`src/` layout) with a
vLLM out-of-tree model (`engine/attention.py`: a `ColumnParallelLinear` from the vLLM it pins) and a
Hugging Face model (`hf/modeling_bar.py`: an `nn.Linear` of a `PreTrainedModel`), each casting an
activation to its layer's weight dtype (fixtures/journeys/mixed, our own code).

The journey: `check` reports the two planted sites and not the engine's plain `nn.Linear` gate;
each finding speaks its own family's words (vLLM's backends for the engine, bitsandbytes for the
HF model); `--fix` gives each family its own helper inside the package (never one family's helper
for the other's layers), `--diff` shows both files it would create, and a second run changes
nothing; the fixed engine module runs on every storage its layer can meet (a stand-in vLLM layer:
Marlin's int32, NVFP4's uint8, AWQ's missing weight, fp8, float) and the fixed HF model on real
bitsandbytes 4-bit and 8-bit layers on CPU, against the original."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import (
    STAND_IN_VLLM,
    copy_project,
    fix_project,
    json_findings,
    run_on_each_project,
    tree_bytes,
    write_tree,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "journeys" / "mixed"
ENGINE = "src/mixpkg/engine/attention.py"
MODEL = "src/mixpkg/hf/modeling_bar.py"
VLLM_HELPER = "src/mixpkg/layer_input_dtype.py"
HF_HELPER = "src/mixpkg/module_input_dtype.py"
VLLM_WORDS = ("Marlin", "NVFP4", "params_dtype", "int32", "vllm 0.")
HF_WORDS = ("bitsandbytes",)


def project(tmp_path: Path, name: str = "proj") -> Path:
    return copy_project(FIXTURE, tmp_path, name)


def _line(root: Path, rel: str, text: str) -> int:
    lines = (root / rel).read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def test_check_reports_each_familys_site_in_its_own_words(tmp_path: Path):
    root = project(tmp_path)
    found = json_findings(root)
    assert sorted((f["path"], f["line"], f["code"]) for f in found) == sorted([
        (ENGINE, _line(root, ENGINE, "self.qkv_proj.weight.dtype"), "DTL001"),
        (MODEL, _line(root, MODEL, "self.proj.weight.dtype"), "DTL001")]), found
    by_path = {f["path"]: json.dumps(f) for f in found}
    assert "bitsandbytes" not in by_path[ENGINE] and "get_layer_input_dtype" in by_path[ENGINE]
    assert any(word in by_path[ENGINE] for word in ("in vllm 0.", "vllm")), by_path[ENGINE]
    assert "bitsandbytes" in by_path[MODEL] and "get_module_input_dtype" in by_path[MODEL]
    for word in VLLM_WORDS:
        assert word not in by_path[MODEL], (word, by_path[MODEL])


def test_doctor_shows_both_families(tmp_path: Path):
    root = project(tmp_path)
    proc = dtl(root, "doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "get_module_input_dtype" in out and "module_input_dtype.py" in out, out
    assert "get_layer_input_dtype" in out, out


def test_diff_shows_both_created_helpers_and_changes_nothing(tmp_path: Path):
    root = project(tmp_path)
    before = tree_bytes(root)
    proc = dtl(root, "check", ".", "--fix", "--diff", "--no-cache")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"+++ b/{VLLM_HELPER}" in proc.stdout and f"+++ b/{HF_HELPER}" in proc.stdout, proc.stdout
    assert tree_bytes(root) == before


def test_fix_gives_each_family_its_own_helper_inside_the_package(tmp_path: Path):
    root = project(tmp_path)
    fix_project(root)
    engine = (root / ENGINE).read_text(encoding="utf-8")
    model = (root / MODEL).read_text(encoding="utf-8")
    assert "get_layer_input_dtype(self.qkv_proj" in engine and "get_module_input_dtype" not in engine, engine
    assert "get_module_input_dtype(self.proj)" in model and "get_layer_input_dtype" not in model, model
    assert "self.gate.weight.dtype" in engine  # the plain torch layer is left as it was
    assert (root / VLLM_HELPER).is_file() and (root / HF_HELPER).is_file()
    # the HF helper never reads vLLM's `params_dtype`: it must run on a bitsandbytes layer
    assert "params_dtype" not in (root / HF_HELPER).read_text(encoding="utf-8")
    assert not (root / "layer_input_dtype.py").exists() and not (root / "hf_utils.py").exists()
    for rel in (ENGINE, MODEL, VLLM_HELPER, HF_HELPER):
        compile((root / rel).read_text(encoding="utf-8"), rel, "exec")
    assert json_findings(root) == []
    fixed = tree_bytes(root)
    fix_project(root)
    assert tree_bytes(root) == fixed


RUN_ENGINE = r"""
import json, sys
import torch
sys.path[:0] = sys.argv[1:3]
from vllm.model_executor.layers.linear import LinearBase
from mixpkg.engine.attention import BarAttention

out = {}
for name in ("int32", "uint8", "missing", "float8_e4m3fn", "float16", "float32"):
    LinearBase.storage = None if name == "missing" else getattr(torch, name)
    attention = BarAttention(8, quant_config="a quantization config")
    try:
        attention(torch.randn(2, 8))
        out[name] = str(attention.qkv_proj.seen)
    except Exception as e:
        out[name] = f"raises {type(e).__name__}"
print(json.dumps(out))
"""


def test_the_fixed_engine_module_hands_its_layer_the_compute_dtype_on_every_storage(tmp_path: Path):
    fake = write_tree(tmp_path / "fake", STAND_IN_VLLM)
    original, fixed = project(tmp_path, "original"), project(tmp_path, "fixed")
    fix_project(fixed)
    before, after = run_on_each_project(RUN_ENGINE, [original / "src", fixed / "src"], fake)
    # The original hands Marlin's int32 and NVFP4's uint8 to the layer and raises without a weight.
    assert before["int32"] == "torch.int32" and before["uint8"] == "torch.uint8", before
    assert before["missing"] == "raises AttributeError", before
    # Fixed: the layer's compute dtype for packed or missing storage (the cast names fp8 input)...
    for name in ("int32", "uint8", "missing"):
        assert after[name] == "torch.bfloat16", (name, after)
    # ...and exactly what it did before where the storage is the compute dtype.
    for name in ("float8_e4m3fn", "float16", "float32"):
        assert after[name] == before[name] == f"torch.{name}", (name, before, after)


RUN_MODEL = r"""
import json, sys
import torch
from transformers import PretrainedConfig
sys.path.insert(0, sys.argv[1])
from mixpkg.hf.modeling_bar import BarModel

torch.manual_seed(0)
model = BarModel(PretrainedConfig(hidden_size=64)).eval()
linear = model.block.proj
x = torch.randn(4, 64)


with torch.no_grad():
    twin = model(x)
    out = {"float": twin.tolist()}
    for kind in ("bnb-4bit", "bnb-8bit"):
        model.block.proj = bnb_layer(linear, kind)
        try:
            got = model(x)
            out[kind] = {"dtype": str(got.dtype), "error": ((got.float() - twin).norm() / twin.norm()).item()}
        except Exception as e:
            out[kind] = {"raises": f"{type(e).__name__}: {e}"}
        model.block.proj = linear
print(json.dumps(out))
"""


def test_the_fixed_hf_model_runs_on_real_bitsandbytes_layers(tmp_path: Path):
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    original, fixed = project(tmp_path, "original"), project(tmp_path, "fixed")
    fix_project(fixed)
    before, after = run_on_each_project(RUN_MODEL, [original / "src", fixed / "src"])
    assert after["float"] == before["float"]  # unquantized, the fix changes nothing
    for kind, tolerance in (("bnb-4bit", 0.5), ("bnb-8bit", 0.2)):
        assert after[kind].get("dtype") == "torch.float32" and after[kind]["error"] < tolerance, (kind, after)
    # the original raised (8-bit: an int8 input) or diverged (4-bit: a uint8 cast)
    assert "raises" in before["bnb-8bit"], before
    assert "raises" in before["bnb-4bit"] or before["bnb-4bit"]["error"] > 0.5, before
