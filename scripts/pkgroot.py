"""Make the repository importable as the installed package would be, without installing it.

``pyproject.toml`` installs three top-level folders under one package (``rules/`` as
``dtype_lint.rules``, ``kernels_ref/`` as ``dtype_lint.kernels_ref``, ...), so putting the checkout
on ``PYTHONPATH`` is not enough. This script builds a folder that holds ``dtype_lint/`` laid out
as installed, made of symlinks into a source tree, and prints it; put it first on
``PYTHONPATH``::

    PYTHONPATH="$(python3 scripts/pkgroot.py /tmp/dtl_pkg)" python3 -m dtype_lint.kernels_ref.harness.gpu_check

Used by ``scripts/gpu_check.sh`` (the GPU machine has nothing installed and no registry) and by
``scripts/mutate.py`` (each mutant runs from a temporary copy of the tree). Standard library
only; ``--source`` picks the tree (default: this checkout).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None

REPO = Path(__file__).resolve().parents[1]
#: Used when tomllib is missing (Python 3.10); tests/test_mutate.py checks it against pyproject.
FALLBACK_PACKAGE_DIRS = {
    "dtype_lint": "dtype_lint",
    "dtype_lint.rules": "rules",
    "dtype_lint.kernels_ref": "kernels_ref",
    "dtype_lint.kernels_ref.harness": "kernels_ref/harness",
}


def package_dirs(source: Path) -> dict[str, str]:
    """``[tool.setuptools] package-dir`` of ``source``'s pyproject.toml."""
    if tomllib is None:
        return dict(FALLBACK_PACKAGE_DIRS)
    data = tomllib.loads((source / "pyproject.toml").read_text())
    return dict(data["tool"]["setuptools"]["package-dir"])


def build(dest: Path, source: Path = REPO) -> Path:
    """Fill ``dest`` with ``dtype_lint/`` as installed, linking into ``source``; returns ``dest``.

    A package that lives inside its parent's folder (``dtype_lint.kernels_ref.harness`` in
    ``kernels_ref/harness``) comes with its parent's link; the others get their own link.
    """
    source = source.resolve()
    dirs = package_dirs(source)
    root_rel = dirs.get("dtype_lint", "dtype_lint")
    pkg = dest / "dtype_lint"
    if pkg.is_symlink() or pkg.is_file():
        pkg.unlink()
    elif pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    for entry in (source / root_rel).iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, pkg / entry.name)
    for name, rel in sorted(dirs.items()):
        parts = name.split(".")
        if len(parts) != 2:
            continue
        parent_rel = dirs.get(".".join(parts[:-1]))
        if parent_rel is not None and Path(rel).parent == Path(parent_rel) and parent_rel != root_rel:
            continue
        link = pkg / parts[1]
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(source / rel, link)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", help="folder to fill (created if missing)")
    ap.add_argument("--source", default=str(REPO), help="the tree to link into (default: this checkout)")
    args = ap.parse_args(argv)
    print(build(Path(args.dest), Path(args.source)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
