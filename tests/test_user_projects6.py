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


def test_explain_follows_the_callers_check_follows(tmp_path: Path):
    """A site in the helper the bound function hands its child to (axolotl's `glm_dsa/patch.py:69`
    shape): explain follows the call as check does, and gives check's resolution and reason (the
    class matched by its name only, low confidence, why), never "class: not resolved"."""
    root = copy_project(FIXTURE, tmp_path, "proj")
    found = {Path(f["path"]).name: f for f in json_findings(root)}
    assert found["named_block.py"]["line"] == 12 and found["named_block.py"]["confidence"] == "low", found
    said = dtl(root, "explain", f"{PACKAGE}/named_block.py:12").stdout
    assert "class: not resolved (" not in said, said
    assert "`gate` is a parameter typed only as a module; its callers in this file say what it is" in said, said
    # check's evidence, step by step, at the call
    for step in found["named_block.py"]["evidence"]:
        assert step["message"] in said, (step, said)
    assert f"named_block.py:{found['named_block.py']['evidence'][0]['line']}: `gate` is `self.gate`" in said, said
    assert "`self` is an instance of `RemoteMixerBlock`, matched by its class name only" in said, said
    assert "DTL001/DTL002: reported with low confidence unless a guard dominates the site (the backends that " \
           "reach it are not known)" in said, said


# ---- the helper a no-fix finding suggests follows the project's ecosystem ------------------------------

HF_PATCH = '''\
"""A fused forward for a transformers block this package finds by name in a loaded model."""

import types


def router_scores(router, hidden_states):
    return router.score_proj(hidden_states.to(router.score_proj.weight.dtype)).softmax(-1)


def _fused_router_forward(self, hidden_states):
    return router_scores(self.router, hidden_states) * hidden_states


def patch_router_blocks(model) -> int:
    {library_import}

    patched = 0
    for module in model.modules():
        if type(module).__name__ == "RemoteRouterBlock":
            module.forward = types.MethodType(_fused_router_forward, module)
            patched += 1
    return patched
'''


def _router_finding(tmp_path: Path, library_import: str, settings: str = "") -> dict:
    root = copy_project(FIXTURE, tmp_path, "proj")
    (root / PACKAGE / "router_patch.py").write_text(HF_PATCH.format(library_import=library_import), encoding="utf-8")
    if settings:
        with (root / "pyproject.toml").open("a", encoding="utf-8") as toml:
            toml.write(f"\n[tool.dtype-lint]\n{settings}\n")
    found = [f for f in json_findings(root) if Path(f["path"]).name == "router_patch.py"]
    assert [(f["line"], f["confidence"], f["fix"]) for f in found] == [(7, "low", None)], found
    assert "which backends reach it cannot be told" in found[0]["message"], found
    return found[0]


def test_the_suggested_helper_follows_the_files_ecosystem_where_the_backends_cannot_be_told(tmp_path: Path):
    """A file importing transformers (inside the patching function, as axolotl's patch does) and no
    engine's layers: the suggestion is the HF helper, in its call shape (the module alone), which runs
    on any module, not the engine's shared helper with its fp8 flag. The same site in a file that
    imports the vllm preset's layers keeps the engine's helper; a `helper` set in [tool.dtype-lint] wins."""
    hf = _router_finding(tmp_path / "hf", "from transformers import PreTrainedModel  # noqa: F401")
    assert hf["message"].endswith("; use `get_module_input_dtype(router.score_proj)`"), hf["message"]
    assert "get_layer_input_dtype" not in json.dumps(hf), hf
    engine = _router_finding(tmp_path / "engine",
                             "from vllm.model_executor.layers.linear import ReplicatedLinear  # noqa: F401\n"
                             "    from transformers import PreTrainedModel  # noqa: F401")
    assert engine["message"].endswith("; use `get_layer_input_dtype(router.score_proj, ...)`"), engine["message"]
    configured = _router_finding(tmp_path / "configured", "from transformers import PreTrainedModel  # noqa: F401",
                                 'helper = "kernelpatch.dtypes:input_dtype_of"')
    assert configured["message"].endswith("; use `input_dtype_of(router.score_proj, ...)`"), configured["message"]

