"""The user's own project, end to end (#40): a model built through megatron-style module specs.

`fixtures/journeys/megatron_spec` is `minimeg`, ours: `spec_utils.py` holds a `ModuleSpec`
dataclass and `build_module`; `ssm/mixer.py` builds its sublayers with
`self.in_proj = build_module(submodules.in_proj, ...)`; `layer_specs.py` names megatron-core's
Transformer Engine linears in `MixerSubmodules(in_proj=..., out_proj=ModuleSpec(module=...))`,
which nvidia-modelopt quantizes and `mtq.compress` packs (uint8/int8/fp8 `.weight`). Planted: the
Mamba-style state allocated in `self.in_proj.weight.dtype` (as megatron-core's
`ssm/mamba_mixer.py:1328`), a cast to `self.out_proj.weight.dtype`, and a cast to a layer whose
spec no file of the package writes (`# planted-low`: low confidence, the reason said). The cast to
the `TENorm` built beside them is not a site.

At 2dbfeba the tool saw `build_module` as the layers' "class" and reported nothing: "0 quantizable
roots". Now `check` reports the planted sites in modelopt's words, `explain` and `doctor` agree,
and `--fix` creates the megatron helper inside `minimeg`; the fixed module imports, and the
helper, called as the fix calls it, returns the compute dtype for every storage.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
from cli_runner import dtl
from tiny_project import copy_project, json_findings, tree_bytes

from dtype_lint.ecosystems.megatron.helper import NEW_HELPER_TEXT

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "journeys" / "megatron_spec"
MIXER = "minimeg/ssm/mixer.py"
SPECS = "minimeg/layer_specs.py"
HELPER = "minimeg/layer_compute_dtype.py"
REASON = "which backends reach it cannot be told"
# Another ecosystem's backends and helpers: never in this project's output.
FOREIGN_WORDS = ("Marlin", "AWQ", "GPTQ", "CompressedTensors", "bitsandbytes", "get_layer_input_dtype",
                 "get_module_input_dtype", "Hugging Face")


def project(tmp_path: Path) -> Path:
    return copy_project(FIXTURE, tmp_path, "meg")


def fix_project(root: Path) -> None:
    """`check --fix`: the casts are fixed, the allocation stays (DTL002 offers no fix: the
    buffer's dtype is a human choice), so the run exits 1."""
    proc = dtl(root, "check", ".", "--fix", "--no-cache")
    assert proc.returncode == 1 and ("1 remaining" in proc.stdout or "Found 1 finding" in proc.stdout), \
        proc.stdout + proc.stderr


def planted(root: Path, mark: str = "# planted") -> list[int]:
    lines = (root / MIXER).read_text(encoding="utf-8").splitlines()
    return [number for number, line in enumerate(lines, 1) if line.rstrip().endswith(mark)]


def sites(found: list[dict]) -> list[tuple[str, int, str, str]]:
    return sorted((f["path"], f["line"], f["code"], f["confidence"]) for f in found)


def test_check_reports_the_planted_sites_in_modelopts_words(tmp_path: Path):
    # 2dbfeba: no finding ("0 quantizable roots": `build_module` was the layers' class)
    root = project(tmp_path)
    found = json_findings(root)
    allocation, cast = planted(root)
    [low] = planted(root, "# planted-low")
    assert sites(found) == [(MIXER, allocation, "DTL002", "high"), (MIXER, cast, "DTL001", "high"),
                            (MIXER, low, "DTL001", "low")], found
    by_line = {f["line"]: f for f in found}
    for line, spec_class in ((allocation, "TELayerNormColumnParallelLinear"), (cast, "TERowParallelLinear")):
        finding = by_line[line]
        assert "uint8 under modelopt NVFP4" in finding["message"] and "float8_e4m3fn under modelopt FP8" in \
            finding["message"], finding["message"]
        assert any(e["path"] == SPECS and f"modelopt registers `{spec_class}`" in e["message"]
                   and "plugins/megatron.py" in e["message"] for e in finding["evidence"]), finding["evidence"]
    assert "get_layer_compute_dtype(self.out_proj)" in by_line[cast]["message"]
    assert REASON in by_line[low]["message"] and "the spec is written outside it" in by_line[low]["message"]
    for finding in found:
        assert not any(word in finding["message"] for word in FOREIGN_WORDS), finding["message"]


def test_explain_agrees_with_check_in_modelopts_words(tmp_path: Path):
    root = project(tmp_path)
    allocation, cast = planted(root)
    [low] = planted(root, "# planted-low")
    for line, spec_class in ((allocation, "TELayerNormColumnParallelLinear"), (cast, "TERowParallelLinear")):
        out = dtl(root, "explain", f"{MIXER}:{line}").stdout
        assert "family: megatron" in out and f"modelopt registers `{spec_class}`" in out, out
        assert "DTL001/DTL002: reported unless a guard dominates the site" in out, out
        assert not any(word in out for word in FOREIGN_WORDS), out
    out = dtl(root, "explain", f"{MIXER}:{low}").stdout
    assert REASON in out and "DTL001/DTL002: reported with low confidence" in out, out
    # The norm the spec builds beside the mixer's linears: modelopt does not quantize it.
    norm = dtl(root, "explain", f"{MIXER}:{cast - 3}").stdout
    assert "`TENorm`" in norm and "DTL001/DTL002: not reported" in norm, norm


def test_doctor_shows_the_family_its_roots_and_where_its_helper_goes(tmp_path: Path):
    root = project(tmp_path)
    found = json_findings(root)
    proc = dtl(root, "doctor", "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"family: megatron module specs ({len(found)} sites, 1 with low confidence" in out, out
    assert "nvidia-modelopt quantizes (nvidia-modelopt 0.47.0)" in out, out
    assert f"helper: minimeg.layer_compute_dtype:get_layer_compute_dtype at {HELPER}: would be created by --fix" \
        in out, out
    assert f"findings: {len(found)} (2 with a fix)" in out, out
    assert not any(word in out for word in ("Marlin", "AWQ", "GPTQ", "CompressedTensors", "bitsandbytes")), out


def test_fix_creates_the_helper_inside_the_package(tmp_path: Path):
    root = project(tmp_path)
    fix_project(root)
    [allocation, _cast] = planted(root)  # one line lower: the import the fix added
    fixed = (root / MIXER).read_text(encoding="utf-8")
    assert "from ..layer_compute_dtype import get_layer_compute_dtype\n" in fixed, fixed
    assert "mixed.to(get_layer_compute_dtype(self.out_proj))" in fixed, fixed
    assert (root / HELPER).read_text(encoding="utf-8") == NEW_HELPER_TEXT
    # The allocation stays reported (DTL002 offers no fix: the buffer's dtype is a human choice).
    assert sites(json_findings(root)) == [(MIXER, allocation, "DTL002", "high")]
    before = tree_bytes(root)
    fix_project(root)
    assert tree_bytes(root) == before


def test_diff_shows_the_helper_it_would_create_and_writes_nothing(tmp_path: Path):
    root = project(tmp_path)
    before = tree_bytes(root)
    proc = dtl(root, "check", ".", "--diff", "--no-cache")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert tree_bytes(root) == before
    assert f"--- /dev/null\n+++ b/{HELPER}\n" in proc.stdout, proc.stdout
    shown = "".join(line[1:] + "\n" for line in proc.stdout.split(f"+++ b/{HELPER}\n", 1)[1].splitlines()
                    if line.startswith("+"))
    fix_project(root)
    assert shown == (root / HELPER).read_text(encoding="utf-8")


# ---- the fixed code, run: stand-ins for modelopt's compressed layers (plain torch modules) --------

COMPUTE = torch.bfloat16


class Config:
    params_dtype = COMPUTE


def packed_weight(dtype: torch.dtype | None, keeps_metadata: bool) -> torch.nn.Parameter | None:
    """A weight as `mtq.compress` leaves it: a Parameter of the packed data whose `metadata` keeps
    the original dtype (modelopt's QTensorWrapper), or plain packed storage, or none."""
    if dtype is None:
        return None
    weight = torch.nn.Parameter(torch.zeros(4, 4).to(dtype), requires_grad=False)
    if keeps_metadata:
        weight.metadata = {"dtype": COMPUTE, "shape": (4, 4)}  # type: ignore[attr-defined]
    return weight


def stand_in(dtype: torch.dtype | None, keeps_metadata: bool):
    """A megatron-style linear (`(in, out, config=...)`, returns `(output, bias)`) whose weight has
    the storage given; it records the dtype of the input it is handed."""

    class Linear(torch.nn.Module):
        def __init__(self, in_features: int, out_features: int, config=None):
            super().__init__()
            self.config = config
            self.seen: list[torch.dtype] = []
            weight = packed_weight(dtype, keeps_metadata)
            if weight is not None:
                self.weight = weight

        def forward(self, x: torch.Tensor):
            self.seen.append(x.dtype)
            return x, None

    return Linear


class Norm(torch.nn.Module):
    def __init__(self, hidden: int, config=None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=COMPUTE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


# (storage, the wrapper keeps the original dtype, what the helper must answer)
STORAGES = [
    ("uint8", torch.uint8, True, COMPUTE),  # NVFP4 / INT4 packed
    ("int8", torch.int8, True, COMPUTE),  # INT8
    ("fp8", torch.float8_e4m3fn, True, COMPUTE),  # FP8
    ("uint8 without metadata", torch.uint8, False, COMPUTE),  # config.params_dtype answers
    ("int32", torch.int32, False, COMPUTE),
    ("missing", None, False, COMPUTE),
    ("float16", torch.float16, False, torch.float16),
    ("bfloat16", torch.bfloat16, False, torch.bfloat16),
    ("float32", torch.float32, False, torch.float32),
    ("complex64", torch.complex64, False, torch.complex64),
]


def import_fresh(root: Path, module: str):
    for name in [m for m in sys.modules if m == "minimeg" or m.startswith("minimeg.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        importlib.invalidate_caches()
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(root))


@pytest.fixture(scope="module")
def original_and_fixed(tmp_path_factory):
    original = copy_project(FIXTURE, tmp_path_factory.mktemp("original"), "meg")
    fixed = copy_project(FIXTURE, tmp_path_factory.mktemp("fixed"), "meg")
    fix_project(fixed)
    return original, fixed


def run_mixer(root: Path, dtype: torch.dtype | None, keeps_metadata: bool):
    """Build the project's Mixer through its own spec machinery with a stand-in `out_proj`, run it
    on a float32 activation: (the dtype `out_proj` was handed, the state allocation's dtype) or the
    exception raised."""
    mixer_module = import_fresh(root, "minimeg.ssm.mixer")
    spec_utils = sys.modules["minimeg.spec_utils"]
    submodules = mixer_module.MixerSubmodules(in_proj=stand_in(COMPUTE, False),
                                              out_proj=spec_utils.ModuleSpec(module=stand_in(dtype, keeps_metadata)),
                                              norm=Norm)
    mixer = spec_utils.build_module(spec_utils.ModuleSpec(module=mixer_module.Mixer, submodules=submodules),
                                    Config(), d_model=4, d_state=2)
    try:
        mixer(torch.zeros(1, 4, dtype=torch.float32))
    except Exception as error:  # noqa: BLE001 - the original's failure is the point
        return error
    return mixer.out_proj.seen[-1]


@pytest.mark.parametrize("name,dtype,keeps_metadata,expected", STORAGES, ids=[s[0] for s in STORAGES])
def test_the_fixed_mixer_hands_its_layer_the_compute_dtype(original_and_fixed, name, dtype, keeps_metadata, expected):
    original, fixed = original_and_fixed
    got = run_mixer(fixed, dtype, keeps_metadata)
    assert got == expected, (name, got)
    before = run_mixer(original, dtype, keeps_metadata)
    if dtype is not None and (dtype.is_floating_point or dtype.is_complex) and dtype.itemsize > 1:
        assert before == got  # an unquantized layer: the fix casts as the original did
    elif dtype is None:
        assert isinstance(before, AttributeError)  # the original raises without `.weight`
    else:
        assert before == dtype  # the original handed the layer its packed storage dtype


@pytest.mark.parametrize("name,dtype,keeps_metadata,expected", STORAGES, ids=[s[0] for s in STORAGES])
def test_the_created_helper_answers_the_compute_dtype_for_every_storage(original_and_fixed, name, dtype,
                                                                        keeps_metadata, expected):
    _, fixed = original_and_fixed
    helper = import_fresh(fixed, "minimeg.layer_compute_dtype").get_layer_compute_dtype
    layer = stand_in(dtype, keeps_metadata)(4, 4, config=Config())
    answer = helper(layer)
    assert answer == expected, (name, answer)
    assert answer.is_floating_point or answer.is_complex


def test_a_layer_with_nothing_to_say_gets_the_default_dtype(original_and_fixed):
    _, fixed = original_and_fixed
    helper = import_fresh(fixed, "minimeg.layer_compute_dtype").get_layer_compute_dtype
    assert helper(stand_in(torch.uint8, False)(4, 4)) == torch.get_default_dtype()
    assert helper(torch.nn.Identity()) == torch.get_default_dtype()


# ---- what the specs say decides -----------------------------------------------------------------


def test_a_subclass_with_its_own_forward_is_not_reached_one_without_is(tmp_path: Path):
    """modelopt's registry takes a registered class's subclasses that keep its `forward`."""
    root = project(tmp_path)
    allocation, cast = planted(root)
    specs = root / SPECS
    text = specs.read_text(encoding="utf-8").replace("ModuleSpec(module=TERowParallelLinear)",
                                                     "ModuleSpec(module=FusedRow)")
    text = text.replace("mixer_spec = ", "class FusedRow(TERowParallelLinear):\n"
                                         "    def forward(self, x):\n        return x, None\n\n\n"
                                         "class NamedLinear(TELayerNormColumnParallelLinear):\n"
                                         "    label = 'in'\n\n\n"
                                         "mixer_spec = ", 1)
    text = text.replace("in_proj=TELayerNormColumnParallelLinear", "in_proj=NamedLinear")
    specs.write_text(text, encoding="utf-8")
    found = json_findings(root)
    [low] = planted(root, "# planted-low")
    assert sites(found) == [(MIXER, allocation, "DTL002", "high"), (MIXER, low, "DTL001", "low")], found
    [state] = [f for f in found if f["line"] == allocation]
    assert any("a subclass of `TELayerNormColumnParallelLinear` keeping its `forward`" in e["message"]
               for e in state["evidence"]), state["evidence"]


def test_a_spec_computed_by_a_call_is_low_confidence_with_the_reason(tmp_path: Path):
    root = project(tmp_path)
    allocation, _cast = planted(root)
    specs = root / SPECS
    specs.write_text(specs.read_text(encoding="utf-8").replace(
        "in_proj=TELayerNormColumnParallelLinear", "in_proj=backend.column_parallel_layer_norm_linear()"),
        encoding="utf-8")
    [state] = [f for f in json_findings(root) if f["line"] == allocation]
    assert state["confidence"] == "low", state
    assert REASON in state["message"] and "a spec computes it: `backend.column_parallel_layer_norm_linear()`" in \
        state["message"], state["message"]


def test_megatron_cores_own_spec_machinery_from_outside_the_tree_is_followed_too(tmp_path: Path):
    """The common user shape: `ModuleSpec` and `build_module` imported from an installed
    megatron-core, not defined in the project."""
    root = project(tmp_path)
    (root / "minimeg/spec_utils.py").unlink()
    for name, old in ((MIXER, "from ..spec_utils import"), (SPECS, "from .spec_utils import")):
        path = root / name
        path.write_text(path.read_text(encoding="utf-8").replace(
            old, "from megatron.core.transformer.spec_utils import"), encoding="utf-8")
    allocation, cast = planted(root)
    [low] = planted(root, "# planted-low")
    assert sites(json_findings(root)) == [(MIXER, allocation, "DTL002", "high"), (MIXER, cast, "DTL001", "high"),
                                          (MIXER, low, "DTL001", "low")]
