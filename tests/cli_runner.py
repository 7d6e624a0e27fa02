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


def dtl(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`dtype-lint ARGS` run in `cwd`; stdout, stderr and the exit code, like a subprocess."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        for k in _CLEAN_ENV:
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