KEPT_DTYPE_ADAPTER = '''\
import torch
from torch import nn
from peft.tuners.tuners_utils import BaseTunerLayer


class ScaledAdapterLayer(nn.Module, BaseTunerLayer):
    def __init__(self, base_layer: nn.Module, rank: int = 4):
        super().__init__()
        self.base_layer = base_layer
        self.dtype = base_layer.weight.dtype
        self.down = nn.Parameter(torch.zeros(rank, base_layer.in_features))

    def forward(self, x):
        result = self.base_layer(x)
        x = x.to(self.dtype)
        return result + (x @ self.down.T).sum(-1, keepdim=True)
'''


def test_a_dtype_kept_on_the_adapter_is_told_the_hf_helpers_call_shape(tmp_path: Path):
    """The base layer's dtype kept on the adapter (`self.dtype = base_layer.weight.dtype`, peft's
    shape): the suggestion calls the HF helper as it is defined, with the module alone."""
    from tiny_project import write_tree

    root = write_tree(tmp_path / "proj", {"adapters/__init__.py": "", "adapters/scaled.py": KEPT_DTYPE_ADAPTER})
    found = json_findings(root)
    assert [(f["line"], f["fix"]) for f in found] == [(15, None)], found
    assert found[0]["message"].endswith("; use `get_module_input_dtype(self.base_layer)`"), found[0]["message"]


def _doctor(root: Path) -> str:
    proc = dtl(root, "doctor", "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


NAMED_ONLY = ("    src/kernelpatch/named_block.py:12: `self` is an instance of `RemoteMixerBlock`, matched by its "
              "class name only, a class this file neither defines nor imports, so its `gate.score_proj` is not "
              "read here\n")


def test_doctor_agrees_with_check_on_a_site_no_root_decides(tmp_path: Path):
    """axolotl 0.19.0's shape (`glm_dsa/patch.py:69`): the only site is on a class matched by its name
    string, which no quantizable root and no ecosystem family decides. `check` reports it (low
    confidence); doctor's roots paragraph says so, how check reached it, and does not claim that
    every site is skipped. At 08e5258 it printed "=> no class in the tree is quantizable: every site
    is skipped" above "findings: 1"."""
    root = copy_project(FIXTURE, tmp_path)
    for other in ("catalogued.py", "local_model.py", "controls.py"):  # only the name-matched patch left
        (root / PACKAGE / other).unlink()
    assert [where(f) for f in json_findings(root)] == [("src/kernelpatch/named_block.py", 12, "DTL001", "low")]
    out = _doctor(root)
    assert "every site is skipped" not in out, out
    assert ("  1 site reported that no root decides, with low confidence; which backends reach its layer cannot "
            "be told:\n" + NAMED_ONLY +
            "  => no class in the tree is quantizable: every site but the one above is skipped. Set "
            "`quantizable = [...]`") in out, out
    assert "\nfindings: 1 (0 with a fix)" in out and "family:" not in out, out


def test_doctor_names_the_undecided_site_beside_a_familys_paragraph(tmp_path: Path):
    """The whole fixture: the HF family's paragraph counts its 2 sites; the third, on the name-matched
    class, is named in the roots paragraph (at 08e5258 doctor said nothing of it), and the advice
    that every site is skipped is not given."""
    out = _doctor(copy_project(FIXTURE, tmp_path))
    assert ("  1 site reported that no root decides, with low confidence; which backends reach its layer cannot "
            "be told:\n" + NAMED_ONLY + "\nfamily: Hugging Face model code (2 sites)\n") in out, out
    assert "=> no class in the tree is quantizable" not in out and "\nfindings: 3 (2 with a fix)" in out, out
