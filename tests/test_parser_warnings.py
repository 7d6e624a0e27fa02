"""The parser's warnings about the linted code (`"\\d"`) are the project's, not what
dtype-lint reports: a run shows none of them on stderr, and `python -W error` does not make such a
file unreadable (it would be DTL900, its finding lost). Each run is a real process: pytest's own
warning capture would hide what a user's terminal shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tiny_project import ATTN, tiny_project

# The site's function with a line the parser warns about (in the function, which every parse
# keeps): an invalid escape, a SyntaxWarning shown by default from Python 3.12 (a
# DeprecationWarning before, shown under `-W default`).
WARNED = ATTN.replace("    def forward(self, x):\n", '    def forward(self, x):\n        print("\\d+")\n')
assert WARNED != ATTN


def _run(root: Path, *args: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONWARNINGS", "DTYPE_LINT"))}
    env["NO_COLOR"] = "1"
    return subprocess.run([sys.executable, *flags, "-m", "dtype_lint", "check", "--no-cache", "--output-format",
                           "json", *args, "."], cwd=root, capture_output=True, text=True, env=env)


def _codes(proc: subprocess.CompletedProcess) -> list[tuple[str, str]]:
    return sorted((Path(f["path"]).name, f["code"]) for f in json.loads(proc.stdout)["findings"])


def test_the_parser_s_warnings_about_the_code_are_not_shown(tmp_path: Path) -> None:
    root = tiny_project(tmp_path, {"proj/attn.py": WARNED})
    proc = _run(root, flags=("-W", "default"))  # as Python 3.12 shows them with no flag
    assert proc.returncode == 1, proc.stderr
    assert _codes(proc) == [("attn.py", "DTL001")]
    assert "Warning" not in proc.stderr, proc.stderr


def test_warnings_as_errors_do_not_make_the_file_unreadable(tmp_path: Path) -> None:
    root = tiny_project(tmp_path, {"proj/attn.py": WARNED})
    proc = _run(root, flags=("-W", "error"))
    assert proc.returncode == 1, proc.stderr
    assert _codes(proc) == [("attn.py", "DTL001")]  # not DTL900 "cannot parse"


def test_workers_show_none_either(tmp_path: Path) -> None:
    files = {f"proj/attn{i}.py": WARNED for i in range(10)}  # enough files for the workers
    root = tiny_project(tmp_path, files)
    proc = _run(root, "-j", "2", flags=("-W", "always"))
    assert proc.returncode == 1, proc.stderr
    assert len(_codes(proc)) == 11
    assert "Warning" not in proc.stderr, proc.stderr


def _parse_escape(_item: int) -> str:
    import ast

    return type(ast.parse('x = "\\d"')).__name__


def test_a_spawned_worker_ignores_them_too(tmp_path: Path) -> None:
    """Where workers are spawned (macOS, Windows), each starts with the interpreter's filters (here
    `-W error`, which the spawn hands on), not the run's: its initializer sets them again."""
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from dtype_lint.run import workers\n"
        "from test_parser_warnings import _parse_escape\n"
        "workers.sys.platform = 'darwin'  # the spawned pool, as off Linux\n"
        "print(workers.parallel_map(_parse_escape, list(range(8)), 2, parallel=True))\n")
    proc = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(["Module"] * 8)
