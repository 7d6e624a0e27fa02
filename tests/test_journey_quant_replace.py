"""The user's own project, end to end (#40): a plain PyTorch project that quantizes its own modules.

`fixtures/journeys/quant_replace` is `tinyq` (our own code, no transformers model base, no vLLM):
`model.py`'s `Gate` casts its input to `self.proj.weight.dtype`; `TinyModel` builds `Gate`s in an
`nn.ModuleList`; `quantize.py` swaps every `nn.Linear` of a `TinyModel` for a `bnb.nn.Linear4bit`.
`Twin` is the same gate in a model nothing quantizes. At 3fd523f the project checked clean: no
family knew a project that applies a quantizer to its own modules
(dtype_lint/ecosystems/quantizers/).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import copy_project, fix_project, json_findings, run_on_each_project, tree_bytes

from dtype_lint.ecosystems.hf.helper import HF_HELPER_SOURCE

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "journeys" / "quant_replace"
MODEL = "src/tinyq/model.py"
QUANTIZE = "src/tinyq/quantize.py"
HELPER = "src/tinyq/module_input_dtype.py"
VLLM_WORDS = ("Marlin", "NVFP4", "AWQ", "GPTQ", "vllm")


def project(tmp_path: Path, name: str = "proj") -> Path:
    return copy_project(FIXTURE, tmp_path, name)


def where(found: dict) -> tuple[str, int, str, str]:
    return Path(found["path"]).as_posix().rsplit("proj/", 1)[-1], found["line"], found["code"], found["confidence"]


def test_check_reports_the_quantized_gate_and_not_its_twin(tmp_path: Path):
    found = json_findings(project(tmp_path))
    assert [where(f) for f in found] == [(MODEL, 11, "DTL001", "high")], found
    message = found[0]["message"]
    assert "uint8 under bitsandbytes 4-bit" in message, message
    assert not any(word in message for word in VLLM_WORDS), message
    evidence = " ".join(step["message"] for step in found[0]["evidence"])
    assert "`bnb.nn.Linear4bit(...)` applies a swap to `bnb.nn.Linear4bit` to `TinyModel`" in evidence, evidence


def test_explain_and_doctor_speak_the_family(tmp_path: Path):
    root = project(tmp_path)
    planted = dtl(root, "explain", f"{MODEL}:11").stdout
    assert "family: quantizers" in planted and "applies a swap to `bnb.nn.Linear4bit`" in planted, planted
    twin = dtl(root, "explain", f"{MODEL}:33").stdout
    assert "not quantizable" in twin and "family:" not in twin, twin
    doctor = dtl(root, "doctor").stdout
    assert "family: a project that quantizes its own modules (1 site)" in doctor, doctor
    assert "helper: tinyq.module_input_dtype:get_module_input_dtype: would be created by --fix" in doctor, doctor
    assert "Hugging Face" not in doctor and "every site is skipped" not in doctor, doctor


def _write(root: Path, name: str, text: str) -> None:
    (root / "src/tinyq" / name).write_text(text, encoding="utf-8")


QUANTIZE_WITH = """\
{imports}
from .model import TinyModel


def build():
    model = TinyModel()
    {call}
    return model
"""


@pytest.mark.parametrize(("imports", "call", "words"), [
    ("from transformers.integrations import replace_with_bnb_linear", "replace_with_bnb_linear(model)",
     "uint8 under bitsandbytes 4-bit, int8 under bitsandbytes 8-bit"),
    ("import modelopt.torch.quantization as mtq", "mtq.compress(model)", "uint8 under modelopt NVFP4"),
])
def test_each_packing_quantizer_reaches_the_gate(tmp_path: Path, imports: str, call: str, words: str):
    root = project(tmp_path)
    _write(root, "quantize.py", QUANTIZE_WITH.format(imports=imports, call=call))
    found = json_findings(root)
    assert [where(f) for f in found] == [(MODEL, 11, "DTL001", "high")], found
    assert words in found[0]["message"], found[0]["message"]


@pytest.mark.parametrize(("imports", "call"), [
    ("from torchao.quantization import Int8WeightOnlyConfig, quantize_", "quantize_(model, Int8WeightOnlyConfig())"),
    ("from optimum.quanto import qint8, quantize", "quantize(model, weights=qint8)"),
    ("import modelopt.torch.quantization as mtq", "mtq.quantize(model, mtq.INT8_DEFAULT_CFG)"),
])
def test_quantizers_that_keep_a_float_dtype_make_no_finding(tmp_path: Path, imports: str, call: str):
    """torchao's tensor subclasses and quanto's report the original float dtype; modelopt's fake
    quantization keeps the float weight: a cast to it is harmless. The twin, quantized so, is not
    reported; the gate, still swapped to bitsandbytes by quantize.py, is."""
    root = project(tmp_path)
    _write(root, "extra.py", QUANTIZE_WITH.format(imports=imports, call=call).replace("TinyModel", "Twin")
           .replace("Twin()", "Twin(64)"))
    assert [where(f) for f in json_findings(root)] == [(MODEL, 11, "DTL001", "high")]


def test_a_model_that_cannot_be_told_is_low_confidence_with_the_reason(tmp_path: Path):
    root = project(tmp_path)
    _write(root, "quantize.py", "from transformers.integrations import replace_with_bnb_linear\n\n\n"
                                "def build(loader):\n    model = loader.load()\n"
                                "    replace_with_bnb_linear(model.backbone)\n    return model\n")
    found = json_findings(root)
    assert sorted(where(f) for f in found) == [(MODEL, 11, "DTL001", "low"), (MODEL, 33, "DTL001", "low")], found
    assert all("`model.backbone`" in f["message"] and "bitsandbytes 4-bit" in f["message"] for f in found), found


def test_a_library_function_handed_its_callers_model_is_no_application(tmp_path: Path):
    """A parameter no call of the tree passes: the model is the caller's, outside the tree."""
    root = project(tmp_path)
    _write(root, "extra.py", "from transformers.integrations import replace_with_bnb_linear\n\n\n"
                             "def quantize(model):\n    return replace_with_bnb_linear(model)\n")
    assert [where(f) for f in json_findings(root)] == [(MODEL, 11, "DTL001", "high")]


