"""Verify a fixed module before it is written: the names a fix introduced mean what it meant.

The planner picks names it believes fresh; this module checks the result independently, with
libcst's scope analysis (`ScopeProvider`) of the fixed text. Detection never pays for libcst; the
few files a run rewrites do, once each, and this is where libcst earns its cost:

- the helper, under its local name, is bound exactly once in the whole module, by a top-level
  `from <module> import <func> [as name]`, and every use of that name resolves to that import
  alone (no local, parameter, global, nested definition or other import shadows it), with no
  star import that could rebind it;
- each variable a fix assigns was not a name in its function before the fix (it shadows
  nothing), is a local there (no `global`/`nonlocal`), is assigned there once, and every use of
  it resolves to that assignment alone;
- each such variable is placed where the old code read the dtype: its one assignment is a call
  of the helper, directly followed in the same block by the `if <var> is not None:` that guards
  the cast, and the variable is read nowhere else. A call hoisted out of that `if`'s block (out
  of a loop, a condition or a `try`) fails this, whatever the planner believed.

A violation raises FixError: the file is left as it was and the run reports DTL901 with the
reason, its sites remaining. The fixer has already checked that the text parses.

libcst is imported here, lazily, through :func:`import_libcst`: where it is missing (the GPU
machine has none) the check raises :class:`LibcstUnavailable`, an ImportError with a message that
says so. The fixer still reports it as DTL901 (nothing may escape it), and
``dtype_lint.api.fix_source`` re-raises it as that ImportError instead of a ValueError, so a caller
that can do without the fixer (``dtype-lint verify --variants``) can tell "no libcst here" from "the
fix failed".
"""

from __future__ import annotations

import ast
from functools import lru_cache

from dtype_lint.analysis.function_walk import iter_functions
from dtype_lint.core.findings import Finding
from dtype_lint.core.source import split_lines
from dtype_lint.fix.bound_names import bindings, has_star_import, identifiers
from dtype_lint.fix.parsed_texts import parsed


class FixCheckError(Exception):
    pass


class LibcstUnavailable(ImportError):
    """libcst, which the name check needs, cannot be imported."""


def import_libcst():
    """``(libcst, libcst.metadata)``; raises :class:`LibcstUnavailable` where libcst is missing."""
    try:
        import libcst
        import libcst.metadata
    except ImportError as error:
        raise LibcstUnavailable(
            f"libcst cannot be imported ({error}): dtype-lint's fixer needs it to check the names a fix "
            "introduces (pip install 'libcst>=1.1')", name="libcst") from error
    return libcst, libcst.metadata


def libcst_unavailable() -> LibcstUnavailable | None:
    """The error a fix would meet here for want of libcst, or None where libcst imports."""
    try:
        import_libcst()
    except LibcstUnavailable as error:
        return error
    return None


def verify_names(original: str, fixed: str, applied: list[Finding]) -> None:
    """Raise FixCheckError when a name an applied fix introduced does not resolve as intended."""
    helpers = {(f.fix.spelling(i), func, local) for f in applied if f.fix is not None
               for i, (_module, func, local) in enumerate(f.fix.local_names())}
    variables = {(f.scope, v) for f in applied if f.fix is not None for v in f.fix.binds}
    if not helpers and not variables:
        return
    _check_fresh(original, variables)
    try:
        tree = parsed(fixed)  # the tree the fixer's other checks of this text read (parsed_texts.py)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise FixCheckError("the fixed text cannot be analysed") from None
    _check_placement(tree, variables, {local for _m, _f, local in helpers})
    _check_helper_bindings(tree, helpers)

    # libcst's scope analysis reads only the scopes the fixes touched: the top-level imports and
    # each function a new variable is assigned in, under its class headers, every other line left
    # out. A new variable is fresh in its function (`_check_fresh`), so no use of it outside that
    # function can resolve to its assignment; and the helper's name is bound once in the whole
    # module (`_check_helper_bindings`, on the whole tree), so no left-out body can hold a binding
    # that shadows it. The analysis of whole modules was more than half of a `--fix` run, and the
    # empty lines that once stood for the left-out code most of what remained (issue #37).
    touched = _touched_text(fixed, tree, {scope for scope, _var in variables})
    star = bool(helpers) and has_star_import(tree)  # at module level, under an `if` or `try` too
    # Where libcst cannot be imported the fix cannot be checked, even for a text remembered from
    # an earlier check in this process: the answer must not depend on what ran before (the GPU
    # machine's harness hides libcst and expects LibcstUnavailable; tests/test_verify.py).
    import_libcst()
    problem = _libcst_problem(touched, frozenset(helpers), frozenset(variables), star)
    if problem:
        raise FixCheckError(problem)


