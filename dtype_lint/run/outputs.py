"""Outputs never clobber inputs: the files a user names for a run's output (`-o`, `--report`,
`--write-baseline`, `--series`).

A report written over `pkg/layers.py` destroys the code the run was checking; a report named
`report.txt` in a checked-out repository may be a symlink the repository committed, aimed at any
file the CI job can write. So an output target is refused (exit 2, with the reason) when:
- it is a file the run reads: its configuration file, its baseline, a path it was asked to
  check, a `.gitignore` or `pyproject.toml` of the project, anything in the cache folder;
- it is a Python source under the project root (`.py`, `.pyi`), existing or not;
- it was named by a relative path inside the project, but resolves (through a symlink, of the
  file or of a folder on the way) outside it: only an absolute path the user typed may lead out;
- a `--series` folder is an existing file, or a report target is an existing folder.

The writer (writer.py) still does every write and its own checks; this module only decides
whether a named output may be the target at all, before the run and again right before writing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

PYTHON_SUFFIXES = (".py", ".pyi")
PROJECT_FILES = (".gitignore", "pyproject.toml")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def output_problem(target: str | os.PathLike, flag: str, root: str | os.PathLike, *,
                   reads: Iterable[str | os.PathLike | None] = (), cache_dir: str | os.PathLike | None = None,
                   folder: bool = False) -> str | None:
    """Why `target` (as the user named it for `flag`) may not be written, or None."""
    given = os.fspath(target)
    if not given:
        return None
    shown = f"{flag} {given}" if flag else given
    real = os.path.realpath(given)
    lexical = os.path.normpath(os.path.abspath(given))
    real_root = os.path.realpath(root)
    lexical_root = os.path.normpath(os.path.abspath(root))
    inside_lexically = _inside(lexical, lexical_root) or _inside(lexical, real_root)
    if not os.path.isabs(given) and inside_lexically and not _inside(real, real_root):
        return (f"{shown}: resolves to {real}, outside the project root {real_root} (a symbolic link on the way); "
                "not written. Name that path itself if it is meant")
    for read in reads:
        if read and os.path.exists(read) and (os.path.realpath(read) == real or _same_file(read, real)):
            return f"{shown}: is a file this run reads ({read}); not overwritten"
    if os.path.isdir(real) and not folder:
        return f"{shown}: is a folder; not written"
    if folder and os.path.exists(real) and not os.path.isdir(real):
        return f"{shown}: is a file, not a folder; not written"
    if _inside(real, real_root):
        # Lower-cased: on a case-insensitive file system `-o pkg/A.PY` is `pkg/a.py`.
        if not folder and real.lower().endswith(PYTHON_SUFFIXES):
            return f"{shown}: is a Python source in the project ({os.path.relpath(real, real_root)}); not overwritten"
        if not folder and os.path.basename(real).lower() in PROJECT_FILES:
            return f"{shown}: is the project's {os.path.basename(real)}, which this run reads; not overwritten"
        if cache_dir is not None:
            cache = os.path.realpath(os.path.join(real_root, cache_dir))
            if _inside(real, cache):
                return f"{shown}: is inside the cache folder {cache}, which runs read; not written"
    return None


def _same_file(a: str | os.PathLike, b: str) -> bool:
    """One file under two names (a hard link, another case on a case-insensitive file system)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def run_inputs(config, paths: Iterable[str] = (), baseline: str | None = None) -> list[str]:
    """The files a run reads that a named output could be aimed at (besides every Python source
    and the project's .gitignore/pyproject.toml, which output_problem refuses by kind)."""
    reads: list[str] = []
    source = getattr(config, "source", "defaults")
    if source and source != "defaults":
        reads.append(source)
    if baseline:
        reads.append(baseline)
    reads += [p for p in paths if p and os.path.isfile(p)]
    return reads


def check_output(target: str | None, flag: str, config, *, paths: Iterable[str] = (), baseline: str | None = None,
                 folder: bool = False) -> str | None:
    """output_problem for a run with this configuration (None when `target` is None)."""
    if not target:
        return None
    return output_problem(target, flag, Path(config.root), reads=run_inputs(config, paths, baseline),
                          cache_dir=config.cache_dir, folder=folder)
