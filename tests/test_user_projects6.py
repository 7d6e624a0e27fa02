"""Issue #40, user projects (round 6): a patch bound onto the *instances* of a model's module class.

Projects that reshape Hugging Face models at run time (axolotl's kernel patches; the TRUE site
axolotl 0.19.0 `glm_dsa/patch.py:69` in benchmarks/accuracy/triage/verdicts/axolotl-0.19.0.tsv)
walk a loaded model, find a module by an `isinstance` test or by its class's *name*
(`type(module).__name__ == "..."`), bind a module-level function onto it with
`types.MethodType(fn, module)`, and that function hands one of the module's children, untyped, to
a helper that casts to `child.layer.weight.dtype`. Three steps had to be followed:

- the bound function runs as a method of the tested class (analysis/instance_patches.py);
- the helper's `gate.score_proj` is the caller's `self.gate.score_proj` (analysis/flow/callers.py:
  the caller lookup extended from the parameter to its attributes), the caller read back whole
  where the reduced parse blanked its body (it holds no site line);
- a class known only by its name's string, defined nowhere in the file's view: which backends
  reach its layer cannot be told, so the finding says so (low confidence, no fix), never a silent pass.

`fixtures/instance_patches` is our own code in that shape (nothing copied from axolotl).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import copy_project, json_findings

from dtype_lint.analysis.function_walk import patched_methods

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "instance_patches"
PACKAGE = "src/kernelpatch"


def where(found: dict) -> tuple[str, int, str, str]:
    return Path(found["path"]).as_posix().split("proj/")[-1], found["line"], found["code"], found["confidence"]


# ---- which class a bound function runs on ---------------------------------------------------------

BINDINGS = '''
import types
from types import MethodType


def by_name(self, x):
    return x


def by_dunder_class(self, x):
    return x


def by_isinstance(self, x):
    return x


def by_type_is(self, x):
    return x


def in_a_conjunction(self, x):
    return x


def untested(self, x):
    return x


def two_classes(self, x):
    return x


def patch(model, Block, Other):
    for module in model.modules():
        if type(module).__name__ == "FarBlock":
            module.forward = types.MethodType(by_name, module)
        if module.__class__.__name__ == "FarMixer":
            setattr(module, "mix", MethodType(by_dunder_class, module))
        if isinstance(module, Block):
            module.forward = types.MethodType(by_isinstance, module)
        if type(module) is Other:
            module.forward = types.MethodType(by_type_is, module)
        if hasattr(module, "gate") and type(module).__name__ == "GatedBlock":
            for _ in range(1):
                module.gate_forward = types.MethodType(in_a_conjunction, module)
        module.sample = types.MethodType(untested, module)
        if isinstance(module, Block):
            module.extra = types.MethodType(two_classes, module)
        elif isinstance(module, Other):
            module.extra = types.MethodType(two_classes, module)
'''


def test_a_function_bound_onto_instances_runs_on_the_class_its_test_names():
    """Each test form gives the class as the file spells it (a string name marked); a binding under
    no test of the instance's class, or onto two classes, gives none."""
    from dtype_lint.analysis.instance_patches import NAMED_CLASS_PREFIX, named_only

    found = patched_methods(ast.parse(BINDINGS))
    assert found == {
        "by_name": NAMED_CLASS_PREFIX + "FarBlock",
        "by_dunder_class": NAMED_CLASS_PREFIX + "FarMixer",
        "by_isinstance": "Block",
        "by_type_is": "Other",
        "in_a_conjunction": NAMED_CLASS_PREFIX + "GatedBlock",
    }, found
    assert named_only(found["by_name"]) == "FarBlock" and named_only("pkg.FarBlock") is None


# ---- the project, end to end ------------------------------------------------------------------------


def test_check_reports_the_handed_layers_of_bound_functions_and_nothing_else(tmp_path: Path):
    """The string-named library class (low, no fix, saying why), a transformers model class named by
    string (the catalogue's low verdict), the package's own model's block patched by `isinstance`
    (high, fixed); nothing in controls.py (a plain torch module, an untested binding, an unbound caller)."""
    found = json_findings(copy_project(FIXTURE, tmp_path, "proj"))
    assert sorted(where(f) for f in found) == [
        (f"{PACKAGE}/catalogued.py", 7, "DTL001", "low"),
        (f"{PACKAGE}/local_model.py", 29, "DTL001", "high"),
        (f"{PACKAGE}/named_block.py", 12, "DTL001", "low"),
    ], found
    by_file = {Path(f["path"]).name: f for f in found}
    named = by_file["named_block.py"]
    assert named["fix"] is None and "no helper is proven to run on it" in named["no_fix_reason"], named
    steps = [step["message"] for step in named["evidence"]]
    assert "`gate` is `self.gate` where `_fused_block_forward` calls `fused_gate_scores`" in steps[0], steps
    assert "`RemoteMixerBlock`, matched by its class name only" in named["message"], named["message"]
    assert "which backends reach it cannot be told" in named["message"], named["message"]
    catalogued = " ".join(step["message"] for step in by_file["catalogued.py"]["evidence"])
    assert "`gate_proj` of `LlamaModel`, a transformers model class outside this tree" in catalogued, catalogued
    local = by_file["local_model.py"]
    assert local["fix"] is not None and "bitsandbytes 4-bit" in local["message"], local
    assert "`scorer` is `self.scorer` where `_scored_forward` calls `scored`" in local["evidence"][0]["message"]


