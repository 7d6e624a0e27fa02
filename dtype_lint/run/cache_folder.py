"""Where the cache folder may be: a folder of its own inside the project, never through a link
that leaves it, never in the project's source.

`cache-dir` is checked as text when the configuration is read (config._validate_cache_dir: relative,
no `..`, not the root). What it names on disk is checked here, on every run that uses the cache:

- its real path (links resolved) must lie inside the project root's real path: a cache folder
  that is a link to elsewhere (a restored CI cache, a checkout holding such a link) would have
  every cache write, the staging folder's temp files and the `.gitignore` land outside the
  project;
- neither it nor any folder between the root and it may be a Python package: hold `__init__.py`,
  or hold Python modules or packages (a namespace package, a folder of scripts on the path): a
  cache there is in the source tree, its files beside the modules (and, with `.gitignore` of
  `*`, hiding them).

Either is refused with one line and exit 2 (pipeline.UserError), not worked around: the folder is
the user's setting or the user's tree, and a run that silently lost its cache, or wrote it
somewhere else, would hide the problem. `--no-cache` runs without the folder and so are not
refused (a fix's temp files then go beside their targets). The pre-commit fast path asks the same
question and leaves such a run to the full one, which says why. Standard library only: the fast
path imports it.
"""

from __future__ import annotations

import os


def cache_folder_problem(root: str | os.PathLike, cache_dir: str) -> str | None:
    """Why the cache folder `cache_dir` (relative to `root`) must not be used, in one line, or
    None when it may (see the module docstring)."""
    real_root = os.path.realpath(root)
    named = os.path.join(os.path.abspath(root), cache_dir)
    real = os.path.realpath(named)
    if real == real_root or not real.startswith(os.path.join(real_root, "")):
        where = "the project root itself" if real == real_root else f"{real}, outside the project {real_root}"
        return (f"cache folder `{cache_dir}` resolves to {where} (a symbolic link?); remove the link, set "
                "`cache-dir` to a folder of its own inside the project, or pass --no-cache")
    folder = real
    while folder != real_root:
        source = "__init__.py" if os.path.exists(os.path.join(folder, "__init__.py")) else _python_entry(folder)
        if source is not None:
            where = "" if folder == real else f" (in `{os.path.relpath(folder, real_root)}`)"
            return (f"cache folder `{cache_dir}` is in the project's Python source{where}: it holds `{source}`; "
                    "set `cache-dir` to a folder of its own outside the source, or pass --no-cache")
        folder = os.path.dirname(folder)
    return None


def _python_entry(folder: str) -> str | None:
    """The name of a Python module or package directly in `folder`, or None (also when it does
    not exist yet)."""
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith((".py", ".pyi")):
                    return entry.name
                try:
                    if entry.is_dir() and os.path.exists(os.path.join(entry.path, "__init__.py")):
                        return entry.name + "/"
                except OSError:
                    continue
    except OSError:
        return None
    return None
