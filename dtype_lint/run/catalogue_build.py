"""Compute the storage model of a whole engine tree (for the shipped catalogue and `explain`).

`project_facts(root)` builds the class index of a tree exactly as `dtype-lint check` does (the
same discovery, module table and index), with nothing cached; `compute(root, dist, version)` asks
the tree's own backends (`CodeBackends`) about every quantizable class the preset names and every
quant root of the tree's layer modules, and returns the catalogue's data (paths relative to the
tree, so the data does not depend on where the release was unpacked).
"""

from __future__ import annotations

import os
from pathlib import Path

from dtype_lint.analysis.index.class_facts import ProjectFacts
from dtype_lint.analysis.storage.platforms import PlatformNarrowing
from dtype_lint.analysis.storage.storage_model import CodeBackends, Storage
from dtype_lint.core.findings import Evidence


def project_facts(root: str | Path, paths: list[str] | None = None, alone: bool = False):
    """(config, ProjectFacts) for the tree at `root`, as a check run there builds them.
    `alone`: the tree is its own project with the default settings, whatever configuration a
    folder above it holds (an engine installed in a project's `.venv`: the project's
    pyproject.toml and .gitignore are not the engine's)."""
    from dtype_lint.core.config import Config, load_config
    from dtype_lint.run.cache import Cache
    from dtype_lint.run.file_analysis import safe_read
    from dtype_lint.run.pipeline import _discover, _Project, build_index

    root = Path(root)
    config = Config(root=root.resolve()) if alone else load_config(root)
    found, index_found = _discover(config, [str(p) for p in (paths or [str(root)])])
    cache = Cache(root / config.cache_dir, key="none", enabled=False, root=root)
    project = _Project(index_found, found, cache)
    index = build_index(project.table, config)
    return config, ProjectFacts(index, load_file=safe_read)


def project_facts_for(path: str, config_file: str | None = None):
    """(config, ProjectFacts) for the project a file belongs to (its configuration's root)."""
    from dtype_lint.core.config import load_for_run
    from dtype_lint.run.cache import Cache
    from dtype_lint.run.file_analysis import safe_read
    from dtype_lint.run.pipeline import _discover, _Project, build_index

    config = load_for_run([path], config_file)
    if config.source == "defaults":  # no configuration: the project is the folder run from, as for `check .`
        config = load_for_run(["."], config_file)
    root = os.path.relpath(config.root)
    found, index_found = _discover(config, [root if not root.startswith("..") else str(config.root)])
    cache = Cache(config.root / config.cache_dir, key="none", enabled=False, root=config.root)
    project = _Project(index_found, found, cache)
    return config, ProjectFacts(build_index(project.table, config), load_file=safe_read)


def compute(root: str | Path, dist: str, version: str, package: str | None = None) -> dict:
    """The catalogue data of the tree at `root` (of its `package` folder alone, as its own
    project: an installed engine's site-packages holds every other installed package too)."""
    root = Path(root)
    here = os.getcwd()
    os.chdir(root)  # paths as a check run in the tree shows them
    try:
        config, project = project_facts(".", [package] if package else None, alone=package is not None)
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
    finally:
        os.chdir(here)
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
