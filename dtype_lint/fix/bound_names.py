"""Every name a piece of code binds or reads: what a fix must not reuse for the names it adds.

A fix introduces names (the helper, imported under some local name, and a variable holding its
result). A name the code already uses anywhere in the region that name would be visible from,
in any role (variable, parameter, function, class, import, `global`/`nonlocal`, exception or
match capture, type parameter), is not fresh: binding it again would shadow it, or be shadowed.
"""

from __future__ import annotations

import ast
from collections import Counter


def _names_of(node: ast.AST, loads: bool):
    if isinstance(node, ast.Name):
        if loads or not isinstance(node.ctx, ast.Load):
            yield node.id
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
    elif isinstance(node, ast.alias):
        if node.name != "*":
            yield node.asname or node.name.split(".")[0]
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        yield from node.names
    else:
        # except ... as name, match captures (MatchAs, MatchStar, MatchMapping.rest), and
        # 3.12 type parameters (TypeVar, ParamSpec, TypeVarTuple) carry the name as a string.
        for attr in ("name", "rest"):
            value = getattr(node, attr, None)
            if isinstance(value, str):
                yield value


def identifiers(node: ast.AST) -> set[str]:
    """Every name `node` and the code inside it bind or read."""
    from dtype_lint.analysis.function_walk import all_nodes  # a set: ast.walk's order not needed

    return {name for n in all_nodes(node) for name in _names_of(n, loads=True)}


def bindings(node: ast.AST) -> Counter:
    """How many times each name is bound in `node` and the code inside it (reads not counted).
    Only the node kinds `_names_of` can name something for are asked (a generator per node of a
    whole fixed module was a tenth of `--fix`'s fixing on vLLM 0.27.1)."""
    from dtype_lint.analysis.function_walk import all_nodes  # a count: ast.walk's order not needed

    binding = _BINDING_KINDS
    return Counter(name for n in all_nodes(node) if type(n) in binding for name in _names_of(n, loads=False))


# The node classes `_names_of` can yield a name for: a name, a parameter, a definition, an import
# alias, `global`/`nonlocal`, and every class with a `name` or `rest` field (an exception handler,
# match captures, type parameters). Others yield nothing.
_BINDING_KINDS = frozenset(
    {ast.Name, ast.arg, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.alias, ast.Global, ast.Nonlocal}
    | {cls for cls in vars(ast).values() if isinstance(cls, type) and issubclass(cls, ast.AST)
       and ("name" in cls._fields or "rest" in cls._fields)})


def module_names(tree: ast.AST) -> tuple[Counter, set[str], bool]:
    """`bindings`, `identifiers` and `has_star_import` of one tree in one walk (a module of 30,000
    nodes walked three times was a fifth of a pre-commit run with a site)."""
    bound: Counter = Counter()
    seen: set[str] = set()
    star = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            seen.add(node.id)
            if not isinstance(node.ctx, ast.Load):
                bound[node.id] += 1
            continue
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            star = True
        for name in _names_of(node, loads=False):
            bound[name] += 1
            seen.add(name)
    return bound, seen, star


def has_star_import(tree: ast.Module) -> bool:
    """`from x import *` anywhere: it may bind any public name, unseen."""
    return any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree))


def fresh(base: str, taken: set[str]) -> str:
    """`base`, else `base_2`, `base_3`... whichever `taken` does not hold."""
    candidate, n = base, 2
    while candidate in taken:
        candidate = f"{base}_{n}"
        n += 1
    return candidate
