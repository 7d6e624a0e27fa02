"""A project outside the engine (a plugin) is judged against the engine it will run with (#39).

Before: one shipped catalogue (vLLM 0.33.0) served every plugin, so a plugin pinned to vLLM 0.34.0
was told about 0.33.0's lines ("marlin_utils_fp8.py:141 in vllm 0.33.0", where 0.34.0 has the
repack at :128). Now the engine is chosen per project (core/engine_source.py): an
installed vLLM in the project's own environment (its code read, never imported), else the
shipped catalogue of the release the project pins (pyproject.toml, setup.cfg, requirements*.txt),
else the newest shipped one; the `engine-release` setting names one outright. The evidence says
which it used, and `doctor` says why.

The plugins below are our own few lines; the installed "vLLM" is a tiny tree of our own in vLLM's
module layout (so the `vllm` preset names its layers) with a Marlin-like backend that repacks
`weight` to int32 after loading, at lines no vLLM release has.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from dtype_lint.analysis.storage.catalogue import release_catalogue
from dtype_lint.core import engine_source
from tests.cli_runner import dtl

HEAD = """
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    class Head:
        def __init__(self, quant_config):
            self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config)

        def forward(self, x):
            return x.to(self.proj.weight.dtype)
"""

# The tiny installed engine: a layer that asks its config for a quant method, and one backend whose
# method registers a compute-dtype `weight` and repacks it to int32 after loading (as Marlin does).
REPACK = "layer.weight = torch.nn.Parameter(packed, requires_grad=False)"
ENGINE = {
    "vllm/__init__.py": "",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/linear.py": """
        import torch
        from torch import nn

        from vllm.model_executor.layers.quantization.base_config import QuantizationConfig


        class LinearBase(nn.Module):
            def __init__(self, n: int, m: int, quant_config: QuantizationConfig | None = None):
                super().__init__()
                self.quant_method = quant_config.get_quant_method(self, "") if quant_config else None
                self.quant_method.create_weights(self, n, m, torch.bfloat16)


        class ColumnParallelLinear(LinearBase):
            pass
    """,
    "vllm/model_executor/layers/quantization/__init__.py": "",
    "vllm/model_executor/layers/quantization/base_config.py": """
        class QuantizationConfig:
            def get_quant_method(self, layer, prefix):
                raise NotImplementedError
    """,
    "vllm/model_executor/layers/quantization/tile_pack.py": f"""
        import torch

        from vllm.model_executor.layers.linear import LinearBase
        from vllm.model_executor.layers.quantization.base_config import QuantizationConfig


        class TilePackMethod:
            def create_weights(self, layer, n, m, params_dtype):
                layer.register_parameter("weight", torch.nn.Parameter(torch.empty(n, m, dtype=params_dtype)))

            def process_weights_after_loading(self, layer):
                n, m = layer.weight.shape
                packed = torch.zeros(n, m // 8, dtype=torch.int32)
                {REPACK}


        class TilePackConfig(QuantizationConfig):
            def get_quant_method(self, layer, prefix):
                if isinstance(layer, LinearBase):
                    return TilePackMethod()
                return None
    """,
}
BACKEND = "vllm/model_executor/layers/quantization/tile_pack.py"
SITE = ".venv/lib/python3.12/site-packages"


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def plugin(root: Path, **pins: str) -> Path:
    """A plugin project: its own package and the files `pins` names (file name -> its text)."""
    files = {"myplugin/__init__.py": "", "myplugin/head.py": HEAD}
    files.update({name.replace("__", "."): text for name, text in pins.items()})
    return write(root, files)


def install_engine(root: Path, version: str) -> Path:
    """Our tiny engine installed in the project's `.venv`, as pip leaves a wheel: the package and
    its dist-info (METADATA, RECORD)."""
    site = root / SITE
    write(site, ENGINE)
    info = site / f"vllm-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n", encoding="utf-8")
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in ENGINE) + f"vllm-{version}.dist-info/METADATA,,\n",
                                 encoding="utf-8")
    return site


def the_cast(root: Path, *args: str) -> dict:
    proc = dtl(root, "check", ".", *args, "--output-format", "json", "--exit-zero")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (cast,) = json.loads(proc.stdout)["findings"]
    assert cast["code"] == "DTL001" and cast["path"] == "myplugin/head.py"
    # the engine's lines are words, never a location a reporter would resolve in the project
    assert all(not e["path"] or e["path"] == "myplugin/head.py" for e in cast["evidence"])
    return cast


def said(cast: dict) -> str:
    """The finding's message and evidence lines: the message names the release, the evidence also
    why it was chosen."""
    return "\n".join([cast["message"], *(e["message"] for e in cast["evidence"])])


def cited(cast: dict, words: str) -> set[tuple[str, int]]:
    """(file name, line) of every engine location the evidence cites with these words: a backend's
    first and last steps, `(fp8.py:185 -> marlin_utils_fp8.py:128 in WORDS)`."""
    found = set()
    for evidence in cast["evidence"]:
        for span in re.findall(r"\(([^()]*) in " + re.escape(words) + r"\)", evidence["message"]):
            found.update((name, int(line)) for name, line in re.findall(r"([\w.]+\.py):(\d+)", span))
    return found


def catalogue_locations(version: str) -> set[tuple[str, int]]:
    """(file name, line) of every step the shipped catalogue of `version` records."""
    data = release_catalogue("vllm", version)
    assert data is not None, version
    return {(path.rsplit("/", 1)[-1], line) for storage in data["storages"] for _, path, line in storage["evidence"]
            if path}


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch):
    """The computed descriptions of installed engines go to a cache of this test's own, and no
    virtual environment of the machine running the tests is the plugins'."""
    monkeypatch.setenv("DTYPE_LINT_CACHE_DIR", str(tmp_path_factory.mktemp("tool-cache")))
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)


