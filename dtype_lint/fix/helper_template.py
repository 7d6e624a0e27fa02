"""The shared input-dtype helper: its template, where it lives in a project, and what it decides.

One function owns the decision "what dtype must an activation have before entering this layer"
(`helper = "pkg.mod:func"`). `--fix` and `migrate` route sites through it and create it from a
template where the project does not have it yet. What it decides is never copied by hand: the
idiom proof and the soundness checks evaluate the helper's own source (dtype_eval.py), the
project's file when it exists, else the template text below.

The templates are the ecosystems' (the registry's `template` role): `vllm`
(ecosystems/vllm/template.py, which says how it differs from upstream vLLM and where that is
proven) and `torch` (ecosystems/generic/template.py, the same decisions with only torch).

Every storage that is not packed (every floating and complex dtype: complex64 weights are data,
not packed integers) gets the weight's own dtype, as the cast it replaces did; only fp8 with
fp8_input False differs (None: the layer quantizes its input). tests/test_trust_round3_templates.py
runs both templates and the HF one on every dtype torch defines.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import sys
from dataclasses import field
from pathlib import Path

from dtype_lint.core.records import record
from dtype_lint.core.source import read_file
from dtype_lint.dtypes.evaluator import STORAGES, HelperShape, Table, Unsupported, evaluate_helper, helper_shape
from dtype_lint.ecosystems.registry import plugins

# Template name -> (its imports, its test of an fp8 weight, docstring, body), from the ecosystems that
# ship one (the `template` role: ecosystems/vllm/template.py, ecosystems/generic/template.py).
_TEMPLATES: dict[str, tuple[str, str, str, str]] = {
    name: parts for module in plugins("template") for name, parts in module.TEMPLATES.items()}
_HEADERS = {name: parts[0] for name, parts in _TEMPLATES.items()}
TEMPLATES = tuple(_HEADERS)


def decision_rows() -> list[str]:
    """The helper's decisions as its docstring states them, one `case -> result` line each (the
    evaluator proves the code agrees: tests/test_truth_table.py)."""
    return [line.strip() for line in _TEMPLATES[TEMPLATES[0]][2].splitlines() if "->" in line]


def helper_source(func: str, template: str, vllm_first_party: bool = True) -> str:
    """The text of the helper module `--fix` creates. `vllm_first_party`: isort puts `vllm` in
    its own first-party block (the helper lives in vLLM itself); in a plugin project `vllm` is
    third party, in one block with torch."""
    if template not in _HEADERS:
        raise ValueError(f"unknown helper template {template!r}")
    header = _HEADERS[template] if vllm_first_party else _HEADERS[template].replace("import torch\n\nfrom vllm",
                                                                                     "import torch\nfrom vllm")
    return (
        '"""Created by dtype-lint: the one place that decides a layer\'s input dtype."""\n\n'
        + header
        + _signature(func)
        + _TEMPLATES[template][2]
        + _TEMPLATES[template][3].format(is_fp8=_TEMPLATES[template][1])
    )


# Stands for the helper's name while the template's own names are collected: no Python name a
# template can use (two leading underscores and a word no code spells).
_PLACEHOLDER = "__dtype_lint_helper_placeholder__"


@functools.lru_cache(maxsize=None)
def template_names(template: str) -> frozenset[str]:
    """Every name the template's module text binds or reads (imports, globals, builtins, its
    parameters and locals), the helper's own name aside: a helper called by one of them would
    shadow it (core/config.py refuses such a `helper`). Computed from the text, never listed by hand."""
    from dtype_lint.fix.bound_names import identifiers

    return frozenset(identifiers(ast.parse(helper_source(_PLACEHOLDER, template))) - {_PLACEHOLDER})


def refuse_template_names(helper: str, template: str) -> None:
    """Raise HelperError when `helper = "pkg.mod:NAME"` names the function like a name the
    template's own text uses (`getattr`, `torch`, `_FP8_DTYPES`, ...) or a builtin: the created
    helper would shadow it in its module, and every fixed site would raise. The names come from
    the text (`template_names`), so an edit of the template keeps this check true; any builtin
    counts (the template may call any, and a module-level `def` hides it there)."""
    import builtins

    func = helper.rpartition(":")[2]
    if template not in _HEADERS or not func:
        return
    if func in template_names(template) or hasattr(builtins, func):
        what = (f"a name the `{template}` helper template uses" if func in template_names(template)
                else "a Python builtin")
        raise HelperError(f"`helper = \"{helper}\"`: `{func}` is {what}; the helper would shadow it and every "
                          "fixed site would fail. Choose another function name (e.g. `get_layer_input_dtype`)")


