"""Run the `dtype-lint` command line in this process, as a user would run it in a folder.

In-process is ten times faster than a subprocess per call; the few tests that must exercise the
installed console script or `python -m dtype_lint` say so and use `subprocess` themselves.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path

from dtype_lint.cli import main

_CLEAN_ENV = ("CI", "PRE_COMMIT", "FORCE_COLOR")


def dtl(cwd: Path, *args: str, env: dict | None = None, unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`dtype-lint ARGS` run in `cwd` with `env` set and the variables `unset` removed; stdout,
    stderr and the exit code, like a subprocess."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        for k in (*_CLEAN_ENV, *unset):
            os.environ.pop(k, None)
        os.environ["NO_COLOR"] = "1"
        os.environ.update(env or {})
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(args))
            except SystemExit as e:  # argparse errors and --help
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    proc = subprocess.CompletedProcess(["dtype-lint", *args], rc, out.getvalue(), err.getvalue())
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout
    return proc



HEAVY_MODULES = ("dtype_lint.run.pipeline", "dtype_lint.rules", "rich")


def heavy_imports_of(cwd: Path, *args: str, modules: tuple[str, ...] = HEAVY_MODULES) -> tuple[str, str]:
    """`python -m dtype_lint ARGS` in a fresh interpreter, which must exit 0: (what it printed,
    which of `modules` it imported, as a list's text: "[]" for a run that needed none)."""
    import sys

    code = (f"import sys, runpy; sys.argv = ['dtype-lint', *{list(args)!r}]\n"
            "try:\n    runpy.run_module('dtype_lint', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            f"heavy = [m for m in {modules!r} if m in sys.modules]\n"
            "print('heavy:', heavy)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    printed, _, heavy = proc.stdout.rpartition("heavy: ")
    return printed, heavy.strip()
