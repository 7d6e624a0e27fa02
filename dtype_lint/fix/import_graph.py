"""The project's import graph, as far as a fix's imports touch it.

A fix adds `from <helper module> import <helper>` to a file and may drop an import its edits
orphaned. Both can break a program that compiles and re-checks clean:
- an added import closes a cycle when the helper's module (or anything it imports at module
  level, transitively, within the project) imports the fixed module: `import pkg.model` then
  stops with "cannot import name ... from partially initialized module";
- a dropped import breaks every other module that imports that name from this one
  (`from pkg.model import current_platform`), or takes it through `__all__` or a star import.

Modules are found through the run's module table (discovery's module → file map, nothing else
walked). Only the modules reachable from the helper's are read, each parsed once for its
module-level imports (not those inside functions or under `if TYPE_CHECKING:`); the class-index
header is not enough, as it keeps only `a` of `import a.b.c` and counts function-level imports.
Every file is read through the safe reader; a file that cannot be parsed counts as importing
what its header says. The question "who imports this name from here" reads only the files whose
text mentions both the name (or a star) and the module.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import deque
from typing import Callable

from dtype_lint.analysis.guard_engine.dominance import statement_blocks
from dtype_lint.analysis.index.class_index import ModuleTable, resolve_relative
from dtype_lint.core.source import MAX_SOURCE_BYTES, READ_ERRORS, read_bytes, read_file


class ImportGraph:
    def __init__(self, table: ModuleTable, created: dict[str, str] | None = None,
                 read_text: Callable[[str], str | None] | None = None):
        """`created`: module -> source of a module the run is about to create (the helper from
        its template), which the table does not hold yet."""
        self.table = table
        self.created = dict(created or {})
        self._read = read_text or _read_text
        self._precise: dict[str, set[str]] = self._shared_imports()

    def _shared_imports(self) -> dict[str, set[str]]:
        """The module-level imports found so far, shared by every graph of this module table and
        these created modules in this process: a run builds one graph per fixed file, and each
        parsed again the modules reachable from the helper's (a tenth of a `--fix` run's fixing,
        #37). A module's imports depend only on its text, read from the same files in one run,
        and on the created modules; a graph with its own reader keeps its own."""
        if self._read is not _read_text:
            return {}
        key = (id(self.table), tuple(sorted(self.created.items())))
        cached = _IMPORTS.get(key)
        if cached is not None and cached[0] is self.table:
            return cached[1]
        if len(_IMPORTS) >= 4:  # a long-lived process (the language server) sees many runs
            _IMPORTS.clear()
        found: dict[str, set[str]] = {}
        _IMPORTS[key] = (self.table, found)
        return found

    # ---- what importing a module runs ------------------------------------------------------
    def _is_module(self, name: str) -> bool:
        return name in self.created or self.table.first_key(name) is not None

    def _source(self, module: str) -> tuple[str | None, bool]:
        """(text, is_package) of a project module."""
        if module in self.created:
            return self.created[module], False
        path = self.table.path_of(module)
        if path is None:
            return None, False
        return self._read(path), path.endswith(("__init__.py", "__init__.pyi"))

    def _targets(self, names: set[str], importer: str) -> set[str]:
        """Project modules that importing each dotted name runs: the name itself when it is a
        module, else the module holding it (always: `from pkg import x` inside `pkg.mod` needs
        `pkg` initialised that far), and the packages above it, except those above `importer`,
        which are being imported already whenever `importer` runs."""
        mine = _ancestors(importer)
        out = set()
        for name in names:
            parts = name.split(".")
            modules = [".".join(parts[:i]) for i in range(1, len(parts) + 1) if self._is_module(".".join(parts[:i]))]
            for i, candidate in enumerate(modules):
                explicit = i == len(modules) - 1
                if candidate != importer and (explicit or candidate not in mine):
                    out.add(candidate)
        return out

    def module_imports(self, module: str) -> set[str]:
        """What executing `module`'s top level imports, within the project (imports in
        functions and under `if TYPE_CHECKING:` excluded; class bodies and `try`/`if`/`with`
        blocks included). A file that cannot be parsed: its header's superset."""
        found = self._precise.get(module)
        if found is not None:
            return found
        text, is_package = self._source(module)
        try:
            tree = ast.parse(text) if text is not None else None
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if tree is None:
            found = self._header_imports(module)
        else:
            names: set[str] = set()
            for node in _module_level(tree.body):
                if isinstance(node, ast.Import):
                    names.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom):
                    base = resolve_relative(module, is_package, node.module, node.level)
                    if base is None:
                        continue
                    if base:
                        names.add(base)
                    names.update(f"{base}.{a.name}" if base else a.name for a in node.names if a.name != "*")
            found = self._targets(names, module)
        self._precise[module] = found
        return found

    def chain(self, start: str, goal: str) -> list[str] | None:
        """start → ... → goal through module-level imports, or None: importing `start` does not
        import `goal`."""
        return self._path(start, goal, self.module_imports)

    @staticmethod
    def _path(start: str, goal: str, edges) -> list[str] | None:
        before = {start: ""}
        todo = deque([start])
        while todo:
            module = todo.popleft()
            if module == goal:
                path = [module]
                while before[path[-1]]:
                    path.append(before[path[-1]])
                return list(reversed(path))
            for nxt in sorted(edges(module)):
                if nxt not in before:
                    before[nxt] = module
                    todo.append(nxt)
        return None

    def cycle_problem(self, importer: str, target: str) -> str:
        """Why `importer` may not import `target` at module level ("" when it may)."""
        if not importer or not target or importer == target:
            return ""
        # `import a.b.c` runs a.b's `__init__` (when it is not being imported already) before c.
        path = None
        for start in sorted(self._targets({target}, importer), key=lambda m: (m != target, m)):
            path = self.chain(start, importer)
            if path is not None:
                break
        if path is None:
            return ""
        shown = " → ".join(f"`{m}`" for m in path)
        return (f"importing `{target}` would close an import cycle: {shown} (a module-level import each), so "
                f"`{importer}` would be partially initialised when it is imported back")

    def _header_imports(self, module: str) -> set[str]:
        """What a file that cannot be parsed may import: its class-index header's imports."""
        header = self.table.get(module) if module not in self.created else None
        return self._targets(set(header.imports.values()) if header is not None else set(), module)

    # ---- who imports a name from a module --------------------------------------------------
    def importers_of(self, module: str, name: str, skip: str = "") -> str:
        """A project module (other than `skip`) that takes `name` from `module`: `from module
        import name`, `from module import *`, or `import module` / `from pkg import module` with
        `.name` in its text. "" when none does. Files whose text cannot mention both are not
        parsed."""
        last = module.rsplit(".", 1)[-1]
        word = re.compile(rf"(?<![\w]){re.escape(name)}(?!\w)")
        for other, path in self.table.module_paths():
            if other == skip or other == module:
                continue
            text = self._read(path)
            if text is None:
                continue
            if last not in text or ("*" not in text and not word.search(text)):
                continue
            is_package = path.endswith(("__init__.py", "__init__.pyi"))
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return other  # cannot tell: as if it did
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    base = resolve_relative(other, is_package, node.module, node.level)
                    if base == module and any(a.name in (name, "*") for a in node.names):
                        return other
                    if base is not None and any(f"{base}.{a.name}" == module if base else a.name == module
                                                for a in node.names) and word.search(text):
                        return other
                elif isinstance(node, ast.Import):
                    if any(a.name == module or a.name.startswith(module + ".") for a in node.names) \
                            and re.search(rf"\.{re.escape(name)}(?!\w)", text):
                        return other
        return ""


    # ---- who star-imports a module ----------------------------------------------------------
    def star_importers(self, module: str, name: str) -> dict[str, ast.Module | None]:
        """Each project module into which `from module import *` carries `name`, directly or
        through a chain of star imports (a module whose literal `__all__` leaves `name` out stops
        the chain): module -> its tree (None: it cannot be parsed). Files whose text holds no
        star import are not parsed. Only called for a fix that adds a public name."""
        found: dict[str, ast.Module | None] = {}
        todo = deque([module])
        while todo:
            exporter = todo.popleft()
            for other, _path, tree, starred in self._star_files():
                if other in found or other == module:
                    continue
                if tree is None:
                    found[other] = None  # cannot tell: as if it did
                    continue
                if exporter in starred:
                    found[other] = tree
                    if star_exports(tree, name):
                        todo.append(other)
        return found

    def _star_files(self) -> list[tuple[str, str, ast.Module | None, frozenset[str | None]]]:
        """(module, path, tree or None: unparsable, the modules its star imports name) of each
        project file whose text holds a star import. Read once per module table and process:
        every fixed file asks, and a run's fixes add only `from m import name` lines, never a
        star import. The star imports are resolved here once: walking every such tree for each
        fixed file and each module in a chain was a quarter of a `--fix` run's fixing (#37)."""
        cached = _STAR_FILES.get(id(self.table))
        if cached is not None and cached[0] is self.table and self._read is _read_text:
            return cached[1]
        files: list[tuple[str, str, ast.Module | None, frozenset[str | None]]] = []
        for other, path in self.table.module_paths():
            if self._read is _read_text and not _may_star_import(path):
                continue  # most files: their bytes searched, never decoded (a tenth of `--fix`'s fixing)
            text = self._read(path)
            if text is None or _STAR.search(text) is None:
                continue
            try:
                tree: ast.Module | None = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
            is_package = path.endswith(("__init__.py", "__init__.pyi"))
            # None: a relative star import that climbs above the top package (it names nothing).
            starred: frozenset[str | None] = frozenset() if tree is None else frozenset(
                resolve_relative(other, is_package, node.module, node.level) for node in _statements(tree.body)
                if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names))
            files.append((other, path, tree, starred))
        if self._read is _read_text:
            if len(_STAR_FILES) >= 4:  # a long-lived process (the language server) sees many runs
                _STAR_FILES.clear()
            _STAR_FILES[id(self.table)] = (self.table, files)
        return files


