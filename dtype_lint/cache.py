"""A per-project cache of file headers and findings, keyed by (mtime, size).

One JSON file per (tool version, config fingerprint). Findings entries also carry the class
index digest (a changed class header anywhere can change any file's findings) and the stamps of
the other files whose code the analysis read (where a layer was constructed, a base class's
`__init__`): a change there invalidates the entry. Writes are atomic, and a corrupt or foreign
cache file is ignored, never an error.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class Cache:
    def __init__(self, directory: Path, key: str, enabled: bool = True):
        self.enabled = enabled
        self.path = directory / f"cache-{key}.json"
        self.data: dict = {"headers": {}, "findings": {}}
        self.dirty = False
        if enabled:
            try:
                with open(self.path, encoding="utf-8") as f:
                    loaded = json.load(f)
                if isinstance(loaded, dict) and {"headers", "findings"} <= loaded.keys():
                    self.data = loaded
            except (OSError, ValueError):
                pass

    @staticmethod
    def _k(path: str) -> str:
        return os.path.abspath(path)

    def header(self, path: str, stamp: str):
        entry = self.data["headers"].get(self._k(path)) if self.enabled else None
        if entry and entry[0] == stamp:
            return entry[1], entry[2]
        return None

    def put_header(self, path: str, stamp: str, header: dict, passes: bool) -> None:
        if self.enabled:
            self.data["headers"][self._k(path)] = [stamp, header, passes]
            self.dirty = True

    def findings(self, path: str, stamp: str, digest: str, stamp_of):
        """Cached findings, if the file, the class index and every other file whose code the
        analysis read (`stamp_of(path)` gives its stamp now) are unchanged."""
        entry = self.data["findings"].get(self._k(path)) if self.enabled else None
        if not (entry and len(entry) == 4 and entry[0] == stamp and entry[1] == digest):
            return None
        if any(stamp_of(dep) != dep_stamp for dep, dep_stamp in entry[3].items()):
            return None
        # Paths are stored as the user spelled them last time; respell for this run.
        return [dict(d, path=path, evidence=d["evidence"]) for d in entry[2]]

    def put_findings(self, path: str, stamp: str, digest: str, findings: list[dict], deps: dict[str, str]) -> None:
        if self.enabled:
            self.data["findings"][self._k(path)] = [stamp, digest, findings, deps]
            self.dirty = True

    def save(self, writer) -> None:
        """Write through the run's writer; a folder dtype-lint creates gets a `.gitignore` that
        covers that folder alone (never the project: the cache folder must be its own)."""
        if not (self.enabled and self.dirty):
            return
        from .writer import WriteError

        try:
            writer.make_dirs(self.path.parent, "cache")
            gitignore = self.path.parent / ".gitignore"
            if not gitignore.exists():
                writer.write(gitignore, b"# created by dtype-lint\n*\n", "cache")
            writer.write(self.path, json.dumps(self.data, separators=(",", ":")).encode(), "cache")
        except (OSError, WriteError):
            pass  # a read-only checkout still lints; it just does not cache
