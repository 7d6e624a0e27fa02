"""Where an input-dtype helper is called and defined (DTL005's questions of a file's code): the
layer a call hands it, the cast its result feeds, and the span of a helper's name on its `def`
line."""

from __future__ import annotations

import ast

from dtype_lint.analysis.flow.recognisers import cast_dtype_args


def layer_argument(call: ast.Call) -> ast.expr | None:
    """The layer a helper call passes: its first positional argument, or a `layer=`-like keyword."""
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in ("layer", "module", "linear")), None)


def fed_cast(call: ast.Call, function) -> ast.Call | None:
    """The cast this call's result feeds: as the cast's dtype (alone or in `... or x.dtype`), or
    through a local name assigned from it and cast to in this function or one nested in it."""
    parents = function.parents
    node: ast.AST = call
    parent = parents.get(id(call))
    while isinstance(parent, (ast.BoolOp, ast.keyword)):
        node, parent = parent, parents.get(id(parent))
    if isinstance(parent, ast.Call) and any(a is node or a is getattr(node, "value", None)
                                            for a in cast_dtype_args(parent)):
        return parent
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return None
    name = parent.targets[0].id
    for sub in ast.walk(function.fn):
        if isinstance(sub, ast.Call):
            for arg in cast_dtype_args(sub):
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(arg)):
                    return sub
    return None


def def_name_node(source, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Name:
    """The function's name on its `def` line, for the finding's span."""
    line = source.line(fn.lineno)
    raw = line.encode("utf-8")
    start = raw.find(f"def {fn.name}".encode()) + 4
    if start < 4:
        start = fn.col_offset
    node = ast.Name(id=fn.name)
    node.lineno = node.end_lineno = fn.lineno
    node.col_offset, node.end_col_offset = start, start + len(fn.name.encode("utf-8"))
    return node


def may_be_packed(context, call: ast.Call, function) -> bool:
    """Can the layer this call hands the helper have a storage the helper decides wrongly? False
    only when the layer resolves and no backend gives it a non-compute storage (a plain
    `nn.Linear`, a layer built without a quant config). `context`: the rule's, for its layers
    and their verdicts."""
    argument = layer_argument(call)
    if argument is None:
        return True
    instance = context.layers.resolve(argument, function.scope)
    if instance.qualname is None and instance.config != "none":
        return True  # unresolved: the helper's own verdict stands
    return context.layer_verdict(argument, function, site=call) is not None


def callers_here(context) -> dict[str, list[bool]]:
    """Helper name → for each call of it in this file, whether the layer it passes may be packed
    (`context`: the rule's, for its helpers and functions)."""
    out: dict[str, list[bool]] = {}
    names = {fn.name for fn, _q, _h in context.helpers.defined}
    if not names:
        return out
    for function in context.every_function:
        if not context.helpers.may_call_helper(function.fn):
            continue  # no line of it names a helper of this file
        for node in function.walk.of(ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in names:
                out.setdefault(node.func.id, []).append(may_be_packed(context, node, function))
    return out
