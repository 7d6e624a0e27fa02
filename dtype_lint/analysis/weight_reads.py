"""The reads of a layer's `.weight` that DTL003 judges, and the bodies a reduced tree blanked
(what an "on-demand" rule's `needs_whole_tree` reads: core/regions.py keeps the functions holding
a line the rules' patterns match whole, and blanks the other bodies).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from dtype_lint.analysis.flow.recognisers import feeds_dtype_site, weight_read
from dtype_lint.core import trees


def blanked_bodies(tree: ast.Module, text: str) -> Iterator[str]:
    """The text of each function body blanked in a reduced tree of `text` (none in a whole tree)."""
    for start, end in getattr(tree, trees.REMOVED, ()):
        yield text[start:end]


def judged_weight_reads(ctx) -> Iterator[tuple]:
    """(candidate, node, layer) of each read of a layer's `.weight` in the candidates of `ctx` (a
    rule.RuleContext) that DTL003 judges: not one feeding a cast's or an allocation's dtype
    (DTL001/DTL002 report those), not a weight handed to a project function that casts with it,
    not a wrapper's `weight` property returning its base's (it raises exactly as the base)."""
    # A read spells `weight` (`L.weight`) or `getattr` (`getattr(L, "wei" "ght")`) in its function:
    # the other candidates (with every rule on, every function saying `dtype`) are not walked.
    for function in ctx.candidates_naming(("weight", "getattr")):
        for node in function.walk.of(ast.Attribute, ast.Call):  # what weight_read recognises
            layer = weight_read(node)
            if layer is None:
                continue
            if feeds_dtype_site(node, function.fn, function.parents) or _flows_on(ctx, node, function):
                continue
            if function.fn.name == "weight" and isinstance(function.parents.get(id(node)), ast.Return):
                continue
            yield function, node, layer


def _flows_on(ctx, node: ast.AST, function) -> bool:
    """The weight is handed to a project function that casts or allocates with it: DTL001/DTL002
    report the call (its message names the missing `.weight` too)."""
    call = function.parents.get(id(node))
    if isinstance(call, ast.keyword):
        call = function.parents.get(id(call))
    if not isinstance(call, ast.Call):
        return False
    return any(flow.arg is node for flow in ctx.flows.flows(call, function.scope))
