"""The record the pre-commit fast path trusts (see fast_path.py): written by a full run through
its writer, read by the fast path, which then needs nothing else about the project.

`fast-path.json` in the cache folder holds: the tool's stamp (its version and the stamps of its
modules), the configuration file and its stamp, the rules' markers and patterns, the stamps of
the files that decided the run's project-level warnings (there were none, or no record is kept),
every folder of the project with its mtime (a file added, removed or renamed anywhere changes
its folder's), the .gitignore files' stamps, and where each top-level module name lives. It is
sealed as the cache's entries are (run/cache_seal.py): a record edited to make a file look
clean (a rule's patterns emptied) is no record.
"""

from __future__ import annotations

import functools
import os

import dtype_lint

RECORD_NAME = "fast-path.json"
RECORD_FORMAT = 1
# Folder names the layout walk never enters (discovery's defaults; a project's own excludes only
# shrink the project, so leaving them out here makes the fast path more careful, never wrong).
PRUNED = (".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", ".mypy_cache",
          ".pytest_cache", ".ruff_cache", ".dtype_lint_cache", "node_modules", "build", "dist",
          "site-packages", ".eggs")


def stamp(path: str) -> str:
    """A file's size and a hash of its bytes (as the cache's: never its mtime, which an edit can
    keep). These are small files (the configuration, .gitignore files); raises OSError when the
    file is gone."""
    from dtype_lint.core.file_stamp import small_file_stamp

    return small_file_stamp(path)


def tool_stamp() -> str:
    """Changes when dtype-lint's code changes (as pipeline.code_stamp, without importing it)."""
    return _tool_inputs()[0]


def tool_paths() -> list[str]:
    """Every path `tool_stamp` reads, folders first: the replay (run/replay_index.py) checks the
    stamp's inputs by their stat data (a module added or removed changes its folder's mtime)."""
    return list(_tool_inputs()[1])


def tool_stat_data() -> tuple[tuple[int, int], ...]:
    """The (size, mtime) of each of `tool_paths`, as the stamp read them."""
    return _tool_inputs()[2]


@functools.lru_cache(maxsize=1)
def _tool_inputs() -> tuple[str, tuple[str, ...], tuple[tuple[int, int], ...]]:
    """(tool_stamp, tool_paths, tool_stat_data): one walk of the code and one stat of each path a
    process (the fast path, the record, the layout cache and the replay index all ask; a second
    walk and stat of 200 files was most of what keeping a replay cost an edited file's run)."""
    import zlib

    parts = [dtype_lint.__version__]
    folders, files, folder_stats, file_stats = [], [], [], []
    for base, folder, names in _tool_folders():
        st = os.stat(folder)
        folders.append(folder)
        folder_stats.append((st.st_size, st.st_mtime_ns))
        # os.path.relpath(path, base), once a folder (per file it was most of the stamp's cost)
        prefix = "" if folder == base else os.path.relpath(folder, base) + os.sep
        for name in names:
            path = os.path.join(folder, name)
            st = os.stat(path)
            parts.append(f"{prefix}{name}:{st.st_mtime_ns}:{st.st_size}")
            files.append(path)
            file_stats.append((st.st_size, st.st_mtime_ns))
    stamp = f"{zlib.crc32(';'.join(parts).encode('utf-8', 'surrogatepass')):08x}-{len(parts)}"
    return stamp, tuple(folders + files), tuple(folder_stats + file_stats)


def _tool_folders():
    """(package folder, folder, its .py file names, sorted) of dtype-lint's code, in walk order."""
    top = os.path.dirname(dtype_lint.__file__)
    bases = [top]
    rules = _rules_folder()
    if rules:
        bases.append(rules)
    for base in bases:
        for folder, dirs, names in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in {"kernels_ref", "fixtures", "rules", "__pycache__"})
            yield base, folder, sorted(name for name in names if name.endswith(".py"))


def _rules_folder() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("dtype_lint.rules")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return locations[0] if locations else None


# The record the fast path just found true, by (path, config, root) -> the record file's (mtime,
# size): the full run it falls back to need not validate it again before deciding not to rewrite
# it. Kept only from a fast path that falls back until that run's end (forget()); a record a
# --fix run then made stale is caught by the next use's validation, which every use does.
_VALIDATED: dict[tuple[str, str, str], tuple[int, int]] = {}
# The mtime of every folder of a record found true, by absolute path: the project's file list
# (layout_cache.py) checks the same folders in the same run, and takes these instead of a second
# `stat` of each (3,051 at ten times vLLM).
_FOLDER_MTIMES: dict[str, int] = {}


def forget() -> None:
    _VALIDATED.clear()
    _FOLDER_MTIMES.clear()


def folder_mtime(folder: str) -> int | None:
    """The mtime a record found true this run saw for `folder` (an absolute path), or None."""
    return _FOLDER_MTIMES.get(folder)


def validated_key(path: str, config_path: str, root: str) -> tuple[int, int] | None:
    """The (mtime, size) of the record file this process last found true, or None."""
    return _VALIDATED.get((path, config_path, root))


