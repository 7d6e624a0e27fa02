"""Recognisers for the expression shapes of the bug class, on stdlib ast (docs/architecture.md).

`weight_dtype_source(expr)` answers: does this expression evaluate to some layer's `.weight.dtype`
(directly, through `getattr`, a `hasattr` fallback, or local aliases)? and if so, which layer?
"""

from __future__ import annotations

import ast
from typing import TypeGuard

from dtype_lint.analysis.index.class_facts import FunctionScope
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.core.prefilter import HANDED
from dtype_lint.core.records import record

# How a file spells a weight-dtype site, for the text prefilter: `L.weight.dtype`, `.to(L.weight)`,
# `getattr(L, "weight"...)` (black may split it over lines, with comments), or an alias
# `w = L.weight` later read as `w.dtype`.
WEIGHT_SITE_PATTERNS = (
    r"\.weight\s*\.\s*dtype",
    r"\.weight\s*\)",
    r"getattr\(\s*[^,()]+,(?:\s|#[^\n]*)*[\"']weight[\"']",
    r"=\s*[\w.]+\.weight\s*$",
    r"=\s*[\w.]+\.weight\s*\[",  # a slice of the weight (`w = L.weight[:, a:b]`), an alias of its dtype
    # an adapter's base layer's `.weight.data.dtype` (peft's HRA; ecosystems/peft)
    r"get_base_layer\(\)\s*\.\s*weight\s*\.\s*data\s*\.\s*dtype",
)
# A layer's weight handed first to a call of a name or of `self.<name>` (`cast_like(self.q_proj.weight,
# x)`, `self.rotary_emb(self.k_proj.weight, n)`), which the rules reading flows follow into the
# callee (flows.py). Narrow on purpose: a weight handed on before another argument anywhere
# (`\.weight\s*,`) passes ten times the files on vLLM, most into kernels, `set_weight_attrs` and
# torch's `init` (benchmarks/README.md).
WEIGHT_HANDED_FIRST = HANDED + r"\.weight\s*,"
FLOW_SITE_PATTERNS = WEIGHT_SITE_PATTERNS + (WEIGHT_HANDED_FIRST,)


@record(frozen=True)
class WeightDtypeSource:
    """A layer's weight dtype as a site reads it: the layer, the form of the read, and the alias it went through."""
    layer: ast.expr  # the layer expression (`self.kv_b_proj`)
    form: str  # "attribute" | "getattr" | "hasattr-fallback" | "tensor"
    alias: str | None = None  # the local name used at the site, when reached through an alias
    alias_value: ast.expr | None = None  # what that alias was assigned


def weight_expr(node: ast.AST, scope: FunctionScope | None, depth: int = 0) -> tuple[ast.expr, str] | None:
    """`L.weight`, `getattr(L, "weight"[, d])`, or a local alias of one → (L, form); also
    `next(iter(M.parameters()))` / `next(M.parameters())` → (M, "first-parameter"): the first
    parameter of a module, which the Hugging Face family resolves to a layer (hf_family.py)."""
    if isinstance(node, ast.Attribute) and node.attr == "weight":
        return node.value, "attribute"
    if isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "weight" and _is_base_layer_getter(node.value.value):
        # `M.get_base_layer().weight.data.dtype` (peft's HRA): `.data` has the weight's dtype. Only
        # for an adapter's base layer (ecosystems/peft): other trees' findings stay as they were.
        return node.value.value, "attribute"
    module = first_parameter_of(node)
    if module is not None:
        return module, FIRST_PARAMETER
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "weight"):
        return node.args[0], "getattr"
    if isinstance(node, ast.Name) and scope is not None and depth < 4:
        values = scope.assigns.get(node.id, [])
        if len(values) == 1 and values[0] is not None:
            value = values[0]
            # `w = L.weight[:, a:b]`: a slice of the weight has the weight's dtype
            while isinstance(value, ast.Subscript):
                value = value.value
            return weight_expr(value, scope, depth + 1)
    return None


FIRST_PARAMETER = "first-parameter"


