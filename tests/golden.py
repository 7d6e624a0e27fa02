"""The one snapshot mechanism: a golden file holds what a test expects, byte for byte.

`assert_golden(path, actual)` compares `actual` with the file; after an intended change in what
users see, regenerate every golden file with `DTYPE_LINT_UPDATE_SNAPSHOTS=1 pytest ...`, read the
diff, commit it. Used for the reporters' outputs (tests/snapshots/), the example projects' lists
of findings (fixtures/project/expected.txt, fixtures/shapes/expected.txt) and the codemod cases'
fixed texts (fixtures/codemod/*.out.py).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

UPDATE = "DTYPE_LINT_UPDATE_SNAPSHOTS"


def assert_golden(path: Path, actual: str) -> None:
    if os.environ.get(UPDATE):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(actual.encode("utf-8"))
    assert path.exists(), f"missing golden file {path}; run with {UPDATE}=1"
    expected = path.read_bytes().decode("utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                            fromfile=str(path), tofile="actual", n=1))
        raise AssertionError(f"output differs from {path} (regenerate with {UPDATE}=1 once intended):\n{diff[:4000]}")


def lines_text(entries: list[str]) -> str:
    """A golden file of one entry per line."""
    return "".join(f"{entry}\n" for entry in entries)
