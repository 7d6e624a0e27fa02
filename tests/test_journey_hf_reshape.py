"""The user's own project, end to end (#40): a project that reshapes Hugging Face models.

`fixtures/journeys/hf_reshape` is `reshape` (our own code, in the shape of unsloth and axolotl):
`modeling_longcat.py` subclasses a *concrete* transformers model (`LongcatCausalLM(LlamaForCausalLM)`)
and adds an `nn.Linear` whose weight dtype its `draft` method casts to; `patches.py` patches
functions over classes in `apply()`: `LongcatCausalLM.draft = fast_draft` (the subclass, whose
layer is read), `setattr(LlamaModel, "gate", llama_model_gate)` (a transformers class, whose
`gate_proj` this tree cannot read: low confidence, saying why) and `RecorderModule.forward =
recorder_forward` (a plain torch module: no HF quantizer reaches it). `controls.py` subclasses a
transformers class that is no model (`LogitsProcessor`), and `widen` is a function never bound.

The transformers classes are known from the shipped catalogue of model class names
(dtype_lint/ecosystems/hf/model_classes.py), never from site-packages. At d9efdd1 the project
checked clean: its classes' MRO stops at `transformers.LlamaForCausalLM`, and a patched
function's `self` was an ordinary parameter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from cli_runner import dtl
from conftest import full_only, pinned_hf_tree
from tiny_project import copy_project, fix_project, json_findings, run_on_quantized_layers, tree_bytes

from dtype_lint.analysis.function_walk import patched_methods
from dtype_lint.ecosystems.hf.helper import HF_HELPER_SOURCE
from dtype_lint.ecosystems.hf.model_classes import PINNED, build_catalogue, catalogue_path, is_model_class, render

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "journeys" / "hf_reshape"
MODEL = "src/reshape/modeling_longcat.py"
PATCHES = "src/reshape/patches.py"
HELPER = "src/reshape/module_input_dtype.py"


def project(tmp_path: Path, name: str = "proj") -> Path:
    return copy_project(FIXTURE, tmp_path, name)


findings = json_findings
fix = fix_project


def where(found: dict) -> tuple[str, int, str, str]:
    return Path(found["path"]).as_posix().split("proj/")[-1], found["line"], found["code"], found["confidence"]


def test_check_reports_the_planted_sites_and_nothing_else(tmp_path: Path):
    found = findings(project(tmp_path))
    # the subclass's own method, the function patched over it, the transformers class's unread
    # layer (low); not the LogitsProcessor subclass, the patched plain module, the unbound function
    assert [where(f) for f in found] == [(MODEL, 13, "DTL001", "high"), (PATCHES, 10, "DTL001", "high"),
                                        (PATCHES, 16, "DTL001", "low")], found
    words = [f["message"] for f in found]
    assert all("bitsandbytes 4-bit" in message and "Marlin" not in message for message in words), words
    evidence = " ".join(step["message"] for step in found[2]["evidence"])
    assert "`gate_proj` of `LlamaModel`, a transformers model class outside this tree" in evidence, evidence


def test_explain_agrees_with_check_on_the_patched_functions(tmp_path: Path):
    root = project(tmp_path)
    patched = dtl(root, "explain", f"{PATCHES}:10").stdout
    assert "class: torch.nn.Linear" in patched and "  family: hf\n" in patched, patched
    assert "DTL001/DTL002: reported unless a guard dominates the site" in patched
    unread = dtl(root, "explain", f"{PATCHES}:16").stdout
    assert "`gate_proj` of `LlamaModel`, a transformers model class outside this tree" in unread, unread
    assert "DTL001/DTL002: reported with low confidence unless a guard dominates the site" in unread
    control = dtl(root, "explain", f"{PATCHES}:21").stdout
    assert "not quantizable" in control and "family: hf" not in control, control


def test_a_subclass_of_a_diffusers_model_and_a_model_imported_from_its_module(tmp_path: Path):
    """`class MyUNet(UNet2DConditionModel)`, and a transformers class imported from its modeling
    module (`transformers.models.vit.modeling_vit.ViTModel`): both HF model code."""
    root = project(tmp_path)
    (root / "src/reshape/unet.py").write_text(
        "from diffusers import UNet2DConditionModel\nfrom torch import nn\n\n\n"
        "class MyUNet(UNet2DConditionModel):\n    def __init__(self):\n        super().__init__()\n"
        "        self.time_mix = nn.Linear(8, 8)\n\n    def mix(self, t):\n"
        "        return self.time_mix(t.to(self.time_mix.weight.dtype))\n", encoding="utf-8")
    (root / "src/reshape/vit.py").write_text(
        "from torch import nn\nfrom transformers.models.vit.modeling_vit import ViTModel\n\n\n"
        "class MyVit(ViTModel):\n    def __init__(self, config):\n        super().__init__(config)\n"
        "        self.head = nn.Linear(8, 8)\n\n    def pool(self, x):\n"
        "        return self.head(x.to(self.head.weight.dtype))\n", encoding="utf-8")
    found = {where(f)[:2] for f in findings(root)}
    assert {("src/reshape/unet.py", 11), ("src/reshape/vit.py", 11)} <= found, found
    unet = [f for f in findings(root) if f["path"].endswith("unet.py")]
    assert "layerwise casting" in unet[0]["message"], unet  # diffusers' own quantizers


def test_fix_puts_the_hf_helper_inside_the_package_and_checks_clean(tmp_path: Path):
    root = project(tmp_path)
    fix(root)
    model = (root / MODEL).read_text(encoding="utf-8")
    patches = (root / PATCHES).read_text(encoding="utf-8")
    assert "get_module_input_dtype(self.draft_proj)" in model and "get_module_input_dtype(self.draft_proj)" in patches
    assert "get_module_input_dtype(self.gate_proj) or hidden_states.dtype" in patches, patches
    assert "from .module_input_dtype import get_module_input_dtype\n" in patches, patches
    assert "self.probe.weight.dtype" in patches and "self.wide.weight.dtype" in patches  # the controls untouched
    assert (root / HELPER).read_text(encoding="utf-8") == "import torch\n\n\n" + HF_HELPER_SOURCE
    assert not list(root.rglob("layer_input_dtype.py")) and not (root / "hf_utils.py").exists()
    for path in (MODEL, PATCHES):
        compile((root / path).read_text(encoding="utf-8"), path, "exec")
    assert findings(root) == []
    before = tree_bytes(root)
    fix(root)
    assert tree_bytes(root) == before


def test_patched_methods_reads_the_patching_statements():
    tree = ast.parse(
        "def a(self, x): pass\n"
        "def b(self, x): pass\n"
        "def c(self, x): pass\n"
        "def d(x, self): pass\n"
        "def apply():\n"
        "    transformers.LlamaModel.forward = a\n"
        "    setattr(Other, 'forward', b)\n"
        "    One.forward = c\n"
        "    Two.forward = c\n"
        "    Three.forward = d\n")
    # `c` is patched onto two classes (no single `self`); `d`'s first parameter is not `self`
    assert patched_methods(tree) == {"a": "transformers.LlamaModel", "b": "Other"}


def test_the_catalogue_names_model_classes_only():
    for qualname in ("transformers.LlamaForCausalLM", "transformers.models.vit.modeling_vit.ViTModel",
                     "transformers.PreTrainedModel", "diffusers.UNet2DConditionModel",
                     "diffusers.models.transformers.transformer_wan.WanTransformer3DModel"):
        assert is_model_class(qualname), qualname
    for qualname in ("transformers.LogitsProcessor", "transformers.models.llama.modeling_llama.LlamaMLP",
                     "transformers.PretrainedConfig", "mypkg.LlamaForCausalLM", "LlamaForCausalLM"):
        assert not is_model_class(qualname), qualname


def test_the_catalogue_builder_follows_ancestry_through_the_librarys_own_classes(tmp_path: Path):
    """The builder on a small tree of our own: descendants of the model base through any number of
    the library's classes (a mixin beside, an alias base by attribute), private and unrelated
    classes left out, a cycle ending."""
    package = tmp_path / "diffusers" / "models"
    package.mkdir(parents=True)
    (package / "modeling_utils.py").write_text("class ModelMixin(Base):\n    pass\n")
    (package / "unet.py").write_text(
        "from . import modeling_utils\n"
        "class UNetModel(modeling_utils.ModelMixin, ConfigMixin):\n    pass\n"
        "class TinyUNet(UNetModel):\n    pass\n"
        "class _PrivateUNet(UNetModel):\n    pass\n"
        "class Scheduler(ConfigMixin):\n    pass\n"
        "class Loop(Loop2):\n    pass\nclass Loop2(Loop):\n    pass\n")
    (package / "broken.py").write_text("class (:\n")  # a file that does not parse is skipped
    assert build_catalogue(tmp_path, "diffusers") == ["ModelMixin", "TinyUNet", "UNetModel"]


# Each catalogue is a whole-tree parse (minutes under CI's load): CI keeps the builder on a tree of
# our own above; DTL_FULL compares both shipped catalogues with their releases.
@pytest.mark.parametrize("library", [full_only(library, "the builder on a tree of our own") for library in sorted(PINNED)])
def test_the_shipped_catalogue_is_fresh(library: str):
    """The shipped list is what the pinned release's own files give (scripts/hf_model_classes.py)."""
    tree = pinned_hf_tree(library)
    assert catalogue_path(library).read_text(encoding="utf-8") == \
        render(library, PINNED[library], build_catalogue(tree, library))


