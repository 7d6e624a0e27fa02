"""The storage model's answers kept on disk across runs, each with what computing it read.

A pre-commit run on an edited file with a site asks the storage model (analysis/storage/storage_model.py)
which storages its layers' backends can give `weight`: a census of the quantization package (every
config's dispatch, every method's `create_weights` and `process_weights_after_loading`, parsed
from their text) that is about a quarter of such a run and is the same from one run to the next
while the backends' files are. So each top-level answer (`storages_for`, `find`) is written to the
cache folder (`s/<hash>.json`, beside the headers and findings) with its reads: the files it read
(their stamps: size and a hash of the bytes, as every cache entry), the module names it looked up
(and which file defined each), the folders it enumerated (their listing digests) and the
project-wide enumerations of module names it made (ModuleTable.enumerate: the platform modules).
A later run uses the entry only while every one of those is unchanged, and replays the reads into
the open frames, so the findings cached for the file still name the backends' files they depend
on; the cache folder's own key holds the tool's code stamp and the configuration's fingerprint. A
missing, foreign or ill-shaped entry is a miss.

Only answers made of plain values are kept (Storage records, whose evidence paths are stored
relative to the project root and respelled for the run, as findings are); the inner memo entries
(parsed methods, dispatch tables holding AST nodes) stay in memory for the run. The platforms'
admissions (analysis/storage/platforms.py, about 0.04 s of an edited pre-commit run at ten times vLLM)
are kept too: they start from every module named `platform(s)`, a recorded enumeration, so a
platform module added anywhere makes the entry (and every cached finding that used it) stale.
"""

from __future__ import annotations

import json

from dtype_lint.analysis.index import class_index
from dtype_lint.analysis.index.class_index import Reads, as_group

# The storage model's memo keys (their first element) whose values are kept on disk, and the
# compiled-code census's (analysis/compiled_elsewhere.py: a third of a pre-commit run on a file
# whose fix it clears, the same from one run to the next while no file's text starts to compile).
ADMISSIONS = "platform admissions"
COMPILED_ELSEWHERE = "compiled elsewhere"
PERSISTED = frozenset({"storages", "find", ADMISSIONS, COMPILED_ELSEWHERE})
# The answers about the whole tree, which the run replays by reference (class_index.cached_facts
# with `census`): their reads are kept as the group entry (`g/`) a findings entry names, not
# inlined in the answer's own entry. So the group is checked once a run for both, and a run that
# reads the answer from disk hands the findings that use it the group by its name: at ten times
# vLLM, the compiled-code census's 23,600 files were otherwise written out again to digest them
# into the group's name, in every pre-commit run on an edited file with a fixable finding.
BY_REFERENCE = frozenset({COMPILED_ELSEWHERE})


class FactsStore:
    """Answers of the storage model for one run's cache (run/cache.py) and project (the stamps,
    module table and path spellings of run/pipeline.py's `_Project`)."""

    def __init__(self, cache, project):
        self.cache = cache
        self.project = project
        self.hits = 0  # answers read from disk this run (tests and benchmarks read it)
        self.misses = 0

    @staticmethod
    def name(key: tuple) -> str:
        return json.dumps(list(key), separators=(",", ":"))

    def get(self, key: tuple):
        """(value, Reads with real paths) of a stored answer whose reads are all unchanged, else None."""
        if key[0] not in PERSISTED:
            return None
        entry = self.cache.entry("s", self.name(key))
        got = self._valid(entry, key) if entry is not None else None
        if got is None:
            self.misses += 1
        else:
            self.hits += 1
        return got

    def _valid(self, entry, key: tuple):
        if not (isinstance(entry, dict) and entry.get("k") == list(key)):
            return None
        reads = self.cache.unchanged_reads(entry, self.project.stamp, self.project.table)
        if reads is None:
            return None
        try:
            value = _CODECS.get(key[0], (_encode, _decode))[1](entry.get("v"), self._display)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return value, reads

    def put(self, key: tuple, value, reads: Reads) -> None:
        """Keep an answer computed this run (only answers of PERSISTED keys, of plain values)."""
        if key[0] not in PERSISTED:
            return
        encoded: object
        try:
            encoded = _CODECS.get(key[0], (_encode, _decode))[0](value, self._stored)
        except (TypeError, AttributeError):
            return  # not a value this store knows how to keep: it stays in memory only
        if key[0] in BY_REFERENCE and not reads.groups and reads.count() >= class_index.GROUP_MIN_FILES:
            reads = by_reference(reads, repr(key))
        self.cache.put_entry("s", self.name(key), {"k": list(key), "v": encoded, **self.cache.stored_reads(reads)})

    def _stored(self, path: str) -> str:
        return self.cache.rel(self.project.real_of(path)) if path else ""

    def _display(self, rel: str) -> str:
        return self.project.display_of(self.cache.real(rel)) if rel else ""