@lru_cache(maxsize=16)
def _libcst_problem(touched: str, helpers: frozenset, variables: frozenset, star: bool) -> str | None:
    """What libcst's scope analysis of `touched` finds wrong with the names the fixes added, or
    None. Remembered by its inputs: a text the run already checked (a `--series --group-by rule`
    step that repeats the fixing run's text, a second fix of the same buffer) is parsed by libcst
    once. Raises LibcstUnavailable where libcst is missing (not remembered: an exception)."""
    cst, metadata = import_libcst()
    ClassScope, FunctionScope, GlobalScope = metadata.ClassScope, metadata.FunctionScope, metadata.GlobalScope
    MetadataWrapper, ScopeProvider = metadata.MetadataWrapper, metadata.ScopeProvider
    try:
        module = cst.parse_module(touched)
        scopes = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
    except (cst.ParserSyntaxError, RecursionError, MemoryError, ValueError) as error:
        return f"the fixed text cannot be analysed ({type(error).__name__})"
    every = list({id(s): s for s in scopes.values() if s is not None}.values())
    top = next((s for s in every if isinstance(s, GlobalScope)), None)
    # Each scope's assignments and accesses indexed by name once, and each function scope under
    # its qualified name and every enclosing one: looking a name up by scanning every scope made
    # a file's check quadratic in its number of sites.
    assignments_of: dict[str, list] = {}
    accesses_of: dict[str, list] = {}
    functions_within: dict[str, list] = {}
    for scope in every:
        for assignment in scope.assignments:
            assignments_of.setdefault(assignment.name, []).append(assignment)
        for access in scope.accesses:
            if isinstance(access.node, cst.Name):
                accesses_of.setdefault(access.node.value, []).append(access)
        if isinstance(scope, FunctionScope):
            qualname = _qualname(scope, FunctionScope, ClassScope)
            for enclosing in _enclosing_names(qualname):
                functions_within.setdefault(enclosing, []).append(scope)

    # Each use of a new variable's name, under every assignment it may resolve to.
    uses_of: dict[int, list] = {}
    for var in {v for _scope, v in variables}:
        for access in accesses_of.get(var, []):
            for referent in access.referents:
                uses_of.setdefault(id(referent), []).append(access)

    for mod, func, local in sorted(helpers):
        binds = assignments_of.get(local, [])
        ours = [a for a in binds
                if a.scope is top and _imports(a.node, mod, func, local) and _is_top_level(a.node, module)]
        if len(binds) != 1 or len(ours) != 1:
            return (f"`{local}` would not name the helper `{mod}:{func}` everywhere: the fixed module "
                    f"binds `{local}` {len(binds)} times")
        if star and not local.startswith("_"):
            return f"a star import could rebind `{local}`, the helper's name"
        for acc in accesses_of.get(local, []):
            if [id(r) for r in acc.referents] != [id(ours[0])]:
                return f"a use of `{local}` does not resolve to the helper's import"

    for scope_name, var in sorted(variables):
        # The site's function, or a function nested in it (a closure the finding is reported in).
        functions = functions_within.get(scope_name, [])
        counts = [sum(1 for a in s.assignments[var]) for s in functions]
        if not any(counts) or any(c > 1 for c in counts):
            return f"`{var}` is not assigned exactly once as a local of `{scope_name}`"
        # The uses that may resolve to this function's assignment (every function's variable may
        # have the same name: scanning all uses of the name per variable was quadratic).
        for acc in {id(acc): acc for s in functions for a in s.assignments[var]
                    for acc in uses_of.get(id(a), ())}.values():
            if len(acc.referents) != 1:
                return f"a use of `{var}` in `{scope_name}` may also resolve to another binding"
    return None


