"""One walk per function, whose node events every rule subscribes to.

Ruff's checker visits a module once and dispatches each node to the rules that want its kind;
the rules here used to walk each candidate function again (its nodes, then its parent map, then
each fact's own `isinstance` filter over the nodes). `FunctionWalk` walks a function once and
keeps what every consumer asks of it:

- `nodes`: the function's own nodes in exactly the order `class_facts.walk_function` yields
  them (a `def` or `class` that is a statement of the body in place; then the closures, which
  read the function's locals: a `def` under a block of it or inside a nested `def`, at any depth,
  and every lambda, each after the walk it was met in; never a class's methods, nor a closure
  taking one of the function's parameter names), so that rules which keep the first of several
  nodes, and fix planners that name variables in the order sites are met, see them as before;
- `parents`: `id(child) -> parent` for every node under the function, nested bodies, arguments
  and decorators included (what `dominance.parent_map(fn)` builds);
- `of(*types)`: the events, the nodes of the given exact AST classes in walk order (`ast.Call`,
  `ast.Compare`, `ast.Attribute`...), bucketed during the walk, so that a rule that wants calls
  meets only calls.

The walk replaces `ast.iter_child_nodes`' three nested generators with a loop over each class's
`_fields`, the same children in the same order.
"""

from __future__ import annotations

import ast
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, TypeVar, overload

from dtype_lint.analysis.instance_patches import instance_patched_methods
from dtype_lint.core.ast_walk import FIELDS, fields_of, parent_map, walk, walked

# Not entered by a function's own walk (walk_function): their nodes belong to another scope.
_OTHER_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
# ... except these where they are statements of a block of the function (own_nodes): `body`,
# `orelse` and `finalbody` of a compound statement, a handler or a case hold statements only.
_STATEMENT_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BLOCK_FIELDS = frozenset({"body", "orelse", "finalbody"})
_BLOCK_OWNERS = frozenset({ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
                           getattr(ast, "TryStar", ast.Try), ast.ExceptHandler, ast.Match, ast.match_case})
_AST = ast.AST
_LAMBDA = ast.Lambda
_DEFS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef})
_HOLDS_CLOSURES = _BLOCK_OWNERS | _DEFS  # whose statement blocks' `def`s own_nodes enters after the walk
# The nodes a FunctionScope reads (its local assignments and the names loops and `with` bind, and
# the nested `def`s and lambdas the walk enters, whose own names shadow).
SCOPE_EVENTS = (ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.With, ast.AugAssign,
                ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


_Node = TypeVar("_Node", bound=ast.AST)
_Other = TypeVar("_Other", bound=ast.AST)
# The child-field table of core/ast_walk.py, under the names the loops here read.
_FIELDS, _fields_of = FIELDS, fields_of


def _children(node: ast.AST):
    for name in _fields_of(type(node)):
        value = getattr(node, name, None)
        if isinstance(value, _AST):
            yield value
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, _AST):
                    yield item


