"""Does a distribution install a top-level package: the inferred helper's home must be one it does.

An inferred helper lives in the top-level package holding the most sites (helper_home.py). The
sites of a project are not all in what its wheel installs: `tests/` and `benchmarks/` hold casts
too, and a helper created there is imported by the fixed modules of the installed package, which
then fail with `No module named 'tests'` (or import another distribution's `tests`). So the
packages a distribution does not install are passed over, read statically from its packaging
files as distributions.py reads them:
- setuptools: `[tool.setuptools] packages` (a list, or `{find = {...}}`) and
  `[tool.setuptools.packages.find]` `include`/`exclude`; setup.cfg's `[options] packages` (a list,
  or `find:` with `[options.packages.find]`); a literal `packages=[...]` or
  `find_packages(include=..., exclude=...)` in setup.py. `py-modules` alone installs no package.
- Poetry's `packages = [{include = "..."}]`, Hatch's `[tool.hatch.build.targets.wheel] packages`,
  Flit's `[tool.flit.module] name`.
- Nothing declared: automatic discovery, which never installs setuptools' reserved names
  (`tests`, `docs`, `benchmarks`, `examples`, `scripts`, `tools`, names starting with `.` or `_`...;
  setuptools.discovery.FlatLayoutPackageFinder); Poetry, Hatch and Flit install the package named
  after the project, which is none of them.
A form this does not read (a computed `packages=`) tells nothing: only the reserved names are
passed over then.
"""

from __future__ import annotations

import ast
import fnmatch
import os

from dtype_lint.fix.distributions import read_cfg, read_text, read_toml

# setuptools' FlatLayoutPackageFinder._EXCLUDE (setuptools 80): never installed by discovery.
RESERVED = frozenset({
    "ci", "bin", "debian", "doc", "docs", "documentation", "manpages", "news", "newsfragments", "changelog",
    "test", "tests", "unit_test", "unit_tests", "example", "examples", "scripts", "tools", "util", "utils",
    "python", "build", "dist", "venv", "env", "requirements", "tasks", "fabfile", "site_scons", "benchmark",
    "benchmarks", "exercise", "exercises", "htmlcov",
})


def ships(top: str, folder: str) -> bool:
    """Would the distribution rooted at `folder` install the top-level package `top`? True when
    its packaging files do not say (only a reserved name is then taken not to be)."""
    declared = declared_packages(folder)
    if declared is None:
        return not _reserved(top)
    includes, excludes = declared
    return any(fnmatch.fnmatchcase(top, p) for p in includes) and not any(fnmatch.fnmatchcase(top, p)
                                                                          for p in excludes)


def installed_as(top: str, folder: str) -> str:
    """The name the distribution at `folder` installs the folder `top` under, where its setuptools
    `package-dir` maps another name onto it (`{"myplug" = "lib"}`: `lib/` is `myplug` once
    installed, and `from lib.x import ...` fails there), else ""."""
    data = read_toml(os.path.join(folder, "pyproject.toml")) or {}
    mapping = _table(data, "tool", "setuptools", "package-dir")
    for name, path in mapping.items():
        if name and isinstance(path, str) and path.strip("/").replace("\\", "/").split("/")[-1] == top and name != top:
            return str(name)
    return ""


def declared_packages(folder: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(include, exclude) fnmatch patterns of the top-level packages the distribution at `folder`
    installs, as its packaging files state them; None where they state nothing this can read."""
    data = read_toml(os.path.join(folder, "pyproject.toml")) or {}
    setuptools = _table(data, "tool", "setuptools")
    packages = setuptools.get("packages")
    if isinstance(packages, list):
        return _tops(packages), ()
    find = _table(setuptools, "packages", "find")
    if find:
        includes, excludes = _found(find.get("include"), find.get("exclude"))
        where = find.get("where")
        if isinstance(where, list) and where:  # only what is found there (`src/`, not `tests/` beside it)
            found = _folders(folder, [str(w) for w in where])
            includes = tuple(t for t in found if any(fnmatch.fnmatchcase(t, p) for p in includes))
        return includes, excludes
    if isinstance(setuptools.get("py-modules"), list):
        return (), ()  # modules, no package
    poetry = _table(data, "tool", "poetry").get("packages")
    if isinstance(poetry, list):
        return tuple(str(p["include"]).strip("/").split("/")[0] for p in poetry
                     if isinstance(p, dict) and isinstance(p.get("include"), str)), ()
    wheel = _table(data, "tool", "hatch", "build", "targets", "wheel").get("packages")
    if isinstance(wheel, list):
        return tuple(os.path.basename(str(p).rstrip("/")) for p in wheel), ()
    flit = _table(data, "tool", "flit", "module").get("name")
    if isinstance(flit, str):
        return (flit.split(".")[0],), ()
    return _setup_cfg(folder) or _setup_py(folder)


def _table(data: dict, *keys: str) -> dict:
    """The table at `keys` (`tool.setuptools`), empty where any step is missing or not a table (a
    hand-written file may hold anything)."""
    for key in keys:
        value = data.get(key)
        if not isinstance(value, dict):
            return {}
        data = value
    return data


def _folders(folder: str, where: list[str]) -> tuple[str, ...]:
    """The names of the folders directly in each of `where` (relative to `folder`)."""
    names: list[str] = []
    for rel in where:
        try:
            names += [e.name for e in os.scandir(os.path.join(folder, rel)) if e.is_dir()]
        except OSError:
            continue
    return tuple(names)


def _reserved(top: str) -> bool:
    return top in RESERVED or top.startswith((".", "_"))


def _tops(names) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(n).split(".")[0] for n in names if isinstance(n, str) and n))


def _found(include, exclude) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """find_packages' include/exclude as patterns on a top-level name (`pkg*` includes `pkg` and
    its subpackages; `pkg.*` excludes only the subpackages, so it excludes no top-level package)."""
    includes = tuple(str(p).split(".")[0] for p in include) if isinstance(include, list) and include else ("*",)
    excludes = tuple(str(p) for p in exclude if "." not in str(p)) if isinstance(exclude, list) else ()
    return includes, excludes


def _setup_cfg(folder: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    cfg = read_cfg(os.path.join(folder, "setup.cfg"))
    if cfg is None:
        return None
    value = cfg.get("options", "packages", fallback="").strip()
    if value.startswith("find"):  # `find:` or `find_namespace:`
        split = lambda key: [v.strip() for v in cfg.get("options.packages.find", key, fallback="").replace(",", "\n")  # noqa: E731
                             .splitlines() if v.strip()]
        return _found(split("include"), split("exclude"))
    if value:
        return _tops(v.strip() for v in value.replace(",", "\n").splitlines()), ()
    return None


def _setup_py(folder: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    text = read_text(os.path.join(folder, "setup.py"))
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup"):
            continue
        for keyword in node.keywords:
            if keyword.arg != "packages":
                continue
            value = keyword.value
            if isinstance(value, (ast.List, ast.Tuple)):
                try:
                    return _tops(ast.literal_eval(value)), ()
                except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                    return None
            if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) in (
                    "find_packages", "find_namespace_packages"):
                kwargs = {}
                for k in value.keywords:
                    try:
                        kwargs[k.arg] = ast.literal_eval(k.value)
                    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                        return None
                return _found(list(kwargs.get("include") or []), list(kwargs.get("exclude") or []))
            return None
    return None
