"""A `--fix` run killed at any instant leaves every file as it was or fully fixed, and the next
run removes what the killed one left and finishes the job (#8).

Each trial forks a child that runs `dtype-lint check --fix` on a fresh copy of a project and
SIGKILLs itself: either at the k-th call of a primitive the writer relies on (creating a temp
file, fsync, chmod, chown, rename, mkdir, unlink...; k random over every call a full run makes,
just before or just after the call), or after a random delay within the duration of a full
run. No `finally` runs. Then:

- every file is byte for byte the original or the fully fixed version (a reference run on
  another copy); the helper's new package is there whole or not at all;
- no temp file lies in the user's tree (only in the cache's staging folder);
- a rerun exits 0, leaves the tree equal to the reference and no temp file anywhere.

The CI budget (tests/conftest.py, docs/testing.md) runs 24 trials (a few seconds); DTL_FULL=1 runs
1000; DTYPE_LINT_KILL_TRIALS=N sets the number outright:

    DTL_FULL=1 .venv/bin/python -m pytest tests/test_crash_consistency.py

A failure prints its DTYPE_LINT_KILL_SEED, which replays it.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest
from cli_runner import dtl
from conftest import budget
from tiny_project import ATTN, PYPROJECT, tiny_project, tree_bytes

from dtype_lint.core.writer import is_temp_name

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin",
                                reason="forks a child and SIGKILLs it (Linux)")

TRIALS = int(os.environ.get("DTYPE_LINT_KILL_TRIALS") or budget(24, 1000))
SEED = int(os.environ.get("DTYPE_LINT_KILL_SEED", str(random.randrange(1 << 32))))

# What the writer does to the file system, wrapped in the child to count calls and die at one.
PRIMITIVES = [(os, "replace"), (os, "rename"), (os, "fsync"), (os, "chmod"), (os, "chown"), (os, "unlink"),
              (os, "mkdir"), (os, "rmdir"), (tempfile, "mkstemp"), (tempfile, "mkdtemp")]
ARGS = ["check", "--fix", "-j", "1", "--no-progress", "--output-format", "concise"]


def build(root: Path) -> Path:
    """Twelve files to fix (one with two sites, one with a guarded idiom), a file with nothing
    to fix, and a helper to be created in a new package (a folder, its marker and the helper)."""
    files = {f"proj/m{i:02d}.py": ATTN.replace("class Attn", f"class Attn{i}") for i in range(10)}
    files["proj/two.py"] = ATTN.replace("        return self.kv_b_proj(x)\n",
                                        "        y = x.to(self.kv_b_proj.weight.dtype)\n        return y\n")
    files["proj/clean.py"] = "def f(x):\n    return x\n"
    return tiny_project(root, files, pyproject=PYPROJECT.replace("proj.dtypes", "proj.common.dtypes"))


def run_child(root: Path, *, kill_at: int | None = None, after: bool = False,
              delay: float | None = None) -> tuple[int, int]:
    """Fork, run `--fix` in `root`, die as asked. Returns (wait status, primitive calls made)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.close(read_end)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.chdir(root)
            calls = [0]

            def wrap(original):
                def counted(*args, **kwargs):
                    calls[0] += 1
                    if calls[0] == kill_at and not after:
                        os.kill(os.getpid(), signal.SIGKILL)
                    result = original(*args, **kwargs)
                    if calls[0] == kill_at and after:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return result
                return counted

            for owner, name in PRIMITIVES:
                setattr(owner, name, wrap(getattr(owner, name)))
            if delay is not None:
                signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGKILL))
                signal.setitimer(signal.ITIMER_REAL, delay)
            from dtype_lint.cli import main

            code = main(ARGS)
            os.write(write_end, str(calls[0]).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as f:
        made = f.read().decode() or "0"
    return status, int(made)


def temp_files(root: Path, *, outside_cache_only: bool) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        if outside_cache_only and rel.parts[:1] == (".dtype_lint_cache",):
            continue
        out += [str(rel / n) for n in dirnames + filenames if is_temp_name(n)]
    return out


def test_a_killed_fix_leaves_every_file_whole_and_the_rerun_finishes(tmp_path: Path):
    pristine = build(tmp_path / "pristine")
    original = tree_bytes(pristine)
    reference = tmp_path / "reference"
    shutil.copytree(pristine, reference)
    t0 = time.perf_counter()
    status, calls = run_child(reference)
    duration = time.perf_counter() - t0
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    fixed = tree_bytes(reference)
    assert fixed != original and calls > 10
    assert "proj/common/dtypes.py" in fixed and "proj/common/__init__.py" in fixed

    rng = random.Random(SEED)
    killed = 0
    for trial in range(TRIALS):
        where = f"DTYPE_LINT_KILL_SEED={SEED} trial {trial}"
        root = tmp_path / f"t{trial}"
        shutil.copytree(pristine, root)
        if trial % 3 == 2:
            how = dict(delay=rng.uniform(0.0, duration))
        else:
            how = dict(kill_at=rng.randint(1, calls), after=rng.random() < 0.5)
        status, _ = run_child(root, **how)
        killed += os.WIFSIGNALED(status)
        where += f" {how}"

        now = tree_bytes(root)
        for rel, data in now.items():
            assert data in (original.get(rel), fixed.get(rel)), f"{where}: {rel} is torn or foreign"
        package = {"proj/common/__init__.py", "proj/common/dtypes.py"}
        assert len(package & now.keys()) in (0, 2), f"{where}: the helper's package is half there"
        assert temp_files(root, outside_cache_only=True) == [], f"{where}: temp files in the user's tree"

        rerun = dtl(root, *ARGS)
        assert rerun.returncode == 0, f"{where}: {rerun.stdout}{rerun.stderr}"
        assert tree_bytes(root) == fixed, f"{where}: the rerun did not finish the job"
        assert temp_files(root, outside_cache_only=False) == [], f"{where}: temp files left after the rerun"
        shutil.rmtree(root)
    assert killed >= TRIALS // 2  # the kill points fell inside the runs, not after them


def test_two_concurrent_fixing_runs_never_clobber_each_other(tmp_path: Path):
    """Two `--fix` runs at once on one tree (two editors' save hooks, say): each refuses the files
    the other changed first (DTL901, changed on disk), neither overwrites the other's helper, and
    the tree ends fully fixed, as one run would leave it."""
    pristine = build(tmp_path / "pristine")
    reference = tmp_path / "reference"
    shutil.copytree(pristine, reference)
    assert dtl(reference, *ARGS).returncode == 0
    fixed = tree_bytes(reference)
    for trial in range(3):
        root = tmp_path / f"c{trial}"
        shutil.copytree(pristine, root)
        pids = [os.fork() for _ in range(1)]
        if pids[0] == 0:
            _run_and_exit(root)
        pids.append(os.fork())
        if pids[1] == 0:
            _run_and_exit(root)
        statuses = [os.waitpid(pid, 0)[1] for pid in pids]
        assert all(os.WIFEXITED(st) and os.WEXITSTATUS(st) in (0, 1) for st in statuses), statuses
        assert tree_bytes(root) == fixed
        assert temp_files(root, outside_cache_only=False) == []


def _run_and_exit(root: Path) -> None:
    code = 70
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.chdir(root)
        from dtype_lint.cli import main

        code = main(ARGS)
    finally:
        os._exit(code)
