"""Run mypy on the installed layout of the package: `python scripts/type_check.py [mypy args]`.

pyproject.toml installs `rules/` and `kernels_ref/` under `dtype_lint.` (package-dir), and an
editable install maps them with an import hook that mypy cannot follow. So this stages the layout
the wheel has, `dtype_lint/` whose entries are symbolic links to the checkout (`rules` and
`kernels_ref` beside the rest), in a fixed folder under `.mypy_cache/` (a fixed place keeps mypy's
incremental cache valid between runs), and runs `mypy -p dtype_lint` there with the repository's
[tool.mypy] configuration. Reported paths are written back as checkout paths, so an editor or a
reader can jump to them. The exit status is mypy's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The folders pyproject.toml's package-dir installs under `dtype_lint.` (fixtures are data, not code).
MAPPED = {"rules": REPO / "rules", "kernels_ref": REPO / "kernels_ref"}


def stage(root: Path) -> Path:
    """Builds `root/dtype_lint` as links into the checkout and returns `root`."""
    package = root / "dtype_lint"
    package.mkdir(parents=True, exist_ok=True)
    wanted = {entry.name: entry for entry in (REPO / "dtype_lint").iterdir() if entry.name != "__pycache__"}
    wanted.update(MAPPED)
    for stale in package.iterdir():  # a module deleted or moved in the checkout must not linger
        if stale.name not in wanted or stale.resolve() != wanted[stale.name].resolve():
            stale.unlink()
    for name, target in wanted.items():
        link = package / name
        if not link.is_symlink():
            link.symlink_to(target)
    return root


def checkout_path(line: str) -> str:
    """`dtype_lint/rules/x.py:3: ...` -> `rules/x.py:3: ...`: the file a reader opens."""
    for name in MAPPED:
        prefix = f"dtype_lint/{name}/"
        if line.startswith(prefix):
            return line[len("dtype_lint/"):]
    return line


def run_mypy(extra: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    staged = stage(REPO / ".mypy_cache" / "stage")
    command = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
               "--cache-dir", str(REPO / ".mypy_cache"), "--python-executable", sys.executable,
               "-p", "dtype_lint", *(extra or [])]
    env = {**os.environ, "MYPYPATH": str(staged)}
    proc = subprocess.run(command, cwd=staged, env=env, capture_output=True, text=True)
    proc.stdout = "\n".join(checkout_path(line) for line in proc.stdout.splitlines())
    return proc


if __name__ == "__main__":
    result = run_mypy(sys.argv[1:])
    print(result.stdout)
    print(result.stderr, end="", file=sys.stderr)
    sys.exit(result.returncode)
