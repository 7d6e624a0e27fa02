"""TOML documents, parsed once a process per text.

A project's `pyproject.toml` is read by the pre-commit fast path (fast_path.py), by
`config.find_pyproject` and `config.load_config`, by the formatter style (project_style.py), the
distribution reader (fix/distributions.py) and the engine pins (engine_source.py): a run on one
edited file of this repository parsed its 8 KB text four times, 1.3-1.5 ms each. The parse is kept
by the text, so a file that changed is parsed again; each caller gets a copy of the document's
tables and arrays (its leaves, strings, numbers and dates, are immutable and shared), so a caller
that changes what it was given changes nothing another reads.

Standard library only, imported by the fast path before the engine; the reader itself (`tomllib`,
or `tomli` on Python 3.10) is imported on the first parse: a project without a TOML file never
needs it (it brings `datetime` and its regexes).
"""

from __future__ import annotations

import sys

MAX_KEPT = 8  # the texts kept: a run reads a handful of TOML files (pyproject.toml, ruff.toml, ...)
_parsed: dict[str, dict] = {}


def reader():
    """`tomllib` (Python 3.11+), or `tomli`, its backport and this package's dependency on 3.10."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return tomllib


def loads(text: str) -> dict:
    """`tomllib.loads(text)`, parsed once a process: raises what it raises (TOMLDecodeError,
    RecursionError), and a text that does not parse is not kept."""
    doc = _parsed.get(text)
    if doc is None:
        doc = reader().loads(text)
        if len(_parsed) >= MAX_KEPT:
            _parsed.clear()
        _parsed[text] = doc
    return _copied(doc)


def _copied(value):
    if type(value) is dict:
        return {key: _copied(item) for key, item in value.items()}
    if type(value) is list:
        return [_copied(item) for item in value]
    return value
