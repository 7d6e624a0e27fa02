"""The repo's own code passes its own linter settings ([tool.ruff] in pyproject.toml): the
pre-commit config runs ruff on every commit, and this keeps CI honest about it (#18)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    beside = Path(sys.executable).with_name("ruff")  # the test extra installs ruff into the venv
    found = str(beside) if beside.exists() else shutil.which("ruff")
    assert found, "ruff is in the test extra: pip install -e '.[test]'"
    return found


def test_ruff_check_is_clean_on_the_repo():
    proc = subprocess.run([_ruff(), "check", "--no-cache", "--output-format", "concise", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
