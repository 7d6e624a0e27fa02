"""Functions of the input-dtype helper's shape that a file defines or calls, and what they decide.

A function has the helper's shape when it takes a layer, reads that layer's weight dtype or model
dtype attribute (an ecosystem's name for it: ecosystems/registry.py), and returns
(dtype_eval.helper_shape). Its decision table is evaluated from its own AST
(dtype_eval.evaluate_helper), in this file or in the project file it is imported from (followed
through re-exports by the class index, whose module headers list each module's candidate functions:
ModuleHeader.functions). The configured helper is marked as such.

Rules read this as the `helpers` fact; the fix planner and `migrate` use `known_helper` directly.
"""

from __future__ import annotations

import ast
import re
from dataclasses import field
from functools import cached_property

from dtype_lint.analysis.index.class_facts import FunctionScope
from dtype_lint.analysis.index.class_index import ModuleHeader, QuantizableLayerIndex
from dtype_lint.core import digests, trees
from dtype_lint.core.config import Config
from dtype_lint.core.records import record
from dtype_lint.core.text_facts import (
    attribute_pattern,
    callee_pattern,
    could_be_helper_shaped,
    function_text,
    respelled_defs,
    top_level_def_spans,
    with_decorators,
)
from dtype_lint.dtypes.evaluator import (
    Case,
    Table,
    Unsupported,
    evaluate_helper,
    helper_shape,
    possibly_unsound_cases,
    summarize_cases,
    unsound_cases,
)


@record(frozen=True)
class KnownHelper:
    """A function of the helper's shape and its table (None when beyond the evaluator: `why`)."""

    name: str
    qualname: str  # "pkg.mod.func" ("pkg.mod.Class.func" for a method)
    path: str
    line: int
    table: Table | None
    why: str = ""
    configured: bool = False
    flag_param: str | None = None
    unsound: tuple[tuple[Case, str], ...] = field(default=(), compare=False)
    maybe_unsound: tuple[tuple[Case, str], ...] = field(default=(), compare=False)
    # Why a fix may not call it as `name(layer, fp8_input)` ("" when it may): call_problem.
    uncallable: str = field(default="", compare=False)

    @property
    def sound(self) -> bool:
        return self.table is not None and not self.unsound

    @property
    def decides(self) -> bool:
        """An input-dtype decision, not a getter or something else of the same shape: some case
        certainly returns a dtype (not a tensor, a class, a value from elsewhere), and some storage
        gets something other than its own dtype."""
        if self.table is None:
            return False
        rows = self.table.rows
        return any(v.startswith("torch.") for _c, v in rows) and any(
            c.storage is not None and v != f"torch.{c.storage}" for c, v in rows)

    def wrong_cases(self) -> list[str]:
        """['int8 storage → returns torch.int8', ...]"""
        return summarize_cases(list(self.unsound), self.table.flags if self.table else (False, True))

    def maybe_wrong_cases(self) -> list[str]:
        return summarize_cases(list(self.maybe_unsound), self.table.flags if self.table else (False, True))


def call_problem(fn: ast.FunctionDef | ast.AsyncFunctionDef, tree: ast.Module | None = None) -> str:
    """Why a fix may not call `fn` as `fn(layer, fp8_input)`, or "" when it may.

    Read from its signature, never assumed: a plain `def` (an `async def` returns a coroutine,
    which `x.to` would receive), no decorator (it may change the signature, the result or cache
    a repacked layer's old answer), two positional parameters or `*args`, any further positional
    or keyword-only parameter with a default; and, at the top of its module, bound by that `def`
    alone (a later assignment or second `def` replaces it)."""
    name = f"`{fn.name}`"
    if isinstance(fn, ast.AsyncFunctionDef):
        return f"{name} is `async def`: calling it gives a coroutine, not a dtype"
    if fn.decorator_list:
        shown = ", ".join(f"@{ast.unparse(d)}" for d in fn.decorator_list)
        return f"{name} is decorated ({shown}), which may change how it is called and what it returns"
    args = fn.args
    positional = args.posonlyargs + args.args
    if len(positional) < 2 and args.vararg is None:
        listed = ", ".join(a.arg for a in positional) or "none"
        return (f"{name} takes {len(positional)} positional parameter{'s' if len(positional) != 1 else ''} "
                f"({listed}); fixes call it as `{fn.name}(layer, fp8_input)`")
    required = len(positional) - len(args.defaults)
    if required > 2:
        extra = ", ".join(a.arg for a in positional[2:required])
        verb = "has" if required == 3 else "have"
        return f"{name} requires more than `(layer, fp8_input)`: {extra} {verb} no default"
    missing = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if missing:
        return f"{name} has keyword-only parameters without a default ({', '.join(missing)}); fixes pass none"
    if tree is not None:
        binds = sum(1 for node in tree.body if _binds_top_level(node, fn.name))
        if binds != 1:
            return (f"{name} is bound {binds} times at the top of its module; the last binding, not this `def`, "
                    "is what callers get")
    return ""


