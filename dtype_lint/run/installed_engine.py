"""The description of an engine installed in a project's environment, computed once and kept.

A plugin whose environment holds vLLM (core/engine_source.py) is judged against that vLLM's own
code: the same description the shipped catalogues are (run/catalogue_build.py's `compute`, over the
installed `vllm/` package alone), computed the first time (vLLM 0.34.0: about 10 s) and kept in the
tool's cache folder, `<cache>/engines/<dist>-<version>-<stamp>.json`: the installed version, a
digest of its dist-info's RECORD (pip writes every installed file's hash there) and where it is
installed, with this tool's code stamp inside (another dtype-lint computes it again). Pre-commit's
next run reads the file. Never imported: importing vLLM takes seconds and initialises CUDA.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dtype_lint.core.engine_source import ENGINES, EngineSource, tool_cache_root

# The catalogues' format (analysis/storage/catalogue.FORMAT): a kept description of another is none.
FORMAT = 1


def describe_installed(source: EngineSource) -> dict | None:
    """The catalogue data of the installed engine `source` names, or None when it cannot be read."""
    from dtype_lint.run.fast_record import tool_stamp

    tool = tool_stamp()
    path = tool_cache_root() / "engines" / f"{source.dist}-{source.version}-{source.stamp}.json"
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(kept, dict) and kept.get("tool") == tool and kept.get("format") == FORMAT:
            return kept
    except (OSError, ValueError):
        pass
    from dtype_lint.run import catalogue_build

    try:
        data = catalogue_build.compute(Path(source.site), source.dist, source.version, package=ENGINES[source.dist])
    except (OSError, RecursionError, ValueError):
        return None
    data["tool"] = tool
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temp.write_text(catalogue_build.dumps(data), encoding="utf-8")
        os.replace(temp, path)  # a reader sees no file or a whole one
    except OSError:
        pass  # an unwritable cache: described again next run, never an error
    return data