def _file_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def load_record(path: str, config_path: str, root: str) -> dict | None:
    record = _load_record(path, config_path, root)
    if record is not None and (key := _file_key(path)) is not None:
        _VALIDATED[(path, config_path, root)] = key
    else:
        _VALIDATED.pop((path, config_path, root), None)
    return record


def _load_record(path: str, config_path: str, root: str) -> dict | None:
    import json

    from dtype_lint.core.safe_read import read_bytes
    from dtype_lint.run.cache_seal import unseal

    try:
        payload = unseal(read_bytes(path, 64 << 20), RECORD_NAME)
        if payload is None:
            return None
        record = json.loads(payload)
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(record, dict) and record.get("format") == RECORD_FORMAT and record.get("root") == root
            and record.get("config") == [config_path, _stamp_or_none(config_path)]
            and record.get("tool") == tool_stamp()):
        return None
    files, dirs = record.get("files"), record.get("dirs")
    if not (isinstance(files, dict) and isinstance(dirs, dict) and isinstance(record.get("tops"), dict)
            and isinstance(record.get("rules"), list)):
        return None
    for real, s in files.items():
        if _stamp_or_none(real) != s:
            return None
    seen = {}
    lead = os.path.join(root, "")
    for rel, ns in dirs.items():
        folder = root if rel == "." else lead + rel  # relative paths (layout_of's): os.path.join's result
        try:
            if os.stat(folder).st_mtime_ns != ns:
                return None
        except OSError:
            return None
        seen[folder] = ns
    _FOLDER_MTIMES.update(seen)
    return record


def _stamp_or_none(path: str) -> str | None:
    try:
        return stamp(path)
    except OSError:
        return None


def layout_of(root: str) -> tuple[dict[str, int], dict[str, list[str]], list[str]]:
    """(every folder of the project -> its mtime, top-level module name -> the folders it is
    found in, the .gitignore files seen). A name is top-level in a folder without `__init__.py`
    (and the root's own name when the root is a package); that is a superset of the modules the
    class index knows, which is what the fast path needs: it may only look at more files."""
    dirs: dict[str, int] = {}
    tops: dict[str, list[str]] = {}
    ignores: list[str] = []
    root = os.path.abspath(root)
    if os.path.exists(os.path.join(root, "__init__.py")):
        tops.setdefault(os.path.basename(root), []).append("..")
    todo = [root]
    while todo:
        folder = todo.pop()
        rel = os.path.relpath(folder, root)
        try:
            dirs[rel] = os.stat(folder).st_mtime_ns
            entries = list(os.scandir(folder))
        except OSError:
            continue
        names = {e.name for e in entries}
        loose = "__init__.py" not in names
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if entry.name in PRUNED or entry.name.endswith(".egg-info"):
                    continue
                todo.append(entry.path)
                if loose:
                    tops.setdefault(entry.name, []).append(rel)
            elif entry.name.endswith(".py") and loose:
                tops.setdefault(entry.name[:-3], []).append(rel)
            elif entry.name == ".gitignore":
                ignores.append(entry.path)
    for v in tops.values():
        v.sort()
    return dirs, tops, ignores


def save_record(config, writer, looked_up_files: dict[str, str], valid: bool) -> None:
    """Write the record a later fast path trusts (see the module docstring), or remove a stale
    one. `looked_up_files`: real path -> stamp of every file read to decide the run's
    project-level warnings; `valid`: the run had none of those warnings and no configured helper
    to check (both are reported on every run: the fast path could not)."""
    root = os.path.abspath(str(config.root))
    base = os.path.join(root, config.cache_dir)
    path = os.path.join(base, RECORD_NAME)
    if not os.path.isdir(base):
        return  # the cache folder is made by the cache (with its .gitignore), never here
    if not valid or config.source == "defaults":
        if os.path.exists(path):
            try:
                os.unlink(path)
            except OSError:
                pass
        return
    import json

    from dtype_lint.core.prefilter import marker_words

    config_path = os.path.abspath(config.source)
    validated = _VALIDATED.pop((path, config_path, root), None)
    if validated is not None and validated == _file_key(path):
        return  # found true by this process's fast path: not validated twice
    if load_record(path, config_path, root) is not None:
        return  # still true: the walk below is not repeated
    dirs, tops, ignores = layout_of(root)
    files: dict[str, str | None] = dict(looked_up_files)
    from dtype_lint.core.git_excludes import watched_files
    from dtype_lint.rules import ALL_RULES  # every rule's prefilter: imported only when a record is written

    # info/exclude, core.excludesFile and git's configuration decide the project's files too.
    for p in ignores + watched_files(root):
        files[p] = _stamp_or_none(p)
    record = {
        "format": RECORD_FORMAT, "root": root, "config": [config_path, _stamp_or_none(config_path)],
        "tool": tool_stamp(), "files": files, "dirs": dirs, "tops": tops,
        "rules": [[r.code, list(marker_words(r)), list(r.patterns)] for r in ALL_RULES],
    }
    from dtype_lint.run.cache_seal import seal

    sealed = seal(json.dumps(record, separators=(",", ":")).encode("utf-8", "surrogatepass"), RECORD_NAME)
    if sealed is None:
        return  # no cache key: no record (cache_seal.py)
    try:
        writer.write_cache(path, sealed)
    except OSError:
        pass  # a read-only checkout still lints; it just has no fast path
