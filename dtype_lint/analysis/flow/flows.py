"""One step of value flow into a callee: a layer's weight, or its dtype, passed as an argument.

`f(embed_weight=self.embed_tokens.weight)` where `f` casts an activation to `embed_weight.dtype`,
or `g(x, bulk_dtype)` with `bulk_dtype = self.attn.to_q.weight.dtype` where `g` does
`x.to(dtype)`: the site is in the callee, the layer at the call. The call is reported (where the
layer is known); the callee's use is its evidence. Callees are functions of the project (module
functions, `self.method(...)`); exempt storage code is not followed. A callee that hands the
dtype (or the weight, or the weight's dtype) on to another project function is followed one call
further (`f(x, dtype)` calling `g(y, dtype)` that allocates with it; a constructor keeping the
weight as `self.w` whose method passes `self.w.dtype` to a function that allocates: vLLM's
`sample_row_stats(..., probs_dtype)`), and no further: two calls down from the reported call.

A weight handed over (not its dtype) has its dtype taken further along, where the reported call
cannot show it: each use keeps where that happens (`anchors`: the cast or allocation that reads
`param.dtype`, or the argument that passes `self.w.dtype` on), so the rules also report it there
when it is in the file of the handing call (DiffusionGemma's sampler step, its row statistics).
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import functools
from dataclasses import field

from dtype_lint.analysis.flow.recognisers import (
    alloc_dtype_keywords,
    cast_dtype_args,
    storage_replacements,
    weight_dtype_source,
    weight_expr,
)
from dtype_lint.analysis.flow.sinks import ACTIVATION, cast_sink
from dtype_lint.analysis.function_walk import SCOPE_EVENTS, FunctionWalk
from dtype_lint.analysis.index.class_facts import ClassFacts, FunctionScope, ProjectFacts, signature_of
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.core.records import record

NEW_LIKE = frozenset({"new_zeros", "new_empty", "new_ones", "new_full", "new_tensor"})
# How many calls a use may be handed on below the callee the reported call reaches (one: the
# callee's callee). Deeper chains are left alone: each step guesses less of what the value is.
HAND_ON_DEPTH = 1


@record(frozen=True)
class CalleeUse:
    """How a callee uses a parameter: as a cast's or allocation's dtype, or as the weight whose dtype it reads."""
    kind: str  # "cast" | "alloc"
    what: str  # "dtype": the parameter is a dtype; "weight": the parameter is the weight tensor
    param: str
    path: str
    line: int
    text: str  # the use, as written
    sink: str = ACTIVATION  # what a cast converts (analysis/flow/sinks.py): an activation, or a weight
    via: str = ""  # the function the value was handed on to, where the use is one call further
    # Where the weight's dtype is taken, nearest first: the use itself (a cast or allocation that
    # reads `param.dtype`), or an argument that hands the dtype (or the weight) on to `via`.
    anchors: tuple[Anchor, ...] = field(default=(), compare=False)


@record(frozen=True)
class Anchor:
    """A node where a handed weight's dtype is used: `via` empty, the cast or allocation itself;
    else an argument passing the weight's dtype (`of_dtype`) or the weight on to the function `via`."""
    path: str
    node: ast.expr = field(compare=False)
    via: str = ""
    of_dtype: bool = False


@record(frozen=True)
class _Callee:
    """A project function a call reaches, with its positional parameters."""
    name: str
    fn: ast.FunctionDef | ast.AsyncFunctionDef
    path: str
    params: list[str]  # positional parameters, after `self` for methods
    cls: str | None = None  # set for a constructor: the class whose instance keeps the argument
    module: str | None = None  # the module the function is written in (its names resolve there)


@record(frozen=True)
class Flow:
    """A layer's weight or dtype passed at a call into a callee that uses it (`use`)."""
    arg: ast.expr  # the argument at the call
    layer: ast.expr  # the layer whose weight (or dtype) it is
    callee: str
    use: CalleeUse  # the first use of the kind the argument is (its dtype, or the weight)
    uses: tuple[CalleeUse, ...] = ()  # every such use, the first included


