"""The user's own project, end to end (#40): an adapter library that reads its base layers.

`fixtures/journeys/adapter_lib` is `tinyadapt` (our own code, peft's shape, no peft imported): an
`AdapterLayer` wraps the loaded model's layer as `self.base_layer` and unwraps nested adapters in
`get_base_layer()`. Planted: `LoraLinear.orthogonal_init` casts its new adapter weights to
`self.get_base_layer().weight.dtype` through a local (as peft's `tuners/lora/layer.py:613`), and
`ScaledLinear.forward` (ia3.py) casts the scaled input to `self.base_layer.weight.dtype`. The
silent twins: `merge` writes into the base weight (its storage dtype is the right one there), the
adapter's own `lora_A` (adapters are never quantized), and `Probe`, a plain module of the package.

The journey: `check` reports the planted sites and nothing else, in the adapter family's words;
`explain` on each reported line and `doctor` agree with it (at 9b82479 `explain` said "not
quantizable" on every reported line and `doctor` counted the sites as Hugging Face model code);
`--fix` creates the HF helper inside `tinyadapt`, `--diff` shows it, a second run changes nothing;
the fixed adapters run, in one interpreter, on a real bitsandbytes 4-bit and 8-bit base on CPU and
on stand-ins for a base without `.weight` (GPTQ/AWQ), an fp8 one, and float and complex ones,
against the original code on the unquantized twin.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import (
    assert_fix_created_only,
    copy_project,
    fix_in_editor,
    fix_project,
    json_findings,
    run_on_quantized_layers,
    tree_bytes,
)

from dtype_lint.ecosystems.hf.helper import HF_HELPER_SOURCE

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "journeys" / "adapter_lib"
LAYERS = "src/tinyadapt/layers.py"
IA3 = "src/tinyadapt/ia3.py"
TOOLS = "src/tinyadapt/tools.py"
HELPER = "src/tinyadapt/module_input_dtype.py"
# vLLM's backends and helper, and the words of the families this project is not.
FOREIGN_WORDS = ("Marlin", "NVFP4", "CompressedTensors", "params_dtype", "get_layer_input_dtype", "modelopt",
                 "Hugging Face model code")


def _lines(root: Path, rel: str, text: str) -> list[int]:
    lines = (root / rel).read_text(encoding="utf-8").splitlines()
    return [number for number, line in enumerate(lines, 1) if text in line]


@pytest.fixture(scope="module")
def journey(tmp_path_factory) -> dict:
    """The project's findings and `--diff` before, and a fixed copy: one run of each, shared by
    the tests (the CI budget)."""
    tmp_path = tmp_path_factory.mktemp("adapter")
    original = copy_project(FIXTURE, tmp_path, "original")
    before = tree_bytes(original)
    diff = dtl(original, "check", ".", "--diff", "--no-cache")
    assert diff.returncode == 1 and tree_bytes(original) == before, diff.stdout + diff.stderr
    fixed = copy_project(FIXTURE, tmp_path, "fixed")
    fix_project(fixed)
    return {"original": original, "fixed": fixed, "found": json_findings(original), "diff": diff.stdout}


def test_check_reports_the_planted_sites_and_nothing_on_the_twins(journey):
    root = journey["original"]
    found = journey["found"]
    planted = sorted([(LAYERS, line) for line in _lines(root, LAYERS, "# planted")] +
                     [(IA3, line) for line in _lines(root, IA3, "# planted")])
    assert len(planted) == 3
    assert sorted((f["path"], f["line"]) for f in found) == planted, found
    assert {(f["code"], f["confidence"]) for f in found} == {("DTL001", "high")}, found
    for finding in found:
        assert "bitsandbytes 4-bit" in finding["message"] and "GPTQ" in finding["message"], finding["message"]
        assert not any(word in finding["message"] for word in FOREIGN_WORDS), finding["message"]
        evidence = " ".join(step["message"] for step in finding["evidence"])
        assert "is the base layer the adapter wraps" in evidence and "before the adapter is attached" in evidence
        assert finding["fix"] is not None


def test_explain_agrees_with_check_on_every_reported_line_and_each_twin(journey):
    # 9b82479: "quant root: none (no backend can be handed it): not quantizable" on every reported
    # line (line 33 explained the adapter's own `self.lora_A.weight`, the assignment's target)
    root = journey["original"]
    for finding in journey["found"]:
        explained = dtl(root, "explain", f"{finding['path']}:{finding['line']}").stdout
        assert "  family: peft (an adapter library)\n" in explained, explained
        assert "is the base layer the adapter wraps" in explained, explained
        assert "DTL001/DTL002: reported unless a guard dominates the site" in explained, explained
        assert "not quantizable" not in explained and "lora_A" not in explained, explained
        assert not any(word in explained for word in FOREIGN_WORDS), explained
    merge = dtl(root, "explain", f"{LAYERS}:{_lines(root, LAYERS, 'self.base_layer.weight.dtype')[0]}").stdout
    assert "family: peft" in merge and "DTL001/DTL002: not reported" in merge, merge
    own = dtl(root, "explain", f"{LAYERS}:{_lines(root, LAYERS, 'self.lora_A.weight.dtype')[0]}").stdout
    assert "not quantizable" in own and "family:" not in own, own
    probe = dtl(root, "explain", f"{TOOLS}:{_lines(root, TOOLS, 'self.proj.weight.dtype')[0]}").stdout
    assert "not quantizable" in probe and "family:" not in probe, probe


def test_doctor_shows_the_adapter_family_its_roots_and_its_helper(journey):
    # 9b82479: "family: Hugging Face model code (3 sites)", roots "in model code (files of
    # transformers/diffusers, ...)": the project has no model code
    doctor = dtl(journey["original"], "doctor", "--no-cache")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    out = doctor.stdout
    assert "family: an adapter library (3 sites)" in out, out
    assert "quantizable roots: the base layer each adapter wraps (`get_base_layer()`, `self.base_layer`" in out
    assert f"helper: tinyadapt.module_input_dtype:get_module_input_dtype at {HELPER}: would be created by --fix" in out
    assert "findings: 3 (3 with a fix)" in out, out
    assert not any(word in out for word in ("Marlin", "NVFP4", "Hugging Face model code", "every site is skipped"))


def test_fix_puts_the_helper_inside_the_package_diff_shows_it_and_a_second_run_changes_nothing(journey):
    fixed, diff = journey["fixed"], journey["diff"]
    assert f"--- /dev/null\n+++ b/{HELPER}\n" in diff, diff
    hunks = diff.split(f"+++ b/{HELPER}\n", 1)[1].split("\n--- ", 1)[0]  # up to the next file's header
    shown = "".join(line[1:] + "\n" for line in hunks.splitlines() if line.startswith("+"))
    assert shown == (fixed / HELPER).read_text(encoding="utf-8") == "import torch\n\n\n" + HF_HELPER_SOURCE
    layers = (fixed / LAYERS).read_text(encoding="utf-8")
    ia3 = (fixed / IA3).read_text(encoding="utf-8")
    # each file imports the helper as it imports its siblings: ia3.py relatively, layers.py (which
    # imports none of its own package) absolutely
    assert "from .module_input_dtype import get_module_input_dtype\n" in ia3, ia3
    assert "from tinyadapt.module_input_dtype import get_module_input_dtype\n" in layers, layers
    assert "dtype = get_module_input_dtype(self.get_base_layer())" in layers, layers
    assert "get_module_input_dtype(self.base_layer) or" in ia3, ia3
    # the twins untouched
    assert "(self.lora_B.weight @ self.lora_A.weight).to(self.base_layer.weight.dtype)" in layers
    assert "x.to(self.lora_A.weight.dtype)" in layers
    assert (fixed / TOOLS).read_bytes() == (FIXTURE / TOOLS).read_bytes()
    assert_fix_created_only(FIXTURE, fixed, [HELPER])  # no root-level hf_utils.py, no vLLM helper



def test_the_editor_fix_all_writes_the_same_files_as_fix(journey, tmp_path: Path):
    root = copy_project(FIXTURE, tmp_path, "editor")
    fix_in_editor(root, [LAYERS, IA3])
    assert tree_bytes(root) == tree_bytes(journey["fixed"])

# One interpreter runs the original and the fixed package (each imported from its own folder) on
# every base: real bitsandbytes 4-bit and 8-bit layers (bnb_layer, tests/tiny_project.py) and
# stand-ins for what cannot run on CPU. A stand-in computes as its float twin does, with the input
# it is handed: GPTQ/AWQ keep no `.weight` (a packed `qweight`), an FP8 layer holds a float8 weight.
RUN_ADAPTERS = r"""
import json, sys
import torch
from torch import nn

