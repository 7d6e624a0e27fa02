"""The user's own project, end to end (#40): a vLLM out-of-tree model plugin, on its own.

`fixtures/journeys/vllm_plugin` is `vllm-tinyllm-plugin` (our own code): a `src/` package
`tinyllm_plugin` whose `register()` (its `vllm.general_plugins` entry point) adds `TinyLlm` to
vLLM's model registry, and whose model builds vLLM's parallel linears with the model's
quantization config; it pins `vllm==0.34.0`. Planted: the attention casts its input to
`self.qkv_proj.weight.dtype` and the MLP to `self.gate_up_proj.weight.dtype`. The silent twins: a
`ReplicatedLinear` router built with `quant_config=None` (vLLM's unquantized method keeps it in
the model dtype) and a plain `nn.Linear`.

The journey: `check` reports the planted sites and nothing else in vLLM's words, judged against
the release the plugin pins; `explain` and `doctor` agree; `--fix` creates the helper inside the
plugin's package (never in the `vllm` it runs with), `--diff` shows it, a second run changes
nothing; the fixed model, registered through `register()` as vLLM loads a plugin, hands each layer
the compute dtype on every storage (a stand-in vLLM: Marlin's int32, NVFP4's uint8, AWQ's missing
weight, fp8, float) and matches its unquantized twin where the original diverged or raised. This
journey runs on mechanisms that existed at 9b82479 (the plugin's engine, #39; the helper's home
per package): it passes there too, and guards them for a plugin on its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import (
    STAND_IN_VLLM,
    assert_fix_created_only,
    copy_project,
    fix_in_editor,
    fix_project,
    json_findings,
    run_on_quantized_layers,
    tree_bytes,
    write_tree,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "journeys" / "vllm_plugin"
MODEL = "src/tinyllm_plugin/model.py"
HELPER = "src/tinyllm_plugin/layer_input_dtype.py"
# Other families' quantizers and helpers: never in this project's output.
FOREIGN_WORDS = ("bitsandbytes", "get_module_input_dtype", "Hugging Face", "modelopt NVFP4", "adapter")


def _lines(root: Path, text: str) -> list[int]:
    lines = (root / MODEL).read_text(encoding="utf-8").splitlines()
    return [number for number, line in enumerate(lines, 1) if text in line]


@pytest.fixture(scope="module")
def journey(tmp_path_factory) -> dict:
    """The project's findings and `--diff` before, and a fixed copy (one run of each, shared)."""
    tmp_path = tmp_path_factory.mktemp("plugin")
    original = copy_project(FIXTURE, tmp_path, "original")
    before = tree_bytes(original)
    diff = dtl(original, "check", ".", "--diff", "--no-cache")
    assert diff.returncode == 1 and tree_bytes(original) == before, diff.stdout + diff.stderr
    fixed = copy_project(FIXTURE, tmp_path, "fixed")
    fix_project(fixed)
    return {"original": original, "fixed": fixed, "found": json_findings(original), "diff": diff.stdout,
            "tmp": tmp_path}


def test_check_reports_the_planted_sites_in_vllms_words_for_the_pinned_release(journey):
    found = journey["found"]
    assert sorted((f["path"], f["line"], f["code"], f["confidence"]) for f in found) == \
        [(MODEL, line, "DTL001", "high") for line in _lines(journey["original"], "# planted")], found
    for finding in found:
        assert "repacks `weight` to int32" in finding["message"] and "in vllm 0.34.0" in finding["message"]
        evidence = " ".join(step["message"] for step in finding["evidence"])
        assert "the release pyproject.toml pins" in evidence, evidence
        assert not any(word in finding["message"] + evidence for word in FOREIGN_WORDS), finding


def test_explain_and_doctor_agree_with_check(journey):
    root = journey["original"]
    for finding in journey["found"]:
        explained = dtl(root, "explain", f"{MODEL}:{finding['line']}").stdout
        assert "  quant root: vllm.model_executor.layers.linear." in explained, explained
        assert "DTL001/DTL002: reported unless a guard dominates the site" in explained, explained
        assert not any(word in explained for word in FOREIGN_WORDS), explained
    router = dtl(root, "explain", f"{MODEL}:{_lines(root, 'self.router.weight.dtype')[0]}").stdout
    assert "without a quantization config" in router and "DTL001/DTL002: not reported" in router, router
    doctor = dtl(root, "doctor", "--no-cache")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    out = doctor.stdout
    assert f"helper: tinyllm_plugin.layer_input_dtype:get_layer_input_dtype (inferred) at {HELPER}: would be " \
           "created by --fix" in out, out
    assert "`vllm==0.34.0` in pyproject.toml: the shipped catalogue of vllm 0.34.0" in out, out
    assert "findings: 2 (2 with a fix)" in out, out
    assert not any(word in out for word in FOREIGN_WORDS), out