def _binds_top_level(node: ast.stmt, name: str) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name.split(".")[0]) == name for a in node.names)
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t))
    if isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
        return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(node)) \
            or any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
                   for n in ast.walk(node))
    return False


def known_helper(fn: ast.FunctionDef | ast.AsyncFunctionDef, tree: ast.Module | None, qualname: str, path: str,
                 configured: bool = False, lines: list[str] | None = None) -> KnownHelper | None:
    """The helper facts of `fn`, or None when it does not have the helper's shape. `lines`: the
    source's lines, for the shape's test on the function's text before its tree."""
    if lines is not None and not could_be_helper_shaped(function_text(lines, fn)):
        return None
    shape = helper_shape(fn)
    if shape is None:
        return None
    try:
        table = evaluate_helper(fn, tree, shape)
    except (Unsupported, RecursionError) as error:
        return KnownHelper(fn.name, qualname, path, fn.lineno, None, f"cannot evaluate `{error}`", configured,
                           shape.flag_param, uncallable=call_problem(fn, tree))
    return KnownHelper(fn.name, qualname, path, fn.lineno, table, "", configured, shape.flag_param,
                       tuple(unsound_cases(table)), tuple(possibly_unsound_cases(table)),
                       uncallable=call_problem(fn, tree))


# Helpers of files other than the one analysed: (path, hash of the text read) -> {qualname: KnownHelper}.
_REMOTE: dict[tuple, dict[str, KnownHelper]] = {}


def _file_helpers(header: ModuleHeader, load_file) -> dict[str, KnownHelper]:
    # Keyed by the text itself, not the file's mtime: a same-tick rewrite in a long-lived
    # process must not keep the old table.
    text = load_file(header.path) if load_file is not None else None
    key = (header.path, digests.blake2b((text or "").encode("utf-8", "surrogatepass"), digest_size=16).digest()
           if text is not None else None)
    if key not in _REMOTE:
        found: dict[str, KnownHelper] = {}
        if text is not None and _may_define_helpers(text, header):
            try:
                tree = trees.parse(header.path, text)
            except (SyntaxError, ValueError, RecursionError):
                tree = None
            for node in (tree.body if tree is not None else []):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in header.functions:
                    h = known_helper(node, tree, f"{header.module}.{node.name}", header.path)
                    if h is not None:
                        found[h.qualname] = h
        _REMOTE[key] = found
    return _REMOTE[key]


# `def` and its name on two lines: a top-level `def` the text cuts (top_level_def_spans) do not see.
_DEF_CONTINUED = re.compile(r"\n(?:async|def)\b[^(\n]*\\")


def _may_define_helpers(text: str, header: ModuleHeader) -> bool:
    """Can a top-level function of this text that `header.functions` names (the text cuts that could
    be helpers: text_facts.dtype_functions) have the helper's shape? Each is parsed first from its
    own text (text_facts.top_level_def_spans), and again with its decorators (with_decorators)
    where it returns a value and the text above it names its layer parameter: the shape
    (dtypes.evaluator.helper_shape) reads only the function's own nodes, its decorators only for
    a read of that parameter's weight. False only where every such parse ends with that `def`, on
    its line, without the shape; the module is then not parsed. With every rule on, vLLM 0.34.0
    parsed 122 modules whole for the helpers they might define, and 118 defined none (2.78 M of
    36.0 M characters parsed)."""
    if "\x0c" in text or "\r" in text or _DEF_CONTINUED.search("\n" + text):
        return True  # a `def` line the cuts may not see as one
    if not text.isascii() and not respelled_defs(text).isdisjoint(header.functions):
        return True  # a `def` the parser reads under a candidate's name, spelled otherwise
    for name in header.functions:
        spans = top_level_def_spans(text, name)
        if not spans:
            return True  # the header was read from another text
        for start, body in spans:
            fn = _only_def(body, name, 1)
            if fn is None or helper_shape(fn) is not None:
                return True
            params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
            if params and params[0] in ("self", "cls"):
                params = params[1:]
            if not params or len(params) > 3 \
                    or not any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn)):
                continue  # what no decorator can change
            first = with_decorators(text, start)
            above = text[first:start]
            if first == start or (above.isascii() and params[0] not in above):
                continue  # no decorator, or none that names the layer
            fn = _only_def(above + body, name, above.count("\n") + 1)
            if fn is None or helper_shape(fn) is not None:
                return True
    return False


