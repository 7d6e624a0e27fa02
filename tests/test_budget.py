"""The CI budget of tests/conftest.py: a `full` case is skipped, saying why and how to run it, and
runs with DTL_FULL=1; `budget(ci, full)` picks the size. Run as a pytest of its own on a small
module, with this suite's conftest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import conftest

MODULE = '''
import pytest
from conftest import budget, full_only

SIZE = budget(2, 7)


@pytest.mark.parametrize("tree", ["ci_tree", full_only("big_tree", "one tree of each kind runs in CI")])
def test_tree(tree):
    pass


@pytest.mark.full("the whole set")
def test_whole_set():
    pass


def test_size():
    print(f"size={SIZE}")
'''


def run(tmp_path: Path, full: str | None) -> subprocess.CompletedProcess:
    shutil.copy(conftest.__file__, tmp_path / "conftest.py")
    for imported in ("xdist_groups.py", "rewritten_tests.py"):  # the modules conftest imports
        shutil.copy(Path(conftest.__file__).with_name(imported), tmp_path / imported)
    (tmp_path / "test_sample.py").write_text(MODULE)
    env = {k: v for k, v in os.environ.items() if k != "DTL_FULL"}
    if full is not None:
        env["DTL_FULL"] = full
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-s", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_the_ci_share_skips_what_is_beyond_it_and_says_how_to_run_it(tmp_path: Path):
    proc = run(tmp_path, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed, 2 skipped" in proc.stdout and "size=2" in proc.stdout
    assert "beyond the CI budget (one tree of each kind runs in CI): DTL_FULL=1 runs it" in proc.stdout
    assert "beyond the CI budget (the whole set): DTL_FULL=1 runs it" in proc.stdout
    assert "CI budget: 2 test(s) beyond it skipped; DTL_FULL=1 runs them" in proc.stdout


def test_dtl_full_runs_everything_at_full_size(tmp_path: Path):
    proc = run(tmp_path, "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 passed" in proc.stdout and "size=7" in proc.stdout and "skipped" not in proc.stdout
