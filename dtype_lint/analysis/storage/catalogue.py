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
from functools import cache

from dtype_lint.analysis.storage.storage_model import CodeBackends, Storage, StorageModel
from dtype_lint.core.findings import Evidence

# The data's format version; the layers recorded are the preset's quantizable classes found in the
# release (its roots and the public subclasses a plugin builds).
FORMAT = 1


@cache
def shipped() -> tuple[dict, ...]:
    """Every catalogue shipped with the tool (parsed once per process)."""
    # Imported here, not at the top: importlib.resources (and the typing module it pulls in) is a
    # tenth of the imports of a pre-commit run on one edited file, which never reads a catalogue.
    from importlib import resources

    out = []
    try:
        # Each ecosystem ships its engines' catalogues in its own folder (ecosystems/vllm/...).
        folder = resources.files("dtype_lint") / "ecosystems"
        entries = sorted((p for ecosystem in folder.iterdir() if ecosystem.is_dir() for p in ecosystem.iterdir()
                          if p.name.startswith("catalogue-") and p.name.endswith(".json")), key=lambda p: p.name)
    except (FileNotFoundError, NotADirectoryError, ModuleNotFoundError):
        return ()
    for entry in entries:
        try:
            data = json.loads(entry.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if data.get("format") == FORMAT:
            out.append(data)
    return tuple(out)


class CatalogueBackends:
    """Storages of layer classes outside the tree, from the shipped catalogues."""

    name = "catalogue"

    def data_for(self, layer_class: str) -> dict | None:
        """The catalogue that records this layer class (its backends' names, the layer's bases)."""
        return next((data for data in shipped() if layer_class in data.get("layers", {})), None)

    def storages_for(self, layer_class: str, construction: object = None) -> frozenset[Storage] | None:
        for data in shipped():
            layers = data.get("layers", {})
            if layer_class in layers:
                release = f"{data['dist']} {data['version']}"
                return frozenset(_outside(Storage.from_dict(data["storages"][i]), release) for i in layers[layer_class])
        return None


@cache
def _methods() -> tuple[dict[str, tuple[dict, dict]], dict[str, list[tuple[dict, dict]]]]:
    """Quant method classes of the shipped catalogues: by qualified name, and by short name (a
    plugin may name a class through a re-export)."""
    by_name: dict[str, tuple[dict, dict]] = {}
    by_short: dict[str, list[tuple[dict, dict]]] = {}
    for data in shipped():
        for qualname, record in data.get("methods", {}).items():
            by_name.setdefault(qualname, (data, record))
            by_short.setdefault(qualname.rsplit(".", 1)[-1], []).append((data, record))
    return by_name, by_short


MethodRecord = tuple[list[Storage] | None, Storage | None, bool, Storage | None]


def method_record(qualname: str) -> MethodRecord | None:
    """What a shipped catalogue records of a quant method class outside the tree: (the storages
    its `create_weights` and after-loading give `weight`, None when its MRO has no
    `create_weights`; the storage its `process_weights_after_loading` leaves when it repacks or
    deletes `weight`; whether its MRO has a `process_weights_after_loading`; the storage a kernel
    object that method hands the layer to can leave), or None when no catalogue knows the class.
    A class named through a re-export of the engine's package is matched by its short name when
    exactly one class of that engine has it."""
    by_name, by_short = _methods()
    got = by_name.get(qualname)
    if got is None:
        same = [(data, record) for data, record in by_short.get(qualname.rsplit(".", 1)[-1], ())
                if qualname.split(".", 1)[0] == data["dist"].replace("-", "_")]
        got = same[0] if len(same) == 1 else None
    if got is None:
        return None
    data, record = got
    release = f"{data['dist']} {data['version']}"
    table = data["storages"]
    storages = None if "storages" not in record else \
        [_outside(Storage.from_dict(table[i]), release) for i in record["storages"]]
    after, kernel = record.get("after"), record.get("kernel")
    return (storages, None if after is None else _outside(Storage.from_dict(table[after]), release), "after" in record,
            None if kernel is None else _outside(Storage.from_dict(table[kernel]), release))


def _outside(storage: Storage, release: str) -> Storage:
    """The release's files are not the project's: their lines go into the words (`fp8.py:89 ->
    repack_utils.py:141 in vllm 0.33.0`), not into locations a reporter would resolve in the
    project."""
    located = [e for e in storage.evidence if e.path]
    ends = located[:1] + located[-1:] if len(located) > 1 else located
    where = " -> ".join(f"{e.path.rsplit('/', 1)[-1]}:{e.line}" for e in ends)
    evidence = tuple(Evidence(f"{e.message} ({e.path}:{e.line} in {release})" if e.path else e.message, "", 0)
                     for e in storage.evidence)
    return Storage(storage.backend, storage.method, storage.kind, storage.dtype,
                   f"{storage.what} ({where} in {release})" if where else f"{storage.what} ({release})",
                   evidence, storage.typed, storage.params)


def default_model(project, config_params: tuple[str, ...] = ("quant_config",)) -> StorageModel:
    """The tree's own backends first, then the shipped catalogue (engines imported, not scanned)."""
    from dtype_lint.analysis.storage.platforms import PlatformNarrowing

    code = CodeBackends(project, config_params, method_record)
    return StorageModel([code, CatalogueBackends()], PlatformNarrowing(code))