# ---- the pinned release's catalogue ---------------------------------------------------------------
def test_a_plugin_pinned_to_0_34_0_is_told_0_34_0_s_lines(tmp_path):
    """The regression: 0.33.0's catalogue answered for every plugin."""
    root = plugin(tmp_path / "p", pyproject__toml='[project]\nname = "p"\ndependencies = ["vllm==0.34.0"]\n')
    cast = the_cast(root)
    words = "vllm 0.34.0, the release pyproject.toml pins"
    assert f"in {words})" in said(cast), said(cast)
    assert "0.33.0" not in json.dumps(cast)
    # the message names the release; why it was chosen is in the evidence, not repeated per backend
    assert "in vllm 0.34.0)" in cast["message"] and "pins" not in cast["message"], cast["message"]
    locations = cited(cast, words)
    assert locations and locations <= catalogue_locations("0.34.0")
    # 0.34.0 moved the FP8 Marlin repack: the line cited is 0.34.0's, not 0.33.0's
    assert ("marlin_utils_fp8.py", 128) in locations and ("marlin_utils_fp8.py", 141) not in locations


def test_a_plugin_pinned_to_0_33_0_keeps_0_33_0(tmp_path):
    root = plugin(tmp_path / "p", pyproject__toml='[project]\nname = "p"\ndependencies = ["vllm[tpu] == 0.33.0 ; '
                                                  'sys_platform == \'linux\'"]\n')
    cast = the_cast(root)
    words = "vllm 0.33.0, the release pyproject.toml pins"
    locations = cited(cast, words)
    assert locations and locations <= catalogue_locations("0.33.0")
    assert ("marlin_utils_fp8.py", 141) in locations and ("marlin_utils_fp8.py", 128) not in locations
    assert "0.34.0" not in json.dumps(cast)


@pytest.mark.parametrize(("files", "version", "source"), [
    # a range: the newest shipped release it allows
    ({"requirements__txt": "torch>=2.4\nvllm>=0.33,<0.35  # the engine\n"}, "0.34.0", "requirements.txt"),
    ({"requirements-dev__txt": "vllm<0.34\n"}, "0.33.0", "requirements-dev.txt"),
    ({"setup__cfg": "[metadata]\nname = p\n\n[options]\ninstall_requires =\n    numpy\n    vllm~=0.33.0\n"},
     "0.33.0", "setup.cfg"),
    # an extra of PEP 621's optional-dependencies
    ({"pyproject__toml": '[project]\nname = "p"\n[project.optional-dependencies]\ngpu = ["vllm==0.33.*"]\n'},
     "0.33.0", "pyproject.toml"),
    # pyproject.toml's pin comes before requirements.txt's
    ({"pyproject__toml": '[project]\nname = "p"\ndependencies = ["vllm==0.33.0"]\n',
      "requirements__txt": "vllm==0.34.0\n"}, "0.33.0", "pyproject.toml"),
])
def test_the_pin_chooses_the_shipped_catalogue(tmp_path, files, version, source):
    cast = the_cast(plugin(tmp_path / "p", **files))
    words = f"vllm {version}, the release {source} pins"
    assert f"in {words})" in said(cast), said(cast)
    assert cited(cast, words) <= catalogue_locations(version)


