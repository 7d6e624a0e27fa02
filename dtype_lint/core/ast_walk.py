"""Walks of a tree read through each AST class's child fields, not `ast.iter_child_nodes`.

`ast.walk` yields each node through three nested generators (`iter_child_nodes`, `iter_fields`,
its own); reading each class's fields that can hold a node once (from the grammar signature in
the class's docstring) and looping over them made a walk several times cheaper. The analysis's
one walk per function (analysis/function_walk.py) is built on the same field table; the dtype
evaluator's shape test walks every function of a file a rule reads for helpers with it.
"""

from __future__ import annotations

import ast

# Field types of the AST grammar that hold no node (`Name(identifier id, expr_context ctx)`).
_SCALARS = frozenset({"identifier", "string", "constant", "int"})
_AST = ast.AST


def child_fields(kind: type[ast.AST]) -> tuple[str, ...]:
    """The fields of an AST class that can hold a node or a list of nodes, in `_fields` order
    (the order `ast.iter_child_nodes` yields them), read from the grammar signature in its
    docstring (`Name(identifier id, expr_context ctx)`: only `ctx`); every field when that
    signature cannot be read."""
    # `Name(...)` then only whitespace, read with string tests: a regex compiled per class was
    # 56 compiles in a one-file run (`re`'s cache holds the pattern, not the class's answer).
    doc = (kind.__doc__ or "").split("\n", 1)[0].rstrip()
    head = kind.__name__ + "("
    if not (doc.startswith(head) and doc.endswith(")") and len(doc) > len(head)):
        return tuple(kind._fields)
    declared = {}
    for part in doc[len(head):-1].split(","):
        words = part.split()
        if len(words) == 2:
            declared[words[1]] = words[0].rstrip("*?")
    if set(declared) != set(kind._fields):
        return tuple(kind._fields)
    return tuple(f for f in kind._fields if declared[f] not in _SCALARS)


# class -> child_fields(class), filled as classes are met (the walks' loops read it directly).
FIELDS: dict[type[ast.AST], tuple[str, ...]] = {}


def fields_of(kind: type[ast.AST]) -> tuple[str, ...]:
    found = FIELDS.get(kind)
    if found is None:
        found = FIELDS[kind] = child_fields(kind)
    return found


def walk(root: ast.AST) -> list[ast.AST]:
    """`list(ast.walk(root))`, in its order (breadth first), read through each class's child
    fields: `ast.iter_child_nodes`' generators made ast.walk a twentieth of a run with every rule
    on, where the guard engine walks whole modules (vLLM 0.34.0: 130.7 G -> 125.3 G instructions)."""
    return walked(root, None)


def parent_map(root: ast.AST) -> dict[int, ast.AST]:
    """id(child) -> parent for every node under `root` (the root itself has none), written in
    ast.walk's order: a node the parser shares (`Load()`, an operator) keeps the last parent."""
    parents: dict[int, ast.AST] = {}
    walked(root, parents)
    return parents


def enclosing_function(parents: dict[int, ast.AST], node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function `node` is in (by `parents`, id -> parent), or None."""
    while id(node) in parents:
        node = parents[id(node)]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    return None


def walked(root: ast.AST, parents: dict[int, ast.AST] | None) -> list[ast.AST]:
    """The nodes under `root` in ast.walk's order; with `parents`, each child's parent written
    there as it is met."""
    nodes: list[ast.AST] = [root]
    push, ast_type, fields = nodes.append, _AST, FIELDS
    for node in nodes:  # the list is the queue: a node's children go after every node before them
        kind = type(node)
        child_fields = fields.get(kind)
        if child_fields is None:
            child_fields = fields_of(kind)
        for name in child_fields:
            value = getattr(node, name, None)
            if value is None:
                continue
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast_type):
                        push(item)
                        if parents is not None:
                            parents[id(item)] = node
            elif isinstance(value, ast_type):
                push(value)
                if parents is not None:
                    parents[id(value)] = node
    return nodes
