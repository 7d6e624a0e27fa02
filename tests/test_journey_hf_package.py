"""The user's own project, end to end (#40): a Hugging Face-based package with a `src/` layout.

`fixtures/journeys/hf_package` is `mypkg`: `modeling_foo.py` subclasses `PreTrainedModel`, its
block holds an `nn.Linear` that bitsandbytes replaces at load time, and casts its input to
`self.proj.weight.dtype` (uint8 under 4-bit, int8 under 8-bit). The package imports its siblings
relatively (`from .configuration_foo import FooConfig`).

The journey: `check` reports that site and nothing else; `--fix` creates the HF helper inside
`mypkg` (at 33e5fec it was a root-level `hf_utils.py` that the wheel does not ship) and imports
it as the package imports its siblings; `--diff` shows the file it would create; pinning the
helper as the tool suggests keeps working and never swaps in the vLLM template; the editor's
quick-fix writes the same files. The slow part (SLOW_TESTS in conftest.py) builds the fixed
project as a wheel, installs it alone into a fresh environment, imports it, and runs the fixed
model with real bitsandbytes 4-bit and 8-bit layers on CPU against its unquantized twin; the same
wheel ships the fixed packages of the megatron, quantizers and mixed journeys, each run from where
it is installed (`DTL_FULL=1`: each journey project as its own wheel, installed alone).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import (
    STAND_IN_VLLM,
    copy_project,
    fix_project,
    json_findings,
    run_on_quantized_layers,
    tree_bytes,
    write_tree,
)

from dtype_lint.ecosystems.hf.helper import HF_HELPER_SOURCE

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "journeys" / "hf_package"
MODEL = "src/mypkg/modeling_foo.py"
HELPER = "src/mypkg/module_input_dtype.py"


def project(tmp_path: Path, name: str = "proj") -> Path:
    return copy_project(FIXTURE, tmp_path, name)


findings = json_findings
fix = fix_project


def test_check_reports_the_planted_site_and_nothing_else(tmp_path: Path):
    found = findings(project(tmp_path))
    assert [(Path(f["path"]).as_posix().split("proj/")[-1], f["line"], f["code"]) for f in found] == \
        [(MODEL, 14, "DTL001")], found


def test_fix_creates_the_helper_inside_the_package_imported_as_its_siblings_are(tmp_path: Path):
    # 33e5fec: `from hf_utils import get_module_input_dtype` and a root-level hf_utils.py
    root = project(tmp_path)
    fix(root)
    fixed = (root / MODEL).read_text(encoding="utf-8")
    assert "from .module_input_dtype import get_module_input_dtype\n" in fixed, fixed
    assert "hf_utils" not in fixed and not (root / "hf_utils.py").exists()
    assert (root / HELPER).read_text(encoding="utf-8") == "import torch\n\n\n" + HF_HELPER_SOURCE
    compile(fixed, MODEL, "exec")
    # Fixed, the project checks clean, and a second `--fix` changes nothing.
    assert findings(root) == []
    before = tree_bytes(root)
    fix(root)
    assert tree_bytes(root) == before


def test_a_package_that_imports_its_siblings_absolutely_gets_an_absolute_import(tmp_path: Path):
    root = project(tmp_path)
    model = root / MODEL
    model.write_text(model.read_text(encoding="utf-8").replace(
        "from .configuration_foo import", "from mypkg.configuration_foo import"), encoding="utf-8")
    fix(root)
    fixed = model.read_text(encoding="utf-8")
    assert "from mypkg.module_input_dtype import get_module_input_dtype\n" in fixed, fixed
    assert "from .module_input_dtype" not in fixed and (root / HELPER).is_file()


def test_a_model_in_a_subpackage_reaches_the_helper_of_its_top_level_package(tmp_path: Path):
    root = project(tmp_path)
    sub = root / "src/mypkg/models/foo"
    sub.mkdir(parents=True)
    for name in ("src/mypkg/models/__init__.py", "src/mypkg/models/foo/__init__.py"):
        (root / name).write_text("", encoding="utf-8")
    (root / MODEL).rename(sub / "modeling_foo.py")
    (root / "src/mypkg/configuration_foo.py").rename(sub / "configuration_foo.py")
    (root / "src/mypkg/__init__.py").write_text("from .models.foo.modeling_foo import FooModel\n", encoding="utf-8")
    fix(root)
    fixed = (sub / "modeling_foo.py").read_text(encoding="utf-8")
    assert "from ...module_input_dtype import get_module_input_dtype\n" in fixed, fixed
    assert (root / HELPER).is_file() and not (sub / "module_input_dtype.py").exists()


def test_diff_shows_the_helper_it_would_create_and_writes_nothing(tmp_path: Path):
    # 33e5fec: the diff showed only the model's edit; the helper's file appeared only with --fix
    root = project(tmp_path)
    before = tree_bytes(root)
    proc = dtl(root, "check", ".", "--diff", "--no-cache")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert tree_bytes(root) == before
    assert f"--- /dev/null\n+++ b/{HELPER}\n" in proc.stdout, proc.stdout
    shown = "".join(line[1:] + "\n" for line in proc.stdout.split(f"+++ b/{HELPER}\n", 1)[1].splitlines()
                    if line.startswith("+"))
    fix(root)
    assert shown == (root / HELPER).read_text(encoding="utf-8")


@pytest.mark.parametrize("pinned", ["mypkg.module_input_dtype:get_module_input_dtype",
                                    "mypkg.layer_input_dtype:get_layer_input_dtype"])
def test_pinning_the_helper_keeps_the_hf_helper_and_its_template(tmp_path: Path, pinned: str):
    """Pinned as the HF helper, that module is its home; pinned as the shared (vLLM-style)
    helper, the HF sites keep their own helper: the vLLM template reads `params_dtype`, which
    bitsandbytes layers do not have."""
    root = project(tmp_path)
    with open(root / "pyproject.toml", "a", encoding="utf-8") as pyproject:
        pyproject.write(f'\n[tool.dtype-lint]\nhelper = "{pinned}"\n')
    fix(root)
    assert (root / HELPER).read_text(encoding="utf-8") == "import torch\n\n\n" + HF_HELPER_SOURCE
    assert not (root / "src/mypkg/layer_input_dtype.py").exists()
    assert "from .module_input_dtype import get_module_input_dtype" in (root / MODEL).read_text(encoding="utf-8")
    # The next run with the pin is clean (33e5fec: exit 2, "appeared while this run was creating it").
    assert dtl(root, "check", ".", "--fix", "--no-cache").returncode == 0


def test_the_editor_quick_fix_writes_the_same_files_as_fix(tmp_path: Path):
    # 33e5fec: the quick-fix imported `hf_utils` but created `mypkg/layer_input_dtype.py`
    from pygls.uris import to_fs_path
    from test_trust_round3_server import Editor, open_document, quick_fix, start

    root = project(tmp_path, "ws")
    server, _ = start(root)
    uri = open_document(server, root / MODEL)
    action = quick_fix(server, uri)
    assert action is not None
    editor = Editor()
    original = (root / MODEL).read_text(encoding="utf-8")
    editor.open = {uri: (1, original)}
    assert editor.apply(action.edit)
    Path(to_fs_path(uri)).write_text(editor.open[uri][1], encoding="utf-8")
    by_cli = project(tmp_path, "cli")
    fix(by_cli)
    assert tree_bytes(root) == tree_bytes(by_cli)


# ---- slow: the fixed project as a wheel, and run on real bitsandbytes layers ----------------------

RUN_MODEL = r"""
import json, sys
import torch
import mypkg
from mypkg.configuration_foo import FooConfig

