"""The trees of issue #40's round 6 in the triage: gptqmodel publishes only an sdist, so
scripts/triage.py fetches an `SDIST_ONLY` distribution from its sdist into the same cache layout as
dtype_lint.releases' wheel trees (the package's `.py` files, a marker written last, one rename).

No network here: pip is replaced by a function that writes a small sdist of our own into the folder
pip was asked to download into. The real trees run in tests/test_triage.py (DTL_FULL=1).
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from dtype_lint import releases

ROOT = Path(__file__).resolve().parents[1]


def _load_script():
    spec = importlib.util.spec_from_file_location("dtype_lint_triage_script_new_trees",
                                                  ROOT / "scripts" / "triage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


triage = _load_script()


def _write_sdist(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    """A gzipped tar at `path` holding `members` (name -> content) and symbolic `links` (name -> target)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def test_extract_keeps_only_the_package_py_files_under_the_tree_root(tmp_path: Path) -> None:
    archive = _write_sdist(tmp_path / "quantpkg-1.0.tar.gz", {
        "quantpkg-1.0/quantpkg/__init__.py": b"",
        "quantpkg-1.0/quantpkg/kernels/linear.py": b"WIDTH = 4\n",
        "quantpkg-1.0/quantpkg/kernels/linear.cu": b"// not python\n",
        "quantpkg-1.0/quantpkg_ext/build.py": b"# another top-level folder\n",
        "quantpkg-1.0/setup.py": b"# the build script\n",
    }, links={"quantpkg-1.0/quantpkg/alias.py": "kernels/linear.py"})
    staged = tmp_path / "tree"

    count = triage._extract_sdist_py(archive, staged, "quantpkg")

    files = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    # The sdist's top folder is dropped (as a wheel installs the package), a link is not followed.
    assert files == ["quantpkg/__init__.py", "quantpkg/kernels/linear.py"]
    assert count == 2
    assert (staged / "quantpkg/kernels/linear.py").read_text() == "WIDTH = 4\n"


def test_extract_refuses_a_member_that_climbs_out(tmp_path: Path) -> None:
    archive = _write_sdist(tmp_path / "quantpkg-1.0.tar.gz", {
        "quantpkg-1.0/quantpkg/../../escaped.py": b"",
    })
    with pytest.raises(releases.ReleaseFetchError, match="unsafe member path"):
        triage._extract_sdist_py(archive, tmp_path / "tree", "quantpkg")
    assert not (tmp_path / "escaped.py").exists()


def test_extract_refuses_an_sdist_without_the_package(tmp_path: Path) -> None:
    archive = _write_sdist(tmp_path / "other-1.0.tar.gz", {"other-1.0/other/__init__.py": b""})
    with pytest.raises(releases.ReleaseFetchError, match="holds no quantpkg/"):
        triage._extract_sdist_py(archive, tmp_path / "tree", "quantpkg")