# ---- the fix, run on every storage the layer can meet ------------------------------------------------


class _StoredLayer:
    """A stand-in for a layer a quantizer replaced: `.weight` in a storage dtype (or absent); its
    forward records the dtype it is called with and hands its input back."""

    def __init__(self, weight):
        if weight is not None:
            self.weight = weight
        self.seen = None

    def __call__(self, values):
        self.seen = values.dtype
        return values


class _Scorer:
    def __init__(self, layer):
        self.score_proj = layer


def _scored_function(path: Path, helper: Path):
    """The `scored` function of `path`, run with the helper module the fix created at `helper`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    function = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "scored")
    namespace: dict = {}
    if helper.exists():
        exec(compile(helper.read_text(encoding="utf-8"), str(helper), "exec"), namespace)
    exec(compile(ast.Module(body=[function], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["scored"]


def test_the_fixed_handed_layer_runs_on_every_storage(tmp_path: Path):
    """`--fix` routes the helper's cast through the HF helper; run on packed int32/uint8/int8, fp8, no
    `.weight`, float16/bfloat16/float32 and complex layers, the fixed cast keeps the activation's
    dtype where the weight is a storage and follows a float or complex weight as the original does.
    The string-named block's site has no fix: its file is unchanged."""
    torch = pytest.importorskip("torch")
    original = copy_project(FIXTURE, tmp_path, "original")
    fixed = copy_project(FIXTURE, tmp_path, "fixed")
    proc = dtl(fixed, "check", ".", "--fix", "--no-cache", "--output-format", "json")
    run = json.loads(proc.stdout)
    # fixed: the package's own block and the catalogued class; left: the site no helper is proven on
    assert run["summary"]["fixed"] == 2, run
    assert [(Path(f["path"]).name, f["line"]) for f in run["findings"]] == [("named_block.py", 12)], run
    assert (fixed / PACKAGE / "named_block.py").read_bytes() == (original / PACKAGE / "named_block.py").read_bytes()
    helpers = [path for path in (fixed / PACKAGE).glob("*.py") if not (original / PACKAGE / path.name).exists()]
    assert len(helpers) == 1, helpers
    before = _scored_function(original / PACKAGE / "local_model.py", original / "absent.py")
    after = _scored_function(fixed / PACKAGE / "local_model.py", helpers[0])
    activation = torch.randn(2, 4)
    storages = {"packed int32": torch.zeros(4, 1, dtype=torch.int32), "uint8": torch.zeros(8, 1, dtype=torch.uint8),
                "int8": torch.zeros(4, 4, dtype=torch.int8), "fp8": torch.zeros(4, 4, dtype=torch.float8_e4m3fn),
                "no weight": None}
    for name, weight in storages.items():
        layer = _StoredLayer(weight)
        out = after(_Scorer(layer), activation)
        assert layer.seen == torch.float32 and torch.equal(out, activation), name
        broken = _StoredLayer(weight)
        try:
            kept = before(_Scorer(broken), activation).dtype == torch.float32
        except AttributeError:
            kept = False
        assert not kept, name  # the original casts to the storage (or raises)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.complex64):
        float_before, float_after = _StoredLayer(torch.zeros(4, 4, dtype=dtype)), _StoredLayer(torch.zeros(4, 4, dtype=dtype))
        assert after(_Scorer(float_after), activation).dtype == before(_Scorer(float_before), activation).dtype == dtype


# ---- explain says what check says ----------------------------------------------------------------------

DIRECT = '''\
import types


def _direct(self, values):
    return values.to(self.out_proj.weight.dtype)


def patch(model):
    for module in model.modules():
        if type(module).__name__ == "FarBlock":
            module.forward = types.MethodType(_direct, module)
'''


def test_explain_agrees_with_check_on_bound_functions(tmp_path: Path):
    """A site in the bound function itself: the string-named class outside the tree (low, the reason)
    and the catalogued transformers class (the catalogue's words), as check reports them."""
    root = copy_project(FIXTURE, tmp_path, "proj")
    (root / PACKAGE / "direct.py").write_text(DIRECT, encoding="utf-8")
    found = {Path(f["path"]).name: f for f in json_findings(root)}
    assert found["direct.py"]["confidence"] == "low" and found["direct.py"]["line"] == 5, found
    named = dtl(root, "explain", f"{PACKAGE}/direct.py:5").stdout
    assert "`self` is an instance of `FarBlock`, matched by its class name only" in named, named
    assert "DTL001/DTL002: reported with low confidence" in named, named
    catalogued = dtl(root, "explain", f"{PACKAGE}/catalogued.py:7").stdout
    assert "`gate_proj` of `LlamaModel`, a transformers model class outside this tree" in catalogued, catalogued
    assert "DTL001/DTL002: reported with low confidence" in catalogued, catalogued
