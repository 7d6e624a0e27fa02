"""The storage model of engines a project imports without containing them (shipped data).

An out-of-tree model or platform plugin imports vLLM's layers (`from vllm.model_executor.layers.linear
import ColumnParallelLinear`) but does not contain vLLM, so the tree's own backends cannot be read.
`dtype_lint/ecosystems/<ecosystem>/catalogue-<dist>-<version>.json` holds what `CodeBackends` computed from a pinned
release of the engine: layer class → the storages its backends can give `weight`, with the
backend's file (relative to the release) and line; and quant method class → what its
`create_weights` and `process_weights_after_loading` leave (`method_record`: a plugin's method that
subclasses the engine's runs them). `scripts/catalogue.py` regenerates it;
`tests/test_catalogue.py` checks that the shipped data equals a fresh computation.
"""

from __future__ import annotations

import json
import os
from functools import cache

from dtype_lint.analysis.storage.engine_source import EngineSource
from dtype_lint.analysis.storage.storage_model import CodeBackends, Storage, StorageModel
from dtype_lint.core.findings import Evidence

# The data's format version; the layers recorded are the preset's quantizable classes found in the
# release (its roots and the public subclasses a plugin builds).
FORMAT = 1


@cache
def shipped() -> tuple[dict, ...]:
    """Every catalogue shipped with the tool, oldest release first (parsed once per process)."""
    from dtype_lint.analysis.storage.engine_source import ENGINES, shipped_releases

    out = []
    for dist in ENGINES:
        for version in shipped_releases(dist):
            data = release_catalogue(dist, version)
            if data is not None:
                out.append(data)
    return tuple(out)


@cache
def release_catalogue(dist: str, version: str) -> dict | None:
    """The shipped catalogue of one release, or None (none ships, or it cannot be read)."""
    # Read from the package's folder (as engine_source.shipped_releases lists it), not through
    # importlib.resources: its import (and the typing module it pulls in) is a tenth of the imports
    # of a pre-commit run on one edited file, which never reads a catalogue.
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "ecosystems" / dist / f"catalogue-{dist}-{version}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


class EngineCatalogues:
    """The one description per engine that serves a project's layers of that engine: chosen for
    the project when first asked (engine_source.choose: the installed engine, the pinned release,
    the newest shipped one), never "the first catalogue that knows the class" (a plugin pinned to
    0.34.0 must not be told 0.33.0's lines). Each answer records the files the choice looked at
    as read, so a finding cached from it is stale once a pin or the installed engine changes."""

    def __init__(self, index=None):
        self.index = index
        self._chosen: dict[str, tuple[EngineSource | None, dict | None]] = {}
        self._methods: dict[str, tuple[dict[str, dict], dict[str, list[tuple[str, dict]]]]] = {}
        self._witnessed: dict[str, dict[str, str]] = {}

    def source(self, dist: str) -> EngineSource | None:
        return self._choice(dist)[0]

    def _choice(self, dist: str) -> tuple[EngineSource | None, dict | None]:
        got = self._chosen.get(dist)
        if got is None:
            got = self._chosen[dist] = _choose_for(self.index, dist)
        return got

    def data(self, qualname: str) -> tuple[EngineSource, dict] | None:
        """(source, catalogue data) of the engine a qualified name belongs to, or None."""
        dist = _PACKAGES.get(qualname.split(".", 1)[0])
        if dist is None:
            return None
        source, data = self._choice(dist)
        return None if source is None or data is None else (source, data)

    def used(self, source: EngineSource) -> None:
        """An answer came from this choice: what it looked at counts as read by the computation
        now open (a findings entry, a kept storage-model answer)."""
        frames = getattr(getattr(self.index, "modules", None), "frames", None)
        if not frames or not source.witnesses:
            return
        stamps = self._witnessed.get(source.dist)
        if stamps is None:
            from dtype_lint.core.file_stamp import file_stamp

            stamps = self._witnessed[source.dist] = {os.path.realpath(w): file_stamp(w) for w in source.witnesses}
        for frame in frames:
            frame.files.update(stamps)

    def method_record(self, qualname: str) -> "MethodRecord | None":
        """What the selected catalogue records of a quant method class outside the tree: (the
        storages its `create_weights` and after-loading give `weight`, None when its MRO has no
        `create_weights`; the storage its `process_weights_after_loading` leaves when it repacks
        or deletes `weight`; whether its MRO has a `process_weights_after_loading`; the storage a
        kernel object that method hands the layer to can leave), or None when it does not know
        the class. A class named through a re-export of the engine's package is matched by its
        short name when exactly one class of that engine has it."""
        got = self.data(qualname)
        if got is None:
            return None
        source, data = got
        by_name, by_short = self._method_tables(source.dist, data)
        record = by_name.get(qualname)
        if record is None:
            same = by_short.get(qualname.rsplit(".", 1)[-1], [])
            record = same[0][1] if len(same) == 1 else None
        if record is None:
            return None
        self.used(source)
        table = data["storages"]
        words = source.words
        storages = None if "storages" not in record else \
            [_outside(Storage.from_dict(table[i]), words) for i in record["storages"]]
        after, kernel = record.get("after"), record.get("kernel")
        return (storages, None if after is None else _outside(Storage.from_dict(table[after]), words),
                "after" in record, None if kernel is None else _outside(Storage.from_dict(table[kernel]), words))

    def _method_tables(self, dist: str, data: dict):
        tables = self._methods.get(dist)
        if tables is None:
            by_name: dict[str, dict] = {}
            by_short: dict[str, list[tuple[str, dict]]] = {}
            for qualname, record in data.get("methods", {}).items():
                by_name[qualname] = record
                by_short.setdefault(qualname.rsplit(".", 1)[-1], []).append((qualname, record))
            tables = self._methods[dist] = (by_name, by_short)
        return tables


