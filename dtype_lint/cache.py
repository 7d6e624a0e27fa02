"""A per-project cache of file headers and findings, keyed by (mtime, size).

One file per (tool version, config fingerprint): the SHA-256 of a JSON payload, a line break,
the payload. Findings entries also carry the class index digest (a changed class header
anywhere can change any file's findings) and the stamps of the other files whose code the
analysis read (where a layer was constructed, a base class's `__init__`): a change there
invalidates the entry. Writes are atomic, and a corrupt or foreign cache file (a FIFO, huge,
not JSON, JSON of another shape, Infinity or NaN) is ignored, never an error: an entry of the
wrong shape is a miss.
"""

from __future__ import annotations

import hashlib
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
            loaded = _load(self.path)
            if isinstance(loaded, dict) and all(isinstance(loaded.get(k), dict) for k in ("headers", "findings")):
                self.data = loaded

    @staticmethod
    def _k(path: str) -> str:
        return os.path.abspath(path)

    def header(self, path: str, stamp: str):
        entry = self.data["headers"].get(self._k(path)) if self.enabled else None
        if _shaped(entry, (str, dict, bool)) and entry[0] == stamp:
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
        if not (_shaped(entry, (str, str, list, dict)) and entry[0] == stamp and entry[1] == digest
                and all(_finding_shaped(d) for d in entry[2])):
            return None
        if any(not isinstance(dep_stamp, str) or stamp_of(dep) != dep_stamp for dep, dep_stamp in entry[3].items()):
            return None
        # Paths are stored as the user spelled them last time; respell for this run.
        return [dict(d, path=path) for d in entry[2]]

    def put_findings(self, path: str, stamp: str, digest: str, findings: list[dict], deps: dict[str, str]) -> None:
        if self.enabled:
            self.data["findings"][self._k(path)] = [stamp, digest, findings, deps]
            self.dirty = True

    def save(self, writer) -> None:
        """Write through the run's writer. The cache folder gets a `.gitignore` of `*` only while
        it holds nothing but dtype-lint's own files (so never the project root, never a folder of
        the user's; and a run killed after making the folder leaves it for the next run to add)."""
        if not (self.enabled and self.dirty):
            return
        from .writer import WriteError

        try:
            folder = self.path.parent
            writer.make_dirs(folder, "cache")
            gitignore = folder / ".gitignore"
            if not gitignore.exists() and all(_ours(name) for name in os.listdir(folder)):
                writer.write(gitignore, b"# created by dtype-lint\n*\n", "cache", create=True)
            writer.write(self.path, encode(self.data), "cache")
        except (OSError, WriteError):
            pass  # a read-only checkout still lints; it just does not cache


def _ours(name: str) -> bool:
    from .writer import is_temp_name

    return name == "tmp" or (name.startswith("cache-") and name.endswith(".json")) or is_temp_name(name)


# A cache larger than this is not ours (vLLM's whole tree caches in a few MB).
MAX_CACHE_BYTES = 256 << 20


def encode(data: dict) -> bytes:
    """A cache file's bytes: the payload's SHA-256, a line break, the JSON payload."""
    payload = json.dumps(data, separators=(",", ":")).encode()
    return hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def decode(raw: bytes):
    """The payload of a cache file, or None when it is not one of ours, intact."""

    def reject(constant: str):
        raise ValueError(f"{constant} is not a cache value")

    check, _, payload = raw.partition(b"\n")
    try:
        # The checksum tells our own file from a truncated, edited or foreign one.
        if check.decode("ascii") != hashlib.sha256(payload).hexdigest():
            return None
        return json.loads(payload, parse_constant=reject)
    except (ValueError, RecursionError):
        return None


def _load(path: Path):
    from .source import read_bytes

    try:
        return decode(read_bytes(path, MAX_CACHE_BYTES))
    except (OSError, ValueError):
        return None


def _shaped(entry, types: tuple) -> bool:
    return isinstance(entry, list) and len(entry) == len(types) and all(
        isinstance(v, t) for v, t in zip(entry, types))


_INT, _STR, _BOOL = "int", "str", "bool"
_FINDING = {"code": _STR, "message": _STR, "path": _STR, "confidence": _STR, "no_fix_reason": _STR,
            "scope": _STR, "expression": _STR,
            "span": {"line": _INT, "col": _INT, "end_line": _INT, "end_col": _INT},
            "evidence": [{"message": _STR, "path": _STR, "line": _INT}],
            "fix": {"description": _STR, "safe": _BOOL, "unsafe_reason": _STR,
                    "edits": [{"start": _INT, "end": _INT, "text": _STR}], "imports": [[_STR]],
                    "aliases": [_STR], "binds": [_STR]}}


def _finding_shaped(d) -> bool:
    """A cached finding has the types `Finding.to_dict` gives (a `fix` may be null)."""
    return _fits(d, _FINDING)


def _fits(value, schema) -> bool:
    if schema == _INT:
        return type(value) is int
    if schema == _STR:
        return type(value) is str
    if schema == _BOOL:
        return type(value) is bool
    if isinstance(schema, list):
        return isinstance(value, list) and all(_fits(v, schema[0]) for v in value)
    if value is None and "edits" in schema:
        return True  # no fix
    return isinstance(value, dict) and all(k in value and _fits(value[k], sub) for k, sub in schema.items()
                                            if k in value or k in ("code", "message", "path", "span"))