def _is_base_layer_getter(node: ast.AST) -> bool:
    """`X.get_base_layer()`: an adapter's base layer (peft's `BaseTunerLayer`)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        node.func.attr == "get_base_layer" and not node.args and not node.keywords


def first_parameter_of(node: ast.AST) -> ast.expr | None:
    """M of `next(iter(M.parameters()))` or `next(M.parameters())`, else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "next"
            and len(node.args) == 1 and not node.keywords):
        return None
    inner = node.args[0]
    if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "iter" \
            and len(inner.args) == 1:
        inner = inner.args[0]
    if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "parameters" \
            and not inner.args and not inner.keywords:
        return inner.func.value
    return None


def _typing_cast(node: ast.AST) -> ast.expr | None:
    """The value of `typing.cast(T, value)` / `cast(T, value)`: a no-op at run time."""
    if isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords:
        callee = node.func
        name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
        if name == "cast":
            return node.args[1]
    return None


def weight_dtype_source(node: ast.AST, scope: FunctionScope | None, depth: int = 0) -> WeightDtypeSource | None:
    inner = _typing_cast(node)
    if inner is not None and depth < 4:
        return weight_dtype_source(inner, scope, depth + 1)
    if isinstance(node, ast.Attribute) and node.attr == "dtype":
        w = weight_expr(node.value, scope)
        if w:
            return WeightDtypeSource(w[0], w[1])
        return None
    if isinstance(node, ast.IfExp):
        for branch in (node.body, node.orelse):
            r = weight_dtype_source(branch, scope, depth + 1)
            if r:
                return WeightDtypeSource(r.layer, "hasattr-fallback", r.alias, r.alias_value)
        return None
    if isinstance(node, ast.Name) and scope is not None and depth < 4:
        # Flow-insensitive: any assignment of the name in this function that is a weight dtype
        # (inside a nested `def` binding the name itself, that def's own).
        for value in (scope.values_at(node) if scope.shadows else scope.assigns.get(node.id, [])):
            if value is None:
                continue
            r = weight_dtype_source(value, scope, depth + 1)
            if r:
                return WeightDtypeSource(r.layer, r.form, node.id, value)
    return None


CAST_METHODS = ("to", "type")
# torch factories whose `dtype=` makes a new tensor, and keywords naming a kernel's output dtype.
TORCH_FACTORIES = frozenset({
    "empty", "zeros", "ones", "full", "rand", "randn", "randint", "arange", "tensor", "as_tensor",
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "empty_strided",
})
OUTPUT_KEYWORDS = ("out_dtype", "output_dtype")


def alloc_dtype_keywords(call: ast.Call, imports: dict[str, str]) -> list[ast.keyword]:
    """The keywords of a call that set the dtype of a tensor it creates."""
    out = [kw for kw in call.keywords if kw.arg in OUTPUT_KEYWORDS]
    name = dotted(call.func) or ""
    head, _, attr = name.rpartition(".")
    if attr in TORCH_FACTORIES and (imports.get(head.split(".")[0], head).split(".")[0] == "torch"):
        out += [kw for kw in call.keywords if kw.arg == "dtype"]
    return out


def cast_dtype_args(call: ast.Call) -> list[ast.expr]:
    """The arguments of `x.to(...)` / `x.type(...)` that can carry a dtype (or a tensor, for `.to`)."""
    if not isinstance(call.func, ast.Attribute) or call.func.attr not in CAST_METHODS:
        return []
    out = list(call.args[:2]) if call.func.attr == "to" else list(call.args[:1])
    out += [kw.value for kw in call.keywords if kw.arg in ("dtype", "other")]
    return out


