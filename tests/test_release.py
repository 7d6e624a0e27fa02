"""Releases: one version, a changelog entry for it, a README that pins it, and pre-commit hooks that
work as users run them (`pre-commit try-repo` on a small project of our own).

The hooks are tested at the release tag `v<version>` when this checkout has it (the commit users
pin), else at the working tree. pre-commit builds its own virtualenv and installs dtype-lint and
its dependencies from the package index into it, hence the `network` marker.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import dtl
from dtype_lint import __version__

ROOT = Path(__file__).resolve().parents[1]
TAG = f"v{__version__}"


def test_version_has_one_source():
    from dtype_lint.config import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    assert "version" not in project and "version" in project["dynamic"], "the version lives in dtype_lint/__init__.py only"
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "dtype_lint.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_the_installed_metadata_agrees():
    from importlib.metadata import version

    assert version("dtype-lint") == __version__


def test_version_flag(tmp_path: Path):
    proc = dtl(tmp_path, "--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"dtype-lint {__version__}"
    # The console script says the same (what `pre-commit` and CI logs show).
    exe = Path(sys.executable).with_name("dtype-lint")
    if exe.exists():
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
        assert out.stdout.strip() == f"dtype-lint {__version__}"


def test_changelog_has_a_section_for_this_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", changelog, re.M)
    assert sections and sections[0] == __version__, "the newest CHANGELOG section is this version"
    body = changelog.split(f"## {__version__}", 1)[1].split("\n## ", 1)[0]
    assert body.count("\n- ") >= 3


def test_readme_pins_this_release():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"rev: {TAG}" in readme
    assert "rev: <tag>" not in readme
    ci_doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    assert f"@{TAG}" in ci_doc


# --- the hooks as users run them ------------------------------------------------------------------

SAMPLE = {
    "pyproject.toml": '[tool.dtype-lint]\nhelper = "pkg.dtypes:get_layer_input_dtype"\n',
    "pkg/__init__.py": "",
    "pkg/attn.py": (
        "import torch\n"
        "from vllm.model_executor.layers.linear import ColumnParallelLinear\n\n\n"
        "class Attn(torch.nn.Module):\n"
        "    def __init__(self, kv_b_proj: ColumnParallelLinear):\n"
        "        super().__init__()\n"
        "        self.kv_b_proj = kv_b_proj\n\n"
        "    def forward(self, x):\n"
        "        x = x.to(self.kv_b_proj.weight.dtype)\n"
        "        return self.kv_b_proj(x)\n"
    ),
    "pkg/clean.py": "def f(x):\n    return x + 1\n",
}


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, check=True).stdout


def _has_tag(tag: str) -> bool:
    proc = subprocess.run(["git", "rev-parse", "-q", "--verify", f"refs/tags/{tag}"], cwd=ROOT,
                          capture_output=True, text=True)
    return proc.returncode == 0


def _pre_commit() -> list[str]:
    exe = Path(sys.executable).with_name("pre-commit")
    if exe.exists():
        return [str(exe)]
    pytest.fail("pre-commit is missing: it is in the `test` extra (pip install -e '.[test]')", pytrace=False)


@pytest.mark.network
@pytest.mark.slow
def test_pre_commit_hooks_at_the_release(tmp_path: Path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("needs git and this repository's checkout", pytrace=False)
    project = tmp_path / "sample"
    for rel, text in SAMPLE.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text, encoding="utf-8")
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "sample")
    ref = ["--ref", TAG] if _has_tag(TAG) else []
    env = {k: v for k, v in os.environ.items() if k not in ("PRE_COMMIT", "CI", "VIRTUAL_ENV")}
    env.update(PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"), GIT_CONFIG_GLOBAL=os.devnull,
               GIT_CONFIG_NOSYSTEM="1", NO_COLOR="1")

    def try_repo(*hook: str) -> subprocess.CompletedProcess:
        return subprocess.run([*_pre_commit(), "try-repo", str(ROOT), *hook, *ref, "--all-files", "--color", "never"],
                              cwd=project, env=env, capture_output=True, text=True, timeout=300)

    # Both hooks, in the order the repository declares them: the check fails on the finding,
    # then the fix hook rewrites the file and creates the helper (pre-commit: "files were modified").
    both = try_repo()
    out = both.stdout + both.stderr
    assert both.returncode == 1, out
    assert re.search(r"^dtype-lint\.+Failed$", out, re.M), out
    assert "pkg/attn.py:11:13: DTL001 [*]" in out
    assert re.search(r"^dtype-lint \(fix\)\.+Failed$", out, re.M) and "files were modified by this hook" in out
    attn = (project / "pkg/attn.py").read_text(encoding="utf-8")
    assert "from pkg.dtypes import get_layer_input_dtype\n" in attn
    assert "kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, True)" in attn
    assert (project / "pkg/dtypes.py").exists()
    assert (project / "pkg/clean.py").read_text(encoding="utf-8") == SAMPLE["pkg/clean.py"]
    # The fixed tree passes the check hook.
    _git(project, "add", "-A")
    again = try_repo("dtype-lint")
    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r"^dtype-lint\.+Passed$", again.stdout, re.M), again.stdout
