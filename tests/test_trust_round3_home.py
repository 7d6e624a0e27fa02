"""Trusted like a compiler, round three (#36): where the created helper lives and what it needs.

A helper is placed where every fixed file can import it in every way the project is installed:
- per installable package in a monorepo (each package's pyproject.toml, setup.cfg or setup.py):
  a package installed alone imports its own helper, never another package's;
- never in a path the project's ignore rules exclude (the fix would import a file no clone has);
- never with a top-level import the fixed module had no means to satisfy (a configured helper
  module importing the optional `triton`): that file's fixes are refused, the findings kept;
- valid for the declared `requires-python` (no `X | None` evaluated at run time below 3.10).

Each behaviour is judged by running the code: the fixed module is imported where only its own
package is installed (a wheel built and installed alone, or its folder alone on the path) and
called on every storage, and compared with the original; the created helper is run by the
oldest Python the project declares. Every test here failed on de0faa5 (the notes say how),
except the HF helper's, which shows that helper already held.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_runner import dtl
from conftest import full_only
from tiny_project import tree_bytes, write_tree

from dtype_lint.ecosystems.hf.helper import HF_HELPER_SOURCE
from dtype_lint.fix.helper_template import helper_source

LAYERS = """\
import torch


class QLinear(torch.nn.Module):
    def __init__(self, weight_dtype, params_dtype=torch.bfloat16):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(2, dtype=weight_dtype), requires_grad=False)
        self.params_dtype = params_dtype
"""

MODEL = """\
import torch
{extra}
from {package}.layers import QLinear


class Attn(torch.nn.Module):
    def __init__(self, o_proj: QLinear):
        super().__init__()
        self.o_proj = o_proj

    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        return x
"""

# Every storage a quantization backend leaves in `.weight` (or none at all), and what the fixed
# code must cast a float16 activation to: the original's cast where the weight dtype is a float
# compute dtype, the layer's params_dtype (bfloat16) where the storage is not one.
STORAGES = {
    "int32": "torch.bfloat16", "uint8": "torch.bfloat16", "int8": "torch.bfloat16",
    "float8_e4m3fn": "torch.float8_e4m3fn", "missing": "torch.bfloat16",
    "float16": "torch.float16", "bfloat16": "torch.bfloat16", "float32": "torch.float32",
    "complex64": "torch.complex64",  # not packed: the weight's own dtype (#36's template semantics)
}
FLOAT_STORAGES = ("float16", "bfloat16", "float32", "float8_e4m3fn")

# Run in a fresh interpreter (torch is imported once: seconds): for each job, the import path holds
# only the job's folders (and the interpreter's own site-packages, for torch), the job's packages
# are imported afresh, and the model is called on every storage; `blocked` modules are absent.
RUNNER = r"""
import importlib, json, sys

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

BLOCKED = set()
sys.meta_path.insert(0, Absent())
import torch
BASE = [p for p in sys.path if p]  # the standard library and site-packages; not the cwd
results = []
for entries, model_name, layers_name, blocked in json.loads(sys.argv[1]):
    BLOCKED.clear()
    BLOCKED.update(blocked)
    sys.path[:] = entries + BASE
    for name in [m for m in sys.modules if m.split(".")[0] in {model_name.split(".")[0], *blocked}]:
        del sys.modules[name]
    importlib.invalidate_caches()
    try:
        model = importlib.import_module(model_name)
        layers = importlib.import_module(layers_name)
    except Exception as e:
        results.append({"import": f"{type(e).__name__}: {e}"})
        continue
    out = {}
    for name in STORAGES:
        try:
            layer = layers.QLinear(torch.float16 if name == "missing" else getattr(torch, name))
            if name == "missing":
                del layer.weight
            out[name] = str(model.Attn(layer).forward(torch.zeros(2, dtype=torch.float16)).dtype)
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"
    results.append(out)