IN, OUT = 64, 32


def load(src):
    for name in [m for m in sys.modules if m == "tinyadapt" or m.startswith("tinyadapt.")]:
        del sys.modules[name]
    sys.path.insert(0, src)
    try:
        import tinyadapt
        return tinyadapt
    finally:
        sys.path.remove(src)


class StandIn(nn.Module):
    def __init__(self, twin, storage):
        super().__init__()
        self.in_features, self.out_features = IN, OUT
        self.twin = [twin]  # not a submodule: the stand-in has no `.weight` of its own but its storage's
        if storage == "missing":
            self.register_buffer("qweight", torch.zeros(IN // 8, OUT, dtype=torch.int32))
        else:
            self.weight = nn.Parameter(twin.weight.detach().to(getattr(torch, storage)), requires_grad=False)

    def forward(self, x):
        if not x.dtype.is_floating_point:
            raise TypeError(f"a {x.dtype} input")
        return nn.functional.linear(x.float(), self.twin[0].weight, self.twin[0].bias)


def values(tensor):
    tensor = tensor.detach()
    return torch.view_as_real(tensor.to(torch.complex128) if tensor.is_complex() else
                              tensor.double().to(torch.complex128)).flatten().tolist()


def run(package, base, x):
    out = {}
    try:
        torch.manual_seed(0)
        lora = package.LoraLinear(base)
        lora.orthogonal_init()
        out["lora"] = {"dtype": str(lora.lora_A.weight.dtype), "grad": lora.lora_A.weight.requires_grad,
                       "values": values(lora.lora_A.weight)}
    except Exception as e:
        out["lora"] = {"raises": type(e).__name__}
    try:
        with torch.no_grad():
            got = package.ScaledLinear(base)(x)
        out["scaled"] = {"dtype": str(got.dtype), "values": values(got)}
    except Exception as e:
        out["scaled"] = {"raises": type(e).__name__}
    return out


original, fixed = load(sys.argv[1]), load(sys.argv[2])
torch.manual_seed(1)
linear = nn.Linear(IN, OUT)
x = torch.randn(3, IN)
out = {"twin": run(original, linear, x)}
for storage in ("bnb-4bit", "bnb-8bit", "missing", "float8_e4m3fn"):
    base = bnb_layer(linear, storage) if storage.startswith("bnb") else StandIn(linear, storage)
    out[storage] = {"original": run(original, base, x), "fixed": run(fixed, base, x)}
for storage in ("float16", "bfloat16", "float32", "complex64"):
    dtype = getattr(torch, storage)
    base = nn.Linear(IN, OUT, dtype=dtype)
    out[storage] = {"original": run(original, base, x.to(dtype)), "fixed": run(fixed, base, x.to(dtype))}
print(json.dumps(out))
"""


def relative_error(got: list[float], want: list[float]) -> float:
    import math

    return math.sqrt(sum((a - b) ** 2 for a, b in zip(got, want, strict=True)) / sum(b * b for b in want))


def test_the_fixed_adapters_run_on_every_base_and_match_the_unquantized_twin(journey):
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    out = run_on_quantized_layers(RUN_ADAPTERS, journey["original"] / "src", journey["fixed"] / "src")
    twin = out["twin"]
    assert twin["lora"]["dtype"] == twin["scaled"]["dtype"] == "torch.float32", twin
    for storage, tolerance in (("bnb-4bit", 0.5), ("bnb-8bit", 0.2), ("missing", 1e-6), ("float8_e4m3fn", 1e-6)):
        before, after = out[storage]["original"], out[storage]["fixed"]
        # the adapter is made in the compute dtype (the twin's), trainable; the original could not
        # make it (uint8/int8 cannot require gradients; no `.weight`) or made an fp8 one
        assert after["lora"]["dtype"] == "torch.float32" and after["lora"]["grad"], (storage, after)
        assert after["lora"]["values"] == twin["lora"]["values"], storage  # the same init as the twin's
        assert before["lora"].get("raises") or before["lora"]["dtype"] == "torch.float8_e4m3fn", (storage, before)
        # the scaled input reaches the base in the activation's dtype; the output matches the twin
        assert after["scaled"]["dtype"] == "torch.float32", (storage, after)
        assert relative_error(after["scaled"]["values"], twin["scaled"]["values"]) < tolerance, storage
        assert before["scaled"].get("raises") or \
            relative_error(before["scaled"]["values"], twin["scaled"]["values"]) > max(tolerance, 1e-3), (storage, before)
    # a float or complex base: the fixed code does exactly what the original did
    for storage in ("float16", "bfloat16", "float32", "complex64"):
        assert out[storage]["fixed"] == out[storage]["original"], storage
        assert out[storage]["fixed"]["lora"]["dtype"] == f"torch.{storage}", out[storage]
