"""The content stamps of a project's files, kept with their stat data between cached runs.

A cache entry is keyed by the stamp of each file it read (core/file_stamp.py: size and a hash of
the bytes), and a cached run checks those stamps by reading and hashing each file again. A finding
whose fix the compiled-code census cleared read every file of the project, so a pre-commit run
on its file hashed all of them (vLLM 0.34.0: 3,604 files, about 0.1 s of a 0.35 s run); so does
every warm `check .` before it asks the scan summary anything.

So a cached run keeps what it stamped in `stamps.bin` in the cache folder: for each file, its
stamp and its stat data (size, mtime, ctime, inode, device) as they were when the stamp was
taken. A later run that asks for the stamp of a file whose stat data is still the same takes the
kept one without reading the file. This is the replay index's rule (run/replay_index.py): an edit
that keeps size and mtime (`touch -r`, `cp -p`, `rsync -t`) still moves the ctime, which no user
call can set, and a file changed less than RACY_NS before the run started keeps no stat data (an
edit in the same clock tick could keep it), so it is hashed on every run until it settles.

A run reads the memo only once it has hashed LOAD_AFTER files, or is asked for that many stamps at
once (`stamps`: the files a census passed over): a pre-commit run on an edited file asks for the
stamps of the few files its answers read, and at ten times vLLM reading the memo (36,000 files)
cost it more than hashing them; a run that checks a census's reads, or the whole project, reads
it. A run that never read it keeps nothing.

The file is written by a run that stamped something new (a run on named files: one entry in
REWRITE_RATIO or more), whole, sealed with the per-user cache
key (run/cache_seal.quick_seal) over a context naming the format and the interpreter (marshal's
format is the interpreter's): a memo edited by anyone else, or moved from another folder, is no
memo, and every file is hashed. A run on the whole project keeps only the files it stamped (a file
deleted or left out is dropped); a run on named files adds to what the last one kept.
"""

from __future__ import annotations

import marshal
import os
import sys

from dtype_lint.core.file_stamp import file_stamp
from dtype_lint.run.replay_index import settled_stat_key, stat_key

MEMO_NAME = "stamps.bin"
FORMAT = 1
LOAD_AFTER = 256  # the files a run hashes before it reads the memo (see StampMemo.__init__)
# A run on named files rewrites the memo only when it changed at least one entry in this many
# (`save`): at ten times vLLM the memo is 3.1 MB, and a pre-commit run on an edited file whose fix
# the compiled-code census cleared reads it (the census's 23,600 files) and rewrote it for the one
# file edited, 111 M instructions of its 2.4 G; the next run hashes that file again instead.
REWRITE_RATIO = 256


def _context(folder: str) -> str:
    return f"{MEMO_NAME} {FORMAT} {sys.implementation.cache_tag} {sys.version} {os.path.realpath(folder)}"