@pytest.fixture
def sdist_dist(monkeypatch, tmp_path: Path):
    """An SDIST_ONLY distribution `quantpkg` (package `quantpkg`), the cache under tmp_path, and pip
    replaced: returns the list of pip commands run."""
    monkeypatch.setenv("DTYPE_LINT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(triage.EXTRA_DISTS, "quantpkg", ("quantpkg", None))
    monkeypatch.setattr(triage, "SDIST_ONLY", {*triage.SDIST_ONLY, "quantpkg"})
    monkeypatch.delitem(releases.PACKAGES, "quantpkg", raising=False)
    commands: list[list[str]] = []

    def fake_pip(cmd, **kwargs):
        commands.append(cmd)
        into = Path(cmd[cmd.index("-d") + 1])
        into.mkdir(parents=True, exist_ok=True)
        _write_sdist(into / "quantpkg-1.0.tar.gz", {"quantpkg-1.0/quantpkg/layer.py": b"DTYPE = 'float16'\n"})
        return subprocess.CompletedProcess(cmd, 0, "Saved quantpkg-1.0.tar.gz\n", "")

    monkeypatch.setattr(triage.subprocess, "run", fake_pip)
    return commands


def test_release_tree_builds_an_sdist_only_tree_once(sdist_dist, tmp_path: Path) -> None:
    tree = triage.release_tree("quantpkg", "1.0")

    assert tree == tmp_path / "cache" / "quantpkg-1.0"
    assert (tree / "quantpkg/layer.py").read_text() == "DTYPE = 'float16'\n"
    marker = json.loads((tree / releases.MARKER).read_text())
    assert marker == {"dist": "quantpkg", "version": "1.0", "sdist": "quantpkg-1.0.tar.gz", "py_files": 1}
    # pip was asked for the sdist, without dependencies and without fetching build requirements.
    (cmd,) = sdist_dist
    assert "quantpkg==1.0" in cmd and "--no-deps" in cmd and "--no-binary=:all:" in cmd
    assert "--no-build-isolation" in cmd
    # The second call finds the marker: no second download, and nothing left beside the tree.
    assert triage.release_tree("quantpkg", "1.0") == tree
    assert len(sdist_dist) == 1
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["quantpkg-1.0", "quantpkg-1.0.lock"]


def test_a_failed_sdist_download_says_what_pip_said(sdist_dist, monkeypatch, tmp_path: Path) -> None:
    def failing_pip(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for quantpkg==1.0\n")

    monkeypatch.setattr(triage.subprocess, "run", failing_pip)
    with pytest.raises(releases.ReleaseFetchError, match=r"sdist of quantpkg==1\.0 \(exit 1\)(.|\n)*No matching"):
        triage.release_tree("quantpkg", "1.0")
    assert not (tmp_path / "cache" / "quantpkg-1.0").exists()


def test_gptqmodel_is_triaged_from_its_sdist() -> None:
    """gptqmodel publishes no wheel for any platform (7.7.0): its tree must come from the sdist."""
    assert triage.EXTRA_DISTS["gptqmodel"] == ("gptqmodel", None)
    assert "gptqmodel" in triage.SDIST_ONLY
    assert triage.EXTRA_DISTS["ms-swift"] == ("swift", None)
    assert {("gptqmodel", "7.7.0"), ("ms-swift", "4.6.0")} <= set(triage.all_trees())


def test_an_old_setuptools_gets_the_wheel_tool_only_when_pip_asks_for_it(sdist_dist, monkeypatch,
                                                                          tmp_path: Path) -> None:
    """deepspeed's and autoawq's sdists prepare their metadata through `bdist_wheel` under
    setuptools < 70.1 (a fresh 3.11 venv's 65.5): pip fails saying so, and the download is made
    again with the `wheel` tool's wheel (fetched alone, `--no-deps`) on PYTHONPATH. A venv whose
    setuptools needs no `wheel` makes one call, as test_release_tree_builds_an_sdist_only_tree_once."""
    calls: list[tuple[list[str], dict | None]] = []
    find_spec = importlib.util.find_spec  # this venv may have `wheel`: the test's must not
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wheel" else find_spec(name, *a))

    def old_setuptools_pip(cmd, **kwargs):
        env = kwargs.get("env")
        calls.append((cmd, env))
        into = Path(cmd[cmd.index("-d") + 1])
        into.mkdir(parents=True, exist_ok=True)
        if triage.WHEEL_TOOL in cmd:
            (into / "wheel-0.48.0-py3-none-any.whl").write_bytes(b"")
            return subprocess.CompletedProcess(cmd, 0, "Saved wheel-0.48.0-py3-none-any.whl\n", "")
        if env is None or "wheel-0.48.0" not in env.get("PYTHONPATH", ""):
            return subprocess.CompletedProcess(cmd, 1, "", "error: invalid command 'bdist_wheel'\n")
        _write_sdist(into / "quantpkg-1.0.tar.gz", {"quantpkg-1.0/quantpkg/layer.py": b"DTYPE = 'float16'\n"})
        return subprocess.CompletedProcess(cmd, 0, "Saved quantpkg-1.0.tar.gz\n", "")

    monkeypatch.setattr(triage.subprocess, "run", old_setuptools_pip)
    tree = triage.release_tree("quantpkg", "1.0")

    assert (tree / "quantpkg/layer.py").read_text() == "DTYPE = 'float16'\n"
    asked = [("wheel tool" if triage.WHEEL_TOOL in cmd else "sdist", env is not None) for cmd, env in calls]
    assert asked == [("sdist", False), ("wheel tool", False), ("sdist", True)]
    assert "--no-deps" in calls[1][0]
