"""The guard vocabulary: what a test that dominates a site proves about the layer there.

Two questions are asked of the same dominating tests (analysis/guard_engine/dominance.py walks to them):
- **storage proven unpacked** (`STORAGE_UNPACKED`, DTL001/DTL002/DTL004): a cast to
  `L.weight.dtype` is harmless where a check has proven the layer unquantized or its storage a plain
  float:
  - a test on the quant method: `isinstance(L.quant_method, Unquantized...)` (any class whose name
    holds `Unquantized`, `FusedUnquantizedLinearMethod` too), `type(L.quant_method) is ...`,
    `L.quant_config is None` (`getattr(L, "quant_method", None)` read as `L.quant_method`), or a
    flag holding one (`self.is_unquantized = isinstance(self.quant_method, UnquantizedLinearMethod)`,
    vLLM's GateLinear), or a module function's result whose one returned test is one
    (`self.replicated_embed = has_full_vocab_on_rank(self.embed_tokens)`), or a predicate method
    that returns early for quantized layers (sglang's `_use_triton_embedding`);
  - a test on the storage that the dtype evaluator proves false for every packed storage (int32,
    uint8, int8, no `.weight`): `w.dtype == torch.bfloat16`;
  - the `else` of a branch that hands the layer to its own quant method (`L.quant_method.apply(L,
    ...)`): it runs for the others.
- **`.weight` exists** (`WEIGHT_PRESENT`, DTL003): a read of `L.weight` cannot raise where the
  layer is proven unquantized (the above), or where `hasattr(L, "weight")` held, an
  `AttributeError` handler catches it, or a backend check names the formats the path was written
  for (`isinstance(L.quant_method, Fp8LinearMethod)`, `isinstance(quant_config, Fp8Config)`,
  `quant_config is None`), directly or through flags, predicates (analysis/guard_engine/guard_flags.py) and the
  callers (analysis/guard_engine/file_guards.py); and where the function itself set `L.weight`
  on every path to the read (`assigned_before`).

Where the two answers differ, `GuardPolicy` says so, in this one place.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Container
from typing import NamedTuple

from dtype_lint.analysis.flow.recognisers import feeds_dtype_site, weight_dtype_source
from dtype_lint.analysis.guard_engine.dominance import (
    Dominator,
    dominators,
    enclosing_blocks,
    evaluated_before,
    same_expression,
)
from dtype_lint.analysis.guard_engine.dormant import truth
from dtype_lint.analysis.index.class_facts import ClassFacts
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.core.findings import Evidence
from dtype_lint.core.records import record
from dtype_lint.dtypes.evaluator import guard_excludes_packed, guard_includes_packed


@record(frozen=True)
class GuardPolicy:
    """How far one question trusts a dominating test (the only place the rules' answers differ).

    `named_backends`: which classes a quant-method (or config) check may name to count:
    "unquantized" (a check naming `Fp8LinearMethod` proves the storage *is* fp8, so a cast to it is
    still wrong) or "concrete" (any backend of its own: a path written for the formats it names
    handles their `.weight`). `hasattr_counts`: `hasattr(L, "weight")` proves a `.weight`, not an
    unpacked one (a repack leaves one in int32). `handler_counts`: an `except AttributeError` catches a
    missing `.weight`, not a cast to a packed dtype."""

    name: str
    named_backends: str
    hasattr_counts: bool
    handler_counts: bool


STORAGE_UNPACKED = GuardPolicy("storage proven unpacked", named_backends="unquantized",
                               hasattr_counts=False, handler_counts=False)
WEIGHT_PRESENT = GuardPolicy("implies `.weight` exists", named_backends="concrete",
                             hasattr_counts=True, handler_counts=True)
# The statements whose handlers a site in their body runs under (`try*` since Python 3.11).
_TRY = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


# ---- primitives shared by both questions ------------------------------------------------------

def names_unquantized_class(node: ast.AST) -> bool:
    """`UnquantizedLinearMethod`, `FusedUnquantizedLinearMethod`, `(K1, K2)` of such: an
    unquantized method leaves the plain float `.weight`."""
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and all(names_unquantized_class(e) for e in node.elts)
    name = dotted(node) or ""
    return "Unquantized" in name.rsplit(".", 1)[-1]


def is_quant_method(node: ast.AST) -> bool:
    """`X.quant_method` or `getattr(X, "quant_method", ...)`."""
    if isinstance(node, ast.Attribute) and node.attr == "quant_method":
        return True
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "quant_method")


def _names_method_object(node: ast.AST) -> bool:
    """The layer's quant method or scheme, or a local named for one (`scheme = getattr(L,
    "scheme", None)`)."""
    if is_quant_method(node):
        return True
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in ("scheme", "quant_method") or name.endswith(("_scheme", "_quant_method"))


def is_hasattr_weight(test: ast.AST, layer: ast.AST | None) -> bool:
    """`hasattr(L, "weight")` (of any layer when `layer` is None: a flag's value)."""
    return (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr"
            and len(test.args) == 2 and isinstance(test.args[1], ast.Constant) and test.args[1].value == "weight"
            and (layer is None or same_expression(test.args[0], layer)))


def is_weight_or_none(value: ast.AST) -> bool:
    """`getattr(L, "weight", None)` or `L._parameters.get("weight")`: true (not None) only when the
    layer has `.weight`."""
    if not isinstance(value, ast.Call):
        return False
    if _is_parameters_get(value):
        return isinstance(value.args[0], ast.Constant) and value.args[0].value == "weight" \
            and (len(value.args) == 1 or is_falsy(value.args[1]))
    return (isinstance(value.func, ast.Name) and value.func.id == "getattr"
            and len(value.args) == 3 and isinstance(value.args[1], ast.Constant) and value.args[1].value == "weight"
            and isinstance(value.args[2], ast.Constant) and value.args[2].value is None)


def _is_parameters_get(call: ast.Call) -> bool:
    """`L._parameters.get(...)`: torch's own registry of a module's parameters."""
    return _parameters_owner(call) is not None


def _parameters_owner(call: ast.Call) -> ast.expr | None:
    """`L._parameters.get(...)` -> `L`, else None."""
    func = call.func
    if (isinstance(func, ast.Attribute) and func.attr == "get" and isinstance(func.value, ast.Attribute)
            and func.value.attr == "_parameters" and 1 <= len(call.args) <= 2 and not call.keywords):
        return func.value.value
    return None


def weight_reads_evaluated(test: ast.AST, outcome: bool | None = None) -> list[ast.Attribute]:
    """The reads `L.weight` that the evaluation of `test` reads on every path that gives it
    `outcome` (None: whatever it gives): a read that did not raise proves the layer has
    `.weight` there (`use_fast = L.weight.dtype == torch.bfloat16`, then `if use_fast:`). Only
    what always runs counts: the first operand of `and`/`or` (every operand of an `and` that held,
    or an `or` that failed), a conditional's test, the first iterable of a comprehension; not a
    lambda's body."""
    layers: list[ast.Attribute] = []
    _weight_reads(test, outcome, layers)
    return layers


def _weight_reads(node: ast.AST, outcome: bool | None, layers: list[ast.Attribute]) -> None:
    """`weight_reads_evaluated`'s walk, adding to `layers`. At module level: a closure that calls
    itself is a reference cycle, and one was left for the collector on every test read."""
    if isinstance(node, ast.Attribute) and node.attr == "weight" and isinstance(node.ctx, ast.Load):
        layers.append(node)
    if isinstance(node, ast.BoolOp):
        every = outcome is (isinstance(node.op, ast.And))
        for value in node.values if every else node.values[:1]:
            _weight_reads(value, outcome if every else None, layers)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        _weight_reads(node.operand, None if outcome is None else not outcome, layers)
        return
    if isinstance(node, ast.IfExp):
        _weight_reads(node.test, None, layers)
        return
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        _weight_reads(node.generators[0].iter, None, layers)
        return
    if isinstance(node, (ast.Lambda, ast.NamedExpr)):
        return
    for child in ast.iter_child_nodes(node):
        _weight_reads(child, None, layers)


def _reads_weight_of(test: ast.AST, layer: ast.AST | None, outcome: bool | None, counts=None) -> bool:
    return any((layer is None or same_expression(read.value, layer)) and (counts is None or counts(read))
               for read in weight_reads_evaluated(test, outcome))


class Element(NamedTuple):
    """`all(E for v in items)` read as (E, "v", items)."""

    value: ast.expr
    name: str
    items: ast.expr


def each_element(test: ast.AST, function: str) -> Element | None:
    """`all(E for v in items)` (function "all") or `any(...)` -> (E, "v", items): what holds of every
    element where `all` held (`any` failed). A filter (`... if c`) leaves elements unchecked."""
    if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == function
            and len(test.args) == 1 and not test.keywords
            and isinstance(test.args[0], (ast.GeneratorExp, ast.ListComp))):
        return None
    generators = test.args[0].generators
    if len(generators) != 1 or generators[0].ifs or not isinstance(generators[0].target, ast.Name):
        return None
    return Element(test.args[0].elt, generators[0].target.id, generators[0].iter)


def elements_include(items: ast.AST, layer: ast.AST, aliases) -> bool:
    """The iterable is a tuple or list (or a local holding one) with `layer` among its elements."""
    if isinstance(items, ast.Name) and items.id in aliases:
        items = aliases[items.id]
    return isinstance(items, (ast.Tuple, ast.List)) and any(same_expression(e, layer) for e in items.elts)


def is_falsy(value: ast.AST | None) -> bool:
    """No value, or a false constant (`None`, `False`, `0`, `""`)."""
    return value is None or (isinstance(value, ast.Constant) and not value.value)


def none_test(test: ast.AST, op) -> str | None:
    """`X is None` / `X is not None` (op: ast.Is / ast.IsNot) -> the text of X."""
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], op)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        return ast.unparse(test.left)
    return None


def catches_attribute_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("AttributeError", "Exception", "BaseException") for n in names)


# ---- storage proven unpacked --------------------------------------------------------------------

class _ClassGuards:
    """The enclosing class's attributes (`self.X = value`) and methods, for flags and predicates;
    `functions(name)`: the function of the module (defined or imported) a call names, or None."""

    def __init__(self, assigned: dict, methods: dict, functions=None):
        self.assigned = assigned
        self.methods = methods
        self.functions = functions or (lambda _name: None)


def unpacked_storage_guard(site: ast.AST, parents: dict[int, ast.AST], layer: ast.expr,
                           aliases: dict[str, ast.expr], cls: ClassFacts | None, path: str,
                           functions=None) -> Evidence | None:
    """Evidence of a check that proves the layer unquantized (or its storage a float) wherever
    `site` runs, or None. `aliases`: the function's single-assignment locals; `cls`: facts of the
    enclosing class (its `self.X = value` flags and its predicate methods); `functions(name)`: the
    module's functions, its own or imported, whose one returned test is read at the call
    (`is_quantized(layer)` returning `not isinstance(layer.quant_method, Unquantized...)`)."""
    class_guards = _ClassGuards(cls.assigned if cls else {}, cls.methods if cls else {}, functions)
    for dominator in dominators(site, parents):
        test = dominator.test
        if test is None:  # under a `try`
            if STORAGE_UNPACKED.handler_counts and _catches(dominator):
                return Evidence("inside a `try` that catches the error", path, dominator.construct.lineno)
            continue
        if _proves_unquantized(test, layer, aliases, class_guards) if dominator.holds else \
                _proves_quantized_or_packed(test, layer, aliases, class_guards):
            return Evidence(f"guarded by `{ast.unparse(test)}`, which proves the layer unquantized or its storage "
                            f"a float", path, test.lineno)
        if not dominator.holds and dominator.kind == "branch" and isinstance(dominator.construct, ast.If) \
                and _dispatches_to_quant_method(dominator.construct.body, layer, aliases):
            return Evidence(f"the branch of `{ast.unparse(test)}` hands quantized layers to their "
                            f"quant method; this one runs for the others", path, test.lineno)
    return None


def _dispatches_to_quant_method(body: list[ast.stmt], layer: ast.expr, aliases) -> bool:
    """The body calls the layer's own quant method on it: `L.quant_method.apply(L, ...)`, or
    `qm.apply(L, ...)` with `qm = getattr(L, "quant_method", None)` (sglang's lm_head path)."""
    for stmt in body:
        for node in ast.walk(stmt):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "apply"
                    and node.args and same_expression(node.args[0], layer)):
                continue
            receiver = node.func.value
            if isinstance(receiver, ast.Name) and receiver.id in aliases:
                receiver = aliases[receiver.id]
            if isinstance(receiver, ast.Call) and dotted(receiver.func) == "getattr" and len(receiver.args) >= 2 \
                    and same_expression(receiver.args[0], layer) and isinstance(receiver.args[1], ast.Constant) \
                    and receiver.args[1].value == "quant_method":
                return True
            if isinstance(receiver, ast.Attribute) and receiver.attr == "quant_method" \
                    and same_expression(receiver.value, layer):
                return True
    return False


def _names_policy_backends(node: ast.AST, policy: GuardPolicy, concrete=None) -> bool:
    """The classes a check names count under `policy` (see GuardPolicy.named_backends)."""
    if policy.named_backends == "unquantized" or concrete is None:
        return names_unquantized_class(node)
    elts = node.elts if isinstance(node, ast.Tuple) else [node]
    return bool(elts) and all(names_unquantized_class(e) or (bool(dotted(e)) and concrete(dotted(e))) for e in elts)


def _proves_unquantized(test: ast.expr, layer: ast.expr, aliases, class_guards: _ClassGuards, depth: int = 0,
                        own_flag: bool = False) -> bool:
    if depth > 4:
        return False
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        if any(_proves_unquantized(v, layer, aliases, class_guards, depth + 1, own_flag) for v in test.values):
            return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and returned_test(test.operand,
                                                                                        class_guards.functions):
        # `not is_quantized(L)`: false only for the layers that test holds for
        return _proves_quantized_or_packed(test.operand, layer, aliases, class_guards)
    if isinstance(test, ast.Call) and dotted(test.func) == "isinstance" and len(test.args) == 2:
        obj, cls = test.args
        if _quant_method_of(obj, layer):
            return _names_policy_backends(cls, STORAGE_UNPACKED)
        # In a flag of the layer's own class, computed in `__init__` from the local that becomes
        # `self.quant_method` (vLLM's `use_fused_embedding`).
        if own_flag and isinstance(obj, ast.Name) and "quant_method" in obj.id:
            return _names_policy_backends(cls, STORAGE_UNPACKED)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right, op = test.left, test.comparators[0], test.ops[0]
        if isinstance(op, (ast.Is, ast.Eq)) and isinstance(left, ast.Call) and dotted(left.func) == "type" \
                and left.args and isinstance(left.args[0], ast.Attribute) and left.args[0].attr == "quant_method" \
                and same_expression(left.args[0].value, layer):
            return _names_policy_backends(right, STORAGE_UNPACKED)
        if isinstance(op, (ast.Is, ast.Eq)) and isinstance(left, ast.Attribute) and left.attr == "quant_config" \
                and same_expression(left.value, layer) and isinstance(right, ast.Constant) and right.value is None:
            return True
    if isinstance(test, ast.Name) and test.id in aliases:
        return _proves_unquantized(aliases[test.id], layer, aliases, class_guards, depth + 1)
    element = each_element(test, "all")
    if element is not None and elements_include(element.items, layer, aliases):
        return _proves_unquantized(element[0], ast.Name(id=element[1], ctx=ast.Load()), {}, class_guards, depth + 1)
    returned = returned_test(test, class_guards.functions)
    if returned is not None:
        return _proves_unquantized(returned, layer, aliases, class_guards, depth + 1)
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and isinstance(test.func.value, ast.Name) \
            and test.func.value.id == "self" and isinstance(layer, ast.Name) and layer.id == "self" \
            and test.func.attr in class_guards.methods:
        return _predicate_proves_unquantized(class_guards.methods[test.func.attr], layer, class_guards)
    if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self" \
            and class_guards.assigned.get(test.attr):
        # A flag of the class: every value it is given must prove it (about `self`'s layers). The
        # values are written in the class's own methods, in this module, so a module function a
        # value calls is read as at the site (`self.fused = full_table(self.embed)`, with
        # `full_table(e)` returning `isinstance(getattr(e, "quant_method", None), Unquantized...)`).
        own = isinstance(layer, ast.Name) and layer.id == "self"
        functions_only = _ClassGuards({}, {}, class_guards.functions)
        return all(_proves_unquantized(v, layer, aliases, functions_only, depth + 1, own)
                   for v in class_guards.assigned[test.attr])
    return guard_excludes_packed(test, layer, aliases, _raising_is_reported(test, aliases))


def _quant_method_of(node: ast.AST, layer: ast.expr) -> bool:
    """`L.quant_method`, or `getattr(L, "quant_method"[, default])`, of the layer."""
    if isinstance(node, ast.Attribute):
        return node.attr == "quant_method" and same_expression(node.value, layer)
    return isinstance(node, ast.Call) and dotted(node.func) == "getattr" and len(node.args) in (2, 3) \
        and not node.keywords and same_expression(node.args[0], layer) \
        and isinstance(node.args[1], ast.Constant) and node.args[1].value == "quant_method"


def _raising_is_reported(test: ast.AST, aliases, depth: int = 0) -> bool:
    """A `.weight` read of the test that raises (no `.weight`) is reported where it is read
    (DTL003), so the test counts as keeping the site from running there (`bf16 = L.weight.dtype ==
    torch.bfloat16`, then `if bf16: x.to(L.weight.dtype)`). Not when the test reads it through a
    local holding the dtype itself (`w_dtype = L.weight.dtype`): that read feeds the cast, is
    reported with the cast, and would be reported by nothing else."""
    if depth > 4:
        return False
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and node.id in aliases:
            value = aliases[node.id]
            if weight_dtype_source(value, None) is not None or not _raising_is_reported(value, aliases, depth + 1):
                return False
    return True


def returned_test(call: ast.AST, functions) -> ast.expr | None:
    """The one value a function returns, its parameters replaced by the call's arguments: what
    `is_quantized(self.proj)` tests when `is_quantized(layer)` is `return not isinstance(
    layer.quant_method, UnquantizedLinearMethod)`. None unless the function's body is that one
    `return` (after a docstring) and every parameter it reads is bound by the call."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    callee = functions(call.func.id)
    if callee is None:
        return None
    body = [s for s in callee.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    params = [a.arg for a in callee.args.posonlyargs + callee.args.args]
    bound = dict(zip(params, call.args))
    bound.update((k.arg, k.value) for k in call.keywords if k.arg in params)
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None

    if any(isinstance(n, ast.Name) and n.id in params and n.id not in bound for n in ast.walk(body[0].value)):
        return None
    return _Bind(bound).visit(copy.deepcopy(body[0].value))


class _Bind(ast.NodeTransformer):
    """Each parameter read replaced by the argument bound to it. One class, not one made per call:
    a class is a reference cycle, left for the collector with what its methods held."""

    def __init__(self, bound: dict[str, ast.expr]):
        self.bound = bound

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return self.bound.get(node.id, node) if isinstance(node.ctx, ast.Load) else node


def _predicate_proves_unquantized(fn: ast.FunctionDef, layer: ast.expr, class_guards: _ClassGuards) -> bool:
    """A method of the layer's class that returns a true value only after an early
    `return False` for quantized layers (sglang's `_use_triton_embedding`)."""
    for stmt in fn.body:
        if isinstance(stmt, ast.Return):
            return False  # returns before any check
        if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Return):
            if not is_falsy(stmt.body[-1].value):
                return False
            if _proves_quantized_or_packed(stmt.test, layer, {}, _ClassGuards(class_guards.assigned, {})):
                return True
    return False


def _proves_quantized_or_packed(test: ast.expr, layer: ast.expr, aliases, class_guards: _ClassGuards) -> bool:
    """The test holds whenever the layer is quantized or packed (its body leaves, so what follows
    runs only on unquantized layers): `not <proves unquantized>`, or the evaluator shows it true
    for every packed storage."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _proves_unquantized(test.operand, layer, aliases, class_guards)
    returned = returned_test(test, class_guards.functions)
    if returned is not None:
        return _proves_quantized_or_packed(returned, layer, aliases, class_guards)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(_proves_quantized_or_packed(v, layer, aliases, class_guards) for v in test.values) or \
            guard_includes_packed(test, layer, aliases, _raising_is_reported(test, aliases))
    return guard_includes_packed(test, layer, aliases, _raising_is_reported(test, aliases))


# ---- `.weight` exists ---------------------------------------------------------------------------

class BackendNames:
    """How a backend check reads in one module: the names of the quantization-config parameters
    (`quant_config`, the preset's `config-params`), and `concrete(name)`: the class is a backend of
    its own, not an abstract base that every backend shares (`LinearMethodBase`,
    `QuantizationConfig`). Without `concrete`, only `Unquantized*` classes are backends."""

    __slots__ = ("config_params", "concrete")

    def __init__(self, config_params: tuple[str, ...] = (), concrete=None):
        self.config_params, self.concrete = config_params, concrete

    def names_backends(self, node: ast.AST) -> bool:
        """`K` or `(K1, K2)`: every class named is a backend under WEIGHT_PRESENT."""
        return _names_policy_backends(node, WEIGHT_PRESENT, self.concrete)

    def is_config(self, node: ast.AST) -> bool:
        """A quantization config by its parameter's name: `quant_config`, `self.quant_config`."""
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        return name is not None and name in self.config_params


NO_BACKENDS = BackendNames()


class GuardKnowledge:
    """What guards mean in one function: `flags`, names and `self.X` attributes that, when true (or
    not None), say the layer has a plain `.weight` (`self.F()` for a flag computed on first use:
    then `self.F.value` or `self.F()` is the flag); `predicates`, functions whose result is true
    (not None) only then (`supports(layer)` that returns False unless unquantized), and, spelt
    `not f`, negated ones whose result is false only then (`is_quantized(layer)`); `backends`, how
    a backend check reads in this module (see `backend_check`); at a read, `opaque(call)`: the call
    is a method of an object whose class the engine cannot resolve (a check on the layer that the
    rule cannot read counts as one, see `_opaque_check`), and `dormant`: `self.X` text -> the one
    falsy constant its class ever gives it (analysis/guard_engine/dormant.py: a test true only once other code
    changes it guards a path the class never takes)."""

    __slots__ = ("flags", "predicates", "backends", "opaque", "dormant", "aliases", "method_locals")

    def __init__(self, flags: frozenset[str] = frozenset(), predicates: Container[str] = frozenset(),
                 backends: BackendNames | None = None, opaque=None, dormant: dict | None = None,
                 aliases: dict | None = None, method_locals: frozenset[str] = frozenset()):
        self.flags, self.predicates, self.backends = flags, predicates, backends or NO_BACKENDS
        self.opaque, self.dormant = opaque, dormant or {}
        self.aliases = aliases or {}  # the function's single-assignment locals (a group's tuple)
        # Locals only ever holding a layer's quant method or scheme, or an object it holds (its
        # kernel): `kernel = getattr(L.quant_method, "kernel", None)` (see `method_part`).
        self.method_locals = method_locals

    def _copy(self, **changes) -> "GuardKnowledge":
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return GuardKnowledge(**fields)

    def with_flags(self, more) -> "GuardKnowledge":
        return self._copy(flags=self.flags | frozenset(more))

    def with_aliases(self, aliases: dict) -> "GuardKnowledge":
        return self._copy(aliases=aliases)

    def with_method_locals(self, names: frozenset[str]) -> "GuardKnowledge":
        return self._copy(method_locals=self.method_locals | names) if names else self

    def at_read(self, opaque, dormant: dict) -> "GuardKnowledge":
        """What is known at a read: also the unresolved calls and the dormant attributes there."""
        return self._copy(opaque=opaque, dormant=dormant)


NOTHING_KNOWN = GuardKnowledge()


def backend_check(test: ast.AST, backends: BackendNames) -> bool:
    """A test true only for named backends: `isinstance(X.quant_method, K)` (or on `getattr(X,
    "quant_method", None)`, or `type(X.quant_method) is K`) for any class K, `isinstance(
    quant_config, C)`, or `quant_config is None`. An `Unquantized*` method or no config leaves the
    plain `.weight`; a path that runs only for quantization formats it names was written for them
    (their `.weight`, packed or absent, is what its author handles), so any such check is
    trusted."""
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" \
            and len(test.args) == 2:
        return (is_quant_method(test.args[0]) or backends.is_config(test.args[0])) \
            and backends.names_backends(test.args[1])
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.Eq)):
        left, right = test.left, test.comparators[0]
        if isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "type" \
                and len(left.args) == 1 and is_quant_method(left.args[0]):
            return backends.names_backends(right)
        if isinstance(left, ast.Attribute) and left.attr == "__name__" and isinstance(left.value, ast.Call) \
                and dotted(left.value.func) == "type" and len(left.value.args) == 1 \
                and _names_method_object(left.value.args[0]) and isinstance(right, ast.Constant) \
                and isinstance(right.value, str) and right.value and "Base" not in right.value:
            return True  # `type(scheme).__name__ == "W8A8Fp8"`: a backend named by its class's name
        return isinstance(test.ops[0], ast.Is) and backends.is_config(left) \
            and isinstance(right, ast.Constant) and right.value is None
    return False


def method_part(node: ast.AST, method_locals: frozenset[str] = frozenset()) -> bool:
    """The layer's quant method or scheme, or an object reached from it by attributes (`L.quant_method.kernel`,
    `getattr(L.quant_method, "kernel", None)`, `getattr(getattr(L, "scheme", None), "mx_linear",
    None)`), or a local only ever holding one (`method_locals`)."""
    if is_quant_method(node) or (isinstance(node, ast.Attribute) and node.attr == "scheme") \
            or _getattr_named(node) == "scheme":
        return True
    if isinstance(node, ast.Name):
        return node.id in method_locals
    if isinstance(node, ast.Attribute):
        return method_part(node.value, method_locals)
    return isinstance(node, ast.Call) and _getattr_named(node) is not None and method_part(node.args[0], method_locals)


def _getattr_named(node: ast.AST) -> str | None:
    """`getattr(X, "name")` or `getattr(X, "name", default)` -> "name"."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
            and len(node.args) in (2, 3) and not node.keywords and isinstance(node.args[1], ast.Constant) \
            and isinstance(node.args[1].value, str):
        return node.args[1].value
    return None


def _method_part_check(test: ast.AST, known: "GuardKnowledge") -> bool:
    """`isinstance(K, C)` on an object the layer's quant method holds (its kernel, directly or
    through a local holding only such objects), C a class of its own: a path that runs only for
    the kernel it names was written for that kernel's storage, as a backend check's is."""
    return (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
            and len(test.args) == 2 and not test.keywords and not is_quant_method(test.args[0])
            and method_part(test.args[0], known.method_locals) and known.backends.names_backends(test.args[1]))


def _attribute_chain(node: ast.AST) -> bool:
    """`a.b.c`: attributes down to a name, no call or subscript on the way."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def callee_name(call: ast.AST) -> str | None:
    """`f(...)` -> "f"; `self.f(...)` (or `cls.f`) -> "self.f"; `x.f(...)` on a local -> "x.f"
    (a method of the object a local holds: guard_flags.object_predicate_calls); `self.a.m(...)` ->
    "self.a.m" (guard_flags.attribute_predicate_calls)."""
    if isinstance(call, ast.Call):
        func = call.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            return f"self.{func.attr}" if func.value.id in ("self", "cls") else f"{func.value.id}.{func.attr}"
        if isinstance(func, ast.Attribute) and _attribute_chain(func.value):
            return f"{ast.unparse(func.value)}.{func.attr}"  # `self.a.m(...)`: a method of what `self.a` holds
    return None


def implies_weight(test: ast.AST, layer: ast.AST | None, known: GuardKnowledge = NOTHING_KNOWN) -> bool:
    """`test` true => the layer has a plain `.weight`: `hasattr(L, "weight")`, a backend check, a
    flag or a predicate's result (see GuardKnowledge); as the test, one of its `and`s, every one
    of its `or`s, or the negation of a no-weight test."""
    if (WEIGHT_PRESENT.hasattr_counts and is_hasattr_weight(test, layer)) or backend_check(test, known.backends) \
            or _method_part_check(test, known):
        return True
    if known.dormant and truth(test, known.dormant) is False:
        return True  # a dormant path
    if isinstance(test, (ast.Name, ast.Attribute)) and ast.unparse(test) in known.flags:
        return True
    if none_test(test, ast.IsNot) in known.flags:
        return True
    if callee_name(test) in known.predicates or _opaque_check(test, layer, known):
        return True
    if isinstance(test, ast.Subscript) and isinstance(test.slice, ast.Constant) and callee_name(test.value) \
            and f"{callee_name(test.value)}[{test.slice.value!s}]" in known.predicates:
        return True  # `f(L)[0]` of a predicate returning `(verdict, reason)`
    if is_weight_or_none(test) or (isinstance(test, ast.Compare) and none_test(test, ast.IsNot) is not None
                                   and is_weight_or_none(test.left)):
        return True  # `getattr(L, "weight", None) is not None`, written in the test itself
    if _isinstance_of_weight_or_none(test, layer):
        return True  # `isinstance(getattr(L, "weight", None), torch.Tensor)`: None is no tensor
    if _reads_weight_of(test, layer, True) or _deferred_flag(test, known):
        return True
    element = each_element(test, "all")
    if element is not None and _may_include(element.items, layer, known.aliases) \
            and implies_weight(element[0], None, known):
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return implies_no_weight(test.operand, layer, known)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return all(implies_weight(v, layer, known) for v in test.values)
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(
        implies_weight(v, layer, known) for v in test.values)


def _isinstance_of_weight_or_none(test: ast.AST, layer: ast.AST | None) -> bool:
    """`isinstance(getattr(L, "weight", None), K)` for a class K that None is not an instance of
    (any but `object`, `NoneType` or a tuple naming one): true only when `L` has `.weight`."""
    if not (isinstance(test, ast.Call) and dotted(test.func) == "isinstance" and len(test.args) == 2
            and not test.keywords and is_weight_or_none(test.args[0])):
        return False
    if layer is not None and not (isinstance(test.args[0], ast.Call) and test.args[0].args
                                  and _same_layer(test.args[0], layer)):
        return False
    classes = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
    names = [dotted(c) for c in classes]
    return bool(names) and all(n and n.rsplit(".", 1)[-1] not in ("object", "NoneType") for n in names) and \
        not any(isinstance(c, ast.Constant) and c.value is None for c in classes)


def _same_layer(weight_or_none: ast.Call, layer: ast.AST) -> bool:
    """The layer a `getattr(L, "weight", None)` / `L._parameters.get("weight")` names is `layer`."""
    owner = _parameters_owner(weight_or_none)
    if owner is not None:
        return same_expression(owner, layer)
    return same_expression(weight_or_none.args[0], layer)


def _may_include(items: ast.expr, layer: ast.AST | None, aliases: dict) -> bool:
    """`all(... for v in items)`: `items` holds the layer read (a tuple or list written out, or a
    local holding one, that names it). In a flag's or a predicate's value (no layer yet) any group
    counts."""
    return layer is None or elements_include(items, layer, aliases)


def _deferred_flag(test: ast.AST, known: GuardKnowledge) -> bool:
    """`self.F.value`, `self.F.get()`, `self.F()`: the value of a flag computed on first use
    (`self.F = LazyValue(lambda: <guard>)`), registered as `self.F()` (guard_flags.py)."""
    if isinstance(test, ast.Call) and not test.args and not test.keywords:
        test = test.func
        if isinstance(test, (ast.Name, ast.Attribute)) and f"{ast.unparse(test)}()" in known.flags:
            return True
    return isinstance(test, ast.Attribute) and f"{ast.unparse(test.value)}()" in known.flags


def implies_no_weight(test: ast.AST, layer: ast.AST | None, known: GuardKnowledge = NOTHING_KNOWN) -> bool:
    """`test` false => the layer has a plain `.weight`: the negation of a guard, `flag is None`,
    `quant_config is not None`, alone, in an `or`, or as every one of an `and`'s operands."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return implies_weight(test.operand, layer, known)
    if none_test(test, ast.Is) in known.flags:
        return True
    if isinstance(test, ast.Compare) and none_test(test, ast.Is) is not None and is_weight_or_none(test.left):
        return True  # `getattr(L, "weight", None) is None`, written in the test itself
    if callee_name(test) is not None and f"not {callee_name(test)}" in known.predicates:
        return True  # a negated predicate: false only when the layer has `.weight`
    if isinstance(test, ast.Subscript) and isinstance(test.slice, ast.Constant) and callee_name(test.value) \
            and f"not {callee_name(test.value)}[{test.slice.value!s}]" in known.predicates:
        return True
    if _reads_weight_of(test, layer, False):
        return True
    element = each_element(test, "any")
    if element is not None and _may_include(element.items, layer, known.aliases) \
            and implies_no_weight(element[0], None, known):
        return True
    if known.dormant and truth(test, known.dormant) is True:
        return True  # what runs where it is false is a dormant path
    if isinstance(test, ast.Compare) and none_test(test, ast.IsNot) is not None and known.backends.is_config(test.left):
        return True  # `quant_config is not None`
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return all(implies_no_weight(v, layer, known) for v in test.values)
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(
        implies_no_weight(v, layer, known) for v in test.values)


def _opaque_check(test: ast.AST, layer: ast.AST | None, known: GuardKnowledge) -> bool:
    """`obj.supports(L)`: a method, of an object whose class the engine cannot resolve, handed the
    very layer that is read. The rule cannot read what it checks; a test on the layer itself,
    written by someone who knew which layers take this path, is trusted as a guard (a predicate
    the rule can read is judged by what it returns instead)."""
    return (layer is not None and known.opaque is not None and isinstance(test, ast.Call)
            and any(same_expression(a, layer) for a in [*test.args, *(k.value for k in test.keywords)])
            and known.opaque(test))


def weight_present_at(site: ast.AST, layer: ast.AST, parents: dict[int, ast.AST], known: GuardKnowledge) -> bool:
    """A guard that implies `.weight` (see `implies_weight`) dominates `site`: an enclosing
    `if`/conditional, an earlier operand of `and` (or `or`), an earlier `if not <guard>: return`,
    or a `try` that catches the AttributeError."""
    for dominator in dominators(site, parents):
        if dominator.test is None:
            if WEIGHT_PRESENT.handler_counts and _catches(dominator):
                return True
        elif dominator.holds:
            if implies_weight(dominator.test, layer, known):
                return True
        elif implies_no_weight(dominator.test, layer, known):
            return True
    return read_before(site, layer, parents) or assigned_before(site, layer, parents)


def read_before(site: ast.AST, layer: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """An earlier read of the same `L.weight` has run on every path to `site` (a dominated re-read:
    had the layer no `.weight`, that read raised first, and it is the one to report). A read that
    only feeds a cast's or an allocation's dtype does not count: DTL001/DTL002 report it, and their
    fix removes it, which would leave this one the first."""
    function_node = site
    while id(function_node) in parents:
        function_node = parents[id(function_node)]

    def counts(read: ast.Attribute) -> bool:
        return not feeds_dtype_site(read, function_node, parents)
    return any(_reads_weight_of(earlier, layer, None, counts) for earlier in evaluated_before(site, parents))


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def assigned_before(site: ast.AST, layer: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """`L.weight = <value>` has run on every path to `site` within its function, `L` a plain name
    (a local or a parameter), and nothing from there to the site may take the weight away again
    (`_may_undo`): the read finds the `.weight` the function set itself, whatever storage a backend
    gave the layer before (torch's `to_float`: `conv.weight = nn.Parameter(...)`, then
    `fuse_conv_bn_weights(conv.weight, ...)`). The nearest such assignment decides: what lies
    between it and the site lies between any earlier one and the site too. A name some nested
    function, lambda or class names, or that is declared `global`/`nonlocal`, can change where
    this walk cannot see: nothing is proven for it."""
    if not isinstance(layer, ast.Name):
        return False
    function_node = parents.get(id(site))
    while function_node is not None and not isinstance(function_node, _SCOPES):
        function_node = parents.get(id(function_node))
    if function_node is None:
        return False
    for block, holder in enclosing_blocks(site, parents):
        for position in range(holder - 1, -1, -1):
            if _sets_weight(block[position], layer.id):
                # From the assignment to the statement holding the site, all of it: in a loop,
                # what follows the site in that statement runs before the site's next turn. (The
                # walk of the whole function last: most reads have no such assignment.)
                return not any(_may_undo(node, layer.id, parents)
                               for stmt in block[position + 1:holder + 1] for node in ast.walk(stmt)) \
                    and not _named_out_of_sight(function_node, layer.id)
    return False


def _sets_weight(stmt: ast.stmt, name: str) -> bool:
    """`name.weight = <value>` (also one target of several, or an element of a tuple target),
    the value not None."""
    if isinstance(stmt, ast.Assign):
        targets = [t for target in stmt.targets for t in _flat(target)]
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets = [stmt.target]
    else:
        return False
    return any(_is_weight_of(t, name) for t in targets) and not _holds_none(stmt.value)


def _flat(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for element in target.elts for t in _flat(element)]
    return [target.value] if isinstance(target, ast.Starred) else [target]


def _is_weight_of(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "weight" and isinstance(node.value, ast.Name) \
        and node.value.id == name


def _holds_none(value: ast.AST | None) -> bool:
    """None itself, or a tuple or list display with a None element (`L.weight, b = None, b`)."""
    if isinstance(value, (ast.Tuple, ast.List)):
        return any(_holds_none(element) for element in value.elts)
    return isinstance(value, ast.Constant) and value.value is None


def _named_out_of_sight(function_node: ast.AST, name: str) -> bool:
    """`global name` / `nonlocal name` in the function, or a nested function, lambda or class
    that names it: code that runs when called (by anything between) could rebind it or drop its
    weight."""
    for node in ast.walk(function_node):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return True
        if node is not function_node and isinstance(node, (*_SCOPES, ast.ClassDef)) and any(
                isinstance(inner, ast.Name) and inner.id == name for inner in ast.walk(node)):
            return True
    return False


def _may_undo(node: ast.AST, name: str, parents: dict[int, ast.AST]) -> bool:
    """Might `node` leave `name` without the `.weight` set before it? A rebinding (any binding
    form), a `del` through it, a store of None into its `.weight`, anything through a private
    attribute (`name._parameters`), a method called on it (`name.reset()`; one of its weight
    tensor's, `name.weight.t()`, cannot drop the weight), or the object handed on bare (`f(name)`,
    `other = name`, `delattr(name, ...)`), after which anything may change it."""
    if _binds(node, name):
        return True
    if not (isinstance(node, ast.Name) and node.id == name):
        return False
    if not isinstance(node.ctx, ast.Load):
        return True
    first = parents.get(id(node))
    if not (isinstance(first, ast.Attribute) and first.value is node):
        return True  # handed on bare
    top, private = first, first.attr.startswith("_")
    while isinstance(above := parents.get(id(top)), ast.Attribute) and above.value is top:
        top, private = above, private or above.attr.startswith("_")
    if private or isinstance(top.ctx, ast.Del):  # (only the outermost attribute of a chain stores or deletes)
        return True
    above = parents.get(id(top))
    if isinstance(above, ast.Subscript) and above.value is top and isinstance(above.ctx, ast.Del):
        return True
    if isinstance(above, ast.Call) and above.func is top and first.attr != "weight":
        return True  # a method of the layer (or of something it holds)
    if top is first and first.attr == "weight" and isinstance(first.ctx, ast.Store):
        statement = above
        while statement is not None and not isinstance(statement, ast.stmt):
            statement = parents.get(id(statement))
        return not isinstance(statement, (ast.Assign, ast.AnnAssign)) or _holds_none(statement.value)
    return False


def _binds(node: ast.AST, name: str) -> bool:
    """`node` binds `name` in a form other than a `Name` target: `except E as name`, a `match`
    capture, an import alias, a nested `def`/`class` of that name."""
    if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
        return node.name == name
    if isinstance(node, ast.MatchMapping):
        return node.rest == name
    if isinstance(node, ast.alias):
        return (node.asname or node.name.split(".")[0]) == name
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name


def _catches(dominator: Dominator) -> bool:
    construct = dominator.construct  # a test-less dominator is a `try` the site is in (dominance.dominators)
    return isinstance(construct, _TRY) and any(catches_attribute_error(handler) for handler in construct.handlers)
