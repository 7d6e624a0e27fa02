"""The inferred helper's home is a package the project's distribution installs, under a name its
package does not use (an adversarial round on the fixer found each of these fixed `[safe]`, exit
0, and broken once installed or imported):
- sites in `tests/` and `benchmarks/` outnumbered the package's: the helper was created in
  `tests/`, which setuptools' discovery never installs, and the installed `plug.model` raised
  `No module named 'tests'` (fix/shipped_packages.py reads what a distribution installs);
- `plug/__init__.py` defined a function `layer_input_dtype`: importing the created submodule
  `plug.layer_input_dtype` rebound the package's attribute, and `plug.layer_input_dtype(cfg)`
  raised `'module' object is not callable`.
The fixed projects are installed with pip into a folder of their own and run from there."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cli_runner import dtl  # noqa: E402
from tiny_project import write_tree  # noqa: E402

from dtype_lint.fix.shipped_packages import declared_packages, ships  # noqa: E402

# A vLLM-shaped plug-in package: a layer that takes its quant method from a config, a model
# casting to its weight's dtype, and a Marlin-like method that repacks the weight to int32.
PLUG = {
    "plug/__init__.py": "",
    "plug/layers.py": """\
import torch
from torch import nn


class Unquantized:
    def create_weights(self, layer, n, params_dtype):
        layer.weight = nn.Parameter(torch.randn(n, n, dtype=params_dtype), requires_grad=False)

    def apply(self, layer, x):
        return torch.nn.functional.linear(x, layer.weight)