# (id(module table), created modules) -> (that table, each module's module-level imports); the
# table is kept so the id stays its own.
_IMPORTS: dict[tuple[int, tuple], tuple[object, dict[str, set[str]]]] = {}
# id(module table) -> (that table, its star-importing files); the table is kept so the id stays its own.
_STAR_FILES: dict[int, tuple[object, list[tuple[str, str, ast.Module | None, frozenset[str | None]]]]] = {}


def star_exports(tree: ast.Module, name: str) -> bool:
    """Does `from <this module> import *` carry `name`: no literal `__all__`, or one listing it."""
    listed = None
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            value = stmt.value
            if isinstance(value, (ast.List, ast.Tuple)) and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts):
                listed = {e.value for e in value.elts if isinstance(e, ast.Constant)}  # all are, checked above
            else:
                return True  # computed: it may
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == "__all__":
            return True
    return name in listed if listed is not None else not name.startswith("_")


_STAR = re.compile(r"import[\s\\(]*\*")
# The same on the raw bytes: a Python source's encoding is ASCII-compatible (a coding cookie must
# be), so a file whose bytes do not match holds no star import once decoded.
_STAR_BYTES = re.compile(rb"import[\s\\(]*\*")


def _statements(body: list[ast.stmt]):
    """Every statement of `body` at any depth (into functions and classes too, as ast.walk), no
    expression: an import is a statement, and walking every node of the star-importing files'
    trees was most of reading them (a fifth of `--fix`'s fixing on vLLM 0.27.1)."""
    todo = list(body)
    while todo:
        stmt = todo.pop()
        yield stmt
        for block in statement_blocks(stmt):
            todo.extend(block)


