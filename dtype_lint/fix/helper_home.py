"""Which helper a run routes fixes through, and why there: configured, the preset's default, or
inferred from the project's layout.

`helper = "pkg.mod:func"` wins and must be valid (helper.locate_helper says why not). Unset, the
preset's default is used where it can live: the vLLM preset's helper belongs inside vLLM, so a
project that only imports vLLM cannot take it, and the generic preset's top-level module
`layer_input_dtype` at the project root is not importable from an installed package. Then the
helper goes into the project's own top-level package that holds the most sites to fix (`src/`
layouts included, `discovery.module_name` names the packages), as `<package>.layer_input_dtype`,
made from the `torch` template unless `helper-template` says otherwise.
A helper created there by an earlier run is found again, so pre-commit runs over different staged
files keep one helper.

In a monorepo (several installable packages, each with its own pyproject.toml, setup.cfg or
setup.py: distributions.py) each package is installed alone, so a helper nobody configured is
inferred per package, and each fixed file imports the one of its own package. Whatever the
choice, `reach_problem_for` says why a file still cannot import it (another package that does
not depend on it, a top-level import of the helper module the file's package does not provide:
helper_requirements.py); its fixes are then refused, the findings kept.
"""

from __future__ import annotations

import ast
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import field, replace
from pathlib import Path

from dtype_lint.core.config import Config
from dtype_lint.core.discovery import module_name, top_package
from dtype_lint.core.findings import Finding
from dtype_lint.core.records import record
from dtype_lint.core.source import read_file
from dtype_lint.fix.bound_names import fresh, identifiers
from dtype_lint.fix.distributions import distribution_of, relative
from dtype_lint.fix.helper_requirements import reach_problem
from dtype_lint.fix.helper_template import HelperError, HelperLocation, in_tree, locate_helper
from dtype_lint.fix.shipped_packages import installed_as, ships

INFERRED_MODULE = "layer_input_dtype"


@record
class HelperChoice:
    """The helper fixes are routed through, and how it was chosen."""
    location: HelperLocation | None  # None: no helper can be used (see `error`)
    config: Config  # the configuration fixes are planned with (its `helper` set when inferred)
    how: str  # "configured" | "preset" | "inferred" | "none"
    note: str = ""  # where and why, for the report and the user
    # The note's first line, for a warning read at a glance (the note is its `--verbose` detail).
    headline: str = ""
    error: str = ""
    # Monorepo: the choice for each installable package's folder (this one among them); files in
    # no package use this one.
    per_distribution: dict[str, HelperChoice] = field(default_factory=dict)

    @property
    def inferred(self) -> bool:
        return self.how == "inferred"

    def for_path(self, path: str, root: Path) -> HelperChoice:
        """The choice for the fixes of file `path`: its own package's helper in a monorepo."""
        if not self.per_distribution:
            return self
        dist = distribution_of(path, root)
        return self.per_distribution.get(dist.folder, self) if dist is not None else self

    def choices(self) -> list[HelperChoice]:
        """Every helper choice of the run, this one first."""
        return [self] + [c for c in self.per_distribution.values() if c is not self]


def package_root(top: str, files: Iterable[str], root: Path) -> Path | None:
    """The folder the scanned top-level package `top` is imported from (`src/` in a src layout)."""
    for file in files:
        mod = module_name(file, root)
        if mod and (mod == top or mod.startswith(top + ".")):  # `top` may be a namespace's package
            p = Path(file).resolve()
            n = len(mod.split("."))
            return p.parents[n if p.name == "__init__.py" else n - 1]
    # Not among the files of this run (`check tests/`): the package where the project keeps it.
    root = Path(root).resolve()
    places = [root]
    try:
        places += sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError:
        pass
    for place in places:
        if place.joinpath(*top.split("."), "__init__.py").is_file():
            return place
    return None


def configured_location(config: Config, files: Iterable[str]) -> HelperLocation:
    """Where `config`'s helper (set or the preset's default) lives. Raises HelperError."""
    module, func = config.helper_spec
    return locate_helper(module, func, config.template, config.root,
                         package_root(module.split(".")[0], files, config.root),
                         configured=bool(config.helper), preset=config.preset)


