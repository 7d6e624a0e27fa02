"""What holds wherever a node runs: the one dominance walk of the analysis.

Walking from a site outwards to its function, every enclosing construct that decides whether the
site runs says something about the program state there:
- in the body of an `if`, a conditional expression or a `while`, the test held;
- in their `else`, or after an earlier operand of `or`, the test failed;
- after an earlier operand of `and`, that operand held;
- after an earlier `if test: return` (or `raise`, `continue`, `break`) in the same or an enclosing
  block, the test failed;
- after an earlier `assert test` in the same or an enclosing block, the test held (where it failed,
  the `assert` raised before the site);
- in the body of a `try`, its handlers are there to catch what the site raises.

`dominators` yields these, innermost first; what a test *means* (it proves the layer unquantized,
it implies a `.weight`) is the guard vocabulary's business (analysis/guard_engine/guards.py). The node-to-parent
map that the walk follows is built by `function_walk.parent_map`, the one builder of the analysis.
"""

from __future__ import annotations

import ast
from typing import Iterator

from dtype_lint.core.records import record

# Statements that leave the block: an `if` whose body ends in one guards what follows it.
EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_TRY = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


def statement_blocks(node: ast.AST | None) -> list[list[ast.stmt]]:
    """The statement lists directly under `node`: body, else, finally, handlers, match cases
    (none under None: a node without a parent)."""
    blocks = [getattr(node, name, None) for name in ("body", "orelse", "finalbody")]
    blocks += [handler.body for handler in getattr(node, "handlers", None) or []]
    blocks += [case.body for case in getattr(node, "cases", None) or []]
    return [block for block in blocks if isinstance(block, list)]


def same_expression(first: ast.AST, second: ast.AST) -> bool:
    """The same expression text, whether stored or loaded (`self.proj = ...` names `self.proj`)."""
    return ast.dump(first).replace("Store()", "Load()") == ast.dump(second).replace("Store()", "Load()")


@record(frozen=True)
class Dominator:
    """One thing known wherever the site runs.

    `test` held (`holds`) or failed (not `holds`); `construct` is the node that decides it: the
    `if`/conditional/`while`, the boolean operation, the earlier `if` that leaves, or a `try`
    (then `test` is None: the site runs under its handlers). `kind`: "branch", "operand", "exit",
    "assert" or "handler"."""

    test: ast.expr | None
    holds: bool
    construct: ast.stmt | ast.expr  # an if, while, assert or try; a conditional or a boolean operation
    kind: str


def dominators(site: ast.AST, parents: dict[int, ast.AST]) -> Iterator[Dominator]:
    """What holds at `site`, innermost first, up to the enclosing function (or lambda)."""
    child, parent = site, parents.get(id(site))
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)):
            if _within(child, parent.body):
                yield Dominator(parent.test, True, parent, "branch")
            elif _within(child, parent.orelse):
                yield Dominator(parent.test, False, parent, "branch")
        elif isinstance(parent, ast.BoolOp) and any(value is child for value in parent.values):
            position = next(i for i, value in enumerate(parent.values) if value is child)
            holds = isinstance(parent.op, ast.And)  # `a and site`: a held; `a or site`: a failed
            for earlier in parent.values[:position]:
                yield Dominator(earlier, holds, parent, "operand")
        elif isinstance(parent, _TRY) and any(stmt is child for stmt in parent.body):
            yield Dominator(None, True, parent, "handler")
        if isinstance(child, ast.stmt):
            for block in statement_blocks(parent):
                if any(stmt is child for stmt in block):
                    for earlier_stmt in block[: _index(block, child)]:
                        if isinstance(earlier_stmt, ast.If) and earlier_stmt.body \
                                and isinstance(earlier_stmt.body[-1], EXITS):
                            yield Dominator(earlier_stmt.test, False, earlier_stmt, "exit")
                        elif isinstance(earlier_stmt, ast.Assert):
                            yield Dominator(earlier_stmt.test, True, earlier_stmt, "assert")
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        child, parent = parent, parents.get(id(parent))


def enclosing_blocks(site: ast.AST, parents: dict[int, ast.AST]) -> Iterator[tuple[list[ast.stmt], int]]:
    """Each statement list of the function that holds `site`, innermost first, with the index of
    its statement that holds the site: the statements before that index have run, in order, on
    every path to `site` that enters that statement (a `try`'s body is not the block of a site in
    one of its handlers)."""
    child, parent = site, parents.get(id(site))
    while parent is not None:
        if isinstance(child, ast.stmt):
            for block in statement_blocks(parent):
                if any(stmt is child for stmt in block):
                    yield block, _index(block, child)
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        child, parent = parent, parents.get(id(parent))


def evaluated_before(site: ast.AST, parents: dict[int, ast.AST]) -> Iterator[ast.AST]:
    """Expressions (and simple statements) that have run, without raising, on every path to `site`
    within its function: each earlier statement of the same or an enclosing block, whole when it is
    a simple statement, only its test (`if`, `while`), iterable (`for`) or context managers
    (`with`) when it is compound. A `try`, a function or a class defined earlier says nothing."""
    for block, holder in enclosing_blocks(site, parents):
        for earlier in block[:holder]:
            yield from _always_runs(earlier)


def _always_runs(stmt: ast.stmt) -> list[ast.AST]:
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Assert)):
        return [stmt]
    return []


def _within(node: ast.AST, body) -> bool:
    return node is body or (isinstance(body, list) and any(stmt is node for stmt in body))


def _index(block: list[ast.stmt], node: ast.AST) -> int:
    return next(i for i, stmt in enumerate(block) if stmt is node)