class FunctionWalk:
    """The one walk of one function (see the module docstring)."""

    __slots__ = ("fn", "nodes", "_parents", "_events", "_merged")

    def __init__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef):
        self.fn = fn
        nodes = own_nodes(fn)
        # Events after the walk, in walk order: one dict lookup a node, cheaper than the walk.
        events: dict[type, list[ast.AST]] = {}
        for node in nodes:
            bucket = events.get(type(node))
            if bucket is None:
                events[type(node)] = [node]
            else:
                bucket.append(node)
        self.nodes = nodes
        self._events = events
        self._parents: dict[int, ast.AST] | None = None
        self._merged: dict[tuple[type, ...], list[ast.AST]] = {}

    @property
    def parents(self) -> dict[int, ast.AST]:
        """id(child) -> parent for every node under the function (nested scopes, arguments and
        decorators included), built on first use: most functions never need it."""
        parents = self._parents
        if parents is None:
            parents = self._parents = {}
            todo: list[ast.AST] = [self.fn]
            pop, push, ast_type, fields = todo.pop, todo.append, _AST, _FIELDS
            while todo:
                node = pop()
                kind = type(node)
                child_fields = fields.get(kind)
                if child_fields is None:
                    child_fields = _fields_of(kind)
                for name in child_fields:
                    value = getattr(node, name, None)
                    if value is None:
                        continue
                    if isinstance(value, list):
                        for item in value:
                            if isinstance(item, ast_type):
                                parents[id(item)] = node
                                push(item)
                    elif isinstance(value, ast_type):
                        parents[id(value)] = node
                        push(value)
        return parents

    @overload
    def of(self, kind: type[_Node], /) -> list[_Node]: ...

    @overload
    def of(self, first: type[_Node], second: type[_Other], /) -> list[_Node | _Other]: ...

    @overload
    def of(self, *kinds: type[ast.AST]) -> list[ast.AST]: ...

    def of(self, *kinds: type[ast.AST]) -> list[Any]:  # list[_Node] for one class (overloads above)
        """The function's own nodes of these exact AST classes, in walk order (shared: do not
        mutate). Abstract classes (`ast.expr`, `ast.stmt`) are matched with `isinstance`."""
        if len(kinds) == 1 and kinds[0] in self._events:
            return self._events[kinds[0]]
        merged = self._merged.get(kinds)
        if merged is None:
            concrete = set(kinds)
            if any(k.__subclasses__() for k in kinds):  # an abstract class: every subclass
                merged = [n for n in self.nodes if isinstance(n, kinds)]
            elif len(kinds) == 1:
                merged = []
            else:
                merged = [n for n in self.nodes if type(n) in concrete]
            self._merged[kinds] = merged
        return merged


def own_nodes(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """`list(class_facts.walk_function(fn))`, in its order (the loop of `FunctionWalk.__init__`
    without the events): `ast.iter_child_nodes`' generators were most of a walk's cost.

    A closure reads the function's locals as code beside them does, so it is walked too, after
    the walk it was met in: a `def` or `class` under a block of the function (`if flag:`, `with`,
    `try`, `match`...), a `def` inside a nested `def` at any depth, and every lambda. Not a class's
    methods (another scope), nor a closure taking one of the function's parameter names (`self`
    there is not the function's `self`). Their casts were met by no walk that knew the locals
    (trl 1.16.0: a forward hook defined under `if`). (Collected as the walk passes them: a pass of
    its own over every function's statements cost 0.15% of a cold check.)"""
    deferred: list[Any] = []  # defs and classes (statements, with their lines) and lambdas
    nodes = _depth_first(list(fn.body), _OTHER_SCOPES, deferred)
    own_params = parameter_names(fn) if deferred else frozenset()
    while deferred:
        # A `def` under a block of a class's body is the class's (a method), not the function's.
        classes = [(c.lineno, c.end_lineno or c.lineno) for c in nodes if type(c) is ast.ClassDef]
        owned = [d for d in deferred if not any(first <= d.lineno <= last for first, last in classes)
                 and not (own_params & parameter_names(d))]
        deferred = []
        if owned:
            nodes += _depth_first(owned, _OTHER_SCOPES, deferred)
    return nodes


def in_closure(fn: ast.AST, parents: dict[int, ast.AST], node: ast.AST) -> bool:
    """Is `node` in a lambda or a nested `def` of `fn` (a closure its walk entered), which runs
    when it is called, not where `fn` defines it? `parents`: FunctionWalk.parents of `fn`."""
    up = parents.get(id(node))
    while up is not None and up is not fn:
        if type(up) is _LAMBDA or type(up) in _DEFS:
            return True
        up = parents.get(id(up))
    return False


def parameter_names(scope: ast.AST) -> frozenset[str]:
    """The parameter names of a `def` or lambda (none for a class). (own_nodes does not enter a
    nested scope taking one of the function's own: `self` or `layer` there is not the function's,
    and what the function's parameters hold, their annotations and `self`'s class, is read by name.)"""
    a = getattr(scope, "args", None)
    if a is None:
        return frozenset()
    return frozenset(arg.arg for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]
                     if arg is not None)