def is_pure(node: ast.AST) -> bool:
    """No side effects: safe to evaluate twice. A name, an attribute chain, a subscript of pure
    parts (`x`, `self.a.b`, `x[i]`, `x[..., :n]`), or a call of a known-pure torch function or
    tensor method (analysis/flow/pure_calls.py) with pure arguments (`torch.rsqrt(torch.tensor(2.0))`,
    `mask.unsqueeze(-1)`)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            if not _pure_call(sub):
                return False
        elif isinstance(sub, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda, ast.Starred)):
            return False
    return True


def _pure_call(call: ast.Call) -> bool:
    """The call itself is pure (its arguments are checked by the walk of `is_pure`)."""
    from dtype_lint.analysis.flow.pure_calls import PURE_TENSOR_METHODS, PURE_TORCH_FUNCTIONS

    func = call.func
    if not isinstance(func, ast.Attribute) or any(kw.arg is None or kw.arg == "out" for kw in call.keywords):
        return False
    if isinstance(func.value, ast.Name) and func.value.id == "torch":
        return func.attr in PURE_TORCH_FUNCTIONS
    return func.attr in PURE_TENSOR_METHODS


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


# Keywords of an allocation or cast that take a dtype (`torch.empty(n, dtype=...)`).
DTYPE_KEYWORDS = ("dtype", "out_dtype", "output_dtype")


def weight_read(node: ast.AST) -> ast.expr | None:
    """The layer of `L.weight` (a load) or `getattr(L, "weight")` (no default), else None."""
    if isinstance(node, ast.Attribute) and node.attr == "weight" and isinstance(node.ctx, ast.Load):
        return node.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 2 and not node.keywords and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == "weight"):
        return node.args[0]
    return None


def _is_typing_cast_call(node: ast.AST | None) -> TypeGuard[ast.Call]:
    return isinstance(node, ast.Call) and (ast.unparse(node.func) in ("cast", "typing.cast")) and len(node.args) == 2


def feeds_dtype_site(read: ast.AST, fn: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """`L.weight.dtype` (at `read`, in `fn`) used as a cast's or an allocation's dtype, directly,
    through a local name or `typing.cast`, or returned by a dtype getter; or `L.weight` handed to
    `.to(...)` (DTL001/DTL002 report those sites, and their fixes handle a missing `.weight`)."""
    up = parents.get(id(read))
    if not (isinstance(up, ast.Attribute) and up.attr == "dtype"):
        return _is_cast_arg(read, parents)  # `.to(L.weight)`
    expr: ast.AST = up
    while True:
        parent = parents.get(id(expr))
        if _is_typing_cast_call(parent) and parent.args[1] is expr:
            expr = parent
            continue
        if isinstance(parent, ast.Return):
            return True
        if isinstance(parent, ast.keyword):
            call = parents.get(id(parent))
            return isinstance(call, ast.Call) and (
                parent.arg in DTYPE_KEYWORDS or parent.value in cast_dtype_args(call))
        if isinstance(parent, (ast.IfExp, ast.BoolOp)):
            expr = parent
            continue
        break
    if _is_cast_arg(expr, parents):
        return True
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        return bool(names) and _name_feeds_dtype_site(names, fn)
    return False


def _is_cast_arg(expr: ast.AST, parents: dict[int, ast.AST]) -> bool:
    call = parents.get(id(expr))
    return isinstance(call, ast.Call) and any(a is expr for a in cast_dtype_args(call))


def _name_feeds_dtype_site(names: set[str], fn: ast.AST) -> bool:
    for sub in ast.walk(fn):
        if not isinstance(sub, ast.Call):
            continue
        args = list(cast_dtype_args(sub)) + [k.value for k in sub.keywords if k.arg in DTYPE_KEYWORDS]
        if any(isinstance(n, ast.Name) and n.id in names for a in args for n in ast.walk(a)):
            return True
    return False


def storage_replacements(nodes, is_tensor) -> set[int]:
    """ids of the expressions in `nodes` that become the storage of a tensor `is_tensor` accepts:
    `T.set_(X)` and `T.data = X`. An allocation there is storage code (a dispose/replace helper
    that swaps a weight's storage for an empty one of its own dtype), not a buffer beside it."""
    found: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set_" \
                and is_tensor(node.func.value):
            found.update(id(arg) for arg in node.args)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "data" and is_tensor(t.value) for t in node.targets):
            found.add(id(node.value))
    return found