class Flows:
    """Callee uses of parameters, computed once per callee."""

    def __init__(self, project: ProjectFacts, module: str, imports: dict[str, str], config, layers=None):
        self.project = project
        self.layers = layers  # resolves `self.a.b` in `self.a.b.method(...)`
        self.index = project.index
        self.module = module
        self.imports = imports
        self.config = config
        self._uses: dict[tuple[str, str, int], list[CalleeUse]] = {}
        # Per call and scope: DTL001 (casts), DTL002 (allocations) and DTL003 (reads handed on)
        # ask about the same calls. The nodes are the analysed tree's, alive as long as this is.
        self._by_call: dict[tuple[int, int], list[Flow]] = {}

    def flows(self, call: ast.Call, scope: FunctionScope) -> list[Flow]:
        """The weight and weight-dtype arguments of `call` that its callee casts or allocates with
        (shared: do not mutate)."""
        key = (id(call), id(scope))
        found = self._by_call.get(key)
        if found is None:
            found = self._by_call[key] = self._flows(call, scope)
        return found

    def _flows(self, call: ast.Call, scope: FunctionScope) -> list[Flow]:
        # Only the arguments `may_carry` passes can be a weight or its dtype: most calls have none
        # (vLLM 0.34.0: 9,400 of the 9,664 calls DTL001 and DTL002 ask about), and their 17,000
        # arguments were each handed to both recognisers.
        assigns = scope.assigns
        args = [(i, a) for i, a in enumerate(call.args) if may_carry(a, assigns)]
        kws = [(k.arg, k.value) for k in call.keywords if k.arg is not None and may_carry(k.value, assigns)]
        if not args and not kws:
            return []
        candidates = []
        for key, arg in args + kws:
            wds = weight_dtype_source(arg, scope)
            if wds is not None and wds.form != "tensor":
                candidates.append((key, arg, wds.layer, "dtype"))
                continue
            w = weight_expr(arg, scope)
            if w is not None:
                candidates.append((key, arg, w[0], "weight"))
        if not candidates:
            return []
        callee = self._callee(call, scope)
        if callee is None:
            return []
        name, function_node, path, params, cls = callee.name, callee.fn, callee.path, callee.params, callee.cls
        out = []
        for key, arg, layer, what in candidates:
            param = key if isinstance(key, str) else (params[key] if key < len(params) else None)
            if param is None:
                continue
            uses = self._class_uses(cls, param) if cls is not None else \
                self._param_uses(function_node, path, param, callee.module)
            matching = tuple(use for use in uses if use.what == what)
            if matching:
                out.append(Flow(arg, layer, name, matching[0], matching))
        return out

    def _method_of(self, classes, method: str) -> "_Callee | None":
        """The first of `classes` (qualnames, in MRO order) that defines `method`, as a callee."""
        for ancestor in classes:
            class_facts: ClassFacts | None = self.project.class_facts(ancestor)
            if class_facts is not None and method in class_facts.methods:
                function_node = class_facts.methods[method]
                location = self.index.class_location(ancestor)
                return _Callee(f"{ancestor.rsplit('.', 1)[-1]}.{method}", function_node, class_facts.path,
                               signature_of(function_node).positional,
                               module=location[0].module if location else None)
        return None

    def _callee(self, call: ast.Call, scope: FunctionScope, module: str | None = None) -> "_Callee | None":
        """The project function (or constructor) the call reaches, if any; its names are read in
        `module` (the analysed file's by default)."""
        module = module or self.module
        imports = self.imports if module == self.module else self._imports_of(module)
        callee = call.func
        if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) \
                and callee.value.id == scope.self_name and scope.class_qualname:
            method = self._method_of(self.index.mro(scope.class_qualname), callee.attr)
            if method is not None or self.layers is None:
                return method
            # `self.rotary_emb(self.k_proj.weight, n)`: a submodule called runs its class's `forward`
            module_class = self.layers.resolve(callee, scope).qualname
            return self._method_of(self.index.mro(module_class), "forward") if module_class else None
        if isinstance(callee, ast.Attribute) and _is_super(callee.value) and scope.class_qualname:
            # `super().__init__(..., target_dtype=target_dtype)` (peft's adaption prompts): the
            # next class of the MRO that defines the method.
            return self._method_of(self.index.mro(scope.class_qualname)[1:], callee.attr)
        if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Attribute) and self.layers is not None:
            owner = self.layers.resolve(callee.value, scope)  # `self.language_model.rotary_emb.method(...)`
            return self._method_of(self.index.mro(owner.qualname) if owner.qualname else [], callee.attr)
        name = dotted(callee)
        if not name:
            return None
        target = self.index.resolve(module, name, imports)
        location = self.index.class_location(target)
        if location is not None:  # a constructor: follow the instance
            init = self.project.init_of(target)
            class_facts = self.project.class_facts(target)
            if init is None or class_facts is None or init[0] != target:
                return None
            return _Callee(target.rsplit(".", 1)[-1], class_facts.methods["__init__"], class_facts.path,
                           init[1].positional, target, location[0].module)
        mod, _, func = target.rpartition(".")
        found = self.project.function(mod, func) if mod else None
        if found is None:
            found = self.project.function(module, name) if "." not in name else None
        if found is None:
            return None
        facts, function_node = found
        return _Callee(func, function_node, facts.path,
                       [a.arg for a in function_node.args.posonlyargs + function_node.args.args], module=facts.module)

    def _imports_of(self, module: str) -> dict[str, str]:
        facts = self.project.file_facts(module)
        return facts.imports if facts is not None else {}

    def _class_uses(self, cls: str, param: str) -> list[CalleeUse]:
        """A constructor parameter kept as `self.X = param`: the weight uses of `self.X` in the
        class's methods, directly or handed on to a project function."""
        class_facts = self.project.class_facts(cls)
        if class_facts is None:
            return []
        attrs = {x for x, p in class_facts.param_attrs.items() if p == param}
        location = self.index.class_location(cls)
        module = location[0].module if location else None
        uses: list[CalleeUse] = []
        for method in class_facts.methods.values():
            if not attrs or any(fnmatch.fnmatch(method.name, p) for p in self.config.exempt_functions):
                continue
            walk = FunctionWalk(method)
            scope = FunctionScope(method, cls, walk.of(*SCOPE_EVENTS))
            is_attr = functools.partial(_is_self_attr, scope=scope, attrs=attrs)
            for node in walk.of(ast.Call):
                uses += [CalleeUse(kind, "weight", param, class_facts.path, node.lineno, ast.unparse(node),
                                   _sink(kind, node, scope), anchors=(Anchor(class_facts.path, node),))
                         for kind, d in _dtype_args(node) if _dtype_of(d, is_attr, scope)]
                # `self.X` handed on (its weight uses), or `self.X.dtype` handed on (the callee's
                # dtype uses: `sample_row_stats(logits, probs_dtype)` with
                # `probs_dtype = self.embed_weight.dtype if c else None`): one call further.
                uses += self._handed_on(node, scope, is_attr, param, module, HAND_ON_DEPTH, class_facts.path,
                                        weight_only=True)
        return uses

    def _handed_on(self, call: ast.Call, scope: FunctionScope, is_value, param: str, module: str | None,
                   depth: int, path: str, weight_only: bool = False) -> list[CalleeUse]:
        """The uses a project function makes of what `call` hands it: the value `is_value` accepts
        itself (its uses as they are; only its weight uses with `weight_only`, for a value known to
        be a weight), or that value's `.dtype` (its "dtype" uses, which are then uses of the
        weight). Relabelled as uses of `param`, where they happen; `path`: the file of `call`."""
        positional = [(index, arg) for index, arg in enumerate(call.args) if not isinstance(arg, ast.Starred)]
        keywords = [(kw.arg, kw.value) for kw in call.keywords if kw.arg is not None]
        handed = [(key, arg, is_value(arg)) for key, arg in positional + keywords
                  if is_value(arg) or _dtype_of(arg, is_value, scope)]
        if not handed:
            return []
        callee = self._callee(call, scope, module)
        if callee is None or callee.cls is not None:
            return []
        uses: list[CalleeUse] = []
        for key, arg, itself in handed:
            inner = key if isinstance(key, str) else (callee.params[key] if key < len(callee.params) else None)
            if inner is None:
                continue
            passed = Anchor(path, arg, callee.name, of_dtype=not itself)
            for use in self._param_uses(callee.fn, callee.path, inner, callee.module, depth):
                if itself and (use.what == "weight" or not weight_only):
                    # the value itself: its dtype is taken where the callee uses it, else here
                    uses.append(dataclasses.replace(use, param=param, via=use.via or callee.name,
                                                    anchors=(*use.anchors, passed)))
                elif not itself and use.what == "dtype":  # the dtype of the weight `param` holds, taken here
                    uses.append(dataclasses.replace(use, what="weight", param=param, via=use.via or callee.name,
                                                    anchors=(passed,)))
        return uses

    def _param_uses(self, fn, path: str, param: str, module: str | None = None, depth: int = 0) -> list[CalleeUse]:
        """How `fn` uses its parameter `param` as a dtype (or as a weight whose dtype it takes);
        below `HAND_ON_DEPTH`, also what a project function it hands the parameter to does."""
        key = (path + ":" + str(fn.lineno), param, depth)
        if key in self._uses:
            return self._uses[key]
        uses: list[CalleeUse] = []
        self._uses[key] = uses
        if any(fnmatch.fnmatch(fn.name, p) for p in self.config.exempt_functions):
            return uses
        # One walk of the function, its nodes bucketed by class (as a candidate's), for its scope
        # and its calls: each of these walked it, and tested every node's class again.
        walk = FunctionWalk(fn)
        scope = FunctionScope(fn, None, walk.of(*SCOPE_EVENTS))
        aliases = {param} | {k for k, v in scope.assigns.items()
                             if len(v) == 1 and isinstance(v[0], ast.Name) and v[0].id == param}

        def is_param(node) -> bool:
            return isinstance(node, ast.Name) and node.id in aliases

        calls = walk.of(ast.Call)
        replacements = storage_replacements(walk.of(ast.Call, ast.Assign), is_param)
        for node in calls:
            if id(node) in replacements:
                continue
            for kind, d in _dtype_args(node):
                if is_param(d):
                    uses.append(CalleeUse(kind, "dtype", param, path, node.lineno, ast.unparse(node),
                                          _sink(kind, node, scope), anchors=(Anchor(path, node),)))
                elif _dtype_of(d, is_param, scope):
                    uses.append(CalleeUse(kind, "weight", param, path, node.lineno, ast.unparse(node),
                                          _sink(kind, node, scope), anchors=(Anchor(path, node),)))
            callee = node.func
            if isinstance(callee, ast.Attribute) and callee.attr in NEW_LIKE and is_param(callee.value) \
                    and not any(kw.arg == "dtype" for kw in node.keywords):
                uses.append(CalleeUse("alloc", "weight", param, path, node.lineno, ast.unparse(node),
                                      anchors=(Anchor(path, node),)))
        if depth < HAND_ON_DEPTH and module is not None:
            # Its own uses first: a flow reports the first use of the kind it asks for.
            for node in calls:
                if id(node) not in replacements:
                    uses += self._handed_on(node, scope, is_param, param, module, depth + 1, path)
        return uses


