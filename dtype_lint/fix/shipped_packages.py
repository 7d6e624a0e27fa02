"""Does a distribution install a package: the inferred helper's home must be one it does.

An inferred helper lives in the package holding the most sites (helper_home.py). The sites of a
project are not all in what its wheel installs: `tests/`, `benchmarks/` and `experiments/` hold
casts too, and a helper created there is imported by the fixed modules of the installed package,
which then fail with `No module named 'tests'` (or import another distribution's `tests`). So the
packages a distribution does not install are passed over, read statically from its packaging
files as distributions.py reads them. A package is named with dots where it lies below a
namespace folder (`acme.plug`), and matched as setuptools matches (`acme.plug*`; `pkg.*` names
only the subpackages):
- setuptools: `[tool.setuptools] packages` (a list, or `{find = {...}}`) and
  `[tool.setuptools.packages.find]` `where`/`include`/`exclude`; setup.cfg's `[options] packages` (a
  list, or `find:` with `[options.packages.find]`); a literal `packages=[...]` or
  `find_packages(include=..., exclude=...)` in setup.py. `py-modules` alone installs no package.
- Poetry's `packages = [{include = "..."}]` (not those with `format = "sdist"`), Hatch's wheel
  `packages`, `include` and `only-include`, PDM's `includes`, Flit's `[tool.flit.module] name`.
- Nothing declared: Hatch, Poetry and Flit install the package named after the project; setuptools'
  and PDM's discovery never installs setuptools' reserved names (`tests`, `docs`, `benchmarks`,
  `examples`, `scripts`, `tools`, names starting with `.` or `_`...;
  setuptools.discovery.FlatLayoutPackageFinder).
- A `packages=` setup.py computes: the package named after the project, when it has a name.
"""

from __future__ import annotations

import ast
import fnmatch
import os

from dtype_lint.fix.distributions import read_cfg, read_text, read_toml, setup_keywords, table

# setuptools' FlatLayoutPackageFinder._EXCLUDE (setuptools 80): never installed by discovery.
RESERVED = frozenset({
    "ci", "bin", "debian", "doc", "docs", "documentation", "manpages", "news", "newsfragments", "changelog",
    "test", "tests", "unit_test", "unit_tests", "example", "examples", "scripts", "tools", "util", "utils",
    "python", "build", "dist", "venv", "env", "requirements", "tasks", "fabfile", "site_scons", "benchmark",
    "benchmarks", "exercise", "exercises", "htmlcov",
})
# Build backends that install only the package named after the project unless told otherwise.
_NAMED_AFTER_PROJECT = ("hatchling.build", "poetry.core.masonry.api", "flit_core.buildapi")

Declared = tuple[tuple[str, ...], tuple[str, ...], "frozenset[str] | None"]  # include, exclude, `where` tops


def ships(package: str, folder: str) -> bool:
    """Would the distribution rooted at `folder` install `package` (dotted below a namespace
    folder)? Where its packaging files do not say, only a reserved name is taken not to be."""
    declared = declared_packages(folder)
    if declared is None:
        return not _reserved(package.split(".")[0])
    includes, excludes, where = declared
    if where is not None and package.split(".")[0] not in where:
        return False
    return any(fnmatch.fnmatchcase(package, p) for p in includes) and \
        not any(fnmatch.fnmatchcase(package, p) for p in excludes)


def installed_as(top: str, folder: str) -> str:
    """The name the distribution at `folder` installs the folder `top` under, where a setuptools
    `package-dir` (pyproject.toml, setup.cfg or a literal in setup.py) maps another name onto it
    (`{"myplug" = "lib"}`: `lib/` is `myplug` once installed, and `from lib.x import ...` fails
    there), else ""."""
    mapping = dict(table(read_toml(os.path.join(folder, "pyproject.toml")) or {}, "tool", "setuptools",
                          "package-dir"))
    cfg = read_cfg(os.path.join(folder, "setup.cfg"))
    if cfg is not None:
        for line in cfg.get("options", "package_dir", fallback="").splitlines():
            name, _, path = line.partition("=")
            mapping.setdefault(name.strip(), path.strip())
    keyword = _setup_keyword(folder, "package_dir")
    if isinstance(keyword, ast.Dict):
        try:
            mapping.update(ast.literal_eval(keyword))
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            pass
    for name, path in mapping.items():
        if name and isinstance(path, str) and path.strip("/").replace("\\", "/").split("/")[-1] == top and name != top:
            return str(name)
    return ""