# Each engine's top-level package -> its distribution (engine_source.ENGINES reversed).
_PACKAGES = {"vllm": "vllm"}


def _choose_for(index, dist: str) -> tuple[EngineSource | None, dict | None]:
    """The engine source of the project an index was built for (pipeline.build_index records its
    root and setting), and its catalogue data; without a project (an index built by hand), the
    newest shipped release."""
    from dtype_lint.analysis.storage.engine_source import choose, shipped_releases

    project = getattr(index, "engine_project", None)
    source: EngineSource | None
    if project is None:
        releases = shipped_releases(dist)
        source = None if not releases else EngineSource(dist, releases[-1], "newest",
                                                        f"{dist} {releases[-1]}, the newest shipped release",
                                                        "the newest catalogue shipped")
    else:
        root, setting = project
        source = choose(root, setting, dist)
    if source is None:
        return None, None
    if source.kind == "installed":
        return source, installed_catalogue(source)
    return source, release_catalogue(dist, source.version)


def installed_catalogue(source: EngineSource) -> dict | None:
    """The catalogue of an engine installed in the project's environment, computed from its files
    with the same `CodeBackends` the shipped ones were (run/catalogue_build.py), once: kept in
    the tool's cache folder (`<cache>/engines/<dist>-<version>-<stamp>.json`) for that installed
    version, its RECORD stamp and this tool's code, so the next run (pre-commit) reads it."""
    from pathlib import Path

    from dtype_lint.releases import cache_root
    from dtype_lint.run.fast_record import tool_stamp

    tool = tool_stamp()
    path = cache_root() / "engines" / f"{source.dist}-{source.version}-{source.stamp}.json"
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(kept, dict) and kept.get("tool") == tool and kept.get("format") == FORMAT:
            return kept
    except (OSError, ValueError):
        pass
    from dtype_lint.analysis.storage.engine_source import ENGINES
    from dtype_lint.run.catalogue_build import compute

    try:
        data = compute(Path(source.site), source.dist, source.version, package=ENGINES[source.dist])
    except (OSError, RecursionError, ValueError):
        return None
    data["tool"] = tool
    try:
        from dtype_lint.run.catalogue_build import dumps

        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temp.write_text(dumps(data), encoding="utf-8")
        os.replace(temp, path)  # a reader sees no file or a whole one
    except OSError:
        pass  # an unwritable cache: computed again next run, never an error
    return data


class CatalogueBackends:
    """Storages of layer classes outside the tree, from the catalogue selected for the project."""

    name = "catalogue"

    def __init__(self, engines: EngineCatalogues | None = None):
        self.engines = engines if engines is not None else EngineCatalogues()

    def data_for(self, layer_class: str) -> dict | None:
        """The selected catalogue, when it records this layer class (its backends' names, the
        layer's bases)."""
        got = self.engines.data(layer_class)
        return got[1] if got is not None and layer_class in got[1].get("layers", {}) else None

    def storages_for(self, layer_class: str, construction: object = None) -> frozenset[Storage] | None:
        got = self.engines.data(layer_class)
        if got is None:
            return None
        source, data = got
        ids = data.get("layers", {}).get(layer_class)
        if ids is None:
            return None
        self.engines.used(source)
        return frozenset(_outside(Storage.from_dict(data["storages"][i]), source.words) for i in ids)


MethodRecord = tuple[list[Storage] | None, Storage | None, bool, Storage | None]


def method_record(qualname: str) -> MethodRecord | None:
    """The newest shipped catalogue's record of a quant method class (for callers without a
    project; a run asks the project's selected catalogue, `EngineCatalogues.method_record`)."""
    return EngineCatalogues().method_record(qualname)


def _outside(storage: Storage, release: str) -> Storage:
    """The release's files are not the project's: their lines go into the words (`fp8.py:89 ->
    marlin_utils_fp8.py:141 in vllm 0.34.0, the release pyproject.toml pins`), not into locations a
    reporter would resolve in the project."""
    located = [e for e in storage.evidence if e.path]
    ends = located[:1] + located[-1:] if len(located) > 1 else located
    where = " -> ".join(f"{e.path.rsplit('/', 1)[-1]}:{e.line}" for e in ends)
    evidence = tuple(Evidence(f"{e.message} ({e.path}:{e.line} in {release})" if e.path else e.message, "", 0)
                     for e in storage.evidence)
    return Storage(storage.backend, storage.method, storage.kind, storage.dtype,
                   f"{storage.what} ({where} in {release})" if where else f"{storage.what} ({release})",
                   evidence, storage.typed, storage.params)


def default_model(project, config_params: tuple[str, ...] = ("quant_config",)) -> StorageModel:
    """The tree's own backends first, then the catalogue selected for the project (engines
    imported, not scanned: engine_source.py says which release)."""
    from dtype_lint.analysis.storage.platforms import PlatformNarrowing

    engines = EngineCatalogues(project.index)
    code = CodeBackends(project, config_params, engines.method_record)
    return StorageModel([code, CatalogueBackends(engines)], PlatformNarrowing(code))
