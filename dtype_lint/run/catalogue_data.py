"""The catalogue data of an engine's tree: what `CodeBackends` reads of its backends for every
quantizable class the preset names and every quant method class the dispatch reaches (the shipped
catalogues, scripts/catalogue.py through run/catalogue_build.py; an engine installed in a plugin's
environment, run/installed_engine.py). Paths are relative to the tree, so the data does not depend
on where the release was unpacked. Apart from catalogue_build.py, which builds a tree's class index
with the pipeline's own discovery: the run hands installed_engine.py to every index it builds, and
that must not import the pipeline back.
"""

from __future__ import annotations

import os

from dtype_lint.analysis.storage.platforms import PlatformNarrowing
from dtype_lint.analysis.storage.storage_model import CodeBackends, Storage
from dtype_lint.core.findings import Evidence


def catalogue_data(config, project, dist: str, version: str) -> dict:
    """The catalogue data of an engine's tree, from its class index as a check run in the tree's
    root builds it (paths relative to that root: run from there)."""
    # The engine's own tree: every class of it is in the tree, and no other release's
    # catalogue may decide what this one records.
    backends = CodeBackends(project, config.all_config_params, lambda _qualname: None)
    registry = PlatformNarrowing(backends)
    table: list[Storage] = []
    index_of: dict[Storage, int] = {}
    layers = {}
    # What a platform plugin's narrowing needs of the engine: the names each backend is
    # registered under, and each layer's classes (to match a plugin config's `isinstance`).
    names: dict[str, list[str]] = {}
    bases: dict[str, list[str]] = {}
    for name in config.all_quantizable:
        if project.index.class_location(name) is None:
            continue
        storages = backends.storages_for(name)
        if storages is None:
            continue
        for backend in backends.backends(name) or ():
            names.setdefault(backend.rsplit(".", 1)[-1], list(registry.names_of(backend)))
        bases[name] = [project.index.canonical(q) for q in project.index.mro(name)
                       if project.index.class_location(q) is not None]
        ids = []
        for s in sorted((_relative(s) for s in storages), key=_key):
            if s not in index_of:
                index_of[s] = len(table)
                table.append(s)
            ids.append(index_of[s])
        layers[name] = ids
    methods = _methods(project, backends, table, index_of)
    # Layers share most storages (every LinearBase subclass the same): each is stored once.
    return {"format": 1, "dist": dist, "version": version,
            "regenerate": f"python scripts/catalogue.py --dist {dist} --version {version}",
            "names": dict(sorted(names.items())), "mro": bases,
            "storages": [s.to_dict() for s in table], "layers": layers, "methods": methods}



def _methods(project, backends: CodeBackends, table: list[Storage], index_of: dict[Storage, int]) -> dict:
    """What a plugin's method class that subclasses one of the engine's needs (`class
    PluginFp8LinearMethod(Fp8LinearMethod)`): for each quant method the dispatch reached and each
    class of its MRO with a `create_weights` or `process_weights_after_loading`, the storages its
    `create_weights` gives (with its after-loading) and what its `process_weights_after_loading`
    leaves ("after": absent when its MRO has none, null when it leaves `weight` be; "kernel": the
    storage a kernel object it hands the layer to can leave, besides the one registered)."""
    index = project.index
    classes: set[str] = set()
    for method in backends.methods_read():
        for class_qualname in index.mro(method):
            if index.class_location(class_qualname) is not None and (
                    backends.defines(class_qualname, "create_weights")
                    or backends.defines(class_qualname, "process_weights_after_loading")):
                classes.add(index.canonical(class_qualname))

    def stored(storage: Storage) -> int:
        storage = _relative(storage)
        if storage not in index_of:
            index_of[storage] = len(table)
            table.append(storage)
        return index_of[storage]

    out = {}
    for class_qualname in sorted(classes):
        record: dict = {}
        if backends.has_method(class_qualname, "create_weights"):
            record["storages"] = sorted({stored(s) for s in backends.method_storages(class_qualname)})
        if backends.has_method(class_qualname, "process_weights_after_loading"):
            after = backends.after_loading_storage(class_qualname)
            record["after"] = None if after is None else stored(after)
            kernel = None if after is not None else backends.after_loading_storage(class_qualname, kernel=True)
            if kernel is not None:
                record["kernel"] = stored(kernel)
        out[class_qualname] = record
    return out


def dumps(data: dict) -> str:
    """The catalogue's file text: one storage per line, so a regeneration diffs readably."""
    import json

    head = {k: v for k, v in data.items() if k not in ("storages", "layers", "methods")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"{json.dumps(k)}: {json.dumps(v)},")
    lines.append('"storages": [')
    lines.append(",\n".join(json.dumps(s, sort_keys=True) for s in data["storages"]))
    lines.append("],")
    lines.append('"layers": {')
    lines.append(",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in data["layers"].items()))
    lines.append("},")
    lines.append('"methods": {')
    lines.append(",\n".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in data["methods"].items()))
    lines.append("}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _relative(s: Storage) -> Storage:
    return Storage(s.backend, s.method, s.kind, s.dtype, s.what,
                   tuple(Evidence(e.message, os.path.normpath(e.path) if e.path else "", e.line) for e in s.evidence),
                   s.typed, s.params)


def _key(s: Storage) -> tuple:
    return (s.backend, s.method, s.kind, s.dtype, s.what, tuple((e.message, e.path, e.line) for e in s.evidence))
