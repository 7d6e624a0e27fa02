"""The installable packages (distributions) of a project, read from their packaging files.

A monorepo holds several: `packages/alpha/pyproject.toml` and `packages/beta/setup.cfg` are each
built and installed on their own, so a module of `beta` can import the shared helper only where
`beta` is installed with it: the helper lives in `beta` itself, or `beta` declares the package
that holds it. What each declares is read statically (nothing is executed, `setup.py` is parsed):
- the project name and its run-time dependencies (`[project] dependencies`, a
  `[tool.setuptools.dynamic]` requirements file, Poetry's `[tool.poetry.dependencies]`,
  setup.cfg's `install_requires`, a literal `install_requires=[...]` in setup.py); None where
  they are not written down statically (`dynamic = ["dependencies"]` with no file, a computed
  list): then nothing can be proved missing and nothing is refused for it;
- `requires-python` (setup.cfg/setup.py: `python_requires`; Poetry: the `python` dependency),
  whose lowest version the created helper must run on.

A folder is a distribution's root when it holds setup.py, a setup.cfg with `[metadata]` or
`[options]`, or a pyproject.toml with `[project]`, `[build-system]` or `[tool.poetry]` (a
pyproject.toml holding only tool settings, a monorepo's root one, is not a package).
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from dtype_lint.core.records import record
from dtype_lint.core.source import read_bytes

if TYPE_CHECKING:  # configparser itself is imported where a setup.cfg is read
    import configparser

# Packaging files are small; anything larger is not read (and the folder counts as no package).
_MAX_PACKAGING_BYTES = 1 << 20
_NAME = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")

# Import names whose distribution is named otherwise (the common ones of this ecosystem).
_DISTRIBUTION_OF_IMPORT = {
    "yaml": "pyyaml", "PIL": "pillow", "cv2": "opencv-python", "sklearn": "scikit-learn",
    "google": "protobuf", "attr": "attrs", "dateutil": "python-dateutil", "flash_attn": "flash-attn",
}


@record(frozen=True)
class Distribution:
    """One installable package: its root folder and what its packaging files declare."""
    folder: str  # absolute, real path
    marker: str  # the packaging file that makes it one (for messages)
    name: str  # normalised project name, "" when not declared statically
    dependencies: frozenset[str] | None  # normalised names; None: not declared statically
    requires_python: str  # the specifier as written, "" when not declared


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_of_import(top: str) -> str:
    """The (normalised) distribution name an import's top-level name is usually installed by."""
    return normalise(_DISTRIBUTION_OF_IMPORT.get(top, top))


def distribution_of(path: str | os.PathLike, root: str | os.PathLike) -> Distribution | None:
    """The distribution whose root is the nearest folder at or above `path` (a file or folder),
    up to the project root; None when no folder there is one."""
    real_root = os.path.realpath(root)
    folder = os.path.realpath(path)
    if not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    while True:
        found = _distribution_at(folder)
        if found is not None:
            return found
        parent = os.path.dirname(folder)
        if folder == real_root or parent == folder or not (folder + os.sep).startswith(real_root + os.sep):
            return None
        folder = parent


def lowest_python(specifier: str) -> tuple[int, int] | None:
    """The lowest `(major, minor)` a `requires-python` specifier admits (`>=3.8`, `~=3.9`,
    `>3.7,<4`, Poetry's `^3.8` or `3.8.*`), or None when it states no lower bound."""
    lows = []
    for clause in specifier.replace("||", ",").split(","):
        match = re.match(r"\s*(>=|>|~=|===|==|\^|~)?\s*(\d+)(?:\.(\d+))?", clause)
        if match:  # every operator but `<`, `<=` and `!=` (which do not match) bounds from below
            lows.append((int(match.group(2)), int(match.group(3) or 0)))
    return min(lows) if lows and "||" in specifier else (max(lows) if lows else None)


def _distribution_at(folder: str) -> Distribution | None:
    """The distribution rooted at `folder`, or None; re-read when a packaging file changes (a
    language server outlives edits to them)."""
    stamps: list[tuple[int, int] | None] = []
    for name in ("pyproject.toml", "setup.cfg", "setup.py"):
        try:
            st = os.stat(os.path.join(folder, name))
            stamps.append((st.st_mtime_ns, st.st_size))
        except OSError:
            stamps.append(None)
    if stamps == [None, None, None]:
        return None
    return _read_distribution(folder, tuple(stamps))


@functools.lru_cache(maxsize=1024)
def _read_distribution(folder: str, _stamps: tuple) -> Distribution | None:
    pyproject = read_toml(os.path.join(folder, "pyproject.toml")) or {}
    tool = table(pyproject, "tool")
    if "project" in pyproject or tool.get("poetry"):
        return _from_pyproject(folder, pyproject)
    # A pyproject.toml with only `[build-system]` leaves the metadata to setup.cfg or setup.py.
    setup_cfg = read_cfg(os.path.join(folder, "setup.cfg"))
    setup_py = read_text(os.path.join(folder, "setup.py"))
    if setup_cfg is not None and (setup_cfg.has_section("metadata") or setup_cfg.has_section("options")):
        return _from_setup_cfg(folder, setup_cfg, setup_py)
    if setup_py is not None:
        return _from_setup_py(folder, setup_py, "setup.py")
    if "build-system" in pyproject:
        return _from_pyproject(folder, pyproject)
    return None