def test_fix_puts_the_helper_inside_the_plugin_diff_shows_it_and_a_second_run_changes_nothing(journey):
    fixed, diff = journey["fixed"], journey["diff"]
    assert f"--- /dev/null\n+++ b/{HELPER}\n" in diff, diff
    hunks = diff.split(f"+++ b/{HELPER}\n", 1)[1].split("\n--- ", 1)[0]  # up to the next file's header
    shown = "".join(line[1:] + "\n" for line in hunks.splitlines() if line.startswith("+"))
    assert shown == (fixed / HELPER).read_text(encoding="utf-8")
    model = (fixed / MODEL).read_text(encoding="utf-8")
    assert "from tinyllm_plugin.layer_input_dtype import get_layer_input_dtype\n" in model, model
    assert "get_layer_input_dtype(self.qkv_proj, True) or hidden_states.dtype" in model, model
    assert "get_layer_input_dtype(self.gate_up_proj, True) or x.dtype" in model, model
    assert "x.to(self.router.weight.dtype)" in model and "x.to(self.scale.weight.dtype)" in model  # the twins
    assert_fix_created_only(FIXTURE, fixed, [HELPER])  # never a `vllm/` folder that would shadow the engine



def test_the_editor_fix_all_writes_the_same_files_as_fix(journey, tmp_path: Path):
    root = copy_project(FIXTURE, tmp_path, "editor")
    fix_in_editor(root, [MODEL])
    assert tree_bytes(root) == tree_bytes(journey["fixed"])

# One interpreter registers the original and the fixed plugin (each from its own folder) as vLLM
# loads a plugin, builds the registered model on every storage of the stand-in vLLM
# (STAND_IN_VLLM, tests/tiny_project.py) and runs it on a model-dtype (bfloat16) activation.
RUN_PLUGIN = r"""
import importlib, json, sys
import torch
sys.path.insert(0, sys.argv[3])
from vllm import ModelRegistry
from vllm.model_executor.layers.linear import LinearBase


def registered(src):
    for name in [m for m in sys.modules if m == "tinyllm_plugin" or m.startswith("tinyllm_plugin.")]:
        del sys.modules[name]
    ModelRegistry.models.clear()
    sys.path.insert(0, src)
    try:
        importlib.import_module("tinyllm_plugin").register()
        module, _, name = ModelRegistry.models["TinyLlmForCausalLM"].partition(":")
        return getattr(importlib.import_module(module), name)
    finally:
        sys.path.remove(src)


def run(model_class, storage, x):
    LinearBase.storage = None if storage == "missing" else getattr(torch, storage)
    torch.manual_seed(0)  # the plain `nn.Linear`'s initial weight: the same in every model
    model = model_class(8, quant_config="a quantization config")
    try:
        with torch.no_grad():
            got = model(x)
    except Exception as e:
        return {"raises": type(e).__name__}
    return {"qkv_proj": str(model.attn.qkv_proj.seen), "gate_up_proj": str(model.mlp.gate_up_proj.seen),
            "router": str(model.mlp.router.seen), "out": got.float().flatten().tolist()}


original, fixed = registered(sys.argv[1]), registered(sys.argv[2])
x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
out = {storage: {"original": run(original, storage, x), "fixed": run(fixed, storage, x)}
       for storage in ("int32", "uint8", "missing", "float8_e4m3fn", "float16", "bfloat16", "float32")}
print(json.dumps(out))
"""


def test_the_fixed_plugin_model_hands_each_layer_the_compute_dtype_on_every_storage(journey):
    stand_in = write_tree(journey["tmp"] / "stand_in_vllm", STAND_IN_VLLM)
    out = run_on_quantized_layers(RUN_PLUGIN, journey["original"] / "src", journey["fixed"] / "src", stand_in)
    twin = out["bfloat16"]["original"]  # unquantized: the weight in the model dtype
    assert twin["qkv_proj"] == twin["gate_up_proj"] == "torch.bfloat16", twin
    # The original hands Marlin's int32 and NVFP4's uint8 to its layers (wrong results) and raises
    # without a weight (AWQ/GPTQ).
    for storage in ("int32", "uint8"):
        before = out[storage]["original"]
        assert before["qkv_proj"] == before["gate_up_proj"] == f"torch.{storage}", before
        assert before["out"] != twin["out"], storage
    assert out["missing"]["original"] == {"raises": "AttributeError"}, out["missing"]
    # Fixed: the compute dtype for packed or missing storage, and exactly the twin's result.
    for storage in ("int32", "uint8", "missing"):
        assert out[storage]["fixed"] == twin, (storage, out[storage]["fixed"])
    # Where the storage is a float the layer takes as input (fp8: the cast names fp8 input), the
    # fixed model does exactly what the original did.
    for storage in ("float8_e4m3fn", "float16", "bfloat16", "float32"):
        after = out[storage]["fixed"]
        assert after == out[storage]["original"] and after["qkv_proj"] == f"torch.{storage}", (storage, after)
    # the router, built without a quantization config, stays in the model dtype on every storage
    assert {run["router"] for storage in out.values() for run in storage.values() if "router" in run} == \
        {"torch.bfloat16"}
