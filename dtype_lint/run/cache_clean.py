"""What removes the cache: `dtype-lint clean` (all of it), and a run that starts a new cache
folder (the folders of other settings or versions that no run has used for STALE_DAYS days).

The cache folder holds one folder per (format, tool code, settings) (`run/cache.py`): each
upgrade, and each change of the settings the key covers, starts a new one, and nothing removed the
old ones (on vLLM 0.34.0 a folder is about 9 MB, at ten times its size about 90 MB). Only what
dtype-lint puts there is removed (`cache._ours`): a file of the user's that ended up in the folder
stays, and so does the folder then. A folder of other settings still in use (a pre-commit hook
with the default rules beside a CI job with every rule) is used within days, so it stays.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

from dtype_lint.run.cache import FORMAT, GITIGNORE, _ours

# A cache folder of other settings that no run used for this long is removed when a run starts a
# new one.
STALE_DAYS = 30


def clean(folder: Path) -> tuple[int, list[str]]:
    """Remove what dtype-lint keeps in the cache folder `folder`, and the folder when nothing else
    is left in it: (bytes removed, the names it holds that are not dtype-lint's, kept)."""
    removed = 0
    kept: list[str] = []
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return 0, []
    for name in names:
        path = folder / name
        if name == ".gitignore":
            try:
                ours = path.read_bytes() == GITIGNORE
            except OSError:
                ours = False
            if not ours:
                kept.append(name)
            continue
        if not _ours(name):
            kept.append(name)
            continue
        removed += _remove(path)
    if not kept:
        removed += _remove(folder / ".gitignore")
        try:
            folder.rmdir()
        except OSError:
            pass
    return removed, kept


def remove_stale_folders(base: Path, current: Path, now: float | None = None) -> list[str]:
    """Remove the cache folders of other settings or versions beside `current` in `base` that no
    run has used for STALE_DAYS days; the names removed."""
    limit = (time.time() if now is None else now) - STALE_DAYS * 86400
    removed = []
    try:
        names = os.listdir(base)
    except OSError:
        return []
    for name in names:
        path = base / name
        if name == current.name or not name.startswith(f"{FORMAT}-") or path.is_symlink() or not path.is_dir():
            continue
        if _last_written(path) < limit:
            shutil.rmtree(path, ignore_errors=True)  # (not measured: nobody is told its size)
            removed.append(name)
    return removed


def _last_written(folder: Path) -> float:
    """When a run last used a cache folder: entries are renamed into the folder itself (the scan
    summary) or its entry folders, which changes their mtimes, and a run that writes nothing sets
    the folder's (Cache.save)."""
    last = 0.0
    for path in (folder, folder / "f", folder / "h", folder / "s", folder / "g"):
        try:
            last = max(last, path.stat().st_mtime)
        except OSError:
            continue
    return last


def _remove(path: Path) -> int:
    """Remove a file or folder (a link as a link, never what it points to); the bytes it held."""
    try:
        st = path.lstat()
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):  # a file, or a link (to a folder too: lstat's mode)
        try:
            path.unlink()
        except OSError:
            return 0
        return st.st_size
    size = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                size += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    shutil.rmtree(path, ignore_errors=True)
    return size if not path.exists() else 0