# The attributes whose reads the recognisers follow: `L.weight`, `L.weight.dtype`, and
# `M.get_base_layer().weight.data` (recognisers.weight_expr).
_CARRYING_ATTRS = frozenset({"weight", "dtype", "data"})


def may_carry(arg: ast.expr, assigns: dict[str, list[ast.expr | None]]) -> bool:
    """Could `weight_dtype_source(arg, scope)` or `weight_expr(arg, scope)` be other than None
    (`assigns`: the scope's)? Each answers only for an attribute named in `_CARRYING_ATTRS`, a
    call (`typing.cast`, `getattr`, `next(iter(M.parameters()))`), a conditional expression, or
    a name the function assigns; for anything else (a constant, another attribute, a parameter,
    a starred argument) both are None without looking further. A superset, checked against both
    recognisers over the package's own calls (tests/test_flows_pretest.py)."""
    if isinstance(arg, ast.Name):
        return arg.id in assigns
    if isinstance(arg, ast.Attribute):
        return arg.attr in _CARRYING_ATTRS
    return isinstance(arg, (ast.Call, ast.IfExp))


def _is_super(node: ast.expr) -> bool:
    """`super()` (argument-less: the enclosing class's next definer)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super" \
        and not node.args and not node.keywords


def _sink(kind: str, call: ast.Call, scope: FunctionScope) -> str:
    """What a cast use converts (its receiver); an allocation converts nothing."""
    if kind != "cast" or not isinstance(call.func, ast.Attribute):
        return ACTIVATION
    return cast_sink(call.func.value, scope.assigns)


def _dtype_args(call: ast.Call) -> list[tuple[str, ast.expr]]:
    """("cast" | "alloc", the expression giving the dtype) for each dtype the call uses."""
    return [("cast", d) for d in cast_dtype_args(call)] + \
        [("alloc", kw.value) for kw in alloc_dtype_keywords(call, {"torch": "torch"})]


def _is_self_attr(node, depth: int = 0, *, scope: FunctionScope, attrs: set[str]) -> bool:
    """`self.X` for an X of `attrs`, rows of it (`self.X[idx]` keeps its dtype), or a local of
    `scope` only ever bound to those. At module level, not a closure of `Flows._class_uses`: a
    closure that calls itself is a reference cycle, and it held the method's tree and scope alive
    until the next collection."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name) and depth < 2:
        vals = scope.assigns.get(node.id, [])
        return bool(vals) and all(v is not None and _is_self_attr(v, depth + 1, scope=scope, attrs=attrs)
                                  for v in vals)
    return isinstance(node, ast.Attribute) and node.attr in attrs and \
        isinstance(node.value, ast.Name) and node.value.id == scope.self_name


def _dtype_of(node: ast.expr, is_tensor, scope: FunctionScope, depth: int = 0) -> bool:
    """`t.dtype` (or a local bound to it, or `t.dtype if ... else ...`) for a tensor `is_tensor` accepts."""
    if depth > 4:  # `dtype = dtype if c else x` binds a name to itself
        return False
    if isinstance(node, ast.Name):
        vals = scope.assigns.get(node.id, [])
        if len(vals) == 1 and vals[0] is not None:
            node = vals[0]
    if isinstance(node, ast.IfExp):
        return _dtype_of(node.body, is_tensor, scope, depth + 1) or _dtype_of(node.orelse, is_tensor, scope, depth + 1)
    return isinstance(node, ast.Attribute) and node.attr == "dtype" and is_tensor(node.value)
