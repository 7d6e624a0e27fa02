"""The project's file list, kept against folder stamps, for a run on named files (pre-commit).

A check of a few named files still walks the whole project, so that a layer defined in an
unstaged file resolves (pipeline._discover): 23,600 files at the benchmark's 10x scale, about
0.1 s, the largest part of a pre-commit run with a site. That walk depends only on the names in
each folder it lists (files, folders, links, `__init__.py`), on the `.gitignore` files and on the
excludes, never on what a file holds. So its result is kept in `project-files.json` in the cache
folder with, for every folder listed, its mtime and a hash of its listing; a later run trusts it
when every folder's mtime is unchanged, or, where an editor's save (a rename) changed a folder's
mtime, when that folder's listing hashes the same. The `.gitignore` files below the root are
stamped by content; the root's ignore state (the root `.gitignore` and whatever `for_folder`
reads with it) is compared as parsed.

Not used on a `--fix` run (the walk also collects the temp files a killed run left behind), nor
when the walk said something about an unreadable `.gitignore` (said again on every run), nor when
a file was reached through a symbolic link (its target can change without its folder's). The
record is sealed as the cache's entries are (run/cache_seal.py): an edited one is no record.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from dtype_lint.core import digests
from dtype_lint.core.discovery import DEFAULT_EXCLUDES, Excluder, Found, discover_files
from dtype_lint.run.fast_record import folder_mtime

if TYPE_CHECKING:
    from dtype_lint.run.project_files import ProjectFiles

RECORD_NAME = "project-files.json"
# 2: a file whose stem holds a dot is spelled out with its module, and "odd" lists where the
# spelled-out rows are (project_files.py looks modules up by folder prefix and stem).
# 3: "firsts", the ALL_MODULES digest of the record's files (class_index.all_modules_digest),
# which a run on named files takes instead of listing every module again for it.
RECORD_FORMAT = 3


def _listing_hash(folder: str, excluder: Excluder) -> str | None:
    """A hash of a folder's entries (names, kinds and where links point), or None when it cannot
    be listed. Names every walk leaves out (the cache folder, `.git`...) are left out of it: the
    cache folder made after the walk must not make its parent look changed."""
    try:
        with os.scandir(folder) as it:
            entries = sorted(f"{e.name}\0{_kind(e)}" for e in it if not excluder.excluded_name(e.name))
    except OSError:
        return None
    return digests.blake2b("\n".join(entries).encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def _kind(entry: os.DirEntry) -> str:
    try:
        if entry.is_symlink():
            return "l" + os.readlink(entry.path)
        return "d" if entry.is_dir() else "f"
    except OSError:
        return "?"


def _file_stamp(path: str) -> str | None:
    from dtype_lint.run.fast_record import stamp

    try:
        return stamp(path)
    except OSError:
        return None


def _root_ignores(root_abs: str) -> str:
    """The root's ignore state as parsed (its `.gitignore` and whatever else `for_folder` reads
    for the root), so that a change to any of them is seen whoever reads them."""
    from dtype_lint.core.gitignore import for_folder

    messages: list[str] = []
    state = repr(for_folder(root_abs, root_abs, messages).files) + repr(messages)
    return digests.blake2b(state.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _key(root_abs: str, excludes: tuple[str, ...]) -> list:
    from dtype_lint.run.fast_record import tool_stamp

    return [RECORD_FORMAT, tool_stamp(), root_abs, list(excludes), _root_ignores(root_abs)]


def load(record_path: str, root_arg: str, root_abs: str, excludes: tuple[str, ...],
         untracked: list[str] | None = None, front: list[Found] | None = None,
         folders: list[tuple[str, int, str]] | None = None) -> "list[Found] | ProjectFiles | None":
    """The walk's files from the record, or None when it is missing or no longer true.
    `untracked`: gets the folders of the record that the fast path's record, found true in this
    run, does not list (the run memo trusts the file list only where that record watches it).
    `folders`: gets every folder of the record with the mtime this run saw and its listing's hash
    (a run on the whole project checks them again at its end: `listed_alike`).
    `front`: the named files of a run on files: then the files are `front` and the record's other
    files, as a `ProjectFiles` that makes a `Found` only for what the run looks up."""
    from dtype_lint.core.safe_read import read_bytes
    from dtype_lint.run.cache_seal import unseal

    try:
        payload = unseal(read_bytes(record_path, 64 << 20), RECORD_NAME)
        if payload is None:
            return None
        record = json.loads(payload)
    except (OSError, ValueError, RecursionError):
        return None
    try:
        if record.get("key") != _key(root_abs, excludes):
            return None
        excluder = Excluder(DEFAULT_EXCLUDES + tuple(excludes))
        for folder, mtime, listing in record["folders"]:
            # A folder the fast path's record checked a moment ago in this run is not stat'ed again.
            seen = folder_mtime(folder)
            if seen == mtime:
                if folders is not None:
                    folders.append((folder, mtime, listing))
                continue
            if seen is None and untracked is not None:
                untracked.append(folder)
            try:
                now = os.stat(folder).st_mtime_ns
            except OSError:
                return None
            if folders is not None:
                folders.append((folder, now, listing))
            if now != mtime and _listing_hash(folder, excluder) != listing:
                return None
        for path, s in record["ignores"].items():
            if _file_stamp(path) != s:
                return None
        if front is not None:
            from dtype_lint.run.project_files import ProjectFiles

            dirs, odd = record["dirs"], record["odd"]
            # The rows are not checked one by one (that is the cost this saves): the record is
            # this tool's own (its stamp is in the key), written whole; the spelled-out rows are.
            if not (isinstance(dirs, list) and isinstance(odd, list)):
                return None
            for d, r in odd:
                name, module = dirs[d][3][r]
                if not (isinstance(name, str) and isinstance(module, str)):
                    return None
            return ProjectFiles(front, dirs, odd, _leads(root_arg), record.get("firsts"))
        out: list[Found] = []
        append = out.append
        new = tuple.__new__  # Found(...) through its generated __new__ is half the time again
        sep = os.sep
        lead_of = _leads(root_arg)
        for rel, real_dir, prefix, rows in record["dirs"]:
            # Joined by hand below: os.path.join costs more than the rest of the loop.
            lead = lead_of(rel)
            real_lead = real_dir.rstrip(sep) + sep
            package = prefix[:-1]
            for row in rows:
                if row.__class__ is str:
                    stem = row[:-3] if row.endswith(".py") else row[:-4]
                    append(new(Found, (lead + row, real_lead + row, package if stem == "__init__" else prefix + stem)))
                else:
                    append(new(Found, (lead + row[0], real_lead + row[0], row[1])))
        return out
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None


def listed_alike(folders: list[tuple[str, int, str]], excludes: tuple[str, ...], mtime_of) -> bool:
    """Does every folder (folder, mtime, listing hash, as `load` or `walk` saw it) list the same
    entries now? By `mtime_of(folder)` (the fast path's record's, found true just before) when
    it is the same, else by hashing its listing again: making the cache folder changes the
    root's mtime, not its listing."""
    excluder = None
    for folder, mtime, listing in folders:
        now = mtime_of(folder)
        if now is None:
            return False  # a folder the fast path's record does not watch
        if now != mtime:
            excluder = excluder or Excluder(DEFAULT_EXCLUDES + tuple(excludes))
            if _listing_hash(folder, excluder) != listing:
                return False
    return True