def choose_helper(config: Config, files: Iterable[str], needing: list[Finding],
                  preset_applies: Callable[[], bool] | None = None) -> HelperChoice:
    """The helper for fixes in `needing` (findings whose fix imports the helper); in a monorepo,
    one per installable package that has such fixes (`HelperChoice.per_distribution`). Raises
    HelperError only for a configured helper that cannot be used (a user error).
    `preset_applies()`: is the project the preset's engine or written on its layers
    (presets.writes_on_preset_layers)? Where it is not, the preset's default is not named as a
    helper that cannot be used: it simply does not apply there. None: it is taken to be."""
    if config.helper:
        location = configured_location(config, files)
        ignored = "" if location.exists else ignored_helper_problem(location, config.root)
        if ignored:  # an error only where a fix needs it: a check of an ignored tree has none
            return HelperChoice(None, config, "none", error=f"{ignored}. Stop ignoring it, or set `helper` to a "
                                                            "module git keeps")
        return HelperChoice(location, config, "configured")
    groups: dict[str, list[Finding]] = {}
    for f in needing:
        dist = distribution_of(f.path, config.root)
        if dist is not None:
            groups.setdefault(dist.folder, []).append(f)
    if len(groups) < 2:
        return _choose_one(config, files, needing, preset_applies)
    # The package with the most sites first: its choice is the run's (files in no package use it).
    ranked = sorted(groups, key=lambda folder: (-len(groups[folder]), folder))
    folder_of = {f: _folder_of(f, config.root) for f in files}
    per_distribution = {folder: _choose_one(config, [f for f in files if folder_of[f] == folder], groups[folder],
                                            preset_applies)
                        for folder in ranked}
    primary = per_distribution[ranked[0]]
    primary.per_distribution = per_distribution
    return primary


def _folder_of(path: str, root: Path) -> str:
    dist = distribution_of(path, root)
    return dist.folder if dist is not None else ""


def reach_problem_for(path: str, location: HelperLocation, root: Path) -> str:
    """Why a fix in `path` must not import the helper at `location` ("" when it may): see
    helper_requirements.reach_problem."""
    if location.exists:
        try:
            source = read_file(str(location.path)).text
        except (OSError, UnicodeDecodeError, ValueError, LookupError):
            return ""  # locate_helper has read it: a file changed since is the writer's to refuse
    else:
        source = location.source
        dist = distribution_of(path, root) if "." not in location.module else None
        here = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        if dist is not None and here in (dist.folder, os.path.join(dist.folder, "src")):
            # Beside a module the wheel installs at its top level, a new top-level module is in no
            # wheel: `py-modules` lists the distribution's, and setuptools' discovery refuses a
            # second top-level module beside the first. (Scripts in a folder below run in place.)
            return (f"the helper would be a new top-level module {_rel(location.path, root)}, which the "
                    f"distribution of {relative(dist.folder, root)} ({dist.marker}) does not install: set `helper` to "
                    "a module it installs")
    depth = len(location.module.split(".")) + (1 if location.path.name == "__init__.py" else 0)
    own_folder = Path(os.path.abspath(location.path)).parents[depth - 1]
    return reach_problem(path, location.module, location.path, source, root, own_folder)


def ignored_helper_problem(location: HelperLocation, root: Path) -> str:
    """Why the helper `location` must not be created (the ignore rules exclude its path), or ""."""
    from dtype_lint.fix.helper_requirements import ignored_path

    ignored = ignored_path(location.path, root)
    if ignored is None:
        return ""
    return (f"the helper `{location.module}` would be created as {_rel(location.path, root)}, which the project's "
            f"ignore rules exclude (`{ignored}` is ignored): the fixes would import a file that no clone has")


