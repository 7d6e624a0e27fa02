"""The adapter-library family (dtype_lint/ecosystems/peft): an adapter's base layer is the loaded
model's layer, which the Hugging Face quantizers replace, so reading its `.weight.dtype` is a
storage dtype; the fix routes it through the HF helper and the fixed code runs on real
bitsandbytes 4-bit and 8-bit base layers on CPU.

Part (a) checks and fixes a tiny project of our own in peft's shape (a LoRA layer with
`get_base_layer()` and an orthogonal init casting to the base weight's dtype) and runs the
original and fixed code on every storage a base layer can have. Part (b) runs on the real peft
0.21.2 tree (the `peft_0212` release fixture): the judged sites are reported, nothing else is,
and peft's own `orthogonal_init`, fixed in a copy, initialises a LoRA adapter on a 4-bit base.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
bnb = pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")

REQUIRES_GRAD_ERROR = "Only Tensors of floating point and complex dtype can require gradients"

LORA_MODULE = '''\
import torch
from torch import nn


class LoraLayer(nn.Module):
    """A LoRA adapter around the model's layer (peft's shape: `base_layer`, `get_base_layer()`)."""

    def __init__(self, base_layer: nn.Module, rank: int = 4) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.rank = rank
        self.in_features = base_layer.in_features
        self.out_features = base_layer.out_features
        self.lora_A = nn.Linear(self.in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, self.out_features, bias=False)

    def get_base_layer(self) -> nn.Module:
        base_layer = self
        while hasattr(base_layer, "base_layer"):
            base_layer = base_layer.base_layer
        return base_layer

    def orthogonal_init(self) -> None:
        basis, _ = torch.linalg.qr(torch.randn(self.rank, self.rank))
        dtype = self.get_base_layer().weight.dtype
        lora_a = torch.randn(self.in_features, self.rank).mm(basis).T / 10.0
        lora_b = torch.randn(self.rank, self.out_features).T.mm(basis) / 10.0
        self.lora_A.weight = nn.Parameter(lora_a.contiguous().to(dtype))
        self.lora_B.weight = nn.Parameter(lora_b.contiguous().to(dtype))

    def merge(self) -> None:
        # Writes into the base weight: its storage dtype is the right target (not a finding).
        base = self.get_base_layer()
        delta = (self.lora_B.weight @ self.lora_A.weight).to(base.weight.dtype)
        base.weight.data += delta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.lora_B(self.lora_A(x))
'''
# the two `.to(dtype)` casts of LORA_MODULE
ORTHOGONAL_CASTS = tuple(i for i, line in enumerate(LORA_MODULE.splitlines(), 1) if ".to(dtype))" in line)


def dtype_lint(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dtype_lint", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def findings_of(cwd: Path, *paths: str) -> list[dict]:
    run = dtype_lint(cwd, "check", *paths, "--no-cache", "--output-format", "json", "--exit-zero")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["findings"]


def write_project(root: Path) -> Path:
    package = root / "adapters"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "lora.py").write_text(LORA_MODULE)
    return root


def load_lora_layer(root: Path, name: str):
    """`LoraLayer` of the project at `root` (its root on sys.path, as the fix's helper import needs)."""
    sys.path.insert(0, str(root))
    try:
        spec = importlib.util.spec_from_file_location(name, root / "adapters" / "lora.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.LoraLayer
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("hf_utils", None)


def base_layer(storage: str) -> torch.nn.Module:
    """A base layer as a quantizer leaves it (real bitsandbytes modules on CPU), or a plain one."""
    if storage == "bnb-4bit":
        return bnb.nn.Linear4bit(64, 32, compute_dtype=torch.bfloat16).to("cpu")
    if storage == "bnb-4bit-no-compute-dtype":
        return bnb.nn.Linear4bit(64, 32).to("cpu")
    if storage == "bnb-8bit":
        return bnb.nn.Linear8bitLt(64, 32, has_fp16_weights=False).to("cpu")
    return torch.nn.Linear(64, 32, dtype=getattr(torch, storage))


# What the unquantized twin's adapter is initialised in: a bitsandbytes 4-bit layer computes in its
# `compute_dtype` (the twin is an nn.Linear of that dtype); without one, and under 8-bit, in float32.
TWIN_DTYPE = {"bnb-4bit": torch.bfloat16, "bnb-4bit-no-compute-dtype": torch.float32, "bnb-8bit": torch.float32}


@pytest.fixture(scope="module")
def fixed_project(tmp_path_factory) -> tuple[Path, Path, list[dict]]:
    original = write_project(tmp_path_factory.mktemp("original"))
    fixed = write_project(tmp_path_factory.mktemp("fixed"))
    found = findings_of(original, ".")
    run = dtype_lint(fixed, "check", ".", "--no-cache", "--fix")
    assert run.returncode == 0, run.stdout + run.stderr
    return original, fixed, found


def test_the_orthogonal_init_casts_are_reported_in_the_hf_familys_words(fixed_project):
    _, _, found = fixed_project
    assert [(f["path"], f["line"], f["code"]) for f in found] == \
        [("adapters/lora.py", line, "DTL001") for line in ORTHOGONAL_CASTS]
    for finding in found:
        assert "bitsandbytes 4-bit" in finding["message"] and "GPTQ" in finding["message"]
        assert "Marlin" not in finding["message"] and "NVFP4" not in finding["message"]
        evidence = " ".join(e["message"] for e in finding["evidence"])
        assert "base layer the adapter wraps" in evidence
        assert finding["fix"] is not None


def test_the_fix_routes_the_base_layer_through_the_hf_helper_not_vllm(fixed_project):
    _, fixed, _ = fixed_project
    text = (fixed / "adapters" / "lora.py").read_text()
    assert "dtype = get_module_input_dtype(self.get_base_layer())" in text
    assert "vllm" not in text and "get_layer_input_dtype" not in text
    helpers = [p for p in fixed.rglob("*.py") if "def get_module_input_dtype" in p.read_text()]
    assert len(helpers) == 1 and "vllm" not in helpers[0].read_text()
    assert findings_of(fixed, ".") == []


@pytest.mark.parametrize("storage", sorted(TWIN_DTYPE))
def test_the_original_raises_on_a_bitsandbytes_base_and_the_fix_matches_the_twin(fixed_project, storage):
    original, fixed, _ = fixed_project
    original_cls = load_lora_layer(original, f"original_lora_{storage.replace('-', '_')}")
    fixed_cls = load_lora_layer(fixed, f"fixed_lora_{storage.replace('-', '_')}")
    with pytest.raises(RuntimeError, match=REQUIRES_GRAD_ERROR):
        original_cls(base_layer(storage)).orthogonal_init()
    layer = fixed_cls(base_layer(storage))
    layer.orthogonal_init()
    twin = original_cls(torch.nn.Linear(64, 32, dtype=TWIN_DTYPE[storage]))
    twin.orthogonal_init()
    assert layer.lora_A.weight.dtype == layer.lora_B.weight.dtype == twin.lora_A.weight.dtype == TWIN_DTYPE[storage]
    assert layer.lora_A.weight.requires_grad and layer.lora_A.weight.shape == twin.lora_A.weight.shape
    x = torch.randn(3, 64, dtype=TWIN_DTYPE[storage])
    assert layer(x).shape == (3, 32)  # the adapted layer runs on the quantized base


@pytest.mark.parametrize("storage", ["float16", "bfloat16", "float32", "float64", "complex64"])
def test_the_fix_keeps_behaviour_on_unquantized_bases(fixed_project, storage):
    original, fixed, _ = fixed_project
    assert "get_module_input_dtype(self.get_base_layer())" in (fixed / "adapters" / "lora.py").read_text()
    original_cls = load_lora_layer(original, f"original_lora_{storage}")
    fixed_cls = load_lora_layer(fixed, f"fixed_lora_{storage}")
    torch.manual_seed(0)
    before = original_cls(base_layer(storage))
    before.orthogonal_init()
    torch.manual_seed(0)
    after = fixed_cls(base_layer(storage))
    after.orthogonal_init()
    assert before.lora_A.weight.dtype == after.lora_A.weight.dtype == getattr(torch, storage)
    assert torch.equal(before.lora_A.weight, after.lora_A.weight)
    assert torch.equal(before.lora_B.weight, after.lora_B.weight)


def test_a_fp8_base_keeps_the_adapter_in_float32(fixed_project):
    """An FP8 quantizer leaves a float8_e4m3fn weight: the original makes an fp8 adapter (nothing
    computes in it), the fix keeps the adapter's own float32."""
    original, fixed, _ = fixed_project
    base = torch.nn.Linear(64, 32)
    base.weight = torch.nn.Parameter(base.weight.detach().to(torch.float8_e4m3fn), requires_grad=False)
    before = load_lora_layer(original, "original_lora_fp8")(base)
    before.orthogonal_init()
    after = load_lora_layer(fixed, "fixed_lora_fp8")(base)
    after.orthogonal_init()
    assert before.lora_A.weight.dtype == torch.float8_e4m3fn
    assert after.lora_A.weight.dtype == torch.float32


def test_a_base_without_weight_no_longer_raises(fixed_project):
    """GPTQ, AWQ and HQQ leave no `.weight` (a stub here: their kernels do not run on CPU)."""
    original, fixed, _ = fixed_project

    class PackedLinear(torch.nn.Module):
        in_features, out_features = 64, 32

        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("qweight", torch.zeros(8, 32, dtype=torch.int32))

    with pytest.raises(AttributeError):
        load_lora_layer(original, "original_lora_packed")(PackedLinear()).orthogonal_init()
    after = load_lora_layer(fixed, "fixed_lora_packed")(PackedLinear())
    after.orthogonal_init()
    assert after.lora_A.weight.dtype == torch.float32


def test_a_peft_shaped_class_that_is_not_an_adapter_is_not_reported(tmp_path):
    """`get_base_layer` names the family; a plain model reading its own layer's dtype is not one."""
    (tmp_path / "plain.py").write_text(textwrap.dedent('''\
        import torch
        from torch import nn


        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 4)

            def forward(self, x, base_layer):
                return x.to(self.proj.weight.dtype) + x.to(base_layer.weight.dtype)
        '''))
    # A script importing peft: its `model` is the whole model, not an adapter's base layer.
    (tmp_path / "train.py").write_text(textwrap.dedent('''\
        import peft


        def first_logits(model, x):
            return model(x.to(model.lm_head.weight.dtype))
        '''))
    assert findings_of(tmp_path, ".") == []


# ---- the real peft 0.21.2 tree ------------------------------------------------------------------
# The sites issue #40 names (file, line of the `.weight.dtype` read), reported at the read or at a
# cast the read feeds (the read's line then in the finding's evidence).
ISSUE_SITES = {("tuners/lora/layer.py", 613), ("tuners/ia3/layer.py", 346), ("tuners/hra/layer.py", 271),
               ("tuners/hra/layer.py", 455), ("tuners/boft/layer.py", 975), ("tuners/adamss/layer.py", 340),
               ("tuners/tinylora/model.py", 167), ("tuners/adaption_prompt/layer.py", 67),
               ("tuners/adaption_prompt/layer.py", 147)}
VERDICTS = Path(__file__).resolve().parents[1] / "benchmarks" / "accuracy" / "triage-peft-0.21.2.json"


def _short(path: str) -> str:
    return path.split("peft/", 1)[1]


@pytest.mark.network
def test_peft_reports_the_issue_sites_and_only_judged_true_ones(peft_0212):
    found = findings_of(peft_0212, ".")
    reached = {(_short(f["path"]), line) for f in found
               for line in {f["line"], *(e["line"] for e in f["evidence"] if e["path"] == f["path"])}}
    hit = ISSUE_SITES & reached
    assert ("tuners/lora/layer.py", 613) in hit
    assert len(hit) >= 8, sorted(ISSUE_SITES - hit)
    verdicts = {(v["path"], v["line"], v["code"]): v for v in json.loads(VERDICTS.read_text())["verdicts"]}
    for finding in found:
        key = (_short(finding["path"]), finding["line"], finding["code"])
        assert key in verdicts, f"an unjudged finding: {key}"
        assert verdicts[key]["verdict"] == "TRUE", (key, verdicts[key]["reason"])
        assert "Marlin" not in finding["message"]


@pytest.mark.network
@pytest.mark.full("the peft-shaped project's orthogonal init, fixed and run on real bitsandbytes 4- and 8-bit bases")
def test_peft_orthogonal_init_fixed_runs_on_a_bitsandbytes_4bit_base(peft_0212, tmp_path):
    """peft's own `orthogonal_init`, fixed by `--fix` in a copy of the release, initialises a LoRA
    adapter on a real bitsandbytes 4-bit base on CPU; the release raises there."""
    pytest.importorskip("peft", reason="peft is not installed")
    tree = tmp_path / "tree"
    shutil.copytree(peft_0212, tree)
    run = dtype_lint(tree, "check", "peft/tuners/lora/layer.py", "--no-cache", "--fix")
    assert run.returncode == 0, run.stdout + run.stderr
    fixed = (tree / "peft" / "tuners" / "lora" / "layer.py").read_text()
    assert "dtype = get_module_input_dtype(self.get_base_layer())" in fixed
    script = textwrap.dedent('''\
        import sys
        import bitsandbytes as bnb
        import torch
        from torch import nn
        import peft
        assert peft.__file__.startswith(sys.argv[1]), peft.__file__
        from peft import LoraConfig, get_peft_model

        class Tiny(nn.Module):
            def __init__(self, proj):
                super().__init__()
                self.proj = proj

            def forward(self, x):
                return self.proj(x)

        def adapted(proj):
            config = LoraConfig(r=4, target_modules=["proj"], init_lora_weights="orthogonal")
            return get_peft_model(Tiny(proj), config)

        base = bnb.nn.Linear4bit(64, 32, compute_dtype=torch.bfloat16).to("cpu")
        try:
            model = adapted(base)
        except RuntimeError as exc:
            print("RAISED", exc)
        else:
            lora_A = model.base_model.model.proj.lora_A["default"].weight
            twin = adapted(nn.Linear(64, 32, dtype=torch.bfloat16)).base_model.model.proj.lora_A["default"].weight
            out = model(torch.randn(2, 64, dtype=torch.bfloat16))
            print("DTYPE", lora_A.dtype, twin.dtype, tuple(out.shape))
        ''')
    (tmp_path / "run.py").write_text(script)

    def run_with(root: Path) -> str:
        done = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(root)], cwd=tmp_path,
                              env={**_env(), "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert REQUIRES_GRAD_ERROR in run_with(peft_0212)
    # peft keeps adapters in float32 by default (`autocast_adapter_dtype`): the fixed 4-bit run's
    # adapter dtype is the unquantized twin's, and the adapted model runs.
    words = run_with(tree).split()
    assert words[0] == "DTYPE" and words[1] == words[2] and words[1].startswith("torch.float"), words
    assert " ".join(words[3:]) == "(2, 32)"


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
