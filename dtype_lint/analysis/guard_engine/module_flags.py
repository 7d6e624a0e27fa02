"""Module-level flags (`_is_cpu = is_cpu()`, bound once) and the arms they close: a layer built
with a config only under one outcome of such a flag does not reach a read under the other
(used by DTL003; engine code, kept out of the rule module)."""

from __future__ import annotations

import ast

from dtype_lint.analysis.function_walk import parent_map, walk
from dtype_lint.analysis.guard_engine.dominance import dominators
from dtype_lint.analysis.storage.storage_model import ABSENT


def _module_flag_tests(site: ast.AST, parents: dict[int, ast.AST], flags: frozenset[str]) -> dict[str, bool]:
    """The module-level flags (`_is_cpu`) tested on the way to `site`, with the outcome there:
    `if _is_cpu:` body True, its `else`/`elif` False, `if _is_cpu: ...; return` then False."""
    outcomes: dict[str, bool] = {}
    for dominator in dominators(site, parents):
        test, holds = dominator.test, dominator.holds
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, holds = test.operand, not holds
        if isinstance(test, ast.Name) and test.id in flags:
            outcomes.setdefault(test.id, holds)
    return outcomes


def _module_flags(tree: ast.Module) -> frozenset[str]:
    """Names bound once at the top level of a module (`_is_cpu = is_cpu()`): fixed for the run."""
    counts: dict[str, int] = {}
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
            stmt, ast.AnnAssign) and stmt.value is not None else []
        for target in targets:
            if isinstance(target, ast.Name):
                counts[target.id] = counts.get(target.id, 0) + 1
    stores: dict[str, int] = {}
    rebound: set[str] = set()
    for node in walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in counts:
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, ast.Global):
            rebound.update(node.names)
    return frozenset(name for name, count in counts.items()
                     if count == 1 and stores.get(name) == 1 and name not in rebound)


def other_arm_builds(ctx, node: ast.AST, layer: ast.expr, function) -> bool:
    """`self.X` built with a config only under one outcome of a module-level flag (`if _is_cpu:
    self.proj = ReplicatedLinear(..., quant_config=...)`, else a plain `nn.Linear`) and read only
    under the other (`if _is_cpu: ...; return` before the read): the constructions that run with
    the read are the only ones that count."""
    if not (isinstance(layer, ast.Attribute) and isinstance(layer.value, ast.Name)
            and layer.value.id == function.scope.self_name and function.class_qualname):
        return False
    layers, project = ctx.layers, ctx.layers.project
    found = project.attr_origins(function.class_qualname, layer.attr)
    location = layers.index.class_location(found[0]) if found else None
    if location is None or location[0].module != ctx.source.module:
        return False  # the flag is a module's: the class and the read share it
    tree = ctx.tree
    flags = _module_flags(tree)
    at_read = _module_flag_tests(node, function.parents, flags)
    if not at_read:
        return False
    parents = parent_map(tree)
    where, origins = found
    env = layers._env_in(layers.resolve(layer.value, function.scope), where)
    excluded = 0
    for origin in origins:
        if origin.call is None or id(origin.call) not in parents:
            return False  # an origin this file's tree does not hold
        built = _module_flag_tests(origin.call, parents, flags)
        if any(name in at_read and at_read[name] != outcome for name, outcome in built.items()):
            excluded += 1
            continue  # never runs together with the read
        inst = layers._from_origin(origin, where, env)
        if inst.qualname is None or layers.quantizable(inst, ast.unparse(layer), None, ABSENT) is not None:
            return False
    return excluded > 0