def _choose_one(config: Config, files: Iterable[str], needing: list[Finding],
                preset_applies: Callable[[], bool] | None = None) -> HelperChoice:
    """choose_helper for sites of one installable package (or of a project that is one)."""
    module, func = config.helper_spec
    top = module.split(".")[0]
    default, why_not, unset = None, "", ""
    if "." in module and not in_tree(top, package_root(top, files, config.root) or config.root, config.root):
        if preset_applies is None or preset_applies():
            why_not = (f"it belongs to package `{top}`, which this project does not hold "
                       f"(creating it here would shadow the installed `{top}`)")
        else:  # not the preset's engine, nor code on its layers: its helper's home is none of its business
            unset = (f"`helper` is not set, and the `{config.preset}` preset's default does not apply here "
                     "(no file is its engine's code or imports from its layers)")
    else:
        try:
            default = configured_location(config, files)
            why_not = _default_unusable(default, needing, config.root) or \
                ("" if default.exists else ignored_helper_problem(default, config.root))
        except HelperError as error:
            why_not = str(error)
    if default is not None and not why_not:
        return HelperChoice(default, config, "preset")
    why_not = unset or \
        f"`helper` is not set, and the {config.preset} preset's `{module}:{func}` cannot be used: {why_not}"
    try:
        inferred, base, reason = _infer(config, files, needing, func)
        # The project is not the preset's package: its helper must not import it (the vllm
        # template reads `vllm.platforms`), so it is made from the torch template unless set.
        cfg = replace(config, helper=f"{inferred}:{func}", helper_template=config.helper_template or "torch")
        location = locate_helper(inferred, func, cfg.template, config.root, base, configured=False,
                                 preset=config.preset)
        ignored = "" if location.exists else ignored_helper_problem(location, config.root)
        if ignored:
            raise HelperError(ignored)
    except HelperError as error:
        return HelperChoice(None, config, "none",
                            error=f"{why_not}; and no home for it could be inferred: {error}. "
                                  f"Set `helper = \"yourpackage.module:{func}\"` in [tool.dtype-lint]")
    rel = _rel(location.path, config.root)
    state = "the existing" if location.exists else "a new"
    note = (f"{why_not}; fixes use {state} `{inferred}:{func}` in {rel} ({reason}). "
            f"Pin it with `helper = \"{inferred}:{func}\"` in [tool.dtype-lint]")
    headline = (f"`helper` is not set: fixes use {state} {rel}, a home inferred from the code "
                f"(`--verbose` says why, and how to pin it)")
    return HelperChoice(location, cfg, "inferred", note=note, headline=headline)


def _default_unusable(location: HelperLocation, needing: list[Finding], root: Path) -> str:
    """Why the preset's default cannot serve these sites, or "" when it can."""
    if location.exists or "." in location.module:
        return ""
    # A top-level module created at `base` is importable only from modules imported from `base`.
    base = os.path.realpath(location.path.parent)
    for f in needing:
        mod = module_name(f.path, root)
        if "." in mod or os.path.basename(f.path) == "__init__.py" or os.path.realpath(os.path.dirname(f.path)) != base:
            return (f"a top-level module `{location.module}.py` in {_rel(location.path.parent, root)} is not "
                    f"importable from `{mod}` once its package is installed")
    return ""