def _enclosing_names(qualname: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`, `a.b.c`]: the scope names `_within` matches the qualname to."""
    parts = qualname.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _check_fresh(original: str, variables: set[tuple[str, str]]) -> None:
    """Each new variable was no name at all in its function before the fix: assigning it cannot
    capture an existing use, or shadow a parameter, global, import or nested definition."""
    if not variables:
        return
    try:
        tree = parsed(original)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise FixCheckError("the original text cannot be analysed") from None
    wanted = {scope_name for scope_name, _var in variables}
    names: dict[str, set[str]] = {}
    for function_node, _class_q, qualname in iter_functions(tree, ""):
        if qualname in wanted:  # only the functions a variable is added to: the others' names are not asked
            names.setdefault(qualname, set()).update(identifiers(function_node))
    for scope_name, var in variables:
        if var in names.get(scope_name, set()):
            raise FixCheckError(f"`{var}` already names something in `{scope_name}`; the fix would shadow it")


def _check_helper_bindings(tree: ast.Module, helpers: set[tuple[str, str, str]]) -> None:
    """The helper's local name is bound exactly once in the whole module (in any role, in any
    scope: a local, parameter, nested definition, `global`, exception or match capture, another
    import), by a top-level `from <module> import <func> [as <local>]`. Then every use of the name
    anywhere resolves to that import: the scope analysis below, which reads only the touched
    functions, could not see a binding in a body it blanked."""
    if not helpers:
        return
    bound = bindings(tree)
    for mod, func, local in sorted(helpers):
        # `mod` as the fix spells it: dotted, or relative (`.module_input_dtype`, Fix.spelled)
        ours = [stmt for stmt in tree.body if isinstance(stmt, ast.ImportFrom)
                and "." * stmt.level + (stmt.module or "") == mod
                and any(alias.name == func and (alias.asname or alias.name) == local for alias in stmt.names)]
        if bound[local] != 1 or len(ours) != 1:
            raise FixCheckError(f"`{local}` would not name the helper `{mod}:{func}` everywhere: the fixed module "
                                f"binds `{local}` {bound[local]} times")


def _touched_text(fixed: str, tree: ast.Module, scopes: set[str]) -> str:
    """What libcst's scope analysis needs of `fixed`: the module's top-level imports (where the
    helper's import is), and each function a new variable is assigned in, whole, with the headers
    of the classes it is defined in; every line of these as it is in `fixed`, in its order, and no
    other line. A new variable's uses resolve within its own function, so nothing else can change
    what they resolve to; the helper's bindings elsewhere are counted on the whole tree
    (`_check_helper_bindings`). Where a touched function is defined under an `if`, `try`... (a
    header that needs its other branches to parse), every function body outside the touched ones
    is one `pass` instead (`_bodies_blanked`).

    The lines left out are left out, not left empty: libcst makes a node of every empty line and
    its scope analysis visits each, and on vLLM's 1,500-line modules those were most of the check
    (issue #37). Nothing the check asks of libcst depends on where a node stands."""
    lines = split_lines(fixed)
    keep: list[tuple[int, int]] = [(stmt.lineno, stmt.end_lineno or stmt.lineno) for stmt in tree.body
                                   if isinstance(stmt, (ast.Import, ast.ImportFrom))]

    if not _keep_touched(tree.body, "", lines, scopes, keep):
        return _bodies_blanked(lines, tree, scopes)
    kept = bytearray(len(lines) + 1)
    for first, last in keep:
        kept[first:last + 1] = b"\x01" * (last + 1 - first)
    # Whole statements are kept or left out, so the kept lines parse on their own; a kept last
    # line without its end is given one, so that a line kept after it stays a line of its own.
    return "".join(_ended(line) for number, line in enumerate(lines, 1) if kept[number])


def _keep_touched(body: list[ast.stmt], prefix: str, lines: list[str], scopes: set[str],
                  keep: list[tuple[int, int]]) -> bool:
    """Add to `keep` the lines `body` holds of the touched functions (`_touched_text`); False where
    that cannot be cut out. At module level: a closure that calls itself is a reference cycle,
    which held the fixed text's lines until the next collection."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qualname = f"{prefix}.{node.name}" if prefix else node.name
            if not any(_within(scope, qualname) for scope in scopes):
                continue
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            if not isinstance(node, ast.ClassDef):
                keep.append((first, node.end_lineno or node.lineno))  # a touched function, whole
                continue
            body_line = node.body[0].lineno
            if lines[body_line - 1][:node.body[0].col_offset].strip():
                return False  # `class C: x = 1` on one line
            keep.append((first, body_line - 1))  # the class's header, its body's functions below
            if not _keep_touched(node.body, qualname, lines, scopes, keep):
                return False
        elif isinstance(node, _COMPOUND) and any(
                isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and any(
                    _within(scope, f"{prefix}.{inner.name}" if prefix else inner.name) for scope in scopes)
                for inner in ast.walk(node)):
            return False
    return True


def _bodies_blanked(lines: list[str], tree: ast.Module, scopes: set[str]) -> str:
    """The text of `lines` with the body of every function outside `scopes` (the functions a new
    variable is assigned in, and those enclosing them) replaced by one `pass`, its other lines
    left out: module- and class-level statements, signatures and decorators kept."""
    blank: list[tuple[int, int]] = []  # (first, last) 1-based body lines, each a body that goes

    _blanked_bodies(tree.body, "", lines, scopes, blank)
    lines = list(lines)
    gone = bytearray(len(lines) + 1)
    for first, last in blank:
        line = lines[first - 1]
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        end = _line_end(line) or "\n"
        lines[first - 1] = f"{indent}pass{end}"
        gone[first + 1:last + 1] = b"\x01" * (last - first)
    return "".join(_ended(line) for number, line in enumerate(lines, 1) if not gone[number])


def _blanked_bodies(body: list[ast.stmt], prefix: str, lines: list[str], scopes: set[str],
                    blank: list[tuple[int, int]]) -> None:
    """Add to `blank` the (first, last) body lines of each function of `body` outside `scopes`
    (`_bodies_blanked`); at module level, as `_keep_touched` is."""
    for node in body:
        if isinstance(node, ast.ClassDef):
            _blanked_bodies(node.body, f"{prefix}.{node.name}" if prefix else node.name, lines, scopes, blank)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            qualname = f"{prefix}.{node.name}" if prefix else node.name
            if any(_within(scope, qualname) for scope in scopes):
                continue  # a touched function, or one enclosing a touched one: kept whole
            first = node.body[0]
            # Only a body that starts on a line of its own (not `def f(): return x`), so
            # that the whole lines from its first statement to its end are the body's.
            if lines[first.lineno - 1][:first.col_offset].strip() == "" and (node.end_lineno or 0) >= first.lineno:
                blank.append((first.lineno, node.end_lineno or first.lineno))
        elif isinstance(node, _COMPOUND):
            blocks = [getattr(node, name, None) or [] for name in ("body", "orelse", "finalbody")]
            blocks += [handler.body for handler in getattr(node, "handlers", None) or []]
            blocks += [case.body for case in getattr(node, "cases", None) or []]
            for block in blocks:
                _blanked_bodies(block, prefix, lines, scopes, blank)


def _ended(line: str) -> str:
    """`line` with a line end: its own, or \\n on a last line without one."""
    return line if line.endswith(("\n", "\r")) else line + "\n"


def _line_end(line: str) -> str:
    """The line's own end (\\r\\n, \\r, \\n), or none on a last line without one."""
    return line[len(line.rstrip("\r\n")):]


# Statements whose blocks hold statements of the same scope (a `def` under an `if` at module level).
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match,
             *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))


def _check_placement(tree: ast.Module, variables: set[tuple[str, str]], helper_names: set[str]) -> None:
    """Each new variable is `var = helper(...)` right before `if var is not None:` in one block,
    and read only inside that `if`."""
    if not variables:
        return
    functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    for function_node, _class_q, qualname in iter_functions(tree, ""):
        functions.setdefault(qualname, []).append(function_node)  # two `def inner` in one function share a name
    for scope_name, var in sorted(variables):
        placed = [(fn, block, i) for fn in functions.get(scope_name, []) for block, i in _own_assignments(fn, var)]
        if not placed or len({id(fn) for fn, _b, _i in placed}) != len(placed):
            raise FixCheckError(f"`{var}` is not assigned exactly once in `{scope_name}`")
        for function_node, block, i in placed:
            value = block[i].value
            if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in helper_names):
                raise FixCheckError(f"`{var}` in `{scope_name}` is not assigned the helper's result")
            guard = block[i + 1] if i + 1 < len(block) else None
            if not (isinstance(guard, ast.If) and _is_not_none_test(guard.test, var)):
                raise FixCheckError(f"the helper call assigned to `{var}` (line {block[i].lineno}) is not right before "
                                    f"the `if {var} is not None:` guarding the cast: it would run where the dtype "
                                    "was not read")
            inside = {id(n) for n in ast.walk(guard)}
            for node in _own_nodes(function_node):
                if isinstance(node, ast.Name) and node.id == var and isinstance(node.ctx, ast.Load) \
                        and id(node) not in inside:
                    raise FixCheckError(f"`{var}` is read on line {node.lineno}, outside the guard it was made for")


def _own_nodes(fn: ast.AST):
    """The nodes of `fn`, not of the functions and classes defined in it (their own scope names
    are checked on their own), but lambdas and comprehensions, which can read `fn`'s variables."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def _own_assignments(fn: ast.AST, var: str):
    """(block, index) of each `var = ...` statement of `fn` itself."""
    for node in [fn, *_own_nodes(fn)]:
        if node is not fn and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if not isinstance(block, list):
                continue
            for i, stmt in enumerate(block):
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                        and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == var:
                    yield block, i


def _is_not_none_test(test: ast.expr, var: str) -> bool:
    """`var is not None`, alone or as the first operand of an `and` (the HF form keeps the
    guard's other tests after it)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and test.values:
        test = test.values[0]
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == var
            and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None)


def _within(qualname: str, scope_name: str) -> bool:
    return qualname == scope_name or qualname.startswith(scope_name + ".")


def _qualname(scope, function_scope, class_scope) -> str:
    parts = []
    s = scope
    while isinstance(s, (function_scope, class_scope)):
        parts.append(s.name or "<lambda>")
        s = s.parent
    return ".".join(reversed(parts))


def _top_statements(module):
    cst, _metadata = import_libcst()

    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            yield from stmt.body


def _is_top_level(node, module) -> bool:
    return any(node is stmt for stmt in _top_statements(module))


def _imports(node, module: str, func: str, local: str) -> bool:
    cst, _metadata = import_libcst()

    if not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
        return False
    # `module` is as the fix spells it: dotted, or relative (`.module_input_dtype`, Fix.spelled)
    if "." * len(node.relative) + (_dotted(node.module) if node.module is not None else "") != module:
        return False
    for alias in node.names:
        name = _dotted(alias.name)
        asname = (alias.asname.name.value
                  if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else None)
        if name == func and (asname or name) == local:
            return True
    return False


def _dotted(node) -> str:
    cst, _metadata = import_libcst()

    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""
