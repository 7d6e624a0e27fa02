"""The description of an engine installed in a project's environment, computed once and kept.

A plugin whose environment holds vLLM (core/engine_source.py) is judged against that vLLM's own
code: the same description the shipped catalogues are (run/catalogue_data.py, over the installed
`vllm/` package alone), computed the first time (vLLM 0.34.0: about 10 s) and kept in the tool's
cache folder, `<cache>/engines/<dist>-<version>-<stamp>-<tool>.json`: the installed version, a
digest of its dist-info's RECORD (pip writes every installed file's hash there) and where it is
installed, and this tool's code stamp (another dtype-lint describes it anew). Pre-commit's next
run reads the file. Never imported: importing vLLM takes seconds and initialises CUDA.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dtype_lint.core.engine_source import ENGINES, EngineSource, tool_cache_root
from dtype_lint.core.writer import create_private
from dtype_lint.run.catalogue_data import catalogue_data, dumps

# The catalogues' format (analysis/storage/catalogue.FORMAT): a kept description of another is none.
FORMAT = 1


def describe_installed(source: EngineSource) -> dict | None:
    """The catalogue data of the installed engine `source` names, or None when it cannot be read."""
    from dtype_lint.run.fast_record import tool_stamp

    tool = tool_stamp()
    # One file per installed build and tool: a new dtype-lint describes it anew (its own file),
    # and a file is never rewritten, so a reader sees a whole one or none.
    path = tool_cache_root() / "engines" / f"{source.dist}-{source.version}-{source.stamp}-{tool}.json"
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(kept, dict) and kept.get("format") == FORMAT and kept.get("version") == source.version:
            return kept
    except (OSError, ValueError):
        pass
    here = os.getcwd()
    try:
        os.chdir(source.site)  # paths as a check run in the site would show them, as the shipped ones
        data = describe_tree(source.site, ENGINES[source.dist], source.dist, source.version)
    except (OSError, RecursionError, ValueError):
        return None
    finally:
        os.chdir(here)
    try:
        create_private(path, dumps(data).encode("utf-8"))
    except OSError:
        pass  # an unwritable cache: described again next run, never an error
    return data


def describe_tree(site: str, package: str, dist: str, version: str) -> dict:
    """The catalogue data of `package` in the folder `site` (the current folder), as its own project
    with the default settings: the project's pyproject.toml and .gitignore above a `.venv` are not
    the engine's, and site-packages holds every other installed package too. The class index is
    built as the pipeline builds one for a folder (discovery, a module table of headers, the
    preset's classes); the pipeline is not imported (it hands this module to every index)."""
    from dtype_lint.analysis.index.class_facts import ProjectFacts
    from dtype_lint.analysis.index.class_index import ModuleTable, QuantizableLayerIndex, extract_header
    from dtype_lint.core.config import Config
    from dtype_lint.core.discovery import discover_files
    from dtype_lint.core.source import READ_ERRORS, read_file
    from dtype_lint.run.file_analysis import safe_read

    config = Config(root=Path(site).resolve())
    found = discover_files([package], tuple(config.exclude), config.root)

    def load_header(module_file, module: str):
        try:
            text = read_file(module_file.path).text
        except READ_ERRORS:
            return None
        return extract_header(text, module, module_file.path, module_file.is_package)

    index = QuantizableLayerIndex(ModuleTable(found, load_header), config.all_quantizable,
                                  config.all_exempt_classes, config.all_not_quantizable)
    return catalogue_data(config, ProjectFacts(index, load_file=safe_read), dist, version)