def test_no_pin_gets_the_newest_shipped_catalogue_and_says_so(tmp_path):
    cast = the_cast(plugin(tmp_path / "p", pyproject__toml='[project]\nname = "p"\ndependencies = ["torch"]\n'))
    newest = engine_source.shipped_releases("vllm")[-1]
    words = f"vllm {newest}, the newest shipped release: the project pins none"
    assert f"in {words})" in said(cast), said(cast)
    assert cited(cast, words) <= catalogue_locations(newest)


def test_a_pin_no_shipped_release_satisfies_gets_the_nearest_and_says_so(tmp_path):
    root = plugin(tmp_path / "p", requirements__txt="vllm==0.40.1\n")
    cast = the_cast(root)
    newest = engine_source.shipped_releases("vllm")[-1]
    assert f"in vllm {newest}, the shipped release nearest to the pin `vllm==0.40.1` of requirements.txt)" \
        in said(cast), said(cast)
    old = plugin(tmp_path / "old", requirements__txt="vllm==0.20.0\n")
    oldest = engine_source.shipped_releases("vllm")[0]
    assert f"in vllm {oldest}, the shipped release nearest" in said(the_cast(old))


def test_the_setting_names_the_release_outright(tmp_path):
    root = plugin(tmp_path / "p", pyproject__toml='[project]\nname = "p"\ndependencies = ["vllm==0.34.0"]\n\n'
                                                  '[tool.dtype-lint]\nengine-release = "0.33.0"\n')
    cast = the_cast(root)
    words = "vllm 0.33.0, the release [tool.dtype-lint] `engine-release` names"
    assert cited(cast, words) and cited(cast, words) <= catalogue_locations("0.33.0")


def test_a_setting_naming_no_shipped_release_is_a_one_line_error(tmp_path):
    root = plugin(tmp_path / "p", pyproject__toml='[tool.dtype-lint]\nengine-release = "0.1.0"\n')
    proc = dtl(root, "check", ".")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "`engine-release` must be a vLLM release whose catalogue ships with dtype-lint" in line
    assert "0.33.0" in line and "0.34.0" in line and "got `0.1.0`" in line


# ---- an installed engine ----------------------------------------------------------------------------
def test_an_installed_engine_is_read_from_its_code(tmp_path, monkeypatch):
    root = plugin(tmp_path / "p", requirements__txt="vllm==0.34.0\n")  # the pin only bounds it
    site = install_engine(root, "0.99.0")
    cast = the_cast(root)
    words = "the installed vllm 0.99.0"
    assert f"in {words})" in said(cast), said(cast)
    assert "TilePack" in cast["message"] and "int32" in cast["message"]
    # the lines cited are our tiny engine's: the config's dispatch and the repack after loading
    locations = cited(cast, words)
    repack_line = next(n for n, line in enumerate((site / BACKEND).read_text().splitlines(), 1) if REPACK in line)
    assert ("tile_pack.py", repack_line) in locations
    for name, line in locations:
        (path,) = [p for p in ENGINE if p.endswith("/" + name)]
        assert 1 <= line <= len((site / path).read_text(encoding="utf-8").splitlines()), (path, line)
    assert not any(re.search(r"in vllm 0\.\d+\.\d+", e["message"]) for e in cast["evidence"])


def test_the_installed_engine_is_described_once_and_kept(tmp_path, monkeypatch):
    """Its description is computed from the installed files once and kept in the tool's cache,
    keyed by the installed version and its RECORD: the next run (pre-commit) reads it."""
    from dtype_lint.run import installed_engine

    computed: list[str] = []
    real = installed_engine.describe_tree

    def counting(*args, **kwargs):
        computed.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr(installed_engine, "describe_tree", counting)
    root = plugin(tmp_path / "p")
    install_engine(root, "0.99.0")
    first = the_cast(root, "--no-cache")
    second = the_cast(root, "--no-cache")
    assert computed == ["0.99.0"] and first == second
    kept = list((Path(engine_source.os.environ["DTYPE_LINT_CACHE_DIR"]) / "engines").glob("vllm-0.99.0-*.json"))
    assert len(kept) == 1
    # another installed build (a different RECORD) is described again
    record = root / SITE / "vllm-0.99.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + "vllm/extra.py,,\n", encoding="utf-8")
    the_cast(root, "--no-cache")
    assert computed == ["0.99.0", "0.99.0"]


