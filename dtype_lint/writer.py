"""The one way dtype-lint writes a file: atomically, keeping what the file was.

`write_atomic` is the primitive (temp file, fsync, rename): a reader, or a run killed at any
instant, sees the old file or the new one, never a torn one. Everything written into a user's
project goes through `ProjectWriter`, which adds the rules a rewriting tool must keep (nothing
outside the project root, never replace a symlink by a file, keep mode and owner, refuse
read-only files) and records every file it creates or changes, so that a run can print them.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# Temp files carry this suffix; a rerun removes any it finds in its staging folder.
TEMP_SUFFIX = ".dtl-tmp"


def _new_file_mode() -> int:
    """What `open(path, "w")` would give a new file: 0o666 less the umask (mkstemp gives 0o600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


class WriteError(Exception):
    """A write that was refused or failed; the target is untouched."""


def write_atomic(path: str | os.PathLike, data: bytes, *, staging: str | os.PathLike | None = None,
                 like: os.stat_result | None = None) -> None:
    """Write `data` to `path` so that it is either the old file or the new one.

    The temp file goes to `staging` when given (a folder a rerun cleans, so a kill leaves nothing
    in the user's tree) and falls back to `path`'s own folder when `staging` is on another
    filesystem (rename cannot cross one). `like`: keep that file's mode (and owner, where allowed).
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp_dir = os.fspath(staging) if staging is not None else directory
    if staging is not None:
        os.makedirs(tmp_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=tmp_dir, prefix=f".{os.path.basename(path)}.{os.getpid()}.",
                               suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(like.st_mode) if like is not None else _new_file_mode())
        if like is not None and hasattr(os, "chown"):
            try:
                os.chown(tmp, like.st_uid, like.st_gid)
            except OSError:
                pass  # not ours to give away: keep our own ownership
        try:
            os.replace(tmp, path)
        except OSError as e:
            if staging is None or e.errno != errno.EXDEV:
                raise
            os.unlink(tmp)
            write_atomic(path, data, like=like)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def remove_stale_temps(staging: str | os.PathLike) -> int:
    """Delete temp files left by a killed run in `staging`; returns how many."""
    removed = 0
    try:
        names = os.listdir(staging)
    except OSError:
        return 0
    for name in names:
        if not name.endswith(TEMP_SUFFIX):
            continue
        pid = name.rsplit(TEMP_SUFFIX, 1)[0].split(".")[-2] if name.count(".") >= 3 else ""
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue  # a concurrent run is writing it
        try:
            os.unlink(os.path.join(staging, name))
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


@dataclass(frozen=True)
class WriteRecord:
    path: str  # as written, relative to the project root when inside it
    action: str  # "created" | "changed"
    why: str  # "fix", "helper", "package marker", "baseline", "report", "cache"


@dataclass
class ProjectWriter:
    """Writes into one project, and remembers what it wrote."""

    root: Path
    staging: Path | None = None
    records: list[WriteRecord] = field(default_factory=list)

    _made: list[Path] = field(default_factory=list)

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
        if self.staging is None or not self.inside(target):
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
            except OSError as e:
                raise WriteError(f"{d}: cannot create: {e.strerror or e}") from None
            self.records.append(WriteRecord(self.rel(d) + "/", "created", why))

    def write(self, path: str | os.PathLike, data: bytes, why: str, *, expect: bytes | None = None,
              outside_ok: bool = False) -> WriteRecord:
        """Write `data` to `path`; `expect`: the bytes the file must still hold (else refused).

        A symlink is followed to its target, which must itself lie in the project; the link stays
        a link. Refused (WriteError, nothing written): a target outside the root (unless
        `outside_ok`, for report files the user named), a read-only file, a file with other hard
        links, a file that changed since it was read, anything that is not a regular file.
        """
        path = os.fspath(path)
        target = os.path.realpath(path) if os.path.islink(path) else path
        if not outside_ok and not self.inside(target):
            raise WriteError(f"{path}: outside the project root {self.root}; not written")
        try:
            st = os.stat(target)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise WriteError(f"{path}: cannot stat: {e.strerror}") from None
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                raise WriteError(f"{path}: not a regular file; not written")
            if not os.access(target, os.W_OK) or not st.st_mode & stat.S_IWUSR:
                raise WriteError(f"{path}: read-only; not written")
            if st.st_nlink > 1:
                # A rename would give this name a new inode and leave the other links stale.
                raise WriteError(f"{path}: has {st.st_nlink} hard links; rewriting would split them; not written")
            if expect is not None:
                try:
                    with open(target, "rb") as f:
                        current = f.read()
                except OSError as e:
                    raise WriteError(f"{path}: cannot read back: {e.strerror}") from None
                if current != expect:
                    raise WriteError(f"{path}: changed on disk while it was being fixed; not written")
        elif expect is not None:
            raise WriteError(f"{path}: deleted while it was being fixed; not written")
        staging = self._staging_for(target)
        try:
            write_atomic(target, data, staging=staging, like=st)
        except OSError as e:
            raise WriteError(f"{path}: cannot write: {e.strerror or e}") from None
        record = WriteRecord(self.rel(path), "changed" if st is not None else "created", why)
        self.records.append(record)
        return record