def _infer(config: Config, files: Iterable[str], needing: list[Finding], func: str) -> tuple[str, Path, str]:
    """(module, the folder it is imported from, why) for a helper nobody configured."""
    root = config.root
    counts: Counter[str] = Counter()
    loose_dirs: Counter[str] = Counter()
    for f in needing:
        mod = module_name(f.path, root)
        if "." in mod or os.path.basename(f.path) == "__init__.py":
            # Below a namespace folder, its first regular package (`acme.plug`): a wheel ships that
            # package, not a module put in the namespace folder `acme/`.
            counts[top_package(mod, f.path) or mod] += 1
        else:
            loose_dirs[os.path.dirname(os.path.abspath(f.path))] += 1
    total = sum(counts.values()) + sum(loose_dirs.values())
    if counts:
        # A package its distribution does not install (`tests/`, `benchmarks/`) is no home: the
        # installed package's fixed modules would import it (shipped_packages.py).
        skipped = sorted(t for t in counts if not _installed(t, needing, root))
        ranked = sorted((t for t in counts if t not in skipped), key=lambda t: (-counts[t], t)) or \
            _installed_beside(skipped, files, root)
        # A helper an earlier run created is kept, wherever its sites were (pre-commit checks only
        # the staged files: the next commit's sites may all be in another package).
        existing = {t: base for t, base in existing_inferred(files, root, func).items() if t not in skipped}
        for top in ranked + sorted(set(existing) - set(ranked)):
            if top in existing:
                return f"{top}.{INFERRED_MODULE}", existing[top], (
                    f"an earlier run created it in package `{top}`; {_share(counts[top], total)} "
                    f"{'is' if counts[top] == 1 else 'are'} there")
        top = ranked[0]
        base = package_root(top, files, root)
        if base is None:
            raise HelperError(f"package `{top}` was not found among the checked files")
        layout = ", src/ layout" if base == Path(root).resolve() / "src" else ""
        others = f"; also in {', '.join(f'`{t}`' for t in ranked[1:] if counts[t])}" \
            if any(counts[t] for t in ranked[1:]) else ""
        not_installed = (f"; not in {', '.join(f'`{t}`' for t in skipped)}, which its distribution does not "
                         "install") if skipped else ""
        name = unshadowed_module(base.joinpath(*top.split(".")), INFERRED_MODULE, func)
        renamed = f"; named `{name}`: the package already uses `{INFERRED_MODULE}`" \
            if name != INFERRED_MODULE else ""
        return f"{top}.{name}", base, (
            f"package `{top}` holds {_share(counts[top], total)}{others}{not_installed}{layout}{renamed}")
    if len(loose_dirs) == 1:
        (folder,) = loose_dirs
        return INFERRED_MODULE, Path(folder), (
            f"the site to fix is in a top-level module of {_rel(Path(folder), root)}" if total == 1 else
            f"the {total} sites to fix are in top-level modules of {_rel(Path(folder), root)}")
    raise HelperError("the sites to fix are in top-level modules of several folders "
                      f"({', '.join(sorted(_rel(Path(d), root) for d in loose_dirs))}), and no package holds them")


def unshadowed_module(package_dir: Path, name: str, func: str = "") -> str:
    """`name` for a new module of the package at `package_dir`, unless its `__init__.py` may bind
    that name: importing the submodule sets the package's attribute `name`, and
    `pkg.layer_input_dtype(...)` would then call a module. It may where it uses the name (a
    function of its own, an import, a read), names it in a string (a module `__getattr__`,
    `globals()[...]`), or star-imports a module whose text holds it (or one it cannot read). Then
    `name_2`, `name_3`... the first it does not use: the same name on every run while the package is
    as it is, so a later run finds the helper an earlier one created there. With `func`, a module of
    the package under a candidate name that does not define `func` (the project's own
    `layer_input_dtype.py`, a `layer_input_dtype/` folder) is passed over too."""
    init = package_dir / "__init__.py"
    try:
        text = read_file(str(init)).text
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, ValueError, LookupError, SyntaxError, RecursionError, MemoryError):
        return name  # no `__init__.py` to shadow (a namespace folder), or one nothing can read
    taken = identifiers(tree)
    if func:
        taken |= _other_modules(package_dir, name, func)
    if name in text or any(name in _star_source(package_dir, node) for node in ast.walk(tree)
                           if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)):
        taken.add(name)
    return fresh(name, taken)


def _other_modules(package_dir: Path, name: str, func: str) -> set[str]:
    """The names `name`, `name_2`... of modules or folders of the package that are not a helper
    defining `func`: the project's own, which a created helper must not replace or be taken for."""
    out: set[str] = set()
    try:
        entries = list(os.scandir(package_dir))
    except OSError:
        return out
    for entry in entries:
        stem = entry.name.removesuffix(".py")
        if not (stem == name or (stem.startswith(name + "_") and stem[len(name) + 1:].isdigit())):
            continue
        if entry.is_dir() or (entry.name.endswith(".py") and not _defines(entry.path, func)):
            out.add(stem)
    return out