if sys.argv[1:] != ["--from-source"]:
    assert "/src/" not in mypkg.__file__, mypkg.__file__  # the installed wheel, not the checkout
torch.manual_seed(0)
model = mypkg.FooModel(FooConfig(hidden_size=64)).eval()
linear = model.block.proj
x = torch.randn(4, 64)


with torch.no_grad():
    twin = model(x)
    out = {"module": mypkg.modeling_foo.__file__}
    for kind in ("bnb-4bit", "bnb-8bit"):
        model.block.proj = bnb_layer(linear, kind)
        try:
            got = model(x)
            error = ((got.float() - twin).norm() / twin.norm()).item()
            out[kind] = {"dtype": str(got.dtype), "error": error}
        except Exception as e:
            out[kind] = {"raises": f"{type(e).__name__}: {e}"}
        model.block.proj = linear
print(json.dumps(out))
"""


# The fixed code of the other families' journey projects, run where it is installed: each section
# imports its package (never from a checkout: the test asserts where each module came from) and runs
# the fixed code on the storages its family names, against the unquantized twin. `--families
# NAMES STAND_IN` picks the sections; STAND_IN holds the stand-in vLLM (tests/tiny_project.py).
RUN_FAMILIES = r"""
import importlib, json, sys
import torch
where = sys.argv.index("--families")
wanted, stand_in = sys.argv[where + 1].split(","), sys.argv[where + 2]
sys.path.insert(0, stand_in)
out = globals().get("out", {})  # beside RUN_MODEL's own results, where it ran first
out["files"] = {}