def all_nodes(root: ast.AST) -> list[ast.AST]:
    """The nodes of `ast.walk(root)` (root and everything under it, nested scopes included), but
    NOT in its order (depth first, last child first): for callers that only test or collect."""
    return _depth_first([root], ())


# skip -> {class: is an instance of it a node the walk enters (an AST node, none of skip's
# kinds)}: `isinstance` answers alike for every instance of a class, so each class is asked
# once a process, not for each child (two `isinstance` tests, one of them against skip's four
# classes: vLLM 0.34.0's cold check walks 254,000 nodes this way, 23.82 -> 23.52 G instructions).
_ENTERED: dict[tuple[type, ...], dict[type, bool]] = {}


def _depth_first(todo: list[ast.AST], skip: tuple[type, ...], blocks: list[Any] | None = None) -> list[ast.AST]:
    """Every node reachable from `todo` (popped last first), not entering nodes of `skip`'s kinds;
    `blocks`, where given, collects the `def`s and `class`es not entered that are statements of a
    compound statement's block. One inlined loop: a call or a generator per node would cost more
    than the walk itself."""
    nodes: list[ast.AST] = []
    entered = _ENTERED.get(skip)
    if entered is None:
        entered = _ENTERED[skip] = {}
    append_node, pop, push, ast_type, fields, enters = nodes.append, todo.pop, todo.append, _AST, _FIELDS, entered.get
    while todo:
        node = pop()
        append_node(node)
        kind = type(node)
        child_fields = fields.get(kind)
        if child_fields is None:
            child_fields = _fields_of(kind)
        for name in child_fields:
            value = getattr(node, name, None)
            if value is None:
                continue
            if isinstance(value, list):
                for item in value:
                    enter = enters(type(item))
                    if enter is None:
                        enter = entered[type(item)] = isinstance(item, ast_type) and not isinstance(item, skip)
                    if enter:
                        push(item)
                    elif blocks is not None and (type(item) is _LAMBDA or (
                            name in _BLOCK_FIELDS and type(item) in _STATEMENT_SCOPES
                            and type(node) in _HOLDS_CLOSURES)):
                        blocks.append(item)
            else:
                enter = enters(type(value))
                if enter is None:
                    enter = entered[type(value)] = isinstance(value, ast_type) and not isinstance(value, skip)
                if enter:
                    push(value)
                elif blocks is not None and type(value) is _LAMBDA:
                    blocks.append(value)
    return nodes


def nodes_of(root: ast.AST, kind: type[_Node]) -> list[_Node]:
    """`[n for n in ast.walk(root) if type(n) is kind]`, in ast.walk's order (breadth first), read
    through each class's child fields instead of `ast.iter_child_nodes`."""
    return [node for node in walked(root, None) if type(node) is kind]


__all__ = ["SCOPE_EVENTS", "FunctionWalk", "all_nodes", "in_closure", "nodes_of", "own_nodes", "parameter_names",
           "parent_map", "walk"]


# Every function of a module with its scope: the walk the rules' candidates, the fix planner's scope
# check and the foreign-call search share (it lived in rule.py; the fix stage, below the rules, reads it).
_COMPOUND: tuple[type[ast.stmt], ...] = tuple(
    getattr(ast, n) for n in ("If", "For", "AsyncFor", "While", "With", "AsyncWith", "Try", "TryStar", "Match")
    if hasattr(ast, n))


def iter_functions(tree: ast.Module, module: str, lines: list[int] | None = None
                   ) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None, str]]:
    """(function node, enclosing class qualname or None, scope qualname) for every function;
    with `lines` (sorted line numbers), only those whose statement spans one of them (and the
    walk skips every statement that spans none). A class defined in a function has Python's
    qualified name (`module.outer.<locals>.Inner`), the name the class index locates it by; the
    scope qualname stays the dotted path (`outer.Inner.method`: baselines are keyed by it)."""
    yield from _visit(tree.body, None, "", module, lines, "")


# What `_visit` does with a statement, by its class: enter a class, yield a function, enter a
# compound statement's blocks, or pass over it. `isinstance` answers alike for every instance of
# a class, so each class is asked once a process (three `isinstance` tests against up to twelve
# classes for every statement of every file, each time its functions are listed: vLLM 0.34.0
# cold -j1 23.52 -> 23.03 G instructions).
_OTHER, _CLASS, _FUNCTION, _BLOCKS = "other", "class", "function", "blocks"
_STATEMENT_KINDS: dict[type, str] = {}


