"""The one way dtype-lint writes a file: atomically, keeping what the file was.

`write_atomic` is the primitive (temp file, fsync, rename): a reader, or a run killed at any
instant, sees the old file or the new one, never a torn one. Everything written into a user's
project goes through `ProjectWriter`, which adds the rules a rewriting tool must keep (nothing
outside the project root, never replace a symlink by a file, keep mode and owner, refuse
read-only files and folders) and records every file it creates or changes, so that a run can
print them.

Temp files go to the run's staging folder (`<cache-dir>/tmp`), where the next fixing run removes
whatever a killed run left; only when that folder cannot hold them (another filesystem, not
creatable) do they go next to their target, where the next run's discovery finds them
(`is_temp_name`) and removes them the same way.

`tempfile` and `shutil` are imported where a write needs them: a check writes nothing (or only
cache entries), and the two bring `random`, `bz2` and `lzma` (about 1 MiB of a check's RSS).
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import field
from functools import cache
from pathlib import Path

from dtype_lint.core.records import record

# Temp files carry this suffix; a rerun removes any it finds in its staging folder.
TEMP_SUFFIX = ".dtl-tmp"
# `.<target name>.<pid>.<random>.dtl-tmp`, as `_temp_prefix` and mkstemp/mkdtemp name them.


@cache
def _temp_name() -> re.Pattern[str]:
    """Compiled on first use: only a run that meets a `.dtl-tmp` name (a killed run's leftovers) needs it."""
    return re.compile(r"^\..*\.(\d+)\.[A-Za-z0-9_]+" + re.escape(TEMP_SUFFIX) + "$", re.S)


def _new_file_mode() -> int:
    """What `open(path, "w")` would give a new file: 0o666 less the umask (mkstemp gives 0o600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


class WriteError(Exception):
    """A write that was refused or failed; the target is untouched."""


def is_temp_name(name: str) -> bool:
    """Is `name` a temp file or folder a dtype-lint run creates?"""
    return _temp_name().match(name) is not None


def _temp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}.{os.getpid()}."


def write_atomic(path: str | os.PathLike, data: bytes, *, staging: str | os.PathLike | None = None,
                 like: os.stat_result | None = None, exclusive: bool = False) -> None:
    """Write `data` to `path` so that it is either the old file or the new one.

    The temp file goes to `staging` when given (a folder a rerun cleans, so a kill leaves nothing
    in the user's tree) and falls back to `path`'s own folder when `staging` cannot be created or
    is on another filesystem (rename cannot cross one). `like`: keep that file's mode (and owner,
    where allowed). `exclusive`: `path` must not exist (FileExistsError otherwise, even when
    another process creates it meanwhile: the temp file is linked in, never renamed over).
    """
    import tempfile
    path = os.fspath(path)
    tmp_dir = os.path.dirname(os.path.abspath(path))
    if staging is not None:
        try:
            os.makedirs(staging, exist_ok=True)
            tmp_dir = os.fspath(staging)
        except OSError:
            staging = None
    try:
        descriptor, tmp = tempfile.mkstemp(dir=tmp_dir, prefix=_temp_prefix(path), suffix=TEMP_SUFFIX)
    except OSError:
        if staging is None:
            raise
        # A read-only or full staging folder: beside the target instead.
        return write_atomic(path, data, like=like, exclusive=exclusive)
    try:
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:
            if staging is None or error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO):
                raise
            _discard(tmp)
            return write_atomic(path, data, like=like, exclusive=exclusive)
        os.chmod(tmp, stat.S_IMODE(like.st_mode) if like is not None else _new_file_mode())
        if like is not None and hasattr(os, "chown"):
            try:
                os.chown(tmp, like.st_uid, like.st_gid)
            except OSError:
                pass  # not ours to give away: keep our own ownership
        try:
            if exclusive:
                _link_new(tmp, path)
            else:
                os.replace(tmp, path)
        except OSError as error:
            if staging is None or error.errno != errno.EXDEV:
                raise
            os.unlink(tmp)
            write_atomic(path, data, like=like, exclusive=exclusive)
    except BaseException:
        _discard(tmp)
        raise


def create_private(path: str | os.PathLike, data: bytes) -> bool:
    """Create `path` holding `data`, readable and writable by this user alone (0600, its folder
    made 0700 when missing), whole or not at all: written and synced under a temp name, then
    linked in. False when another process created `path` first (its file is kept). Used for the
    cache key (cache_seal.py), which lives outside any project."""
    import tempfile
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    descriptor, tmp = tempfile.mkstemp(dir=folder, prefix=_temp_prefix(path), suffix=TEMP_SUFFIX)  # 0600
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        _link_new(tmp, path)
    except FileExistsError:
        _discard(tmp)
        return False
    except BaseException:
        _discard(tmp)
        raise
    return True


def _link_new(tmp: str, path: str) -> None:
    """Put `tmp` at `path` only if nothing is there: a hard link fails on an existing name."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        if os.path.lexists(path):  # a file system without hard links: check, then rename
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def remove_stale_temps(folder: str | os.PathLike, names: list[str] | None = None) -> int:
    """Delete temp files (and staged folders) a killed run left in `folder` (only `names`, when
    given); returns how many. Those of a live process (a concurrent run) are kept."""
    removed = 0
    if names is None:
        try:
            names = os.listdir(folder)
        except OSError:
            return 0
    for name in names:
        match = _temp_name().match(name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid != os.getpid() and _alive(pid):
            continue  # a concurrent run is writing it
        full = os.path.join(folder, name)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                import shutil
                shutil.rmtree(full)
            else:
                os.unlink(full)
            removed += 1
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _holds(path: Path, data: bytes) -> bool:
    from dtype_lint.core.source import read_bytes

    try:
        return read_bytes(path, len(data)) == data
    except (OSError, ValueError):  # missing, not a regular file, larger
        return False


_COUNTER = itertools.count()


@record(frozen=True)
class WriteRecord:
    """One file a run wrote, and why."""
    path: str  # as written, relative to the project root when inside it
    action: str  # "created" | "changed"
    why: str  # "fix", "helper", "package marker", "baseline", "report", "cache"


@record
class ProjectWriter:
    """Writes into one project, and remembers what it wrote."""

    root: Path
    staging: Path | None = None
    records: list[WriteRecord] = field(default_factory=list)

    _made: list[Path] = field(default_factory=list)
    _cache_tmp: str | None = None  # where write_cache stages ("": beside each entry)

    def close(self) -> None:
        """Remove the folders this writer made for staging when they are empty again (a run with
        `--no-cache` leaves nothing behind)."""
        for d in reversed(self._made):
            try:
                os.rmdir(d)
            except OSError:
                return
        self._made.clear()

    def _staging_for(self, target: str) -> Path | None:
        # The staging folder must itself lie in the project (a cache folder linked elsewhere
        # would put temp files outside it): else temp files go next to their target.
        if self.staging is None or not self.inside(target) or not self.inside(self.staging):
            return None
        if not self.staging.exists():
            missing = []
            d = self.staging
            while not d.exists():
                missing.append(d)
                d = d.parent
            self._made.extend(reversed(missing))
        return self.staging

    def inside(self, path: str | os.PathLike) -> bool:
        try:
            Path(os.path.realpath(path)).relative_to(os.path.realpath(self.root))
            return True
        except ValueError:
            return False

    def rel(self, path: str | os.PathLike) -> str:
        try:
            return Path(os.path.abspath(path)).relative_to(os.path.abspath(self.root)).as_posix()
        except ValueError:
            return os.fspath(path)

    def make_dirs(self, directory: str | os.PathLike, why: str, *, outside_ok: bool = False) -> None:
        """Create `directory` and its missing parents inside the project, recording each
        (`outside_ok`: a folder the user named, such as a patch series)."""
        directory = Path(directory)
        if not outside_ok and not self.inside(directory):
            raise WriteError(f"{directory}: outside the project root {self.root}; not created")
        missing = []
        d = directory
        while not d.exists():
            missing.append(d)
            d = d.parent
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                continue
            except OSError as error:
                raise WriteError(f"{d}: cannot create: {error.strerror or error}") from None
            self.records.append(WriteRecord(self.rel(d) + "/", "created", why))

    def write_cache(self, path: str | os.PathLike, data: bytes) -> WriteRecord:
        """One cache entry, in a folder `make_dirs` made or checked inside the project: written
        to a temp file beside it and renamed over it, so a reader never sees a torn entry, but
        not synced (a crash costs a recomputation, not a wrong result: a damaged entry is a
        miss) and not checked like a user's file, so that a run writing thousands stays cheap."""
        path = os.fspath(path)
        head, name = os.path.split(path)
        if self._cache_tmp is None:
            # The staging folder (a rerun with --fix removes what a killed run left there), once
            # per run; where it cannot be used, beside the entry.
            staging = self._staging_for(path)
            try:
                if staging is not None:
                    os.makedirs(staging, exist_ok=True)
            except OSError:
                staging = None
            self._cache_tmp = os.fspath(staging) if staging is not None else ""
        tmp = os.path.join(self._cache_tmp or head, f".{name}.{os.getpid()}.{next(_COUNTER)}{TEMP_SUFFIX}")
        descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
            existed = os.path.exists(path)
            os.replace(tmp, path)
        except BaseException:
            _discard(tmp)
            raise
        record = WriteRecord(self.rel(path), "changed" if existed else "created", "cache")
        self.records.append(record)
        return record

    def create_files(self, files: list[tuple[Path, bytes, str]], folders_why: str) -> None:
        """Create new files, and the folders they need, all at once: the missing folders are
        built complete in the staging folder and renamed into place in one step, so a run killed
        midway leaves either no trace or all of them (never a folder without its `__init__.py`).
        `files`: (path, bytes, why), in creation order."""
        import shutil
        import tempfile
        first = files[0][0].parent
        missing: list[Path] = []
        d = first
        while not d.exists():
            missing.append(d)
            d = d.parent
        staging = self._staging_for(str(files[0][0]))
        if not missing or staging is None:
            self._create_plainly(files, folders_why)
            return
        top = missing[-1]
        if not self.inside(top.parent):
            raise WriteError(f"{top}: outside the project root {self.root}; not created")
        self._check_folder(top.parent, str(top))
        try:
            os.makedirs(staging, exist_ok=True)
            box = Path(tempfile.mkdtemp(dir=staging, prefix=_temp_prefix(str(top)), suffix=TEMP_SUFFIX))
        except OSError:
            self._create_plainly(files, folders_why)
            return
        try:
            for path, data, _why in files:
                rel = path.relative_to(top.parent)
                (box / rel).parent.mkdir(parents=True, exist_ok=True)
                write_atomic(box / rel, data)
            os.rename(box / top.name, top)
        except OSError as error:
            shutil.rmtree(box, ignore_errors=True)
            # Another file system, or a concurrent run made the folder first: file by file
            # (identical files are left as they are, others are never overwritten).
            if error.errno in (errno.EXDEV, errno.EEXIST, errno.ENOTEMPTY):
                self._create_plainly(files, folders_why)
                return
            raise WriteError(f"{top}: cannot create: {error.strerror or error}") from None
        shutil.rmtree(box, ignore_errors=True)
        for d in reversed(missing):
            self.records.append(WriteRecord(self.rel(d) + "/", "created", folders_why))
        for path, _data, why in files:
            self.records.append(WriteRecord(self.rel(path), "created", why))

    def _create_plainly(self, files: list[tuple[Path, bytes, str]], folders_why: str) -> None:
        self.make_dirs(files[0][0].parent, folders_why)
        for path, data, why in files:
            if _holds(path, data):
                continue  # a concurrent run created the very same file: nothing to do
            self.write(path, data, why, create=True)

    def _check_folder(self, folder: str | os.PathLike, path: str) -> None:
        """The folder a file is written into: it must exist and be writable. Its permission bits
        are read, not only `access`: a folder its owner made read-only stays so even for root."""
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            raise WriteError(f"{path}: folder {folder} does not exist; not written") from None
        except OSError as error:
            raise WriteError(f"{path}: cannot stat folder {folder}: {error.strerror}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise WriteError(f"{path}: {folder} is not a folder; not written")
        if not os.access(folder, os.W_OK | os.X_OK) or not st.st_mode & stat.S_IWUSR:
            raise WriteError(f"{path}: folder {folder} is read-only; not written")

    def check(self, path: str | os.PathLike, *, expect: bytes | None = None, outside_ok: bool = False,
              create: bool = False) -> tuple[str, os.stat_result | None]:
        """Everything `write` checks, without writing: (the real target, its stat or None).
        Raises WriteError with the reason."""
        path = os.fspath(path)
        target = os.path.realpath(path) if os.path.islink(path) else path
        if not outside_ok and not self.inside(target):
            raise WriteError(f"{path}: outside the project root {self.root}; not written")
        try:
            st = os.stat(target)
        except FileNotFoundError:
            st = None
        except OSError as error:
            raise WriteError(f"{path}: cannot stat: {error.strerror}") from None
        if st is not None and create:
            raise WriteError(f"{path}: appeared while this run was creating it; not overwritten")
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                raise WriteError(f"{path}: not a regular file; not written")
            if not os.access(target, os.W_OK) or not st.st_mode & stat.S_IWUSR:
                raise WriteError(f"{path}: read-only; not written")
            if st.st_nlink > 1:
                # A rename would give this name a new inode and leave the other links stale.
                raise WriteError(f"{path}: has {st.st_nlink} hard links; rewriting would split them; not written")
            if expect is not None:
                from dtype_lint.core.source import read_bytes

                try:
                    current = read_bytes(target, len(expect))
                except ValueError:
                    current = None  # larger than it was: changed
                except OSError as error:
                    raise WriteError(f"{path}: cannot read back: {error.strerror or error}") from None
                if current != expect:
                    raise WriteError(f"{path}: changed on disk while it was being fixed; not written")
        elif expect is not None:
            raise WriteError(f"{path}: deleted while it was being fixed; not written")
        self._check_folder(os.path.dirname(os.path.abspath(target)), path)
        return target, st

    def write(self, path: str | os.PathLike, data: bytes, why: str, *, expect: bytes | None = None,
              outside_ok: bool = False, create: bool = False) -> WriteRecord:
        """Write `data` to `path`; `expect`: the bytes the file must still hold (else refused).

        A symlink is followed to its target, which must itself lie in the project; the link stays
        a link. Refused (WriteError, nothing written): a target outside the root (unless
        `outside_ok`, for report files the user named), a read-only file or folder, a missing
        folder, a file with other hard links, a file that changed or went away since it was
        read, anything that is not a regular file.
        """
        path = os.fspath(path)
        target, st = self.check(path, expect=expect, outside_ok=outside_ok, create=create)
        staging = self._staging_for(target)
        try:
            write_atomic(target, data, staging=staging, like=st, exclusive=create)
        except FileExistsError:
            raise WriteError(f"{path}: appeared while this run was creating it; not overwritten") from None
        except OSError as error:
            raise WriteError(f"{path}: cannot write: {error.strerror or error}") from None
        record = WriteRecord(self.rel(path), "changed" if st is not None else "created", why)
        self.records.append(record)
        return record


def target_problem(path: str | os.PathLike) -> str | None:
    """Why a file the user named on the command line (a report) could not be written, or None:
    checked before a run, so that a run that rewrites files never loses its report."""
    try:
        ProjectWriter(Path(os.getcwd())).check(path, outside_ok=True)
    except WriteError as error:
        return str(error)
    return None


def _discard(tmp: str) -> None:
    """Remove a temp file a failed write leaves (gone already is fine)."""
    try:
        os.unlink(tmp)
    except OSError:
        pass


def write_scratch_files(root: Path, files: dict[str, bytes] | dict[str, str] | dict[str, bytes | str]) -> None:
    """Files of a scratch tree under a temporary folder the run itself made (a migration's
    re-check copy, a proof's module tree, a release's test folder): never a user's project, so
    plain writes, but still only here, so that every write the tool makes is in this module.
    A symbolic link already at a file's place is replaced, not written through: in a copy of a
    user's tree it may point back into that tree."""
    for rel, data in files.items():
        target = Path(root) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        if isinstance(data, str):
            target.write_text(data, encoding="utf-8")
        else:
            target.write_bytes(data)


# Room a memory-backed scratch folder must have, in multiples of the copy: the copy never takes
# more than a quarter of what is free there (a container's /dev/shm is often only 64 MiB).
SCRATCH_ROOM = 4
MEMORY_SCRATCH = "/dev/shm"  # Linux's memory-backed file system, where it is mounted


@contextmanager
def scratch_copy(root: Path, ignore_names: tuple[str, ...] = ()) -> Iterator[Path]:
    """A copy of the tree at `root` (all but the entries named `ignore_names`, at any depth),
    removed on exit, for a run to read as the tree after a change (a migration's re-check).

    Made on a memory-backed file system where the user has not chosen a temporary folder
    (`TMPDIR` unset) and there is room, else in the system's temporary folder: creating the
    2,360 files of vLLM 0.27.1 took 1.5-2.4 CPU s on this project's ext4 machine and 0.11 s on
    tmpfs, most of a `migrate --series` re-check. The files are copies, not hard links (a link
    changes the original's ctime, which git and the pre-commit replay index read). For reading
    only: /dev/shm is often mounted `noexec`, where a tree's compiled extensions would not load
    (the HF regression trees, which run the project's tests, are made in the temporary folder).

    A symbolic link is copied as a link aimed where it leads from `root`, so that the copy reads
    what the tree reads after the change: into the copy for a target inside `root` (an absolute
    link would otherwise read the user's unchanged file, and a relative one that climbs out of
    `root` would dangle), and at the same absolute target outside it."""
    import shutil
    import tempfile
    root = Path(root)
    real_root = Path(os.path.realpath(root))
    links: list[tuple[str, str]] = []  # (path in the tree, where it leads), relative to `root`

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {name for name in names if name in ignore_names}
        for name in names:
            path = os.path.join(folder, name)
            if name not in skipped and os.path.islink(path):
                skipped.add(name)
                links.append((os.path.relpath(path, root), os.path.realpath(path)))
        return skipped

    with tempfile.TemporaryDirectory(prefix="dtype-lint-recheck-", dir=_scratch_base(root, ignore_names)) as tmp:
        copy = Path(tmp) / "tree"
        shutil.copytree(root, copy, ignore=ignore)
        for rel, target in links:
            try:  # a target inside the tree: its place in the copy, relative to the link
                aim = os.path.relpath(copy / Path(target).relative_to(real_root), (copy / rel).parent)
            except ValueError:  # outside it: the same file
                aim = target
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(aim, copy / rel, target_is_directory=os.path.isdir(target))
        yield copy


def _scratch_base(root: Path, ignore_names: tuple[str, ...]) -> str | None:
    """The folder a scratch copy of `root` goes in: MEMORY_SCRATCH when TMPDIR is unset and it
    holds SCRATCH_ROOM times the copy's bytes, else None (tempfile's choice)."""
    import shutil
    if os.environ.get("TMPDIR") or not os.path.isdir(MEMORY_SCRATCH) or not os.access(MEMORY_SCRATCH, os.W_OK):
        return None
    try:
        free = shutil.disk_usage(MEMORY_SCRATCH).free
    except OSError:
        return None
    need, todo = 0, [os.fspath(root)]
    while todo:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    if entry.name in ignore_names or entry.is_symlink():
                        continue
                    if entry.is_dir():
                        todo.append(entry.path)
                    else:
                        need += entry.stat().st_size
        except OSError:
            continue
        if need * SCRATCH_ROOM > free:
            return None
    return MEMORY_SCRATCH