def _signature(func: str) -> str:
    """The helper's `def` line, as Black and `ruff format` lay it out: every line of the created
    module fits in 79 columns (PEP 8, and the shortest line length projects configure)."""
    one_line = f"def {func}(layer: torch.nn.Module, fp8_input: bool) -> torch.dtype | None:"
    if len(one_line) <= 79:
        return f"\n\n{one_line}\n"
    return f"\n\ndef {func}(\n    layer: torch.nn.Module, fp8_input: bool\n) -> torch.dtype | None:\n"


def function_table(source: str, func: str, storages: tuple[str | None, ...] = STORAGES) -> Table:
    """What `func` in module text `source` decides, case by case. Raises Unsupported."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
            shape = helper_shape(node)
            if shape is None and storages != STORAGES:
                # The proof that a fix casts as before (UNPACKED storages) reads the function the
                # fix calls as `func(layer, flag)` whatever else it takes: the rest are unknowns.
                params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
                if params:
                    shape = HelperShape(params[0], params[1] if len(params) > 1 else None, tuple(params[2:]))
            return evaluate_helper(node, tree, shape, storages=storages)
    raise Unsupported(f"no function `{func}`")


_TABLES: dict[tuple, Table | None] = {}


def helper_table(module: str, func: str, template: str, path: str | None,
                 storages: tuple[str | None, ...] = STORAGES) -> Table | None:
    """The configured helper's decisions (on `storages`): from its file when the project has it,
    else from the template it would be created from. None when its code is beyond the evaluator."""
    source = None
    if path is not None:
        try:  # keyed by the helper's text, not its mtime (a same-tick rewrite)
            source = read_file(path).text
        except FileNotFoundError:
            path = None  # not created yet: the template it will be made from
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError, LookupError):
            return None  # beyond the evaluator, as before: unreadable
    key = (module, func, template, path, source, storages)
    if key not in _TABLES:
        try:
            _TABLES[key] = function_table(source if source is not None else helper_source(func, template), func,
                                          storages)
        except (Unsupported, SyntaxError, OSError, UnicodeDecodeError, ValueError, LookupError, RecursionError,
                MemoryError):
            _TABLES[key] = None
    return _TABLES[key]


class HelperError(Exception):
    """The helper cannot be used or created as configured (a user error: exit 2)."""


@record
class HelperLocation:
    """Where the shared helper is, or is to be created: its module, function and file."""
    module: str
    func: str
    path: Path
    exists: bool
    source: str = ""  # the template text when it must be created
    # Package markers (`__init__.py`) the created helper needs, in creation order.
    package_markers: list[Path] = field(default_factory=list)


def locate_helper(module: str, func: str, template: str, root: Path, package_root: Path | None,
                  configured: bool, preset: str) -> HelperLocation:
    """Where `module:func` lives: under `package_root` (the folder holding the scanned tree's
    top-level package of the same name) when known, else under the project `root`.

    Raises HelperError when the helper cannot live there: its top-level name belongs to the
    standard library or an installed package the project does not hold, creating it would shadow
    a module, or the module exists and does not define `func`."""
    parts = module.split(".")
    base = package_root or root
    path = base.joinpath(*parts[:-1], parts[-1] + ".py")
    pkg_init = base.joinpath(*parts, "__init__.py")
    if pkg_init.exists():
        path = pkg_init
    if not configured and len(parts) > 1 and not in_tree(parts[0], base, root):
        # The preset's default lives in a package this tree does not hold (vLLM, for a project
        # that imports it): creating `vllm/__init__.py` here would shadow the installed package.
        raise HelperError(
            f"the {preset} preset's helper `{module}:{func}` belongs to package `{parts[0]}`, "
            f"which is not among the checked files; creating it under {base} would shadow the installed "
            f"`{parts[0]}`. Set `helper = \"yourpackage.module:{func}\"` in [tool.dtype-lint]")
    _refuse_foreign(module, func, base, root)
    _refuse_shadowing(module, func, base)
    if path.exists():
        try:
            tree = ast.parse(read_file(str(path)).text)
        except (SyntaxError, OSError, UnicodeDecodeError, ValueError, LookupError, RecursionError,
                MemoryError) as error:
            raise HelperError(f"helper module {path} cannot be read: {error}") from None
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func]
        if not defs:
            raise HelperError(f"{path} exists but defines no `{func}`; add it or point `helper` elsewhere")
        from dtype_lint.analysis.helper_functions import call_problem

        problem = call_problem(defs[-1], tree)
        if problem:
            raise HelperError(f"helper `{module}:{func}` in {path} cannot be called as fixes call it: {problem}")
        return HelperLocation(module, func, path, True)
    from dtype_lint.core.project_style import FIRST_PARTY, project_style

    vllm_first_party = project_style(str(root)).section("vllm") == FIRST_PARTY
    source = _creatable_source(module, func, path, root, helper_source(func, template, vllm_first_party))
    return HelperLocation(module, func, path, False, source, _markers_needed(path.parent, base))


def _creatable_source(module: str, func: str, path: Path, root: Path, source: str) -> str:
    """The text the helper is created with, one the project's declared Python runs
    (helper_requirements.py; whether git keeps its path is helper_home's question, asked only
    when a fix needs it). Raises HelperError."""
    from dtype_lint.fix.helper_requirements import declared_python, for_declared_python, python_problem

    shown = os.path.relpath(os.path.abspath(path), os.path.abspath(root)).replace(os.sep, "/")
    specifier, lowest, marker = declared_python(path, root)
    source = for_declared_python(source, lowest)
    problem = python_problem(source, lowest)
    if problem and lowest is not None:  # a problem is found only against a declared version
        raise HelperError(f"the helper `{module}:{func}` created as {shown} would not run on Python "
                          f"{lowest[0]}.{lowest[1]}, the lowest that {marker} admits "
                          f"(requires-python = \"{specifier}\"): {problem}")
    return source


# Packages a project of this kind imports, refused even when this environment lacks them (a
# pre-commit hook runs in its own virtualenv, where `torch` is not installed).
ECOSYSTEM_PACKAGES = frozenset({
    "torch", "numpy", "triton", "transformers", "safetensors", "vllm", "sglang", "lmdeploy", "aphrodite",
})


def in_tree(top: str, base: Path, root: Path) -> bool:
    """Is `top` a package or module of this project: at the import root, or one folder below the
    project root (`src/pkg`, `python/sglang`) when the run was given other folders?"""
    places = {base, root}
    try:
        places.update(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError:
        pass
    return any((d / top).is_dir() or (d / f"{top}.py").is_file() for d in places)


def _refuse_foreign(module: str, func: str, base: Path, root: Path) -> None:
    """The helper must be the project's own code: a top-level name of the standard library or of
    an installed package would be shadowed by the file `--fix` creates (`torch.py` at the root
    hides torch from everything run there), or would route casts into foreign code (`os:system`)."""
    top = module.split(".")[0]
    spec = f"`helper = \"{module}:{func}\"`"
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise HelperError(f"{spec}: `{top}` is a standard-library module, not part of this project; "
                          "name a module inside your package (e.g. `yourpackage.layer_input_dtype`)")
    if in_tree(top, base, root):
        return
    where = _installed_at(top, root)
    if where is not None or top in ECOSYSTEM_PACKAGES:
        what = f"an installed package ({where})" if where else "a package such projects install"
        raise HelperError(f"{spec}: `{top}` is {what}, not part of this project; creating the helper under "
                          f"{base} would shadow it. Name a module inside your package "
                          "(e.g. `yourpackage.layer_input_dtype`)")


def _installed_at(top: str, root: Path) -> str | None:
    """Where `top` is installed outside the project, or None. Finds, never imports, it."""
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    places = list(found.submodule_search_locations or []) or [found.origin or ""]
    real_root = os.path.realpath(root)
    outside = [p for p in places if p and p not in ("built-in", "frozen")
               and os.path.commonpath([os.path.realpath(p), real_root]) != real_root]
    if places and not outside:
        return None  # the project itself, installed in editable mode
    return outside[0] if outside else "built in"


def _refuse_shadowing(module: str, func: str, base: Path) -> None:
    """Creating the helper must not change what an existing import finds: no folder `pkg/model/`
    beside a module `pkg/model.py`, no module `pkg/helpers.py` beside a folder `pkg/helpers/`."""
    parts = module.split(".")
    spec = f"`helper = \"{module}:{func}\"`"
    for i in range(1, len(parts)):
        d = base.joinpath(*parts[:i])
        as_module = d.with_name(d.name + ".py")
        if as_module.is_file() and not (d / "__init__.py").is_file():
            raise HelperError(f"{spec}: `{'.'.join(parts[:i])}` is the module {as_module}, which cannot hold "
                              f"`{module}`; creating the folder {d} would shadow it. Point `helper` elsewhere")
    last = base.joinpath(*parts)
    if last.is_dir() and not (last / "__init__.py").is_file():
        raise HelperError(f"{spec}: {last} is a namespace package; creating {last}.py would shadow it. "
                          "Point `helper` elsewhere")


def _markers_needed(directory: Path, base: Path) -> list[Path]:
    """`__init__.py` files for folders the helper creates, only where the parent package is a
    regular one (a namespace package, PEP 420, stays one: its folders have no markers)."""
    new_dirs = []
    d = directory
    while d != base and not d.exists():
        new_dirs.append(d)
        d = d.parent
    if not new_dirs or not (d / "__init__.py").exists():
        return []
    return [nd / "__init__.py" for nd in reversed(new_dirs)]