class StampMemo:
    """Stamps by stat data for one run (`stamp`), kept for the next (`save`). `folder`: the
    cache folder (None: nothing kept or read, every stamp is taken); `started_ns`: when the run
    started (every stamp it takes is of a file read after it)."""

    def __init__(self, folder: str | os.PathLike | None, started_ns: int):
        self.folder = None if folder is None else str(folder)
        self.started_ns = started_ns
        # Files are kept by their path from the project root (the cache folder's parent): at ten
        # times vLLM the memo's size halves, and with it the time to read and unseal it.
        self.lead = os.path.join(os.path.dirname(os.path.abspath(self.folder)), "") if self.folder else ""
        # stored path -> (size, mtime, ctime, inode, device, stamp): one tuple a file. Read once the
        # run has hashed LOAD_AFTER files: a run on an edited file asks for the stamps of the few
        # files its answers read, and hashing them costs less than reading a memo of 36,000 files.
        self.kept: dict[str, tuple] | None = None if self.folder is not None else {}
        self.taken: dict[str, str] = {}  # stamps this run took by reading the file, by real path
        self.vouched: dict[str, tuple] = {}  # kept stamps this run found true by stat data

    def held(self) -> dict[str, tuple]:
        """What the memo holds (stored path -> stat data and stamp), read now if not yet."""
        if self.kept is None:
            self.kept = self._load()
        return self.kept

    def _stored(self, real: str) -> str:
        lead = self.lead
        return real[len(lead):] if lead and real.startswith(lead) else real

    def _load(self) -> dict[str, tuple]:
        from dtype_lint.run.cache_seal import read_quick_sealed_dict

        assert self.folder is not None
        return read_quick_sealed_dict(os.path.join(self.folder, MEMO_NAME), _context(self.folder)) or {}

    def stamp(self, real: str) -> str:
        """The stamp of the file at `real` (core/file_stamp.file_stamp's)."""
        if self.kept is None:
            if len(self.taken) < LOAD_AFTER:
                stamp = self.taken[real] = file_stamp(real)
                return stamp
        stored = self._stored(real)
        kept = self.held().get(stored)
        if kept is not None:
            key = stat_key(real)
            if key is not None and key == kept[:5]:
                self.vouched[stored] = kept
                return kept[5]
        stamp = self.taken[real] = file_stamp(real)
        return stamp

    def stamps(self, reals: list[str]) -> list[str]:
        """`[stamp(real) for real in reals]`: a census's files (23,600 at ten times vLLM) checked
        in one loop, the memo read first when they are LOAD_AFTER or more (else the first of them
        would be hashed before it is)."""
        if self.kept is None and len(reals) + len(self.taken) >= LOAD_AFTER:
            self.held()
        held = self.kept
        if held is None:
            return [self.stamp(real) for real in reals]
        # `stamp`'s check by stat data, inlined: through `stamp` per file the edited-file run at
        # ten times vLLM took 34 M instructions more (1.2%); a file the memo cannot vouch for
        # goes to `stamp` all the same.
        lead, cut = self.lead, len(self.lead)
        vouched = self.vouched
        out = []
        for real in reals:
            stored = real[cut:] if lead and real.startswith(lead) else real
            kept = held.get(stored)
            if kept is not None:
                key = stat_key(real)  # (the replay index's stat data: one definition)
                if key is not None and key == kept[:5]:
                    vouched[stored] = kept
                    out.append(kept[5])
                    continue
            out.append(self.stamp(real))
        return out

    def stat_data(self, real: str) -> tuple | None:
        """The stat data of the file at `real` as this run found it, where the memo vouched for
        its stamp by it (settled then, so settled now: replay_index.settled_stat_key), else None."""
        kept = self.vouched.get(self._stored(real))
        return kept[:5] if kept is not None else None

    def took(self, real: str, stamp: str) -> None:
        """`stamp` was taken of the file at `real` from bytes this run read."""
        self.taken[real] = stamp

    def save(self, writer, whole: bool) -> None:
        """Keep this run's stamps (see the module docstring); `whole`: the run stamped every file
        of the project, and what it did not stamp is dropped. A run that never read the memo
        (it hashed fewer than LOAD_AFTER files) keeps nothing: at ten times vLLM the memo is
        36,000 files, and reading and rewriting it after every edited file's run cost that run a
        fifth of its time; the few files it hashed are hashed again by the next run, until a run
        that reads the memo keeps them. A run on named files that read it keeps nothing either
        when it changed fewer than one entry in REWRITE_RATIO: hashing those few files again
        costs the next runs less than rewriting the memo costs this one."""
        if self.folder is None or self.kept is None:
            return  # it hashed fewer than LOAD_AFTER files: the next run hashes them again
        dropped = whole and len(self.vouched) != len(self.kept)
        if not (self.taken or dropped):
            return
        memo = dict(self.vouched) if whole else dict(self.kept)
        changed = 0  # entries added, replaced or removed
        for real, stamp in self.taken.items():
            stored = self._stored(real)
            key = settled_stat_key(real, self.started_ns)
            if key is None:
                changed += memo.pop(stored, None) is not None
                continue
            entry = (*key, stamp)
            if memo.get(stored) != entry:
                memo[stored] = entry
                changed += 1
        if not (dropped or changed >= (1 if whole else max(1, len(memo) // REWRITE_RATIO))):
            return
        from dtype_lint.run.cache_seal import quick_seal

        sealed = quick_seal(marshal.dumps(memo), _context(self.folder))
        if sealed is None:
            return
        try:
            writer.write_cache(os.path.join(self.folder, MEMO_NAME), sealed)
        except OSError:
            pass  # a read-only checkout still lints; it just hashes every file