def walk(root_arg: str, root_abs: str, excludes: tuple[str, ...], temps, messages: list[str] | None):
    """(the project's files as `discover_files([root_arg])` lists them, the record to keep for
    them or None when they must not be kept)."""
    visited: list[tuple[str, bool]] = []
    said: list[str] = []
    files = discover_files([root_arg], excludes, Path(root_abs), temps=temps, messages=said, visited=visited)
    if messages is not None:
        messages.extend(said)
    if said:
        return files, None
    folders = []
    ignores = {}
    excluder = Excluder(DEFAULT_EXCLUDES + tuple(excludes))
    for folder, has_ignore in visited:
        try:
            mtime = os.stat(folder).st_mtime_ns
        except OSError:
            return files, None
        listing = _listing_hash(folder, excluder)
        if listing is None:
            return files, None
        folders.append([folder, mtime, listing])
        if has_ignore:
            ignores[os.path.join(folder, ".gitignore")] = _file_stamp(os.path.join(folder, ".gitignore"))
    dirs: list[list] = []
    odd: list[list[int]] = []
    where: dict[str, list] = {}
    numbers: dict[str, int] = {}  # real folder -> its place in `dirs`
    real_root = os.path.realpath(root_abs)
    leads: dict[str, str] = {}
    for file in files:
        real_dir, name = os.path.split(file.real)
        if os.path.basename(file.path) != name or os.path.islink(file.path):
            return files, None  # through a link: its target can change without any folder
        group = where.get(real_dir)
        if group is None:
            # Kept relative to the root: a walk spelled another way (`..` from a subfolder) shows
            # the same folders below its own spelling of the root.
            rel = os.path.relpath(real_dir, real_root)
            rel = "" if rel == "." else rel
            if rel.startswith(".."):
                return files, None
            group = where[real_dir] = [rel, real_dir, _prefix_of(file.module, name), []]
            numbers[real_dir] = len(dirs)
            leads[real_dir] = _lead(root_arg, rel)
            dirs.append(group)
        if leads[real_dir] + name != file.path:
            return files, None  # shown otherwise than load() would show it: not kept
        # A file's module is its folder's prefix and its stem, stored only where it is not, or
        # where the stem holds a dot (a module name is then not cut at its last dot).
        if _module(group[2], name) == file.module and "." not in _stem(name):
            group[3].append(name)
        else:
            odd.append([numbers[real_dir], len(group[3])])
            group[3].append([name, file.module])
    from dtype_lint.analysis.index.class_index import all_modules_digest
    from dtype_lint.run.project_files import ProjectFiles

    firsts = all_modules_digest(ProjectFiles([], dirs, odd, _leads(root_arg)).first_keys())
    record = {"key": _key(root_abs, excludes), "folders": folders, "ignores": ignores, "dirs": dirs, "odd": odd,
              "firsts": firsts}
    return files, record