def test_installing_upgrading_or_removing_the_engine_makes_cached_findings_stale(tmp_path):
    root = plugin(tmp_path / "p", requirements__txt="vllm==0.33.0\n")
    (root / ".venv" / "lib" / "python3.12" / "site-packages").mkdir(parents=True)  # a venv without vLLM
    assert "in vllm 0.33.0, the release requirements.txt pins)" in said(the_cast(root))
    install_engine(root, "0.98.0")
    assert "in the installed vllm 0.98.0)" in the_cast(root)["message"]
    import shutil

    shutil.rmtree(root / SITE / "vllm-0.98.0.dist-info")
    install_engine(root, "0.99.0")
    assert "in the installed vllm 0.99.0)" in the_cast(root)["message"]
    shutil.rmtree(root / SITE / "vllm")
    assert "in vllm 0.33.0, the release requirements.txt pins)" in said(the_cast(root))
    # and an edited pin, with the cache on
    (root / "requirements.txt").write_text("vllm==0.34.0\n", encoding="utf-8")
    assert "in vllm 0.34.0, the release requirements.txt pins)" in said(the_cast(root))


def test_the_active_virtual_env_counts_after_the_project_s_own(tmp_path, monkeypatch):
    root = plugin(tmp_path / "p", requirements__txt="vllm==0.33.0\n")
    elsewhere = tmp_path / "env"
    write(elsewhere / "lib" / "python3.11" / "site-packages", ENGINE)
    info = elsewhere / "lib" / "python3.11" / "site-packages" / "vllm-0.97.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("vllm/__init__.py,,\n", encoding="utf-8")
    monkeypatch.setenv("VIRTUAL_ENV", str(elsewhere))
    assert "in the installed vllm 0.97.0)" in the_cast(root, "--no-cache")["message"]
    install_engine(root, "0.99.0")  # the project's own .venv comes first
    assert "in the installed vllm 0.99.0)" in the_cast(root, "--no-cache")["message"]


def test_doctor_says_which_engine_and_why(tmp_path):
    root = plugin(tmp_path / "p", requirements__txt="vllm>=0.33,<0.35\n")
    out = dtl(root, "doctor").stdout
    assert "engine (vllm): vllm 0.34.0, shipped catalogue" in out, out
    assert "`vllm>=0.33,<0.35` in requirements.txt" in out and "(the newest it allows)" in out
    install_engine(root, "0.99.0")
    out = dtl(root, "doctor").stdout
    assert "engine (vllm): the installed vllm 0.99.0" in out, out
    assert ".venv/lib/python3.12/site-packages/vllm" in out


def test_an_engine_checkout_is_not_a_plugin(tmp_path):
    """A tree holding the engine reads its own backends: no release is chosen or named."""
    root = write(tmp_path / "engine", {**ENGINE, "requirements.txt": "vllm==0.34.0\n", "vllm/head.py": HEAD})
    proc = dtl(root, "check", ".", "--output-format", "json", "--exit-zero")
    (cast,) = json.loads(proc.stdout)["findings"]
    assert "TilePack" in cast["message"] and "in vllm 0." not in cast["message"]
    assert "engine (vllm): the tree's own" in dtl(root, "doctor").stdout


# ---- reading pins ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "specifiers"), [
    ("vllm==0.34.0", [("==", "0.34.0")]),
    ("vllm >=0.33, <0.35", [(">=", "0.33"), ("<", "0.35")]),
    ("VLLM[tpu]~=0.33.0; python_version >= '3.10'", [("~=", "0.33.0")]),
    ("vllm", []),
    ("vllm-omni==0.30.0", None),
    ("vllm @ https://example.invalid/vllm.whl", None),
])
def test_requirement_specifiers(line, specifiers):
    assert engine_source.requirement_specifiers(line, "vllm") == specifiers