class Marlin:
    def create_weights(self, layer, n, params_dtype):
        layer.weight = nn.Parameter(torch.zeros(n, n // 4, dtype=torch.int32), requires_grad=False)

    def apply(self, layer, x):
        return x.clone()


class MarlinConfig:
    def get_quant_method(self, layer, prefix=""):
        return Marlin()


class ReplicatedLinear(nn.Module):
    def __init__(self, n, params_dtype=None, quant_config=None):
        super().__init__()
        self.params_dtype = params_dtype or torch.get_default_dtype()
        self.quant_method = quant_config.get_quant_method(self) if quant_config else Unquantized()
        self.quant_method.create_weights(self, n, self.params_dtype)

    def forward(self, x):
        return self.quant_method.apply(self, x)
""",
    "plug/model.py": """\
import torch
from torch import nn
from plug.layers import ReplicatedLinear


class Head(nn.Module):
    def __init__(self, n, params_dtype=None, quant_config=None):
        super().__init__()
        self.proj = ReplicatedLinear(n, params_dtype=params_dtype, quant_config=quant_config)

    def forward(self, x):
        x = x.to(self.proj.weight.dtype)
        return self.proj(x)
""",
}
SITES = """\
from plug.layers import ReplicatedLinear


def check_a(x, layer: ReplicatedLinear):
    return layer(x.to(layer.weight.dtype))


def check_b(x, layer: ReplicatedLinear):
    x = x.to(layer.weight.dtype)
    return layer(x)


def check_c(x, layer: ReplicatedLinear):
    return layer(x.type(layer.weight.dtype))
"""
PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "plug"
version = "0.1"
dependencies = ["torch"]
"""
RUN = """\
import torch
from plug.layers import MarlinConfig
from plug.model import Head
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    assert Head(8, params_dtype=dtype)(torch.randn(2, 8)).dtype == dtype
packed = Head(8, params_dtype=torch.bfloat16, quant_config=MarlinConfig())
assert packed.proj.weight.dtype == torch.int32
assert packed(torch.randn(2, 8)).dtype == torch.bfloat16  # not int32: the model dtype
print("ok")
"""


def _install_and_run(project: Path, tmp: Path, script: str = RUN) -> subprocess.CompletedProcess:
    target = tmp / "site"
    built = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--target", str(target), str(project)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    # Run where the project is not: only what the wheel installed is importable.
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp,
                          env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("folder,extra", [
    ("tests", ""),
    ("benchmarks", '\n[tool.setuptools.packages.find]\ninclude = ["plug*"]\n'),
])
def test_the_helper_is_not_created_in_a_package_the_distribution_does_not_install(tmp_path, folder, extra):
    root = write_tree(tmp_path / "proj", {**PLUG, "pyproject.toml": PYPROJECT + extra,
                                          f"{folder}/__init__.py": "", f"{folder}/check_linear.py": SITES})
    fixed = dtl(root, "check", ".", "--fix", "--no-cache", "-v")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "created plug/layer_input_dtype.py (helper)" in fixed.stderr, fixed.stderr
    assert f"not in `{folder}`, which its distribution does not install" in fixed.stderr, fixed.stderr
    assert not (root / folder / "layer_input_dtype.py").exists()
    for rel in ("plug/model.py", f"{folder}/check_linear.py"):
        assert "from plug.layer_input_dtype import get_layer_input_dtype" in (root / rel).read_text()
    ran = _install_and_run(root, tmp_path)
    assert ran.returncode == 0 and "ok" in ran.stdout, ran.stderr


def test_sites_only_outside_the_installed_package_use_the_package_it_installs(tmp_path):
    root = write_tree(tmp_path / "proj", {**PLUG, "plug/model.py": PLUG["plug/model.py"].replace(
        "x = x.to(self.proj.weight.dtype)\n        ", ""), "pyproject.toml": PYPROJECT,
        "tests/__init__.py": "", "tests/check_linear.py": SITES})
    fixed = dtl(root, "check", ".", "--fix", "--no-cache")
    assert fixed.returncode == 0 and "created plug/layer_input_dtype.py (helper)" in fixed.stderr, fixed.stderr
    assert "from plug.layer_input_dtype import" in (root / "tests/check_linear.py").read_text()


def test_below_a_namespace_folder_the_helper_is_in_its_first_regular_package(tmp_path):
    """`src/acme/` has no `__init__.py` (a namespace shared with other distributions) and the
    distribution installs `acme.plug*`: a helper put in `acme/` is in no wheel."""
    files = {f"src/acme/{rel}": text.replace("plug.", "acme.plug.") for rel, text in PLUG.items()}
    pyproject = PYPROJECT + '\n[tool.setuptools.packages.find]\nwhere = ["src"]\ninclude = ["acme.plug*"]\n' \
        'namespaces = true\n'
    root = write_tree(tmp_path / "proj", {**files, "pyproject.toml": pyproject})
    fixed = dtl(root, "check", ".", "--fix", "--no-cache")
    assert fixed.returncode == 0 and "created src/acme/plug/layer_input_dtype.py (helper)" in fixed.stderr, \
        fixed.stdout + fixed.stderr
    ran = _install_and_run(root, tmp_path, RUN.replace("from plug.", "from acme.plug."))
    assert ran.returncode == 0 and "ok" in ran.stdout, ran.stderr
    again = dtl(root, "check", ".", "--fix", "--no-cache")  # found again by a later run
    assert again.returncode == 0 and "created" not in again.stderr, again.stderr


def test_a_new_helper_module_does_not_rebind_a_name_of_its_package(tmp_path):
    init = textwrap.dedent('''\
        """plug: public API."""
        import torch


        def layer_input_dtype(config) -> torch.dtype:
            return getattr(config, "torch_dtype", torch.bfloat16)
        ''')
    root = write_tree(tmp_path / "proj", {**PLUG, "plug/__init__.py": init, "pyproject.toml": PYPROJECT})
    fixed = dtl(root, "check", ".", "--fix", "--no-cache")
    assert fixed.returncode == 0 and "created plug/layer_input_dtype_2.py (helper)" in fixed.stderr, fixed.stderr
    ran = _install_and_run(root, tmp_path, RUN + textwrap.dedent("""\
        import types, plug
        assert plug.layer_input_dtype(types.SimpleNamespace(torch_dtype=torch.float16)) == torch.float16
        print("api ok")
        """))
    assert ran.returncode == 0 and "api ok" in ran.stdout, ran.stderr
    again = dtl(root, "check", ".", "--fix", "--no-cache")  # a later run finds that helper again
    assert again.returncode == 0 and "created" not in again.stderr, again.stderr


def test_a_module_of_the_project_under_the_helper_s_name_is_left_alone(tmp_path):
    """The project's own `plug/layer_input_dtype.py` (no helper in it), or a `layer_input_dtype/`
    folder: `--fix` stopped with exit 2 telling the user to add the helper to their module. The
    created helper takes the next free name, and a later run finds it there."""
    for n, own in enumerate(({"plug/layer_input_dtype.py": "def layer_input_dtype(cfg):\n    return cfg\n"},
                             {"plug/layer_input_dtype/__init__.py": ""})):
        root = write_tree(tmp_path / f"proj{n}", {**PLUG, **own, "pyproject.toml": PYPROJECT})
        fixed = dtl(root, "check", ".", "--fix", "--no-cache")
        assert fixed.returncode == 0 and "created plug/layer_input_dtype_2.py (helper)" in fixed.stderr, \
            fixed.stdout + fixed.stderr
        assert (root / next(iter(own))).read_text() == next(iter(own.values()))
        again = dtl(root, "check", ".", "--fix", "--no-cache")
        assert again.returncode == 0 and "created" not in again.stderr, again.stderr


def test_the_hf_helper_module_does_not_rebind_a_name_of_its_package(tmp_path):
    journey = Path(__file__).resolve().parents[1] / "fixtures" / "journeys" / "hf_package"
    files = {str(p.relative_to(journey)): p.read_text() for p in journey.rglob("*") if p.is_file()
             and "__pycache__" not in p.parts}
    init = "def module_input_dtype(config):\n    return config\n"
    root = write_tree(tmp_path / "proj", {**files, "src/mypkg/__init__.py": init})
    fixed = dtl(root, "check", ".", "--fix", "--no-cache")
    assert fixed.returncode == 0 and "created src/mypkg/module_input_dtype_2.py (helper)" in fixed.stderr, \
        fixed.stdout + fixed.stderr


@pytest.mark.parametrize("files,installs,passes_over", [
    ({}, ["plug", "mypkg"], ["tests", "benchmarks", "docs", "_private", "examples"]),  # discovery
    ({"pyproject.toml": '[project]\nname = "p"\n[tool.setuptools]\npackages = ["plug", "plug.sub"]\n'},
     ["plug"], ["other", "tests"]),
    ({"pyproject.toml": '[project]\nname = "p"\n[tool.setuptools.packages.find]\ninclude = ["plug*"]\n'
                        'exclude = ["plug_old", "plug.tests"]\n'}, ["plug", "plugx"], ["plug_old", "tests"]),
    ({"pyproject.toml": '[project]\nname = "p"\n[tool.setuptools]\npy-modules = ["tiny"]\n'}, [], ["tiny", "plug"]),
    ({"pyproject.toml": '[project]\nname = "p"\n[tool.setuptools.packages.find]\nwhere = ["src"]\n',
      "src/plug/__init__.py": "", "tests/__init__.py": ""}, ["plug"], ["tests"]),
    ({"pyproject.toml": '[tool.poetry]\nname = "p"\npackages = [{include = "plug", from = "src"}]\n'},
     ["plug"], ["tests"]),
    ({"pyproject.toml": '[project]\nname = "p"\n[tool.hatch.build.targets.wheel]\npackages = ["src/plug"]\n'},
     ["plug"], ["src", "tests"]),
    ({"pyproject.toml": '[project]\nname = "p"\n[tool.flit.module]\nname = "plug"\n'}, ["plug"], ["tests"]),
    ({"setup.cfg": "[metadata]\nname = p\n[options]\npackages = find:\n[options.packages.find]\nexclude =\n"
                   "    tests\n    bench*\n"}, ["plug"], ["tests", "benchmarks"]),
    ({"setup.cfg": "[metadata]\nname = p\n[options]\npackages =\n    plug\n    plug.sub\n"}, ["plug"], ["tests"]),
    ({"setup.py": "from setuptools import setup, find_packages\n"
                  "setup(name='p', packages=find_packages(exclude=['tests', 'tests.*']))\n"}, ["plug"], ["tests"]),
    ({"setup.py": "from setuptools import setup\nsetup(name='p', packages=['plug'])\n"}, ["plug"], ["tests"]),
    # Hatch, Poetry and Flit install the package named after the project unless told otherwise.
    ({"pyproject.toml": '[build-system]\nbuild-backend = "hatchling.build"\n[project]\nname = "plug"\n'},
     ["plug", "plug.sub"], ["experiments", "research"]),
    ({"pyproject.toml": '[build-system]\nbuild-backend = "poetry.core.masonry.api"\n[project]\nname = "my-plug"\n'},
     ["my_plug"], ["research"]),
    ({"pyproject.toml": '[build-system]\nbuild-backend = "flit_core.buildapi"\n[project]\nname = "plug"\n'},
     ["plug"], ["research"]),
    ({"pyproject.toml": '[project]\nname = "p"\n[tool.hatch.build.targets.wheel]\nonly-include = ["plug"]\n'},
     ["plug"], ["research"]),
    ({"pyproject.toml": '[project]\nname = "p"\n[tool.hatch.build.targets.wheel]\ninclude = ["/plug"]\n'},
     ["plug"], ["research"]),
    ({"pyproject.toml": '[project]\nname = "p"\n[tool.pdm.build]\nincludes = ["plug"]\n'}, ["plug"], ["research"]),
    ({"pyproject.toml": '[tool.poetry]\nname = "p"\npackages = [{include = "plug"}, '
                        '{include = "research", format = "sdist"}]\n'}, ["plug"], ["research"]),
    # A computed list: the package named after the project.
    ({"setup.py": "from setuptools import setup, find_packages\n"
                  "setup(name='plug', packages=['plug'] + find_packages(include=['plug.*']))\n"}, ["plug"], ["research"]),
    # Below a namespace folder, patterns match the dotted name.
    ({"pyproject.toml": '[project]\nname = "p"\n[tool.setuptools.packages.find]\nwhere = ["src"]\n'
                        'exclude = ["acme.plug_bench*"]\n', "src/acme/plug/__init__.py": ""},
     ["acme.plug"], ["acme.plug_bench"]),
])
def test_what_a_distribution_installs_is_read_from_its_packaging_files(tmp_path, files, installs, passes_over):
    write_tree(tmp_path, files)
    assert all(ships(top, str(tmp_path)) for top in installs), declared_packages(str(tmp_path))
    assert not any(ships(top, str(tmp_path)) for top in passes_over), declared_packages(str(tmp_path))


def test_nothing_declared_passes_over_the_reserved_names_only(tmp_path):
    write_tree(tmp_path, {"setup.py": "from setuptools import setup\nsetup(name='p')\n"})
    assert declared_packages(str(tmp_path)) is None
    assert ships("plug", str(tmp_path)) and not ships("tests", str(tmp_path))


def test_a_package_dir_mapping_is_refused_with_the_name_it_installs(tmp_path):
    """`package-dir = {"myplug" = "lib"}`: the folder `lib/` is installed as `myplug`, so a fix
    importing `lib.layer_input_dtype` fails once installed. No home can be inferred: `--fix`
    exits 2 saying why, and writes nothing."""
    files = {rel.replace("plug/", "lib/"): text.replace("from plug.layers", "from .layers") for rel, text in PLUG.items()}
    pyproject = PYPROJECT.replace('name = "plug"', 'name = "myplug"') + \
        '\n[tool.setuptools]\npackages = ["myplug"]\npackage-dir = {"myplug" = "lib"}\n'
    root = write_tree(tmp_path / "proj", {**files, "pyproject.toml": pyproject})
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    fixed = dtl(root, "check", ".", "--fix", "--no-cache")
    assert fixed.returncode == 2, fixed.stdout + fixed.stderr
    assert "folder `lib`, which the project's distribution installs as `myplug` (`package-dir`)" in fixed.stderr
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_a_single_module_distribution_gets_no_new_top_level_helper_module(tmp_path):
    """`py-modules = ["modeling_tiny"]`: the HF helper's home beside a top-level module would be a
    new `hf_utils.py`, which the wheel does not install: the fix is refused, the finding kept."""
    model = textwrap.dedent('''\
        import torch
        from torch import nn
        from transformers import PreTrainedModel


        class TinyModel(PreTrainedModel):
            def __init__(self, config):
                super().__init__(config)
                self.proj = nn.Linear(8, 8)

            def forward(self, x):
                return self.proj(x.to(self.proj.weight.dtype))
        ''')
    pyproject = PYPROJECT.replace('name = "plug"', 'name = "tinyhf"') + '\n[tool.setuptools]\npy-modules = ["modeling_tiny"]\n'
    root = write_tree(tmp_path / "proj", {"modeling_tiny.py": model, "pyproject.toml": pyproject})
    fixed = dtl(root, "check", ".", "--fix", "--no-cache")
    assert fixed.returncode == 1, fixed.stdout + fixed.stderr  # the finding stays, unfixed
    assert "the helper would be a new top-level module hf_utils.py" in fixed.stderr, fixed.stderr
    assert not (root / "hf_utils.py").exists() and (root / "modeling_tiny.py").read_text() == model
