"""The shipped pre-commit hooks, run by a real `pre-commit run` on a fresh git repository, offline:
the hooks of `.pre-commit-hooks.yaml` are declared as `repo: local` hooks with the same entry,
types and serial setting, running the `dtype-lint` of this virtualenv (`language: system`), so
pre-commit needs no package index. What is tested is what users get: the entry line (with
`--force-exclude`), the file selection pre-commit makes, and its pass/fail/modified verdicts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_project import ATTN

ROOT = Path(__file__).resolve().parents[1]
EXE = Path(sys.executable).with_name("dtype-lint")

pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PRE_COMMIT", "CI", "VIRTUAL_ENV")}
    env.update(PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"), GIT_CONFIG_GLOBAL=os.devnull,
               GIT_CONFIG_NOSYSTEM="1", NO_COLOR="1")
    return env


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
                          capture_output=True, text=True)


def shipped_hooks_as_local(exe: Path = EXE) -> dict:
    """`.pre-commit-hooks.yaml`, as a `repo: local` config running the dtype-lint `exe`."""
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    local = []
    for hook in hooks:
        assert hook["entry"].startswith("dtype-lint "), hook
        local.append({**hook, "language": "system", "entry": str(exe) + hook["entry"][len("dtype-lint"):]})
    return {"repos": [{"repo": "local", "hooks": local}]}


def sample_repo(root: Path, hook_ids: list[str], exe: Path = EXE) -> Path:
    files = {
        "pyproject.toml": '[tool.dtype-lint]\nhelper = "pkg.dtypes:get_layer_input_dtype"\nexclude = ["third_party"]\n',
        "pkg/__init__.py": "",
        "pkg/attn.py": ATTN,
        "third_party/__init__.py": "",
        "third_party/vendored.py": ATTN.replace("class Attn", "class VendoredAttn"),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    config = shipped_hooks_as_local(exe)
    config["repos"][0]["hooks"] = [h for h in config["repos"][0]["hooks"] if h["id"] in hook_ids]
    (root / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert _git(root, "init", "-q").returncode == 0
    return root


def pre_commit(root: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("pre-commit")
    assert exe.exists(), "pre-commit is in the `test` extra"
    return subprocess.run([str(exe), *args, "--color", "never"], cwd=root, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=300)


def test_the_shipped_hooks_force_exclude():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert {h["id"] for h in hooks} == {"dtype-lint", "dtype-lint-fix"}
    assert all("--force-exclude" in h["entry"].split() for h in hooks)


def test_a_commit_with_an_excluded_folder(tmp_path: Path):
    if shutil.which("git") is None:
        pytest.fail("needs git", pytrace=False)
    root = sample_repo(tmp_path / "repo", ["dtype-lint"])
    # Only the excluded folder staged: the hook passes (pre-commit names third_party/vendored.py).
    _git(root, "add", ".pre-commit-config.yaml", "pyproject.toml", "third_party")
    proc = pre_commit(root, tmp_path, "run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^dtype-lint\.+Passed$", proc.stdout, re.M), proc.stdout
    # A real commit, through the installed git hook.
    assert pre_commit(root, tmp_path, "install").returncode == 0
    commit = _git(root, "commit", "-qm", "vendored code")
    assert commit.returncode == 0, commit.stdout + commit.stderr
    # Staging the package: the finding there fails the hook, the excluded file stays unreported.
    _git(root, "add", "pkg")
    proc = pre_commit(root, tmp_path, "run", "--all-files")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert re.search(r"^dtype-lint\.+Failed$", out, re.M)
    assert "pkg/attn.py:11:13: DTL001" in out and "third_party" not in out
    blocked = _git(root, "commit", "-qm", "the package")
    assert blocked.returncode != 0 and "pkg/attn.py:11:13: DTL001" in blocked.stdout + blocked.stderr


def test_the_fix_hook_fixes_staged_files_only_outside_the_excludes(tmp_path: Path):
    root = sample_repo(tmp_path / "repo", ["dtype-lint-fix"])
    _git(root, "add", "-A")
    proc = pre_commit(root, tmp_path, "run", "--all-files")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "files were modified by this hook" in out, out
    assert "get_layer_input_dtype(self.kv_b_proj, True)" in (root / "pkg/attn.py").read_text(encoding="utf-8")
    assert (root / "third_party/vendored.py").read_text(encoding="utf-8") == ATTN.replace("class Attn", "class VendoredAttn")
    assert "(cache)" not in out  # quiet stderr: no cache bookkeeping in hook logs
    _git(root, "add", "-A")
    again = pre_commit(root, tmp_path, "run", "--all-files")
    assert again.returncode == 0, again.stdout + again.stderr