def table(data: dict, *keys: str) -> dict:
    """The table at `keys` (`table(data, "tool", "setuptools")`), empty where any step is missing
    or not a table (a hand-written file may hold anything)."""
    for key in keys:
        value = data.get(key)
        if not isinstance(value, dict):
            return {}
        data = value
    return data


def setup_keywords(text: str) -> dict[str, ast.expr]:
    """The keyword arguments of the `setup(...)` calls of a setup.py's `text`, unevaluated (a later
    call's win); empty where it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    found: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup":
            found.update((k.arg, k.value) for k in node.keywords if k.arg is not None)
    return found


def _from_pyproject(folder: str, data: dict) -> Distribution:
    project = table(data, "project")
    poetry = table(data, "tool", "poetry")
    name = project.get("name") or poetry.get("name") or ""
    dependencies: frozenset[str] | None = None
    requires = project.get("requires-python") or ""
    dynamic = project.get("dynamic") or []
    if project and "dependencies" not in dynamic:
        dependencies = _names(project.get("dependencies") or [])
    elif "dependencies" in dynamic:
        files = data.get("tool", {}).get("setuptools", {}).get("dynamic", {}).get("dependencies", {})
        files = files.get("file") if isinstance(files, dict) else None
        dependencies = _requirement_files(folder, [files] if isinstance(files, str) else files)
    if poetry and not project:
        declared = table(poetry, "dependencies")
        requires = declared.get("python") if isinstance(declared.get("python"), str) else ""
        dependencies = frozenset(normalise(n) for n in declared if n != "python")
    if dependencies is None:  # a setuptools project may still declare them in setup.cfg/setup.py
        setup_cfg = read_cfg(os.path.join(folder, "setup.cfg"))
        if setup_cfg is not None and setup_cfg.has_option("options", "install_requires"):
            dependencies = _names(setup_cfg.get("options", "install_requires").splitlines())
    return Distribution(folder, "pyproject.toml", normalise(str(name)), dependencies,
                        requires if isinstance(requires, str) else "")


def _from_setup_cfg(folder: str, cfg: configparser.RawConfigParser, setup_py: str | None) -> Distribution:
    name = cfg.get("metadata", "name", fallback="")
    dependencies = (_names(cfg.get("options", "install_requires").splitlines())
                    if cfg.has_option("options", "install_requires") else None)
    requires = cfg.get("options", "python_requires", fallback="")
    if setup_py is not None and (dependencies is None or not name or not requires):
        from_py = _from_setup_py(folder, setup_py, "setup.cfg")
        name = name or from_py.name
        dependencies = dependencies if dependencies is not None else from_py.dependencies
        requires = requires or from_py.requires_python
    return Distribution(folder, "setup.cfg", normalise(name), dependencies, requires)


def _from_setup_py(folder: str, text: str, marker: str) -> Distribution:
    """What a `setup(...)` call states in literals (its other arguments are not evaluated)."""
    name, dependencies, requires = "", None, ""
    for arg, expr in setup_keywords(text).items():
        try:
            value = ast.literal_eval(expr)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            continue
        if arg == "name" and isinstance(value, str):
            name = value
        elif arg == "install_requires" and isinstance(value, (list, tuple)):
            dependencies = _names([v for v in value if isinstance(v, str)])
        elif arg == "python_requires" and isinstance(value, str):
            requires = value
    return Distribution(folder, marker, normalise(name), dependencies, requires)


def _requirement_files(folder: str, files) -> frozenset[str] | None:
    if not isinstance(files, list) or not files:
        return None
    lines: list[str] = []
    for rel in files:
        text = read_text(os.path.join(folder, str(rel)))
        if text is None:
            return None
        lines += [line for line in text.splitlines() if not line.lstrip().startswith(("-", "#"))]
    return _names(lines)


def _names(requirements) -> frozenset[str]:
    names = set()
    for requirement in requirements:
        match = _NAME.match(str(requirement)) if not str(requirement).lstrip().startswith("#") else None
        if match:
            names.add(normalise(match.group(1)))
    return frozenset(names)


def read_text(path: str) -> str | None:
    try:
        return read_bytes(path, _MAX_PACKAGING_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def read_toml(path: str) -> dict | None:
    text = read_text(path)
    if text is None:
        return None
    from dtype_lint.core import toml_docs

    try:
        data = toml_docs.loads(text)  # parsed once a process per text (pyproject.toml: config reads it too)
    except (toml_docs.reader().TOMLDecodeError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def read_cfg(path: str) -> configparser.RawConfigParser | None:
    text = read_text(path)
    if text is None:
        return None
    import configparser  # only where a setup.cfg is read

    cfg = configparser.RawConfigParser()
    try:
        cfg.read_string(text)
    except configparser.Error:
        return None
    return cfg


def relative(folder: str, root: Path) -> str:
    """A distribution's folder as messages show it."""
    rel = os.path.relpath(folder, os.path.realpath(root))
    return "the project root" if rel == "." else rel.replace(os.sep, "/")
