"""Code that never runs: a site there is no finding, whatever the layer.

`if TYPE_CHECKING:` bodies are read by type checkers only (sglang's `kimi_k3.py` declares typed
stubs of its layers there); a `def` that a later `def` of the same name in the same class or
module body replaces is never called (`shadowed_definitions`, asked by DTL003); the `else` of a
`hasattr(self.X, "m")` that every construction of `self.X` makes true never runs
(`false_arm_of_method_check`, asked by DTL003). New predicates live here rather than in the guard engine
(analysis/guard_engine/guards.py): they do not depend on the layer, only on where the site stands.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.index.class_index import dotted


def _type_checking(test: ast.expr) -> bool:
    return (dotted(test) or "").rsplit(".", 1)[-1] == "TYPE_CHECKING"


def never_runs(site: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """The site is inside the body of an `if TYPE_CHECKING:` (not its `else`)."""
    child, node = site, parents.get(id(site))
    while node is not None:
        if isinstance(node, ast.If) and _type_checking(node.test) and any(child is s for s in node.body):
            return True
        child, node = node, parents.get(id(node))
    return False


_KEEPS_NAME = ("staticmethod", "classmethod", "property", "cached_property", "functools.cached_property")


def shadowed_definitions(tree: ast.Module) -> frozenset[int]:
    """The `id`s of the functions of a module or class body rebound later in that same body (a
    second `def` of the name, or an assignment to it): every use, `self.f()` included, finds the
    later binding, so the first body never runs. Not when something between them, or the later
    `def`'s decorators, reads the name (`@f.setter`, `g = f`), nor when the first is decorated
    with anything but a plain method wrapper (`@overload`, a registering decorator keeps it)."""
    shadowed: set[int] = set()
    bodies, todo = [], [tree.body]
    while todo:  # the module's body and its classes' (not function bodies: nothing is rebound there)
        body = todo.pop()
        bodies.append(body)
        todo.extend(stmt.body for stmt in body if isinstance(stmt, ast.ClassDef))
    for body in bodies:
        names = [stmt.name for stmt in body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))]
        twice = {name for name in names if names.count(name) > 1}
        if not twice and not any(isinstance(stmt, ast.Assign) for stmt in body):
            continue
        for i, stmt in enumerate(body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name not in twice and not any(
                    isinstance(t, ast.Name) and t.id == stmt.name
                    for later in body[i + 1:] if isinstance(later, ast.Assign) for t in later.targets):
                continue
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or \
                    any((dotted(d) or "") not in _KEEPS_NAME for d in stmt.decorator_list):
                continue
            for later in body[i + 1:]:
                if isinstance(later, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if _reads(later.decorator_list, stmt.name):
                        break
                    if later.name == stmt.name:
                        shadowed.add(id(stmt))
                        break
                    continue
                if isinstance(later, ast.ClassDef) or _reads([later], stmt.name):
                    break  # read (or may be) before it is rebound
                if isinstance(later, ast.Assign) and any(isinstance(t, ast.Name) and t.id == stmt.name
                                                         for t in later.targets):
                    shadowed.add(id(stmt))
                    break
    return frozenset(shadowed)


def _reads(nodes: list[ast.expr] | list[ast.stmt], name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
               for node in nodes for n in ast.walk(node))


def false_arm_of_method_check(site: ast.AST, parents: dict[int, ast.AST], has_method) -> bool:
    """The site runs only where a `hasattr(X, "m")` failed, and `has_method(X, "m")` says every
    object X can hold defines method `m` (a delegating `elif` after `if hasattr(self.language_model,
    "get_embed_and_head"): return self.language_model.get_embed_and_head()`)."""
    from dtype_lint.analysis.guard_engine.dominance import dominators

    for dominator in dominators(site, parents):
        test = dominator.test
        if dominator.holds or not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name)
                                   and test.func.id == "hasattr" and len(test.args) == 2 and not test.keywords):
            continue
        name = test.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str) and has_method(test.args[0], name.value):
            return True
    return False
