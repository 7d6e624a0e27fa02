"""The project's import and formatting style, read from its configuration files (see
fix/formatting.py's docstring for what is read and why).

Below every stage because `Config.fingerprint` puts the style into each cache key: a setting the
fixer learns to read lands in `ProjectStyle`, and so in the key. The fixes that use the style
(import placement, wrapping) live in fix/.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import field
from pathlib import Path

from dtype_lint.core.records import record

DEFAULT_LINE_LENGTH = 88

FUTURE, STDLIB, THIRD_PARTY, FIRST_PARTY, LOCAL_FOLDER = range(5)


@record(frozen=True)
class ProjectStyle:
    """How the project sorts and wraps imports (isort's sections, its line length), for the lines a fix adds."""
    line_length: int | None = None
    first_party: frozenset[str] = field(default_factory=frozenset)
    third_party: frozenset[str] = field(default_factory=frozenset)
    force_sort_within_sections: bool = False

    def section(self, module: str, level: int = 0) -> int:
        """isort's section of an import of `module` (`level`: dots of a relative import)."""
        if level:
            return LOCAL_FOLDER
        top = module.split(".")[0]
        if top == "__future__":
            return FUTURE
        if top in self.third_party:
            return THIRD_PARTY
        if top in self.first_party:
            return FIRST_PARTY
        if top in sys.stdlib_module_names:
            return STDLIB
        return THIRD_PARTY


def _read(path: Path) -> dict:
    """A formatter's TOML document, or {} (read with the one safe reader and the configuration's
    size limit, not through config.read_toml: `Config.fingerprint` reads the style, so config
    imports this module)."""
    from dtype_lint.core.safe_read import read_bytes

    if not path.is_file():
        return {}  # before importing tomllib: a project without the file never needs it
    from dtype_lint.core import toml_docs

    try:
        return toml_docs.loads(read_bytes(path, 1 << 20).decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # UnicodeDecodeError and TOMLDecodeError are ValueErrors
        return {}  # a broken formatter configuration is the formatter's to report, not ours


def _get(table: object, *keys: str):
    for key in keys:
        if not isinstance(table, dict):
            return None
        table = table.get(key)
    return table


def line_length_for(config) -> int | None:
    """The length a fix wraps at: the `line-length` setting, else the project's formatter's."""
    return config.line_length or project_style(str(config.root)).line_length


@functools.lru_cache(maxsize=32)
def project_style(root: str) -> ProjectStyle:
    """The style of the project at `root` (see the module docstring)."""
    base = Path(root)
    pyproject = _read(base / "pyproject.toml")
    tool = pyproject.get("tool", {}) if isinstance(pyproject.get("tool", {}), dict) else {}
    ruff = next((doc for doc in (_read(base / ".ruff.toml"), _read(base / "ruff.toml")) if doc), None)
    if ruff is None:
        ruff = tool.get("ruff", {}) if isinstance(tool.get("ruff", {}), dict) else {}
    black = tool.get("black", {}) if isinstance(tool.get("black", {}), dict) else {}
    isort = tool.get("isort", {}) if isinstance(tool.get("isort", {}), dict) else {}
    ruff_isort = _get(ruff, "lint", "isort") or _get(ruff, "isort") or {}

    length = next((v for v in (ruff.get("line-length"), black.get("line-length"), isort.get("line_length"))
                   if isinstance(v, int) and v > 0), None)
    if length is None and isort.get("profile") == "google":
        length = 80
    if length is None and (ruff or "black" in tool or "isort" in tool):
        length = DEFAULT_LINE_LENGTH
    first = set(_strings(ruff_isort.get("known-first-party"))) | set(_strings(isort.get("known_first_party")))
    third = set(_strings(ruff_isort.get("known-third-party"))) | set(_strings(isort.get("known_third_party")))
    folders = [base, base / "src"] + [base / s for s in _strings(ruff.get("src"))]
    for folder in folders:
        first |= _top_level_names(folder)
    force = ruff_isort.get("force-sort-within-sections", isort.get("force_sort_within_sections", False))
    return ProjectStyle(length, frozenset(first - third), frozenset(third), bool(force))


def _strings(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _top_level_names(folder: Path) -> set[str]:
    """Packages and modules directly in `folder`, as Ruff's first-party detection sees them."""
    from dtype_lint.core.discovery import is_namespace_folder

    try:
        entries = list(os.scandir(folder))
    except OSError:
        return set()
    names = set()
    for e in entries:
        if e.name.startswith("."):
            continue
        if e.name.endswith(".py") and e.name != "setup.py":
            names.add(e.name[:-3])
        elif e.is_dir() and (os.path.exists(os.path.join(e.path, "__init__.py")) or is_namespace_folder(e.path)):
            # A namespace folder (PEP 420) is a folder Ruff and isort find too (they take any folder).
            names.add(e.name)
    return names