def test_fix_puts_the_helper_inside_the_package_and_diff_shows_it(tmp_path: Path):
    root = project(tmp_path)
    diff = dtl(root, "check", ".", "--diff", "--no-cache").stdout
    assert "+++ b/src/tinyq/module_input_dtype.py" in diff and "get_module_input_dtype(self.proj)" in diff, diff
    fix_project(root)
    model = (root / MODEL).read_text(encoding="utf-8")
    assert "x.to(get_module_input_dtype(self.proj) or x.dtype)" in model, model
    assert model.count("self.proj.weight.dtype") == 1  # the twin untouched
    assert (root / HELPER).read_text(encoding="utf-8") == "import torch\n\n\n" + HF_HELPER_SOURCE
    assert not list(root.rglob("layer_input_dtype.py")) and not (root / "hf_utils.py").exists()
    assert json_findings(root) == []
    before = tree_bytes(root)
    fix_project(root)
    assert tree_bytes(root) == before


# ---- slow: the fixed model runs on real bitsandbytes, torchao and quanto layers on CPU ------------

RUN_MODEL = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, sys.argv[1])
from tinyq.model import Gate, Twin

torch.manual_seed(0)
gate = Gate(64).eval()
twin = Twin(64).eval()
twin.load_state_dict(gate.state_dict())
x = torch.randn(2, 5, 64)
linear = gate.proj


def library_layer(linear, kind):
    import copy
    holder = torch.nn.Sequential(copy.deepcopy(linear))
    if kind == "torchao-int8":
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
        quantize_(holder, Int8WeightOnlyConfig())
    else:
        from optimum.quanto import freeze, qint8, quantize
        quantize(holder, weights=qint8)
        freeze(holder)
    return holder[0]


out = {}
with torch.no_grad():
    reference = twin(x)
    out["float"] = gate(x).tolist() == reference.tolist()
    for kind, make in (("bnb-4bit", bnb_layer), ("bnb-8bit", bnb_layer), ("torchao-int8", library_layer),
                       ("quanto-int8", library_layer)):
        try:
            gate.proj = make(linear, kind)
        except ImportError as e:  # a library not installed here (torchao and quanto are optional)
            out[kind] = {"unavailable": f"{type(e).__name__}: {e}"}
            continue
        try:
            got = gate(x)
            out[kind] = {"dtype": str(got.dtype),
                         "error": ((got.float() - reference).norm() / reference.norm()).item()}
        except Exception as e:
            out[kind] = {"raises": f"{type(e).__name__}: {e}"}
        gate.proj = linear
print(json.dumps(out))
"""


def test_fixed_gate_runs_on_real_quantized_layers(tmp_path: Path):
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    original, fixed = project(tmp_path, "original"), project(tmp_path, "fixed")
    fix_project(fixed)
    before, after = run_on_each_project(RUN_MODEL, [original / "src", fixed / "src"])
    assert after["float"] and before["float"]  # unquantized, the fix changes nothing
    for kind, tolerance in (("bnb-4bit", 0.5), ("bnb-8bit", 0.2)):
        got = after[kind]
        assert got.get("dtype") == "torch.float32" and got["error"] < tolerance, (kind, after)
    # the original raised (8-bit: an int8 input) or diverged (4-bit: a uint8 cast)
    assert "raises" in before["bnb-8bit"], before
    assert "raises" in before["bnb-4bit"] or before["bnb-4bit"]["error"] > 0.5, before
    # torchao and quanto keep a float `.dtype`: original and fixed both run, and agree
    for kind in ("torchao-int8", "quanto-int8"):
        if "unavailable" in after[kind]:
            continue
        assert after[kind].get("dtype") == "torch.float32" and after[kind]["error"] < 0.1, (kind, after)
        assert before[kind] == after[kind], (kind, before, after)


def _cached_findings(root: Path) -> list[dict]:
    import json

    proc = dtl(root, "check", ".", "--output-format", "json")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return json.loads(proc.stdout)["findings"]


@pytest.mark.parametrize("module_first", [True, False])
def test_a_cached_run_sees_a_quantizer_added_where_no_file_named_one(tmp_path: Path, module_first: bool):
    """The applications' census reads only the headers of files whose text names a quantizer
    package (ModuleTable.naming); the files it passed over still count as read, so the cached
    answer of the gate's file is stale once `quantize.py` starts importing bitsandbytes (as an
    edited file, or as a new module)."""
    root = project(tmp_path)
    swapping = (root / QUANTIZE).read_text(encoding="utf-8")
    if module_first:
        _write(root, "quantize.py", "def build():\n    return None\n")
    else:
        (root / QUANTIZE).unlink()
    assert _cached_findings(root) == []
    assert _cached_findings(root) == []  # the answer kept, read back
    _write(root, "quantize.py", swapping)
    assert [where(f) for f in _cached_findings(root)] == [(MODEL, 11, "DTL001", "high")]
