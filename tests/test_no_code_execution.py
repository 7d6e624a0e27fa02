"""A linter never runs the code or the commands of the project it checks (#8).

`--changed-since` calls git; a repository's own configuration can name commands git runs (an
fsmonitor hook, a content filter, an external diff), and a revision that looks like an option
is an option. `python -m dtype_lint` puts the current folder first on sys.path, where a project's
own `json.py` would shadow the standard library's. Each test plants a command that would leave a
marker file, and checks the marker never appears.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import tiny_project

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@e", "GIT_CONFIG_GLOBAL": os.devnull})


def repo(tmp_path: Path) -> Path:
    root = tiny_project(tmp_path / "repo")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "init")
    with open(root / "proj/attn.py", "a", encoding="utf-8") as f:
        f.write("# changed\n")
    return root


@needs_git
def test_a_revision_that_looks_like_an_option_is_refused(tmp_path: Path):
    root = repo(tmp_path)
    marker = tmp_path / "created-by-git"
    for ref in (f"--output={marker}", "-o", f"--output={marker} HEAD"):
        proc = dtl(root, "check", f"--changed-since={ref}")
        assert proc.returncode == 2 and "not a git revision" in proc.stderr
    assert not marker.exists()
    proc = dtl(root, "check", "--changed-since", "no-such-branch")
    assert proc.returncode == 2 and "not a commit in this repository" in proc.stderr


@needs_git
@pytest.mark.parametrize("setting", ["core.fsmonitor", "filter", "diff.external"])
def test_repository_config_commands_never_run(tmp_path: Path, setting: str):
    root = repo(tmp_path)
    marker = tmp_path / "ran"
    command = f"touch '{marker}'; cat"
    if setting == "filter":
        (root / ".gitattributes").write_text("*.py filter=evil diff=evil\n")
        git(root, "config", "filter.evil.clean", command)
        git(root, "config", "filter.evil.process", command)
        git(root, "config", "diff.evil.textconv", command)
        # The control: plain git does run it, so the test would see the marker if we did.
        subprocess.run(["git", "diff", "--name-only", "HEAD"], cwd=root, capture_output=True)
        assert marker.exists()
        marker.unlink()
        os.utime(root / "proj/attn.py")  # stat-dirty again: a diff must look at the content
    else:
        git(root, "config", setting, command)
    proc = dtl(root, "check", "--changed-since", "HEAD", "--output-format", "concise")
    assert proc.returncode == 1, proc.stderr
    assert "attn.py" in proc.stdout
    assert not marker.exists()


@needs_git
def test_git_environment_variables_of_the_caller_are_not_used(tmp_path: Path):
    root = repo(tmp_path)
    marker = tmp_path / "ran"
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    git(elsewhere, "init", "-q")
    env = {"GIT_EXTERNAL_DIFF": f"touch {marker}; true", "GIT_DIR": str(elsewhere / ".git"),
           "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsmonitor", "GIT_CONFIG_VALUE_0": f"touch {marker}"}
    proc = dtl(root, "check", "--changed-since", "HEAD", "--output-format", "concise", env=env)
    assert proc.returncode == 1 and "attn.py" in proc.stdout
    assert not marker.exists()


# Modules the interpreter imports before `-m` runs (re, enum...) cannot be shadowed this way;
# these are imported later, by dtype-lint itself.
@pytest.mark.parametrize("module", ["json", "argparse", "typing", "dataclasses"])
def test_python_m_never_imports_the_projects_own_modules(tmp_path: Path, module: str):
    root = tiny_project(tmp_path)
    (root / f"{module}.py").write_text(f"raise SystemExit('the project imported its own {module}.py')\n")
    proc = subprocess.run([sys.executable, "-m", "dtype_lint", "check", "--no-cache", "--output-format", "concise"],
                          cwd=root, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")})
    assert proc.returncode == 1, proc.stderr
    assert "attn.py" in proc.stdout and "imported its own" not in proc.stderr + proc.stdout