print(json.dumps(results))
""".replace("STORAGES", repr(list(STORAGES)))


def run_alone(jobs: list[tuple[list[Path], str, str, tuple[str, ...]]], cwd: Path) -> list[dict]:
    """For each job (folders, model module, layers module, absent modules): what the model does
    where the import path holds only those folders (and the test environment's torch)."""
    cwd.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    spec = json.dumps([[[str(p) for p in entries], model, layers, list(blocked)]
                       for entries, model, layers, blocked in jobs])
    proc = subprocess.run([sys.executable, "-c", RUNNER, spec], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_fixed_behaviour(before: dict, after: dict) -> None:
    """The fixed code casts as the helper decides on every storage, and as the original did on
    every float compute dtype."""
    assert "import" not in after, after
    assert after == STORAGES, after
    for name in FLOAT_STORAGES:
        assert after[name] == before[name], name


def findings_of(root: Path) -> list[dict]:
    """The findings a check reports, as JSON."""
    proc = dtl(root, "check", "--no-cache", "--output-format", "json")
    return json.loads(proc.stdout)["findings"]


def fix(root: Path, *extra: str):
    return dtl(root, "check", "--fix", "--no-cache", "--output-format", "concise", *extra)


# --- 1. monorepo: a helper per installable package -----------------------------------------------

ROOT_CONFIG = """\
[tool.dtype-lint]
quantizable = ["alpha.layers.QLinear", "beta.layers.QLinear"]
"""


def packaging(name: str, kind: str, dependencies: tuple[str, ...] = ("torch",)) -> dict[str, str]:
    """The packaging files of package `name` in the style `kind`."""
    deps = ", ".join(f'"{d}"' for d in dependencies)
    if kind == "pyproject":
        return {"pyproject.toml": textwrap.dedent(f"""\
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{name}"
            version = "0.1"
            requires-python = ">=3.8"
            dependencies = [{deps}]

            [tool.setuptools]
            packages = ["{name}"]
            """)}
    if kind == "setup.cfg":
        requires = "".join(f"\n    {d}" for d in dependencies)
        return {"setup.cfg": f"[metadata]\nname = {name}\nversion = 0.1\n\n[options]\npackages = {name}\n"
                             f"install_requires ={requires}\n",
                "setup.py": "from setuptools import setup\n\nsetup()\n"}  # the shim pip needs to build it
    return {"setup.py": f"from setuptools import setup\n\nsetup(name={name!r}, version='0.1', packages=[{name!r}], "
                        f"install_requires=[{deps}])\n"}


def monorepo(root: Path, beta_kind: str = "pyproject", alpha_sites: int = 2) -> Path:
    files = {"pyproject.toml": ROOT_CONFIG}
    for name, kind, sites in (("alpha", "pyproject", alpha_sites), ("beta", beta_kind, 1)):
        base = f"packages/{name}"
        files.update({f"{base}/{rel}": text for rel, text in packaging(name, kind).items()})
        files.update({f"{base}/{name}/__init__.py": "", f"{base}/{name}/layers.py": LAYERS})
        for i in range(sites):
            files[f"{base}/{name}/model{i}.py"] = MODEL.format(package=name, extra="")
    return write_tree(root, files)


def install_alone(package_dir: Path, target: Path) -> Path:
    """Build `package_dir` as a wheel and install it, alone (no dependencies), into `target`."""
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(target), str(package_dir)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return target


def fixed_monorepo(tmp_path: Path, beta_kind: str) -> tuple[Path, Path]:
    """(the monorepo after `--fix`, a copy of it before), with what the fix run must have done."""
    root = monorepo(tmp_path / "repo", beta_kind)
    original = tmp_path / "original"
    shutil.copytree(root, original)
    proc = fix(root, "--verbose")  # the helper warning's detail (why there)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("alpha", "beta"):
        helper = root / f"packages/{name}/{name}/layer_input_dtype.py"
        assert helper.is_file(), name
        fixed = (root / f"packages/{name}/{name}/model0.py").read_text(encoding="utf-8")
        assert f"from {name}.layer_input_dtype import get_layer_input_dtype\n" in fixed, fixed
        other = "beta" if name == "alpha" else "alpha"
        assert f"from {other}." not in fixed
    assert not (root / "layer_input_dtype.py").exists()
    # Both helpers are reported, with why each is where it is.
    assert "package `beta` holds the one site to fix" in proc.stderr
    assert "package `alpha` holds both sites to fix" in proc.stderr
    # A second run has nothing left and keeps the two helpers.
    again = fix(root)
    assert again.returncode == 0 and "get_layer_input_dtype" not in again.stdout
    return root, original


def package_jobs(root: Path, original: Path, installed: dict[str, Path]) -> tuple[list, list[tuple[int, int]]]:
    """run_alone's jobs for each package of a fixed monorepo, alone: the original from its folder,
    then the fixed one from its folder (and where `installed` installed it), and the (before,
    after) pairs of job indices to compare."""
    jobs, pairs = [], []
    for name in ("alpha", "beta"):
        modules = (f"{name}.model0", f"{name}.layers", ())
        jobs.append(([original / f"packages/{name}"], *modules))
        first = len(jobs) - 1
        for place in [root / f"packages/{name}"] + ([installed[name]] if name in installed else []):
            pairs.append((first, len(jobs)))
            jobs.append(([place], *modules))
    return jobs, pairs


def assert_packages_run_alone(jobs: list, pairs: list[tuple[int, int]], cwd: Path) -> None:
    """Each package imports and behaves as the helper decides, and as the original on float
    storages."""
    results = run_alone(jobs, cwd)
    for before, after in pairs:
        assert "import" not in results[before], results[before]
        assert_fixed_behaviour(results[before], results[after])


def test_each_package_of_a_monorepo_gets_its_own_helper(tmp_path: Path):
    # de0faa5: the helper went into `alpha` (most sites) and beta/model0.py got
    # `from alpha.layer_input_dtype import ...`: ModuleNotFoundError where beta is used alone.
    jobs: list = []
    pairs: list[tuple[int, int]] = []
    for kind in ("pyproject", "setup.cfg", "setup.py"):  # beta's packaging; one interpreter runs all
        root, original = fixed_monorepo(tmp_path / kind, kind)
        more, more_pairs = package_jobs(root, original, {})
        pairs += [(before + len(jobs), after + len(jobs)) for before, after in more_pairs]
        jobs += more
    assert_packages_run_alone(jobs, pairs, tmp_path / "cwd")


@pytest.mark.slow
@pytest.mark.parametrize("beta_kind", [
    "pyproject",
    full_only("setup.cfg", "the pyproject package's wheel; each packaging's helper placement is tested without a wheel"),
    full_only("setup.py", "the pyproject package's wheel; each packaging's helper placement is tested without a wheel"),
])
def test_each_package_of_a_fixed_monorepo_installs_alone_as_a_wheel(tmp_path: Path, beta_kind: str):
    root, original = fixed_monorepo(tmp_path, beta_kind)
    installed = {name: install_alone(root / f"packages/{name}", tmp_path / f"site-{name}") for name in ("alpha", "beta")}
    assert all((installed[name] / name / "layer_input_dtype.py").is_file() for name in installed)
    assert_packages_run_alone(*package_jobs(root, original, installed), tmp_path / "cwd")


def test_a_configured_helper_in_another_package_is_refused_per_file(tmp_path: Path):
    # de0faa5: beta's file was fixed to import `alpha.layer_input_dtype`, which beta does not depend on.
    root = monorepo(tmp_path / "repo")
    config = ROOT_CONFIG + 'helper = "alpha.layer_input_dtype:get_layer_input_dtype"\nhelper-template = "torch"\n'
    write_tree(root, {"pyproject.toml": config})
    beta_before = (root / "packages/beta/beta/model0.py").read_bytes()
    beta = [f for f in findings_of(root) if f["path"].endswith("beta/model0.py")]
    assert beta and all(f["fix"] is None for f in beta), beta
    assert all("does not depend on it" in f["no_fix_reason"] for f in beta), beta
    proc = fix(root)
    assert (root / "packages/beta/beta/model0.py").read_bytes() == beta_before
    assert "beta/model0.py" in proc.stdout, proc.stdout  # the finding stays
    assert "fixes refused" in proc.stderr and "ModuleNotFoundError" in proc.stderr
    assert "from alpha.layer_input_dtype import" in (root / "packages/alpha/alpha/model0.py").read_text()
    # Where beta declares alpha, the same helper serves it.
    write_tree(root, {"packages/beta/pyproject.toml": packaging("beta", "pyproject", ("torch", "alpha"))[
        "pyproject.toml"]})
    proc = fix(root)
    assert "from alpha.layer_input_dtype import" in (root / "packages/beta/beta/model0.py").read_text(), proc.stdout


def test_distributions_are_read_from_each_kind_of_packaging_file(tmp_path: Path):
    from dtype_lint.fix.distributions import distribution_of, lowest_python

    root = monorepo(tmp_path / "repo", "setup.cfg")
    write_tree(root, {"packages/gamma/setup.py": "from setuptools import setup\nsetup(name='Gamma_X', "
                                                 "install_requires=['Triton>=2; sys_platform == \"linux\"'], "
                                                 "python_requires='>=3.7')\n",
                      "packages/gamma/gamma/m.py": ""})
    alpha = distribution_of(root / "packages/alpha/alpha/model0.py", root)
    beta = distribution_of(root / "packages/beta/beta", root)
    gamma = distribution_of(root / "packages/gamma/gamma/m.py", root)
    assert (alpha.name, alpha.marker, alpha.dependencies, alpha.requires_python) == (
        "alpha", "pyproject.toml", frozenset({"torch"}), ">=3.8")
    assert (beta.name, beta.marker, beta.dependencies) == ("beta", "setup.cfg", frozenset({"torch"}))
    assert (gamma.name, gamma.dependencies, gamma.requires_python) == ("gamma-x", frozenset({"triton"}), ">=3.7")
    # The monorepo's root pyproject holds only tool settings: it is no package.
    assert distribution_of(root / "README.md", root) is None
    assert [lowest_python(s) for s in (">=3.8", "~=3.9", ">3.7,<4", "^3.6", "<4")] == [
        (3, 8), (3, 9), (3, 7), (3, 6), None]


# --- 2. a helper module's top-level imports ------------------------------------------------------

def helper_with_triton(guarded: bool = False) -> str:
    template = helper_source("get_layer_input_dtype", "torch")
    doc, rest = template.split("\n\n", 1)
    extra = "try:\n    import triton  # noqa: F401\nexcept ImportError:\n    triton = None\n" if guarded \
        else "import triton  # noqa: F401\n"
    return f"{doc}\n\n{extra}{rest}"


def single(root: Path, dependencies: str = '["torch"]', helper: str | None = None, model_extra: str = "") -> Path:
    pyproject = textwrap.dedent(f"""\
        [project]
        name = "proj"
        version = "0.1"
        dependencies = {dependencies}

        [project.optional-dependencies]
        kernels = ["triton"]

        [tool.dtype-lint]
        quantizable = ["proj.layers.QLinear"]
        helper = "proj.dtypes:get_layer_input_dtype"
        helper-template = "torch"
        """)
    return write_tree(root, {"pyproject.toml": pyproject, "proj/__init__.py": "", "proj/layers.py": LAYERS,
                             "proj/model.py": MODEL.format(package="proj", extra=model_extra),
                             "proj/dtypes.py": helper if helper is not None else helper_with_triton()})


def test_a_helper_importing_an_optional_dependency_is_refused(tmp_path: Path):
    # de0faa5: proj/model.py was fixed to import proj.dtypes, which imports triton at top level:
    # on a machine without triton the fixed module no longer imports.
    root = single(tmp_path / "p")
    before = tree_bytes(root)
    proc = fix(root)
    assert tree_bytes(root) == before, proc.stdout + proc.stderr
    assert "proj/model.py" in proc.stdout  # the finding stays
    assert "imports `triton` at top level (line 3)" in proc.stderr
    assert "does not declare" in proc.stderr and "pyproject.toml" in proc.stderr
    check = findings_of(root)
    assert check and all(f["fix"] is None for f in check) and "`triton`" in check[0]["no_fix_reason"]
    # Where triton is not installed, the module still imports and runs as before.
    shutil.copytree(root, tmp_path / "original")
    write_tree(tmp_path / "original", {"proj/model.py": before["proj/model.py"].decode()})
    (without_before, without_after) = run_alone([([tmp_path / "original"], "proj.model", "proj.layers", ("triton",)),
                                                 ([root], "proj.model", "proj.layers", ("triton",))], tmp_path / "cwd")
    assert "import" not in without_after and without_after == without_before


@pytest.mark.parametrize("case", ["declared", "file-imports-it", "guarded"])
def test_a_helper_import_the_fixed_module_can_satisfy_is_kept(tmp_path: Path, case: str):
    root = single(tmp_path / "p",
                  dependencies='["torch", "triton"]' if case == "declared" else '["torch"]',
                  model_extra="import triton  # noqa: F401\n" if case == "file-imports-it" else "",
                  helper=helper_with_triton(guarded=True) if case == "guarded" else None)
    proc = fix(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "from proj.dtypes import get_layer_input_dtype" in (root / "proj/model.py").read_text(), proc.stderr
    if case == "guarded":  # runs without triton, on every storage
        assert run_alone([([root], "proj.model", "proj.layers", ("triton",))], tmp_path / "cwd") == [STORAGES]


# --- 3. ignored paths ----------------------------------------------------------------------------

@pytest.mark.parametrize("configured", [True, False])
def test_a_helper_is_never_created_where_git_ignores_it(tmp_path: Path, configured: bool):
    # de0faa5: the helper was created in the ignored path and the fixes imported it.
    config = '[project]\nname = "proj"\n\n[tool.dtype-lint]\nquantizable = ["proj.layers.QLinear"]\n'
    if configured:
        config += 'helper = "proj.generated.dtypes:get_layer_input_dtype"\nhelper-template = "torch"\n'
    root = write_tree(tmp_path / "p", {
        "pyproject.toml": config, ".gitignore": "generated/\n" if configured else "layer_input_dtype.py\n",
        "proj/__init__.py": "", "proj/layers.py": LAYERS, "proj/model.py": MODEL.format(package="proj", extra=""),
    })
    before = tree_bytes(root)
    proc = fix(root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert tree_bytes(root) == before
    message = proc.stderr.strip().splitlines()[-1]
    ignored = "proj/generated/" if configured else "proj/layer_input_dtype.py"
    assert f"which the project's ignore rules exclude (`{ignored}` is ignored)" in message, message
    assert "no clone has" in message
    # A check keeps the finding and says why it has no fix.
    check = findings_of(root)
    assert check and all(f["fix"] is None for f in check) and "ignore rules" in check[0]["no_fix_reason"]
    # Un-ignored, the same run creates it and fixes the file.
    (root / ".gitignore").write_text("build/\n")
    assert fix(root).returncode == 0
    assert (root / ("proj/generated/dtypes.py" if configured else "proj/layer_input_dtype.py")).is_file()


# --- 4. the declared Python ----------------------------------------------------------------------

# A stand-in torch for interpreters that have none: dtypes as classes' instances, as torch's are.
STUB_TORCH = '''\
class dtype:  # as torch < 2.1 has it: no `itemsize`
    def __init__(self, name, is_floating_point, size=2, is_complex=False):
        self.name, self.is_floating_point, self._size = name, is_floating_point, size
        self.is_complex = is_complex
    def __repr__(self):
        return "torch." + self.name

int32, uint8, int8 = dtype("int32", False, 4), dtype("uint8", False, 1), dtype("int8", False, 1)
float16, bfloat16, float32 = dtype("float16", True), dtype("bfloat16", True), dtype("float32", True, 4)
float8_e4m3fn = dtype("float8_e4m3fn", True, 1)
complex64 = dtype("complex64", False, 8, is_complex=True)

class Tensor:
    def __init__(self, dt):
        self.dtype = dt
    def element_size(self):  # every torch has it (`dtype.itemsize` is torch 2.1's)
        return self.dtype._size

class nn:
    class Module:
        pass
'''

HELPER_RUN = r'''
import sys
sys.path.insert(0, sys.argv[1])
import torch
from helper import get_layer_input_dtype

class Layer:
    params_dtype = torch.bfloat16

out = {}
for name in sys.argv[2].split(","):
    layer = Layer()
    if name != "missing":
        layer.weight = torch.Tensor(getattr(torch, name))
    out[name] = repr(get_layer_input_dtype(layer, True))
print(out)
'''


def old_pythons() -> dict[str, str]:
    """Interpreters older than 3.10 on this machine, by version (pyenv's, or on the PATH)."""
    found = {}
    for version in ("3.6", "3.7", "3.8", "3.9"):
        candidates = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python"))
        exe = str(candidates[-1]) if candidates else shutil.which(f"python{version}")
        if exe:
            found[version] = exe
    return found


def created_helper(tmp_path: Path, requires: str) -> str:
    root = write_tree(tmp_path / f"p{requires.strip('>=~^.')}", {
        "pyproject.toml": f'[project]\nname = "proj"\nrequires-python = "{requires}"\n\n[tool.dtype-lint]\n'
                          'quantizable = ["proj.layers.QLinear"]\n',
        "proj/__init__.py": "", "proj/layers.py": LAYERS, "proj/model.py": MODEL.format(package="proj", extra=""),
    })
    proc = fix(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (root / "proj/layer_input_dtype.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("requires", [">=3.8", ">=3.7", ">=3.6", "~=3.9"])
def test_the_created_helper_runs_on_the_lowest_declared_python(tmp_path: Path, requires: str):
    # de0faa5: `-> torch.dtype | None` is evaluated when the `def` runs: TypeError before 3.10.
    pythons = old_pythons()
    lowest = requires.strip(">=~")
    if lowest not in pythons:
        pytest.skip(f"no Python {lowest} interpreter on this machine")
    source = created_helper(tmp_path, requires)
    compile(source, "layer_input_dtype.py", "exec")  # and valid for the Python running the tests
    folder = tmp_path / "run"
    write_tree(folder, {"torch.py": STUB_TORCH, "helper.py": source})
    proc = subprocess.run([pythons[lowest], "-c", HELPER_RUN, str(folder), ",".join(STORAGES)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + source
    decided = eval(proc.stdout)  # noqa: S307 - our own script's dict of reprs
    # The decisions the fixed code casts by (None: keep the activation's dtype, float16 here).
    expected = {k: ("torch.float16" if v == "None" else v) for k, v in STORAGES.items()}
    assert {k: ("torch.float16" if v == "None" else v) for k, v in decided.items()} == expected


def test_the_created_helper_is_unchanged_where_the_declared_python_evaluates_it(tmp_path: Path):
    assert created_helper(tmp_path, ">=3.10") == helper_source("get_layer_input_dtype", "torch")
    assert "from __future__ import annotations\n" in created_helper(tmp_path, ">=3.8")


def test_the_hf_helper_runs_on_the_oldest_python(tmp_path: Path):
    # Held on de0faa5 already (its annotations are strings): kept true.
    pythons = old_pythons()
    if not pythons:
        pytest.skip("no Python older than 3.10 on this machine")
    exe = pythons[min(pythons)]
    stub = STUB_TORCH.replace("class Tensor:", "class Tensor(object):")
    folder = write_tree(tmp_path / "hf", {"torch.py": stub, "hf.py": "import torch\n\n\n" + HF_HELPER_SOURCE})
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import torch, hf\n"
            "class M: pass\nm = M(); m.weight = torch.Tensor(torch.uint8)\n"
            "print(hf.get_module_input_dtype(m), hf.get_module_input_dtype(M()))\n")
    proc = subprocess.run([exe, "-c", code, str(folder)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["None", "None"]


def test_a_monorepo_series_adds_every_packages_helper(tmp_path: Path):
    # de0faa5: the one helper (in alpha) was the series' only new file, beta's fix importing it.
    root = monorepo(tmp_path / "repo")
    before = tree_bytes(root)
    proc = dtl(root, "migrate", ".", "--series", str(tmp_path / "series"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert tree_bytes(root) == before  # a series changes nothing in the tree
    patches = "".join(p.read_text(encoding="utf-8") for p in sorted((tmp_path / "series").glob("*.patch")))
    for name in ("alpha", "beta"):
        assert f"+++ b/packages/{name}/{name}/layer_input_dtype.py" in patches, name
        assert f"+from {name}.layer_input_dtype import get_layer_input_dtype" in patches, name
    assert "+from alpha.layer_input_dtype" not in patches.split("+++ b/packages/beta/beta/model0.py", 1)[1]


def test_the_hf_helper_is_never_created_where_git_ignores_it(tmp_path: Path):
    # de0faa5: `hf_utils.py` was created although .gitignore ignores it, and the model imported it.
    model = textwrap.dedent("""\
        import torch
        from torch import nn
        from transformers import PreTrainedModel


        class Block(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.proj = nn.Linear(64, 64)

            def forward(self, hidden_states):
                return hidden_states.to(self.proj.weight.dtype)


        class Model(PreTrainedModel):
            def __init__(self, config):
                super().__init__(config)
                self.block = Block(config)
        """)
    root = write_tree(tmp_path / "p", {"model.py": model, ".gitignore": "hf_utils.py\n"})
    found = [f for f in findings_of(root) if f["code"] == "DTL001"]
    assert found and all(f["fix"] is None for f in found), found
    assert all("`hf_utils.py` is ignored" in f["no_fix_reason"] for f in found), found
    before = tree_bytes(root)
    proc = fix(root)
    assert tree_bytes(root) == before, proc.stdout + proc.stderr
    assert "fixes refused" in proc.stderr
    (root / ".gitignore").write_text("build/\n")  # not ignored: created, and the model imports it
    assert fix(root).returncode == 0 and (root / "hf_utils.py").is_file()
    assert "from hf_utils import get_module_input_dtype" in (root / "model.py").read_text()


def test_doctor_names_each_packages_helper(tmp_path: Path):
    root = monorepo(tmp_path / "repo")
    proc = dtl(root, "doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("alpha", "beta"):
        assert (f"helper: {name}.layer_input_dtype:get_layer_input_dtype (inferred) at "
                f"packages/{name}/{name}/layer_input_dtype.py") in proc.stdout, proc.stdout