# ---- slow: the fixed model runs on real bitsandbytes 4-bit and 8-bit layers on CPU ---------------

RUN_MODEL = r"""
import json, sys
import torch
from transformers import LlamaConfig
sys.path.insert(0, sys.argv[1])
import reshape
from reshape import patches

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=4, num_key_value_heads=4)
model = reshape.LongcatCausalLM(config).eval()
linear = model.draft_proj
ids = torch.randint(0, 64, (2, 5))


def run(out, name):
    twin = model(ids)
    out[name] = {"float": twin.tolist()}
    for kind in ("bnb-4bit", "bnb-8bit"):
        model.draft_proj = bnb_layer(linear, kind)
        try:
            got = model(ids)
            out[name][kind] = {"dtype": str(got.dtype), "error": ((got.float() - twin).norm() / twin.norm()).item()}
        except Exception as e:
            out[name][kind] = {"raises": f"{type(e).__name__}: {e}"}
        model.draft_proj = linear


with torch.no_grad():
    out = {}
    run(out, "own")  # LongcatCausalLM.draft, the subclass's own method
    patches.apply()
    run(out, "patched")  # fast_draft, patched over it
    # the transformers class's layer, patched: handed a real 4-bit layer as `gate_proj`
    hidden = torch.randn(2, 5, 64)
    model.model.gate_proj = bnb_layer(linear, "bnb-4bit")
    gated = model.model.gate(hidden)
    out["gate"] = {"dtype": str(gated.dtype), "same": bool(torch.equal(gated.float(), hidden))}
print(json.dumps(out))
"""


def run_model(root: Path) -> dict:
    return run_on_quantized_layers(RUN_MODEL, root / "src")


def test_fixed_subclass_and_patched_forward_run_on_bitsandbytes(tmp_path: Path):
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    original, fixed = project(tmp_path, "original"), project(tmp_path, "fixed")
    fix(fixed)
    before, after = run_model(original), run_model(fixed)
    for name in ("own", "patched"):
        # unquantized, the fix changes nothing
        assert after[name]["float"] == before[name]["float"], name
        for kind, tolerance in (("bnb-4bit", 0.5), ("bnb-8bit", 0.2)):
            got = after[name][kind]
            assert got.get("dtype") == "torch.float32" and got["error"] < tolerance, (name, kind, after)
        # the original raised (8-bit: int8 input) or diverged (4-bit: a uint8 cast)
        assert "raises" in before[name]["bnb-8bit"], before
        assert "raises" in before[name]["bnb-4bit"] or before[name]["bnb-4bit"]["error"] > 0.5, before
    assert after["gate"] == {"dtype": "torch.float32", "same": True}, after
    assert before["gate"]["dtype"] == "torch.uint8", before