def _defines(path: str, func: str) -> bool:
    try:
        return f"def {func}(" in read_file(path).text
    except (OSError, UnicodeDecodeError, ValueError, LookupError):
        return False


def _star_source(package_dir: Path, node: ast.ImportFrom) -> str:
    """The text of the module `from <it> import *` in the package's `__init__.py` names, where it
    is one of the package's own (relative, or absolute through the package's name); the star
    itself where it cannot be read, which holds every name."""
    if node.level == 0:
        own = package_dir.name
        if not node.module or not (node.module == own or node.module.startswith(own + ".")):
            return "*" if node.module else ""
        parts = node.module.split(".")[1:]
        base = package_dir
    else:
        parts = (node.module or "").split(".") if node.module else []
        base = package_dir
        for _ in range(node.level - 1):
            base = base.parent
    target = base.joinpath(*parts) if parts else base
    for candidate in (target.with_suffix(".py"), target / "__init__.py"):
        try:
            return read_file(str(candidate)).text
        except (OSError, UnicodeDecodeError, ValueError, LookupError):
            continue
    return "*"


def _share(count: int, total: int) -> str:
    """`2 of the 5 sites to fix`, said as a reader would: `the one site to fix`, `both sites to
    fix`, `all 3 sites to fix`, `none of the 2 sites to fix`."""
    if count == total:
        return {1: "the one site to fix", 2: "both sites to fix"}.get(total, f"all {total} sites to fix")
    return f"none of the {total} sites to fix" if count == 0 else f"{count} of the {total} sites to fix"


def _installed(top: str, needing: list[Finding], root: Path) -> bool:
    """Does the distribution holding `top`'s sites install it (True where none holds them)?"""
    for f in needing:
        mod = module_name(f.path, root)
        if mod == top or mod.startswith(top + "."):
            dist = distribution_of(f.path, root)
            return dist is None or ships(top, dist.folder)
    return True


def _installed_beside(skipped: list[str], files: Iterable[str], root: Path) -> list[str]:
    """Every site is in a package its distribution does not install (`tests/`): the one package of
    the project that it does, where there is exactly one; else no home can be inferred."""
    tops: dict[str, str] = {}
    for file in files:
        mod = module_name(file, root)
        if "." in mod or os.path.basename(file) == "__init__.py":
            top = top_package(mod, file) or mod
            if top not in skipped and top not in tops:
                dist = distribution_of(file, root)
                if dist is None or ships(top, dist.folder):
                    tops[top] = file
    if len(tops) == 1:
        return list(tops)
    dist = distribution_of(root, root)
    renamed = [(t, installed_as(t, dist.folder)) for t in skipped] if dist is not None else []
    renamed = [(t, name) for t, name in renamed if name]
    if renamed:  # `package-dir`: the folder is installed under another name than its own
        folder, name = renamed[0]
        raise HelperError(f"the sites to fix are in folder `{folder}`, which the project's distribution installs as "
                          f"`{name}` (`package-dir`): an import of `{folder}.…` fails once installed")
    where = ", ".join(f"`{t}`" for t in skipped)
    raise HelperError(f"the sites to fix are in {where}, which the project's distribution does not install, and "
                      + ("no package it installs was found among the checked files" if not tops else
                         f"it installs several packages ({', '.join(f'`{t}`' for t in sorted(tops))})"))


def existing_inferred(files: Iterable[str], root: Path, func: str = "") -> dict[str, Path]:
    """Top-level package -> the folder it is imported from, for each `<package>.layer_input_dtype`
    among the files (with `func`, only one that defines it: the project's own module of that name
    is not a helper an earlier run created)."""
    found = {}
    for file in files:
        if os.path.basename(file) == INFERRED_MODULE + ".py" and (not func or _defines(file, func)):
            parts = module_name(file, root).split(".")
            if len(parts) >= 2 and top_package(".".join(parts), file) == ".".join(parts[:-1]):
                found[".".join(parts[:-1])] = Path(file).resolve().parents[len(parts) - 1]
    return found


def _rel(path: Path, root: Path) -> str:
    try:
        rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
        return rel if rel != "." else "the project root"
    except ValueError:
        return str(path)