def _may_star_import(path: str) -> bool:
    """Can the file hold a star import: its bytes match, or they cannot be read here (the
    safe reader then says why, as before)."""
    try:
        data = read_bytes(path, MAX_SOURCE_BYTES)
    except READ_ERRORS:
        return True
    return _STAR_BYTES.search(data) is not None


# `try:` and, from Python 3.11, `try: ... except* ...:` (both have body, handlers, orelse, finalbody).
if sys.version_info >= (3, 11):
    _TRY_STATEMENTS = (ast.Try, ast.TryStar)
else:
    _TRY_STATEMENTS = (ast.Try,)


def _module_level(body: list[ast.stmt]):
    """The statements a module's import runs: its top level, into `if`/`try`/`with`/loops and
    class bodies, not into functions, and not into `if TYPE_CHECKING:` bodies."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield node
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.ClassDef):
            yield from _module_level(node.body)
        elif isinstance(node, _TRY_STATEMENTS):
            yield from _module_level(node.body)
            for handler in node.handlers:
                yield from _module_level(handler.body)
            yield from _module_level(node.orelse)
            yield from _module_level(node.finalbody)
        elif isinstance(node, (ast.With, ast.For, ast.While)):
            yield from _module_level(node.body)
            yield from _module_level(getattr(node, "orelse", []))


def _is_type_checking(test: ast.expr) -> bool:
    """`TYPE_CHECKING`, or `TYPE_CHECKING or FLAG`: diffusers' lazy `__init__`s import every
    submodule under `if TYPE_CHECKING or DIFFUSERS_SLOW_IMPORT:` (a debugging switch, off unless
    set in the environment) and install a `_LazyModule` in the `else`; reading that body as run
    made every model file look imported by `diffusers/__init__.py`, so any import of
    `diffusers.utils` from one looked like a cycle (#22)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(_is_type_checking(value) for value in test.values)
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _ancestors(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _read_text(path: str) -> str | None:
    try:
        return read_file(path).text
    except READ_ERRORS:
        return None