def by_reference(reads: Reads, name: str) -> Reads:
    """Reads holding nothing but `reads`, as the group `name` (a copy: `reads` is left as it is)."""
    group = Reads()
    group.modules, group.files, group.passed = reads.modules, reads.files, reads.passed
    group.listings, group.enumerations = reads.listings, reads.enumerations
    outer = Reads()
    outer.groups[name] = as_group(group)
    return outer


def _encode(value, stored) -> dict | None:
    if value is None:
        return None
    kind = "set" if isinstance(value, frozenset) else "list" if isinstance(value, list) else None
    if kind is None:
        raise TypeError(type(value).__name__)
    items = []
    for storage in value:
        d = storage.to_dict()
        d["evidence"] = [[message, stored(path), line] for message, path, line in d["evidence"]]
        items.append(d)
    if kind == "set":  # a set's order is per process: stored sorted, so the entry's bytes are stable
        items.sort(key=lambda d: json.dumps(d, sort_keys=True))
    return {kind: items}


def _decode(data, display):
    from dtype_lint.analysis.storage.storage_model import Storage

    if data is None:
        return None
    (kind, items), = data.items()
    if kind not in ("set", "list") or not isinstance(items, list):
        raise ValueError(kind)
    storages = []
    for item in items:
        if not all(isinstance(item[k], str) for k in ("backend", "method", "kind", "dtype", "what")) \
                or not isinstance(item["typed"], bool) or not isinstance(item["evidence"], list):
            raise ValueError("storage")
        evidence = []
        for message, path, line in item["evidence"]:
            if not (isinstance(message, str) and isinstance(path, str) and type(line) is int):
                raise ValueError("evidence")
            evidence.append([message, display(path), line])
        storages.append(Storage.from_dict(dict(item, evidence=evidence)))
    return frozenset(storages) if kind == "set" else storages


def _encode_admissions(value, stored) -> list:
    """The platforms' admissions (analysis/storage/platforms.py): plain fields, paths stored as cache keys."""
    if not isinstance(value, list):
        raise TypeError(type(value).__name__)
    return [[a.platform, stored(a.path), a.line, None if a.names is None else list(a.names), a.declared_by]
            for a in value]


def _decode_admissions(data, display) -> list:
    from dtype_lint.analysis.storage.platforms import Admission

    if not isinstance(data, list):
        raise ValueError("admissions")
    out = []
    for platform, path, line, names, declared_by in data:
        if not (isinstance(platform, str) and isinstance(path, str) and type(line) is int
                and isinstance(declared_by, str)
                and (names is None or (isinstance(names, list) and all(isinstance(n, str) for n in names)))):
            raise ValueError("admission")
        out.append(Admission(platform, display(path), line, None if names is None else tuple(names), declared_by))
    return out


def _encode_census(value, stored) -> dict:
    """The compiled-code census (compiled_elsewhere.census): module -> name -> the code that
    compiles it, its path stored as a cache key."""
    if not isinstance(value, dict):
        raise TypeError(type(value).__name__)
    return {module: {name: [o.why.compiler, o.why.evidence, o.why.code, o.why.line, stored(o.path)]
                     for name, o in sorted(names.items())} for module, names in sorted(value.items())}


def _decode_census(data, display) -> dict:
    from dtype_lint.analysis.compiled_code import Compiled
    from dtype_lint.analysis.compiled_elsewhere import Origin

    if not isinstance(data, dict):
        raise ValueError("census")
    out: dict = {}
    for module, names in data.items():
        if not isinstance(names, dict):
            raise ValueError("census")
        found = out[module] = {}
        for name, (compiler, evidence, code, line, path) in names.items():
            if not (isinstance(compiler, str) and isinstance(evidence, str) and isinstance(code, str)
                    and type(line) is int and isinstance(path, str)):
                raise ValueError("origin")
            found[name] = Origin(Compiled(compiler, evidence, code, line), display(path))
    return out


# How the values of a kind are kept (encode, decode); the storage model's answers by default.
_CODECS = {ADMISSIONS: (_encode_admissions, _decode_admissions), COMPILED_ELSEWHERE: (_encode_census, _decode_census)}