def compare(model, holder, name, x):
    linear = getattr(holder, name)
    with torch.no_grad():
        twin = model(x)
        got = {}
        for kind in ("bnb-4bit", "bnb-8bit"):
            setattr(holder, name, bnb_layer(linear, kind))
            result = model(x)
            got[kind] = {"dtype": str(result.dtype), "error": ((result.float() - twin).norm() / twin.norm()).item()}
        setattr(holder, name, linear)
    return got


def seen_by(build, layer, storages):
    return {storage: str(layer(build(storage))) for storage in storages}


if "quantizers" in wanted:
    module = importlib.import_module("tinyq.model")
    out["files"]["quantizers"] = module.__file__
    torch.manual_seed(0)
    gate = module.Gate(64).eval()
    out["quantizers"] = compare(gate, gate, "proj", torch.randn(2, 5, 64))
if "hf" in wanted:
    from transformers import PretrainedConfig
    module = importlib.import_module("mixpkg.hf.modeling_bar")
    out["files"]["hf"] = module.__file__
    torch.manual_seed(0)
    model = module.BarModel(PretrainedConfig(hidden_size=64)).eval()
    out["hf"] = compare(model, model.block, "proj", torch.randn(4, 64))
if "vllm" in wanted:
    from vllm.model_executor.layers.linear import LinearBase
    module = importlib.import_module("mixpkg.engine.attention")
    out["files"]["vllm"] = module.__file__

    def attention(storage):
        LinearBase.storage = None if storage == "missing" else getattr(torch, storage)
        layer = module.BarAttention(8, quant_config="a quantization config")
        layer(torch.randn(2, 8).to(torch.bfloat16))
        return layer
    out["vllm"] = seen_by(attention, lambda layer: layer.qkv_proj.seen, ("int32", "uint8", "missing", "bfloat16"))
if "megatron" in wanted:
    mixer = importlib.import_module("minimeg.ssm.mixer")
    specs = importlib.import_module("minimeg.spec_utils")
    out["files"]["megatron"] = mixer.__file__

    class Config:
        params_dtype = torch.bfloat16

    def linear_of(storage):
        class Linear(torch.nn.Module):  # modelopt's compressed layer: packed `.weight` or none
            def __init__(self, in_features, out_features, config=None):
                super().__init__()
                self.config, self.seen = config, None
                if storage != "missing":
                    self.weight = torch.nn.Parameter(torch.zeros(out_features, in_features).to(getattr(torch, storage)),
                                                     requires_grad=False)

            def forward(self, x):
                self.seen = x.dtype
                return x, None
        return Linear

    class Norm(torch.nn.Module):
        def __init__(self, hidden, config=None):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=torch.bfloat16))

        def forward(self, x):
            return x

    def built(storage):
        submodules = mixer.MixerSubmodules(in_proj=linear_of("bfloat16"),
                                           out_proj=specs.ModuleSpec(module=linear_of(storage)), norm=Norm)
        layer = specs.build_module(specs.ModuleSpec(module=mixer.Mixer, submodules=submodules), Config(),
                                   d_model=4, d_state=2)
        layer(torch.zeros(1, 4))
        return layer
    out["megatron"] = seen_by(built, lambda layer: layer.out_proj.seen, ("uint8", "int8", "int32", "missing"))
