"""Compute the storage model of a whole engine tree (for the shipped catalogue and `explain`).

`project_facts(root)` builds the class index of a tree exactly as `dtype-lint check` does (the
same discovery, module table and index), with nothing cached; `compute(root, dist, version)` asks
the tree's own backends (`CodeBackends`) about every quantizable class the preset names and every
quant root of the tree's layer modules, and returns the catalogue's data (run/catalogue_data.py:
paths relative to the tree, so the data does not depend on where the release was unpacked).
"""

from __future__ import annotations

import os
from pathlib import Path

from dtype_lint.analysis.index.class_facts import ProjectFacts
from dtype_lint.run.catalogue_data import catalogue_data


def project_facts(root: str | Path, paths: list[str] | None = None):
    """(config, ProjectFacts) for the tree at `root`, as a check run there builds them."""
    from dtype_lint.core.config import load_config
    from dtype_lint.run.cache import Cache
    from dtype_lint.run.file_analysis import safe_read
    from dtype_lint.run.pipeline import _discover, _Project, build_index

    root = Path(root)
    config = load_config(root)
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


def compute(root: str | Path, dist: str, version: str) -> dict:
    """The catalogue data of the tree at `root` (scripts/catalogue.py)."""
    root = Path(root)
    here = os.getcwd()
    os.chdir(root)  # paths as a check run in the tree shows them
    try:
        config, project = project_facts(".")
        return catalogue_data(config, project, dist, version)
    finally:
        os.chdir(here)