def declared_packages(folder: str) -> Declared | None:
    """(include patterns, exclude patterns, the top-level names `where` finds or None) of the
    packages the distribution at `folder` installs, as its packaging files state them; None where
    they state nothing this can read (setuptools' and PDM's discovery)."""
    data = read_toml(os.path.join(folder, "pyproject.toml")) or {}
    setuptools = table(data, "tool", "setuptools")
    packages = setuptools.get("packages")
    if isinstance(packages, list):
        return tuple(str(p) for p in packages), (), None
    find = table(setuptools, "packages", "find")
    if find:
        where = find.get("where")
        tops = _folders(folder, [str(w) for w in where]) if isinstance(where, list) and where else None
        return _patterns(find.get("include")), _patterns(find.get("exclude"), ()), tops
    if isinstance(setuptools.get("py-modules"), list):
        return (), (), None  # modules, no package
    poetry = table(data, "tool", "poetry").get("packages")
    if isinstance(poetry, list):
        return _named(str(p["include"]) for p in poetry if isinstance(p, dict) and isinstance(p.get("include"), str)
                      and _in_wheel(p.get("format"))), (), None
    hatch = [table(data, "tool", "hatch", "build", "targets", "wheel"), table(data, "tool", "hatch", "build")]
    for build in hatch:
        for key in ("packages", "only-include", "include"):
            if isinstance(build.get(key), list):
                return _named(str(p) for p in build[key]), (), None
    pdm = table(data, "tool", "pdm", "build").get("includes")
    if isinstance(pdm, list):
        return _named(str(p) for p in pdm), (), None
    flit = table(data, "tool", "flit", "module").get("name")
    if isinstance(flit, str):
        return _named([flit]), (), None
    backend = table(data, "build-system").get("build-backend")
    name = _project_name(data)
    if backend in _NAMED_AFTER_PROJECT and name:
        return _named([name]), (), None
    return _setup_cfg(folder) or _setup_py(folder, name)


def _project_name(data: dict) -> str:
    """The project's name as an import name (`my-plug` -> `my_plug`), or ""."""
    name = table(data, "project").get("name") or table(data, "tool", "poetry").get("name") or ""
    return str(name).replace("-", "_").replace(".", "_").lower() if isinstance(name, str) else ""


def _in_wheel(fmt) -> bool:
    """Poetry's `format` of a `packages` entry: absent, "wheel", or a list holding it."""
    return fmt is None or fmt == "wheel" or (isinstance(fmt, list) and "wheel" in fmt)


def _named(paths) -> tuple[str, ...]:
    """Patterns for the packages a backend's path list names (`plug`, `src/plug`, `/plug`,
    `plug/**/*.py`): each path's package and its subpackages."""
    out: list[str] = []
    for path in paths:
        parts = [p for p in path.replace("\\", "/").strip("/").split("/") if p and p != "."]
        if parts and parts[0] == "src" and len(parts) > 1:
            parts = parts[1:]
        if parts and not any(c in parts[0] for c in "*?["):
            top = parts[0].removesuffix(".py")
            out += [top, f"{top}.*"]
    return tuple(dict.fromkeys(out))


def _patterns(value, default: tuple[str, ...] = ("*",)) -> tuple[str, ...]:
    """find_packages' include/exclude: patterns on the dotted name, as given."""
    if isinstance(value, (list, tuple)) and value:
        return tuple(str(p) for p in value)
    return default


def _folders(folder: str, where: list[str]) -> frozenset[str]:
    """The names of the folders directly in each of `where` (relative to `folder`)."""
    names: list[str] = []
    for rel in where:
        try:
            names += [e.name for e in os.scandir(os.path.join(folder, rel)) if e.is_dir()]
        except OSError:
            continue
    return frozenset(names)


def _reserved(top: str) -> bool:
    return top in RESERVED or top.startswith((".", "_"))


def _setup_cfg(folder: str) -> Declared | None:
    cfg = read_cfg(os.path.join(folder, "setup.cfg"))
    if cfg is None:
        return None
    value = cfg.get("options", "packages", fallback="").strip()

    def listed(section: str, key: str) -> list[str]:
        return [v.strip() for v in cfg.get(section, key, fallback="").replace(",", "\n").splitlines() if v.strip()]

    if value.startswith("find"):  # `find:` or `find_namespace:`
        where = listed("options.packages.find", "where")
        return (_patterns(listed("options.packages.find", "include")),
                _patterns(listed("options.packages.find", "exclude"), ()),
                _folders(folder, where) if where else None)
    if value:
        return tuple(listed("options", "packages")), (), None
    return None


def _setup_keyword(folder: str, keyword: str) -> ast.expr | None:
    """The expression of `keyword=` in setup.py's `setup(...)` call, or None."""
    text = read_text(os.path.join(folder, "setup.py"))
    return setup_keywords(text).get(keyword) if text is not None else None


def _setup_py(folder: str, name: str) -> Declared | None:
    value = _setup_keyword(folder, "packages")
    if value is None:
        return None
    if isinstance(value, (ast.List, ast.Tuple)):
        try:
            return tuple(str(p) for p in ast.literal_eval(value)), (), None
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            pass
    elif isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) in (
            "find_packages", "find_namespace_packages"):
        try:
            kwargs = {k.arg: ast.literal_eval(k.value) for k in value.keywords}
            where = kwargs.get("where")
            return (_patterns(kwargs.get("include")), _patterns(kwargs.get("exclude"), ()),
                    _folders(folder, [str(where)]) if isinstance(where, str) else None)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            pass
    # Computed: the package named after the project is the one it surely installs.
    name = name or _setup_name(folder)
    return (_named([name]), (), None) if name else None


def _setup_name(folder: str) -> str:
    value = _setup_keyword(folder, "name")
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value.replace("-", "_").replace(".", "_").lower()
    return ""