def _only_def(text: str, name: str, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The `def name` that ends `text`, on its `line`; None when the text does not end so."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # cut inside a string or a bracket: the module says
    fn = tree.body[-1] if tree.body else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name != name or fn.lineno != line:
        return None
    return fn


def lookup_function(index: QuantizableLayerIndex, qualname: str, load_file) -> KnownHelper | None:
    """The helper-shaped top-level function `qualname` names, anywhere in the indexed project."""
    qualname = index.canonical(qualname)
    module, _, name = qualname.rpartition(".")
    header = index.modules.get(module)
    if header is None or name not in header.functions:
        return None
    return _file_helpers(header, load_file).get(qualname)


def imports_a_helper(header: ModuleHeader | None, index: QuantizableLayerIndex) -> bool:
    """Does this module import a function another module defines that may be an input-dtype
    helper? (Such a file is analysed by rules that report helper call sites, whatever its text.)"""
    if header is None:
        return False
    for target in header.imports.values():
        q = index.canonical(target)
        module, _, name = q.rpartition(".")
        other = index.modules.get(module)
        if other is not None and other is not header and name in other.functions:
            return True
    return False


class HelperFacts:
    """The helper-shaped functions of one file, and the helper (if any) a call reaches."""

    def __init__(self, tree: ast.Module, module: str, path: str, imports: dict[str, str], config: Config,
                 index: QuantizableLayerIndex, load_file, source=None):
        """`source`: the file's SourceFile, for the tests on text that spare walking functions which
        cannot be helper-shaped or call one (without it every function is walked)."""
        self.tree = tree
        self.source = source
        self.module = module
        self.path = path
        self.imports = imports
        self.index = index
        self.load_file = load_file
        self.config_module, self.config_func = config.helper_spec
        self._imports_found: dict[str, KnownHelper | None] = {}  # target -> `_imported`'s answer

    def _configured(self, qualname: str) -> bool:
        if not self.module and "." not in qualname:
            # A text analysed on its own (the API, rule examples) has no module name: its
            # top-level function of the configured name is taken for the configured helper.
            return qualname == self.config_func
        return qualname == f"{self.config_module}.{self.config_func}"

    @cached_property
    def defined(self) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None, KnownHelper]]:
        """(function, enclosing class qualname or None, facts) for each helper-shaped function here."""
        out = []
        for function_node, class_q, scope_name in _functions(self.tree, self.module):
            qual = f"{self.module}.{scope_name}" if self.module else scope_name
            h = known_helper(function_node, self.tree, qual, self.path, self._configured(qual),
                             self.source.lines if self.source is not None else None)
            if h is not None:
                out.append((function_node, class_q, h))
        return out

    @cached_property
    def _call_lines(self) -> list[int] | None:
        """Sorted lines on which a call `called` can resolve may start (None: any line). Such a call
        names, as `f(...)`, an imported name, a helper-shaped function of this file or a method of
        one, or, as `m.f(...)`, an imported name that is a project module (`called` looks a
        function up under nothing else); a name's text is its identifier where the text is ASCII."""
        if self.source is None or not self.source.text.isascii():
            return None
        from bisect import bisect_right

        named = {fn.name for fn, _q, _h in self.defined}
        modules: dict[str, ModuleHeader] = {}
        for local, target in self.imports.items():
            # What `called` and `lookup_function` ask first: `f` names a helper-shaped `def` of
            # the module it resolves to (the lookups `imports_a_helper` made already); `m.f`
            # needs `m` to be a project module whose header lists `f` as a helper-shaped `def`
            # or imports it (`canonical` follows only that).
            module, _, name = self.index.canonical(target).rpartition(".")
            header = self.index.modules.get(module)
            if header is not None and name in header.functions:
                named.add(local)
            own = self.index.modules.get(target)
            if own is not None:
                modules[local] = own
        text, starts, lines = self.source.text, self.source.starts, set()
        pattern = callee_pattern(named)
        for m in pattern.finditer(text) if pattern is not None else ():
            if text[m.end() - 1] == "(":
                lines.add(bisect_right(starts, m.start()))
        pattern = attribute_pattern(modules)
        for m in pattern.finditer(text) if pattern is not None else ():
            header, attr = modules[m.group(1)], m.group(2)
            if attr in header.functions or attr in header.imports:
                lines.add(bisect_right(starts, m.start()))
        return sorted(lines)

    def may_call_helper(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """Can a call in `fn`'s own lines reach a helper-shaped function (`called`)? False only when
        no line of it names what such a call must name (`_call_lines`)."""
        lines = self._call_lines
        if lines is None:
            return True
        from bisect import bisect_left

        i = bisect_left(lines, fn.lineno)
        return i < len(lines) and lines[i] <= (fn.end_lineno or fn.lineno)

    @cached_property
    def _top_level(self) -> dict[str, KnownHelper]:
        return {fn.name: h for fn, class_q, h in self.defined if class_q is None}

    @cached_property
    def _methods(self) -> dict[tuple[str, str], KnownHelper]:
        return {(class_q, fn.name): h for fn, class_q, h in self.defined if class_q is not None}

    def called(self, call: ast.Call, scope: FunctionScope | None = None) -> KnownHelper | None:
        """The helper-shaped function this call reaches: a function of this file (`f(...)`,
        `self.f(...)` in its class), or one imported from another file of the project."""
        callee = call.func
        if isinstance(callee, ast.Name):
            if callee.id in self.imports:
                return self._imported(self.imports[callee.id])
            return self._top_level.get(callee.id)
        if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name):
            if scope is not None and callee.value.id == scope.self_name and scope.class_qualname:
                return self._methods.get((scope.class_qualname, callee.attr))
            target = self.imports.get(callee.value.id)
            if target is not None:  # `module.func(...)` after `import pkg.module as module`
                return self._imported(f"{target}.{callee.attr}")
        return None

    def _imported(self, target: str) -> KnownHelper | None:
        """The helper another file defines under `target`, looked up once per analysis of this
        file: each lookup reads and hashes that file's text (`_file_helpers`), and a helper's
        calls are many (vLLM 0.34.0 with every rule on: 8,204 lookups of imported names)."""
        try:
            return self._imports_found[target]
        except KeyError:
            found = lookup_function(self.index, target, self.load_file)
            found = self._imports_found[target] = \
                _configured_copy(found, self._configured(found.qualname)) if found else None
            return found


