"""The cache of one process's runs over copies of one tree, kept in memory (`migrate --series`).

`migrate --series` runs twice over the same tree: the fixing run on the tree, then a re-check of
a scratch copy with the patches applied. Both run uncached (nothing of theirs may land in the
user's cache folder, and a migration must see the tree as it is), so the re-check once analysed
every file again, as a cold check does: about as much CPU as the fixing run itself.

A `RunStore` passed to both runs (`RunOptions.store`) keeps, in memory, the entries the disk cache
(run/cache.py) would write: each file's class header and findings, and the storage model's answers,
each with what computing it read. Entries are named by the path relative to the run's project
root, and checked by the content stamps of what they read, so the re-check of the scratch copy
reuses an entry exactly where the disk cache would reuse it on that tree: the file is unchanged,
every file its analysis read is unchanged, every module it looked up resolves to the same file
(a module the series creates, looked up as missing before, is a change), every folder listing
and enumeration of module names it made is the same (a census of the whole table included:
class_index.ALL_MODULES). One read more is checked here than on disk: an answer that walked every
module may also have read every file's text without recording it (the callers of a helper are
found by the helper's name in each file's text, analysis/flow/foreign_calls.py: a rewrite that
adds a call of it to a file that never named it changes the helper's verdict), so an entry that
recorded ALL_MODULES is reused only when every file of the tree has the stamp the earlier run's
scan gave it. Everything else is analysed again. Entries are JSON, as on disk (no seal: they
never leave the process), and keyed by the configuration's fingerprint: a run under other
settings starts empty.
"""

from __future__ import annotations

import json
from pathlib import Path

from dtype_lint.analysis.index.class_index import ALL_MODULES
from dtype_lint.run.cache import Cache


class RunStore:
    """The entries of earlier runs of this process, by the settings they were computed under."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, bytes]] = {}  # fingerprint -> entry name -> JSON

    def cache(self, key: str, root: Path) -> "MemoryCache":
        """A cache for one run under `key` (the configuration's fingerprint) rooted at `root`."""
        return MemoryCache(self._entries.setdefault(key, {}), key, root)


class MemoryCache(Cache):
    """A `Cache` whose entries live in a `RunStore` instead of sealed files."""

    def __init__(self, entries: dict[str, bytes], key: str, root: Path):
        super().__init__(Path(root) / ".dtype-lint-memory", key=f"memory-{key}", enabled=True, root=root)
        self._entries = entries
        # The earlier run's scan: file (relative) -> its stamp then (None: not loaded yet).
        self._earlier: dict[str, str] | None = None
        self._tree_unchanged: bool | None = None

    def _scan_data(self) -> dict:
        data = super()._scan_data()
        if self._earlier is None:  # before this run's scan writes its own stamps over it
            self._earlier = {rel: entry[0] for rel, entry in data.items()
                             if isinstance(entry, list) and entry and isinstance(entry[0], str)}
        return data

    def unchanged_reads(self, entry: dict, stamp_of, table):
        enumerations = entry.get("enumerations")
        if isinstance(enumerations, dict) and ALL_MODULES in enumerations and not self._same_tree(stamp_of, table):
            return None
        return super().unchanged_reads(entry, stamp_of, table)

    def _same_tree(self, stamp_of, table) -> bool:
        """Every file of the tree (the earlier scan's, the same list of modules) unchanged."""
        if self._tree_unchanged is None:
            self._scan_data()
            earlier = self._earlier or {}
            self._tree_unchanged = bool(earlier) and all(stamp_of(self.real(rel)) == stamp
                                                         for rel, stamp in earlier.items())
        return self._tree_unchanged

    def _load(self, kind: str, rel: str):
        raw = self._entries.get(f"{kind}/{rel}")
        return self._decode(raw) if raw is not None else None

    def _encode(self, data) -> bytes:
        return json.dumps(data, separators=(",", ":")).encode("utf-8", "surrogatepass")

    def _decode(self, raw: bytes):
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def save(self, writer) -> None:
        """Keep this run's entries for the next run of the process; nothing is written."""
        self._entries.update(self._pending)
        if self._scan_dirty:
            self._entries["/scan.json"] = self._encode({"names": self._scan_names, "files": self._scan})
        self._pending.clear()
        self._scan_dirty = False