def _lead(root_arg: str, rel: str) -> str:
    """What discovery shows before the names of a folder `rel` (root-relative) of a walk of
    `root_arg`: the scandir path, without the `./` a walk of `.` would put first."""
    lead = os.path.join(root_arg, rel, "")
    return lead[2:] if lead.startswith("." + os.sep) else lead


def _leads(root_arg: str):
    """`_lead` for one `root_arg` and many folders, joined by hand: `rel` is relative and does
    not end with a separator (os.path.relpath's, or ""), so os.path.join adds exactly one."""
    head = os.path.join(root_arg, "")
    dot = "." + os.sep

    def lead(rel: str) -> str:
        joined = head + rel + os.sep if rel else head
        return joined[2:] if joined.startswith(dot) else joined

    return lead


def _stem(name: str) -> str:
    return name[:-4] if name.endswith(".pyi") else name[:-3] if name.endswith(".py") else name


def _module(prefix: str, name: str) -> str:
    """The module of a file named `name` in a folder whose modules start with `prefix` ("" or
    "pkg.sub."), as discovery names it."""
    stem = _stem(name)
    return prefix[:-1] if stem == "__init__" else prefix + stem


def _prefix_of(module: str, name: str) -> str:
    stem = _stem(name)
    if stem == "__init__":
        return module + "." if module else ""
    return module[: -len(stem)] if module.endswith(stem) else ""


def save(record_path: str, record: dict, writer) -> None:
    if not os.path.isdir(os.path.dirname(record_path)):
        return  # the cache folder is made by the cache (with its .gitignore), never here
    from dtype_lint.run.cache_seal import seal

    sealed = seal(json.dumps(record, separators=(",", ":")).encode("utf-8", "surrogatepass"), RECORD_NAME)
    if sealed is None:
        return  # no cache key: no record (cache_seal.py)
    try:
        writer.write_cache(record_path, sealed)
    except OSError:
        pass  # a read-only checkout still lints; it just walks the project every time