if "adapter" in wanted:
    module = importlib.import_module("tinyadapt.layers")
    out["files"]["adapter"] = module.__file__
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32)
    out["adapter"] = {}
    for kind in ("bnb-4bit", "bnb-8bit"):
        lora = module.LoraLinear(bnb_layer(linear, kind))
        lora.orthogonal_init()
        out["adapter"][kind] = str(lora.lora_A.weight.dtype)
if "plugin" in wanted:
    from vllm import ModelRegistry
    from vllm.model_executor.layers.linear import LinearBase
    importlib.import_module("tinyllm_plugin").register()
    name, _, cls = ModelRegistry.models["TinyLlmForCausalLM"].partition(":")
    module = importlib.import_module(name)
    out["files"]["plugin"] = module.__file__

    def plugin_model(storage):
        LinearBase.storage = None if storage == "missing" else getattr(torch, storage)
        model = getattr(module, cls)(8, quant_config="a quantization config")
        model(torch.randn(2, 8).to(torch.bfloat16))
        return model
    out["plugin"] = seen_by(plugin_model, lambda model: model.attn.qkv_proj.seen, ("int32", "uint8", "missing"))
print(json.dumps(out))
"""
# What each family's installed, fixed code must do (RUN_FAMILIES): the compute dtype, and the twin's
# result within the quantizer's own error.
BNB_TOLERANCE = {"bnb-4bit": 0.5, "bnb-8bit": 0.2}
# The journey projects the sections run: (fixture, the package folder in it, its helpers).
FAMILY_PROJECTS = {
    "quantizers": ("quant_replace", "src/tinyq", ("tinyq/module_input_dtype.py",)),
    "hf": ("mixed", "src/mixpkg", ("mixpkg/module_input_dtype.py", "mixpkg/layer_input_dtype.py")),
    "vllm": ("mixed", "src/mixpkg", ("mixpkg/module_input_dtype.py", "mixpkg/layer_input_dtype.py")),
    "megatron": ("megatron_spec", "minimeg", ("minimeg/layer_compute_dtype.py",)),
}


def fixed_family_project(tmp_path: Path, fixture: str) -> Path:
    """A fixed copy of the journey project `fixture` (the megatron one keeps its allocation site,
    which has no fix: exit 1)."""
    root = tmp_path / fixture
    if not root.exists():
        copy_project(REPO / "fixtures" / "journeys" / fixture, tmp_path, fixture)
        proc = dtl(root, "check", ".", "--fix", "--no-cache")
        assert proc.returncode in (0, 1) and "fixed" in proc.stdout, proc.stdout + proc.stderr
    return root


def assert_families_ran(out: dict, families) -> None:
    for family in families:
        assert "site-packages" in out["files"][family] and "/src/" not in out["files"][family], out["files"]
    for family in {"quantizers", "hf"} & set(families):
        for kind, tolerance in BNB_TOLERANCE.items():
            got = out[family][kind]
            assert got["dtype"] == "torch.float32" and got["error"] < tolerance, (family, kind, got)
    for family in {"vllm", "megatron", "plugin"} & set(families):
        assert set(out[family].values()) == {"torch.bfloat16"}, (family, out[family])
    if "adapter" in families:  # the adapter made in the compute dtype (4-bit's `compute_dtype`; 8-bit: its own)
        assert set(out["adapter"].values()) == {"torch.float32"}, out["adapter"]


def fresh_environment(tmp_path: Path, wheel: Path) -> Path:
    """A new virtual environment holding the wheel alone; torch, transformers and bitsandbytes
    come from this interpreter's site-packages through a .pth file (never the checkout)."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # `addsitedir`: this interpreter's own .pth files (its dependencies may be linked in that way)
    (site / "_deps.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n",
                                    encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                           "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return python


def build_wheel(root: Path, out: Path, name: str = "mypkg") -> Path:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(out), str(root)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob(f"{name}-*.whl")
    return wheel


def run_installed(python: Path, cwd: Path, source: Path | None = None, families: tuple[str, ...] = (),
                  stand_in: Path | None = None) -> dict:
    """RUN_MODEL with the package installed in `python`'s environment, or imported from `source`'s
    src/ folder; then RUN_FAMILIES' sections for `families`, installed beside it."""
    if not families:
        return run_on_quantized_layers(RUN_MODEL, *(["--from-source"] if source else []), python=python, cwd=cwd,
                                       pythonpath=source / "src" if source is not None else None)
    return run_on_quantized_layers(RUN_MODEL + RUN_FAMILIES, "--families", ",".join(families), stand_in,
                                   python=python, cwd=cwd)


def test_wheel_of_the_fixed_project_installs_imports_and_runs_on_bitsandbytes(tmp_path: Path):
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    original = project(tmp_path, "original")
    fixed = project(tmp_path, "fixed")
    fix(fixed)
    # The fixed packages of the megatron, quantizers and mixed journeys ride in the same wheel (the CI
    # budget builds one wheel and one environment; DTL_FULL builds each project's own, below): each is
    # imported from where it is installed and run, so a helper the fix left outside its package, or
    # imported by a path only a checkout has, fails here.
    for fixture, folder, _ in FAMILY_PROJECTS.values():
        package = fixed / "src" / Path(folder).name
        if not package.exists():
            shutil.copytree(fixed_family_project(tmp_path / "families", fixture) / folder, package)
    wheel = build_wheel(fixed, tmp_path / "wheels")
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    for helper in ("mypkg/module_input_dtype.py", *(h for _, _, helpers in FAMILY_PROJECTS.values() for h in helpers)):
        assert helper in names, (helper, names)
    python = fresh_environment(tmp_path, wheel)
    elsewhere = write_tree(tmp_path / "cwd", {"README": "not the project\n"})
    stand_in = write_tree(tmp_path / "stand_in_vllm", STAND_IN_VLLM)
    after = run_installed(python, elsewhere, families=tuple(FAMILY_PROJECTS), stand_in=stand_in)
    assert_families_ran(after, FAMILY_PROJECTS)
    assert "site-packages" in after["module"], after
    for kind, tolerance in (("bnb-4bit", 0.5), ("bnb-8bit", 0.2)):
        assert after[kind].get("dtype") == "torch.float32" and after[kind]["error"] < tolerance, after
    # The original, imported from its own source folder (where it is installed makes no difference
    # to what it computes), raised (8-bit) or diverged (4-bit: uint8 out).
    before = run_installed(Path(sys.executable), elsewhere, source=original)
    assert "raises" in before["bnb-8bit"], before
    assert before["bnb-4bit"].get("dtype") != "torch.float32" or "raises" in before["bnb-4bit"], before


# Each family's journey project as its own wheel (its own packaging: a flat layout, a `src/` one, a
# plugin's entry point), installed alone into its own fresh environment: beyond the CI budget,
# whose share above ships the three families' packages in the one wheel it builds.
OWN_WHEELS = {
    "quant_replace": ("tinyq", ("quantizers",)),
    "mixed": ("mixpkg", ("hf", "vllm")),
    "megatron_spec": ("minimeg", ("megatron",)),
    "adapter_lib": ("tinyadapt", ("adapter",)),
    "vllm_plugin": ("vllm_tinyllm_plugin", ("plugin",)),
}


@pytest.mark.full("the CI share ships the megatron, quantizers and mixed packages in the HF package's wheel")
@pytest.mark.parametrize("fixture", sorted(OWN_WHEELS))
def test_each_familys_fixed_project_installs_alone_as_its_own_wheel_and_runs(tmp_path: Path, fixture: str):
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    name, families = OWN_WHEELS[fixture]
    wheel = build_wheel(fixed_family_project(tmp_path, fixture), tmp_path / "wheels", name)
    python = fresh_environment(tmp_path, wheel)
    elsewhere = write_tree(tmp_path / "cwd", {"README": "not the project\n"})
    stand_in = write_tree(tmp_path / "stand_in_vllm", STAND_IN_VLLM)
    out = run_on_quantized_layers(RUN_FAMILIES, "--families", ",".join(families), stand_in, python=python,
                                  cwd=elsewhere)
    assert_families_ran(out, families)


def test_the_fixed_helper_runs_on_every_storage_the_hf_family_names(tmp_path: Path):
    """The created helper (imported from the fixed package's folder) on every storage: no
    AttributeError, never an integer or packed dtype, the unquantized path's dtype where the
    weight is a float wider than a byte."""
    import torch

    root = project(tmp_path)
    fix(root)
    namespace: dict = {}
    exec(compile((root / HELPER).read_text(encoding="utf-8"), HELPER, "exec"), namespace)
    helper = namespace["get_module_input_dtype"]

    def layer(dtype=None, **attrs):
        module = torch.nn.Module()
        if dtype is not None:
            module.weight = torch.nn.Parameter(torch.zeros(2, dtype=dtype), requires_grad=False)
        for key, value in attrs.items():
            setattr(module, key, value)
        return module

    expected = {torch.float16: torch.float16, torch.bfloat16: torch.bfloat16, torch.float32: torch.float32,
                torch.complex64: torch.complex64, torch.float8_e4m3fn: None, torch.int8: None, torch.uint8: None,
                torch.int32: None}
    for dtype, want in expected.items():
        assert helper(layer(dtype)) == want, dtype
    assert helper(layer()) is None
    assert helper(layer(torch.uint8, compute_dtype=torch.bfloat16)) == torch.bfloat16



# ---- --name-heuristics: a layer known only by its name, in HF model code ---------------------------

BAR = '''\
import torch
from torch import nn
from transformers import PreTrainedModel

from .configuration_foo import FooConfig


class BarAttention(nn.Module):
    def __init__(self, config: FooConfig, o_proj):
        super().__init__()
        self.o_proj = o_proj

    def forward(self, hidden_states):
        hidden_states = hidden_states.to(self.o_proj.weight.dtype)
        return self.o_proj(hidden_states)


class BarModel(PreTrainedModel):
    config_class = FooConfig

    def __init__(self, config: FooConfig):
        super().__init__(config)
        self.attn = BarAttention(config, nn.Linear(config.hidden_size, config.hidden_size))
        self.post_init()
'''


def name_heuristics_project(tmp_path: Path, name: str = "named") -> Path:
    root = project(tmp_path, name)
    (root / "src/mypkg/modeling_bar.py").write_text(BAR, encoding="utf-8")
    return root


def test_name_heuristics_in_hf_code_speak_the_hf_familys_words_and_use_its_helper(tmp_path: Path):
    # 33e5fec: "(int32 under Marlin, uint8 under NVFP4, absent under AWQ)" and the vLLM helper,
    # whose template reads `params_dtype`: AttributeError on Linear4bit / Linear8bitLt
    root = name_heuristics_project(tmp_path)
    found = [f for f in findings(root, "--name-heuristics") if f["path"].endswith("modeling_bar.py")]
    assert len(found) == 1 and found[0]["confidence"] == "low", found
    assert "bitsandbytes" in found[0]["message"] and not any(
        word in found[0]["message"] for word in ("Marlin", "NVFP4", "AWQ)")), found[0]["message"]
    fix(root, "--name-heuristics")
    fixed = (root / "src/mypkg/modeling_bar.py").read_text(encoding="utf-8")
    assert "from .module_input_dtype import get_module_input_dtype" in fixed, fixed
    assert "get_module_input_dtype(self.o_proj)" in fixed
    assert not list(root.rglob("layer_input_dtype.py"))
    assert "params_dtype" not in (root / HELPER).read_text(encoding="utf-8")


def test_name_heuristics_fix_runs_on_real_bitsandbytes_layers(tmp_path: Path):
    """The fixed attention, given real Linear4bit / Linear8bitLt, matches its float twin."""
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    root = name_heuristics_project(tmp_path)
    fix(root, "--name-heuristics")
    script = r"""
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from mypkg.modeling_bar import BarAttention
from mypkg.configuration_foo import FooConfig

torch.manual_seed(0)
linear = torch.nn.Linear(64, 64)
x = torch.randn(4, 64)
with torch.no_grad():
    twin = BarAttention(FooConfig(hidden_size=64), linear)(x)
    out = {}
    for kind in ("bnb-4bit", "bnb-8bit"):
        got = BarAttention(FooConfig(hidden_size=64), bnb_layer(linear, kind))(x)
        out[kind] = [str(got.dtype), ((got.float() - twin).norm() / twin.norm()).item()]
print(json.dumps(out))
"""
    out = run_on_quantized_layers(script, root / "src")
    assert out["bnb-4bit"][0] == "torch.float32" and out["bnb-4bit"][1] < 0.5, out
    assert out["bnb-8bit"][0] == "torch.float32" and out["bnb-8bit"][1] < 0.2, out


# ---- words: the HF family's own, in check, explain and doctor ---------------------------------------

VLLM_WORDS = ("Marlin", "NVFP4", "vllm preset", "`vllm` preset")


def test_check_and_doctor_speak_the_hf_familys_words(tmp_path: Path):
    # 33e5fec: every run warned that "none of the `vllm` preset's layer classes" is here, and
    # doctor said "no class in the tree is quantizable: every site is skipped", then "findings: 1"
    root = project(tmp_path)
    proc = dtl(root, "check", ".", "--no-cache")
    assert proc.returncode == 1 and not any(word in proc.stdout + proc.stderr for word in VLLM_WORDS), \
        proc.stdout + proc.stderr
    doctor = dtl(root, "doctor", "--no-cache").stdout
    assert "every site is skipped" not in doctor, doctor
    assert "family: Hugging Face model code (1 site)" in doctor, doctor
    assert "quantizable roots: `nn.Linear`" in doctor
    assert f"helper: mypkg.module_input_dtype:get_module_input_dtype at {HELPER}: would be created by --fix" in doctor
    assert "findings: 1 (1 with a fix)" in doctor
    helper_paragraph = doctor.split("\nhelper:", 1)[1].split("\n\n", 1)[0]
    assert not any(word in helper_paragraph for word in VLLM_WORDS), helper_paragraph
    # the vllm preset's classes are not listed one by one as "not in the tree": the project never
    # imports vLLM, so it is not missing them
    assert "vllm.model_executor.layers.linear" not in doctor and "not in the tree" not in doctor, doctor
    assert ("the `vllm` preset's 12 layer classes: not used here (the tree is not vllm, and no file imports "
            "from vllm.model_executor.layers)") in doctor
    # explain on the reported line agrees (33e5fec: "quant root: none ...: not quantizable")
    explained = dtl(root, "explain", f"{MODEL}:14").stdout
    assert "  family: hf\n" in explained and "in Hugging Face model code" in explained, explained
    assert "DTL001/DTL002: reported unless a guard dominates the site" in explained
    assert "not quantizable" not in explained and not any(word in explained for word in VLLM_WORDS)
    fix(root)
    assert f"at {HELPER}: exists" not in dtl(root, "doctor", "--no-cache").stdout  # no site left: no paragraph