def _statement_kind(node: ast.stmt) -> str:
    kind = _CLASS if isinstance(node, ast.ClassDef) else _FUNCTION \
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else _BLOCKS \
        if isinstance(node, _COMPOUND) else _OTHER
    _STATEMENT_KINDS[type(node)] = kind
    return kind


def _spans(node: ast.stmt, lines: list[int]) -> bool:
    i = bisect_left(lines, node.lineno)
    return i < len(lines) and lines[i] <= (node.end_lineno or node.lineno)


def _visit(body: list[ast.stmt], class_q: str | None, prefix: str, module: str, lines: list[int] | None,
           qual: str) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None, str]]:
    """`prefix`: the scope path; `qual`: the Python qualified name of what encloses `body`."""
    kinds = _STATEMENT_KINDS
    node: Any  # a ClassDef, a def or a compound statement as its kind says (mypy cannot tell from it)
    for node in body:
        kind = kinds.get(type(node))
        if kind is None:
            kind = _statement_kind(node)
        if kind is _OTHER:  # most statements: nothing to enter
            continue
        if lines is not None and not _spans(node, lines):
            continue
        if kind is _CLASS:
            q = f"{prefix}.{node.name}" if prefix else node.name
            inner = f"{qual}.{node.name}" if qual else node.name
            yield from _visit(node.body, f"{module}.{inner}" if module else inner, q, module, lines, inner)
        elif kind is _FUNCTION:
            q = f"{prefix}.{node.name}" if prefix else node.name
            yield node, class_q, q
            function_qual = f"{qual}.{node.name}" if qual else node.name
            yield from _visit(node.body, None, q, module, lines, f"{function_qual}.<locals>")
        else:  # _BLOCKS: if/for/while/with/try/match
            for block in _blocks(node):
                yield from _visit(block, class_q, prefix, module, lines, qual)


def _blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    """The statement blocks of a compound statement (if/for/while/with/try/match)."""
    blocks = [getattr(node, f, None) or [] for f in ("body", "orelse", "finalbody")]
    blocks += [h.body for h in getattr(node, "handlers", None) or []]
    blocks += [c.body for c in getattr(node, "cases", None) or []]
    return blocks


def patched_methods(tree: ast.Module) -> dict[str, str]:
    """Module-level functions patched onto a class in this module (`Model.forward = fn`,
    `setattr(Model, "forward", fn)`, anywhere in the file; or bound onto an instance of a tested
    class, `module.forward = types.MethodType(fn, module)`): the function's name → the class's
    dotted name as the file spells it (a string-named class: instance_patches.NAMED_CLASS_PREFIX).
    Such a function runs as that class's method, so its first
    parameter is an instance of the class. Only a function whose first parameter is `self`, and
    bound to one class: one patched onto several classes (or rebound) keeps no class."""
    functions = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.args.args and node.args.args[0].arg == "self"}
    if not functions:
        return {}
    bound: dict[str, set[str]] = {}
    nodes = walk(tree)
    for node in nodes:
        owner, function = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) \
                and isinstance(node.value, ast.Name):
            owner, function = node.targets[0].value, node.value.id
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) == 3 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and isinstance(node.args[2], ast.Name):
            owner, function = node.args[0], node.args[2].id
        name = _dotted_name(owner) if owner is not None else None
        if function in functions and name and name != "self":
            bound.setdefault(function, set()).add(name)
    # `module.forward = types.MethodType(fn, module)` under a test of the module's class
    # (analysis/instance_patches.py): fn runs as a method of that class too.
    for function, names in instance_patched_methods(nodes, parent_map(tree), functions).items():
        bound.setdefault(function, set()).update(names)
    return {function: next(iter(names)) for function, names in bound.items() if len(names) == 1}


def _dotted_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted_name(node.value)
        return f"{head}.{node.attr}" if head else None
    return None