@pytest.mark.parametrize(("specifiers", "version", "allowed"), [
    ([("==", "0.34.0")], "0.34.0", True),
    ([("==", "0.34")], "0.34.0", True),
    ([("==", "0.34.0")], "0.33.0", False),
    ([(">=", "0.33"), ("<", "0.35")], "0.34.0", True),
    ([(">=", "0.33"), ("<", "0.34")], "0.34.0", False),
    ([("~=", "0.33.0")], "0.33.5", True),
    ([("~=", "0.33.0")], "0.34.0", False),
    ([("~=", "0.33")], "0.34.0", True),
    ([("==", "0.33.*")], "0.33.0", True),
    ([("!=", "0.34.0")], "0.34.0", False),
])
def test_allows(specifiers, version, allowed):
    assert engine_source.allows(specifiers, version) is allowed


# ---- the real release trees (slow tier) -------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_the_cited_lines_are_the_release_s_own(tmp_path, version):
    """Every engine line the evidence cites is, in that release's own tree, a line of the code the
    words describe, not a line of another release: a config's dispatch to its method
    (`return Fp8LinearMethod(self)`), or where `weight` is registered or repacked
    (`replace_parameter(layer, "weight", marlin_qweight)`, a `dtype=torch.uint8` argument of it)."""
    from dtype_lint.releases import release_tree

    tree = release_tree("vllm", version)
    cast = the_cast(plugin(tmp_path / "p", requirements__txt=f"vllm=={version}\n"))
    locations = cited(cast, f"vllm {version}, the release requirements.txt pins")
    assert locations
    for name, line in locations:
        # the catalogue's path of that file name (several releases' files share a name: any of them)
        paths = {path for storage in release_catalogue("vllm", version)["storages"]
                 for _, path, at in storage["evidence"] if path.endswith("/" + name) and at == line}
        assert paths, (name, line)
        for path in paths:
            text = (tree / path).read_text(encoding="utf-8").splitlines()[line - 1]
            assert re.search(r"\bweight\b|dtype=torch\.|Method\(", text), (path, line, text)


@pytest.mark.slow
@pytest.mark.network
def test_an_installed_release_is_described_as_its_shipped_catalogue(tmp_path):
    """vLLM 0.34.0's files in a project's `.venv` give the same storages as the shipped catalogue
    of 0.34.0: one computation, two sources."""
    import shutil

    from dtype_lint.releases import release_tree

    root = plugin(tmp_path / "p")
    site = root / SITE
    site.mkdir(parents=True)
    shutil.copytree(release_tree("vllm", "0.34.0") / "vllm", site / "vllm")
    (site / "vllm-0.34.0.dist-info").mkdir()
    (site / "vllm-0.34.0.dist-info" / "RECORD").write_text("vllm/__init__.py,,\n", encoding="utf-8")
    installed = the_cast(root, "--no-cache")
    shutil.rmtree(site / "vllm")
    (root / "requirements.txt").write_text("vllm==0.34.0\n", encoding="utf-8")
    pinned = the_cast(root, "--no-cache")
    assert installed["message"].replace("the installed vllm 0.34.0", "vllm 0.34.0") == pinned["message"]


# ---- what 0.34.0's catalogue showed ------------------------------------------------------------------
def test_two_configs_handing_out_one_method_are_one_format():
    """vLLM 0.34.0's W4AFP8Config hands linear layers Fp8Config's `Fp8LinearMethod`: its int32
    (Marlin) storage is one format, so a branch on `int32` with the method's `weight_scale_inv`
    picks the right kernel (DTL004's VALID example); two methods leaving int32 are two formats."""
    from dtype_lint.analysis.storage.storage_dispatch import ambiguous_storage
    from dtype_lint.analysis.storage.storage_model import Storage

    def int32(backend: str, method: str) -> Storage:
        return Storage(backend, method, "packed", "int32", "repacks `weight` to int32", (), True,
                       ("weight", "weight_scale", "weight_scale_inv"))

    shared = [int32("vllm.q.fp8.Fp8Config", "Fp8LinearMethod"), int32("vllm.q.w4afp8.W4AFP8Config", "Fp8LinearMethod")]
    assert ambiguous_storage(shared, ["torch.int32"], frozenset({"weight_scale_inv"})) is None
    two = [*shared, int32("vllm.q.fbgemm.FBGEMMFp8Config", "FBGEMMFp8LinearMethod")]
    assert ambiguous_storage(two, ["torch.int32"], frozenset()) == ("int32", ["FBGEMMFp8LinearMethod", "Fp8LinearMethod"])