def _functions(tree: ast.Module, module: str):
    """(function, enclosing class qualname or None, scope name) for the functions and methods of
    the module, classes nested in classes included (not functions nested in functions: a helper
    defined inside another function cannot be called from elsewhere)."""
    return _functions_in(tree.body, module, None, "")


def _functions_in(body, module: str, class_q: str | None, prefix: str):
    # At module level: a generator closure that calls itself is a reference cycle.
    for node in body:
        if isinstance(node, ast.ClassDef):
            q = f"{prefix}.{node.name}" if prefix else node.name
            yield from _functions_in(node.body, module, f"{module}.{q}" if module else q, q)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, class_q, f"{prefix}.{node.name}" if prefix else node.name
        elif isinstance(node, ast.If):  # `if TYPE_CHECKING:` / platform branches
            yield from _functions_in(node.body + node.orelse, module, class_q, prefix)


def _configured_copy(h: KnownHelper, configured: bool) -> KnownHelper:
    if h.configured == configured:
        return h
    from dataclasses import replace

    return replace(h, configured=configured)


def project_helpers(config: Config, paths: list[str]) -> list[KnownHelper]:
    """Every top-level input-dtype helper the project defines (a function of the helper's shape
    that decides a dtype from a layer's storage), read from the files whose text could hold one;
    by path and line."""
    from dtype_lint.analysis.index.class_index import dtype_functions
    from dtype_lint.core.discovery import discover, module_name
    from dtype_lint.core.source import READ_ERRORS, read_file

    cfg_module, cfg_func = config.helper_spec
    out = []
    for path in discover(paths, tuple(config.exclude), config.root):
        try:
            text = read_file(path).text
        except READ_ERRORS:
            continue
        names = dtype_functions(text)
        if not names:
            continue
        try:
            tree = trees.parse(path, text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        module = module_name(path, config.root)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                qual = f"{module}.{node.name}" if module else node.name
                h = known_helper(node, tree, qual, path, configured=(module == cfg_module and node.name == cfg_func))
                if h is not None and h.decides:
                    out.append(h)
    return sorted(out, key=lambda h: (h.path, h.line))
