"""What the shared helper's home must satisfy beyond being importable from the checked tree:
every way the project is installed and cloned must have it, and run it.

- git must keep it: a helper created where a `.gitignore` (or the repository's excludes) ignores
  it would be imported by committed fixes from a file no clone has (`ignored_path`);
- the project's declared Python must run it: a created helper is made valid for the lowest
  version `requires-python` admits (`for_declared_python`), and checked (`python_problem`);
- every fixed file must be able to import it where its own package is installed alone
  (`reach_problem`): in a monorepo the helper must be in the file's own installable package
  (distributions.py) or in one it declares, and each module the helper imports at top level must
  be one the fixed file could already import: the standard library, torch (the flagged code is
  torch code: its layer's `.weight` is a torch tensor), the project's own package, a module the
  file already imports at top level, or a dependency its package declares. An optional
  dependency (`triton` in `[project.optional-dependencies]`) is none of these: without it, the
  fixed module would no longer import.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from dtype_lint.core.source import read_file
from dtype_lint.fix.distributions import Distribution, distribution_of, distribution_of_import, lowest_python, relative

# Imports a fixed module is granted whatever it declares (see the module docstring).
_ALWAYS_AVAILABLE = frozenset({"torch", "__future__"})
_FUTURE_ANNOTATIONS = "from __future__ import annotations\n"


# ---- git ------------------------------------------------------------------------------------


def ignored_path(path: Path, root: Path) -> str | None:
    """The root-relative path (the file or a folder above it) that the project's ignore rules
    exclude, making `path` a file git would not commit; None when git would keep it or `path`
    lies outside the project."""
    from dtype_lint.core.gitignore import for_folder

    root_abs, path_abs = os.path.abspath(root), os.path.abspath(path)
    rel = os.path.relpath(path_abs, root_abs)
    if rel.startswith("..") or os.path.isabs(rel):
        return None
    parts = rel.split(os.sep)
    ignores = for_folder(root_abs, os.path.dirname(path_abs), None)
    for i in range(len(parts)):
        probe = "/".join(parts[: i + 1])
        if ignores.ignored(probe, i < len(parts) - 1):
            return probe + ("/" if i < len(parts) - 1 else "")
    return None


# ---- the declared Python --------------------------------------------------------------------


def declared_python(path: Path, root: Path) -> tuple[str, tuple[int, int] | None, str]:
    """(the `requires-python` specifier, its lowest version, the packaging file stating it) of
    the package `path` is created in ("", None, "" when none is declared)."""
    dist = distribution_of(path, root)
    if dist is None:
        dist = distribution_of(root, root)
    if dist is None or not dist.requires_python:
        return "", None, ""
    where = relative(dist.folder, root)
    marker = dist.marker if where == "the project root" else f"{where}/{dist.marker}"
    return dist.requires_python, lowest_python(dist.requires_python), marker


def for_declared_python(source: str, lowest: tuple[int, int] | None) -> str:
    """The created helper's text, made to run on `lowest`: annotations such as `torch.dtype |
    None` are evaluated when the `def` runs, which raises TypeError before Python 3.10, so below
    it they are deferred (PEP 563, `from __future__ import annotations`, Python 3.7+); below 3.7
    they are written with `typing.Optional`."""
    if lowest is None or lowest >= (3, 10) or not _runtime_annotation_problems(source, lowest):
        return source
    tree = ast.parse(source)
    if lowest >= (3, 7):
        doc = tree.body[0] if tree.body and isinstance(tree.body[0], ast.Expr) and \
            isinstance(getattr(tree.body[0], "value", None), ast.Constant) else None
        lines = source.splitlines(keepends=True)
        at = doc.end_lineno if doc is not None else 0
        head, rest = "".join(lines[:at]), "".join(lines[at:]).lstrip("\n")
        # Black's layout: the docstring, a blank line, the future import, a blank line.
        return (head + ("\n" if head else "") + _FUTURE_ANNOTATIONS + "\n" + rest)
    import re

    text = re.sub(r"([\w.]+) \| None", r"Optional[\1]", source)
    first_import = next((n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))), None)
    lines = text.splitlines(keepends=True)
    at = first_import.lineno - 1 if first_import is not None else 0
    return "".join(lines[:at]) + "from typing import Optional\n\n" + "".join(lines[at:])


def python_problem(source: str, lowest: tuple[int, int] | None) -> str:
    """Why `source` would not run on Python `lowest` ("" when it would, or nothing is declared):
    syntax newer than it, or an annotation evaluated at run time that it cannot evaluate."""
    if lowest is None:
        return ""
    try:
        ast.parse(source, feature_version=max(lowest, (3, 7)))
    except SyntaxError as error:
        return f"its syntax needs a newer Python (line {error.lineno}: {error.msg})"
    problems = _runtime_annotation_problems(source, lowest)
    return problems[0] if problems else ""


def _runtime_annotation_problems(source: str, lowest: tuple[int, int]) -> list[str]:
    """Annotations that Python `lowest` evaluates when the module runs and cannot: `X | Y`
    before 3.10, `list[int]` before 3.9 (none where `from __future__ import annotations`
    defers them all)."""
    tree = ast.parse(source)
    if any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and any(a.name == "annotations" for a in n.names)
           for n in tree.body):
        return []
    annotations: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            annotations += [a.annotation for a in every if a is not None and a.annotation is not None]
            if node.returns is not None:
                annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)  # module and class level ones are evaluated
    problems = []
    for annotation in annotations:
        for sub in ast.walk(annotation):
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.BitOr) and lowest < (3, 10):
                problems.append(f"`{ast.unparse(annotation)}` (line {annotation.lineno}) is evaluated when the "
                                f"module runs, and `X | Y` of types needs Python 3.10")
            elif isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and lowest < (3, 9) and \
                    sub.value.id in ("list", "dict", "tuple", "set", "frozenset", "type"):
                problems.append(f"`{ast.unparse(annotation)}` (line {annotation.lineno}) is evaluated when the "
                                f"module runs, and `{sub.value.id}[...]` needs Python 3.9")
    return problems


# ---- every fixed file can import it ----------------------------------------------------------


def unguarded_imports(tree: ast.Module) -> dict[str, int]:
    """Top-level name -> line of each absolute import the module runs whenever it is imported:
    at its top level, in a top-level `if` or `with` (not `if TYPE_CHECKING:`), not in a `try`
    that handles the import failing."""
    found: dict[str, int] = {}
    _unguarded(tree.body, found)
    return found


def _unguarded(body: list[ast.stmt], found: dict[str, int]) -> None:
    # At module level: a closure that calls itself is a reference cycle (left for the collector).
    for stmt in body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                found.setdefault(alias.name.split(".")[0], stmt.lineno)
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
            found.setdefault(stmt.module.split(".")[0], stmt.lineno)
        elif isinstance(stmt, ast.If) and "TYPE_CHECKING" not in ast.unparse(stmt.test):
            _unguarded(stmt.body, found)
            _unguarded(stmt.orelse, found)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            _unguarded(stmt.body, found)
        elif isinstance(stmt, ast.Try) and not any(_handles_import_error(h) for h in stmt.handlers):
            _unguarded(stmt.body, found)


def _handles_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = {n.id if isinstance(n, ast.Name) else getattr(n, "attr", "") for n in ast.walk(handler.type)}
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def reach_problem(path: str, module: str, helper_path: Path, helper_source: str, root: Path,
                  own_folder: Path | None = None) -> str:
    """Why a fix in `path` must not import the helper `module` (file `helper_path`, text
    `helper_source`), or "" when every installation of the file's package can (see the module
    docstring). `own_folder`: the folder the helper's top-level package is imported from."""
    file_dist = distribution_of(path, root)
    helper_dist = distribution_of(helper_path, root)
    if file_dist is not None and helper_dist is not None and file_dist.folder != helper_dist.folder \
            and not _declares(file_dist, helper_dist.name):
        return (f"the helper `{module}` is in the package built from {_where(helper_dist, root)}, and this file "
                f"is in the one built from {_where(file_dist, root)}, which does not depend on it: installed "
                f"alone, `from {module} import ...` would fail with ModuleNotFoundError")
    if file_dist is None:
        return ""  # nothing declared: the project is used from its source tree
    try:
        helper_tree = ast.parse(helper_source)
        own = unguarded_imports(ast.parse(read_file(path).text))
    except (SyntaxError, OSError, UnicodeDecodeError, ValueError, LookupError, RecursionError, MemoryError):
        return ""  # unreadable: the fixer reports that file on its own
    helper_top = module.split(".")[0]
    for top, line in sorted(unguarded_imports(helper_tree).items(), key=lambda item: item[1]):
        if top in _ALWAYS_AVAILABLE or top == helper_top or top in own or top in sys.stdlib_module_names:
            continue
        in_project = _project_package(top, own_folder, root)
        if in_project is not None:
            dist = distribution_of(in_project, root)
            if dist is None or dist.folder == file_dist.folder or _declares(file_dist, dist.name):
                continue
        elif file_dist.dependencies is None or _declares(file_dist, distribution_of_import(top)):
            continue  # declared, or the package declares nothing statically: nothing to prove
        return (f"the helper module {_rel(helper_path, root)} imports `{top}` at top level (line {line}), which "
                f"this file does not import and its package ({_where(file_dist, root)}) does not declare "
                f"as a dependency: where `{top}` is not installed, importing this file would fail")
    return ""


def _declares(dist: Distribution, name: str) -> bool:
    return bool(name) and dist.dependencies is not None and name in dist.dependencies


def _project_package(top: str, own_folder: Path | None, root: Path) -> Path | None:
    """The folder or module of the project's own top-level package `top`, if it has one."""
    places = [p for p in (own_folder, Path(root)) if p is not None]
    try:
        places += sorted(d for d in Path(root).iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError:
        pass
    for place in places:
        for candidate in (place / top, place / f"{top}.py", place / "src" / top):
            if candidate.exists():
                return candidate
    return None


def _where(dist: Distribution, root: Path) -> str:
    where = relative(dist.folder, root)
    return dist.marker if where == "the project root" else f"{where}/{dist.marker}"


def _rel(path: Path, root: Path) -> str:
    return os.path.relpath(os.path.abspath(path), os.path.abspath(root)).replace(os.sep, "/")
