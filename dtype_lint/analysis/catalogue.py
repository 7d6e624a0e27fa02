"""The storage model of engines a project imports without containing them (shipped data).

An out-of-tree model or platform plugin imports vLLM's layers (`from vllm.model_executor.layers.linear
import ColumnParallelLinear`) but does not contain vLLM, so the tree's own backends cannot be read.
`dtype_lint/data/catalogue-<dist>-<version>.json` holds what `CodeBackends` computed from a pinned
release of the engine: layer class → the storages its backends can give `weight`, with the
backend's file (relative to the release) and line. `scripts/catalogue.py` regenerates it;
`tests/test_catalogue.py` checks that the shipped data equals a fresh computation.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from dtype_lint.analysis.storage_model import CodeBackends, Storage, StorageModel

# The layer classes whose storages the catalogue records: the quantizable roots of vLLM and the
# public subclasses a plugin builds (the preset's names).
FORMAT = 1


@lru_cache(maxsize=None)
def shipped() -> tuple[dict, ...]:
    """Every catalogue shipped with the tool (parsed once per process)."""
    out = []
    try:
        folder = resources.files("dtype_lint") / "data"
        entries = sorted(p for p in folder.iterdir() if p.name.startswith("catalogue-") and p.name.endswith(".json"))
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

    def storages_for(self, layer_class: str, construction: object = None) -> frozenset[Storage] | None:
        for data in shipped():
            layers = data.get("layers", {})
            if layer_class in layers:
                release = f"{data['dist']} {data['version']}"
                table = data["storages"]
                return frozenset(Storage.from_dict(dict(table[i], what=table[i]["what"] + f" ({release})"))
                                 for i in layers[layer_class])
        return None


def default_model(project, config_params: tuple[str, ...] = ("quant_config",)) -> StorageModel:
    """The tree's own backends first, then the shipped catalogue (engines imported, not scanned)."""
    return StorageModel([CodeBackends(project, config_params), CatalogueBackends()])
