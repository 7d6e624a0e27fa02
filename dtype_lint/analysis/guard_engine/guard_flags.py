"""Flags and predicates: names whose value is a guard (analysis/guard_engine/guards.py, the `.weight` question).

- a **flag** is a name or `self.X` attribute only ever set, in the function or in any method of
  its class, to a guard value: a check that implies `.weight`, a predicate's result,
  `getattr(L, "weight", None)`, `hasattr(...)`, a value assigned only where such a check holds, or
  false (`self.is_unquantized = isinstance(...)`, `self.use_fast = self.is_unquantized and ...`,
  `ok &= self.is_unquantized`, `self._scale = prep(layer)`). Flags feed flags, so they are found
  by a fixed point.
- a **predicate** is a function (of the module, nested, a method of the class, or imported from a
  project module) whose every true or non-None result is such a check or is returned only after
  one (`if weight is None: return False` with `weight = getattr(L, "weight", None)`). Imported
  predicates are read through the class index's file facts and memoised on the index (per run,
  with the reads they made), never in a module-global cache.

`ClassGuardFlags.of(fn)` is what is known in one function of the file: its class's flags, the
predicates it may call, and whether the class refuses quantization in `__init__`.
"""

from __future__ import annotations

import ast
from typing import Callable

from dtype_lint.analysis.function_walk import nodes_of, walk
from dtype_lint.analysis.guard_engine.dominance import EXITS
from dtype_lint.analysis.guard_engine.guards import (
    BackendNames,
    GuardKnowledge,
    backend_check,
    implies_no_weight,
    implies_weight,
    is_falsy,
    is_weight_or_none,
    method_part,
)
from dtype_lint.analysis.guard_engine.names_on_demand import NamesOnDemand, Part, memoised
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.analysis.index.lazy_exports import lazy_owner
from dtype_lint.core.text_facts import may_define_top_level, top_level_defs

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_NOT = ast.Not()


class _Assignment:
    """One assignment to a would-be flag: its value, whether it is `&=`, and the tests that hold
    wherever it runs (enclosing `if`s, and the negations of earlier `if ...: return`s)."""

    __slots__ = ("value", "anded", "tests", "scope")

    def __init__(self, value, anded, tests, scope=None):
        self.value, self.anded, self.tests, self.scope = value, anded, tests, scope

    def is_flag_value(self, known: GuardKnowledge) -> bool:
        if is_falsy(self.value) or is_weight_or_none(self.value) or implies_weight(self.value, None, known):
            return True
        return any(implies_weight(test, None, known) for test in self.tests)

    def is_deferred_flag_value(self, known: GuardKnowledge) -> bool:
        """A wrapper of a guard computed on first use: `LazyValue(lambda: <flag value>)`,
        `Cached(self._supported)` with `_supported` a predicate of the class."""
        value = self.value
        if not (isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords):
            return False
        creator = value.args[0]
        if isinstance(creator, ast.Lambda) and not creator.args.args:
            return _Assignment(creator.body, False, self.tests).is_flag_value(known)
        name = ast.unparse(creator) if isinstance(creator, (ast.Name, ast.Attribute)) else None
        return name is not None and name in known.predicates


def _walk_block(body: list[ast.stmt], tests: tuple, visit) -> None:
    """Call `visit(stmt, tests)` for every statement, `tests` being what holds there; nested
    functions and classes are not entered."""
    for stmt in body:
        if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
            continue
        visit(stmt, tests)
        if isinstance(stmt, ast.If):
            _walk_block(stmt.body, tests + (stmt.test,), visit)
            _walk_block(stmt.orelse, tests + (ast.UnaryOp(op=_NOT, operand=stmt.test),), visit)
            if stmt.body and isinstance(stmt.body[-1], EXITS):
                tests = tests + (ast.UnaryOp(op=_NOT, operand=stmt.test),)
        else:
            for field in ("body", "orelse", "finalbody"):
                _walk_block(getattr(stmt, field, None) or [], tests, visit)
            for handler in getattr(stmt, "handlers", None) or []:
                _walk_block(handler.body, tests, visit)
            for case in getattr(stmt, "cases", None) or []:
                _walk_block(case.body, tests, visit)


def _assignments_of(fn, self_name: str | None, attributes: dict, local_names: dict) -> None:
    def unknown() -> _Assignment:
        return _Assignment(ast.Name("?"), False, (), id(fn))

    def visit(stmt, tests):
        pairs: list[tuple[ast.expr, ast.expr | None, bool]] = []
        if isinstance(stmt, ast.Assign):
            pairs = [(target, stmt.value, False) for target in stmt.targets]
        elif isinstance(stmt, ast.AnnAssign):
            pairs = [(stmt.target, stmt.value, False)]
        elif isinstance(stmt, ast.AugAssign):
            pairs = [(stmt.target, stmt.value, isinstance(stmt.op, ast.BitAnd))]
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            for node in ast.walk(stmt.target if isinstance(stmt, (ast.For, ast.AsyncFor)) else stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    local_names.setdefault(node.id, []).append(unknown())
        for target, value, anded in pairs:
            assignment = _Assignment(value, anded, tests, id(fn))
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id == self_name:
                attributes.setdefault(f"self.{target.attr}", []).append(assignment)
            elif isinstance(target, ast.Name):
                local_names.setdefault(target.id, []).append(assignment)
            elif isinstance(target, (ast.Tuple, ast.List)):
                elements = target.elts if isinstance(value, ast.Call) and not any(
                    isinstance(e, ast.Starred) for e in target.elts) else []
                for position, element in enumerate(elements):
                    # `ok, why = f(L)`: `ok` is `f(L)[0]` (elements is empty unless `value` is a call)
                    if isinstance(element, ast.Name) and isinstance(value, ast.Call):
                        item = ast.Subscript(value=value, slice=ast.Constant(position), ctx=ast.Load())
                        local_names.setdefault(element.id, []).append(_Assignment(item, anded, tests, id(fn)))
                for node in ast.walk(target):
                    if isinstance(node, ast.Name) and not any(node is e for e in elements):
                        local_names.setdefault(node.id, []).append(unknown())
    _walk_block(fn.body, (), visit)


_ANY_NAME = "*"  # `setattr(X, name, ...)` with a computed name: any attribute may be set


def _stores_on_other_objects(tree: ast.Module) -> dict[str, list[_Assignment]]:
    """attribute name -> the assignments `X.name = value` in every function of the file whose `X`
    is not the function's own `self` (`layer.mlp.fuse_act = supports(layer.mlp.down_proj)`, a
    decoder layer turning on its MLP's path), with the tests that hold there; a `setattr(X, "name",
    v)` is an assignment of an unknown value, and one with a computed name sets `_ANY_NAME`."""
    stores: dict[str, list[_Assignment]] = {}
    for fn in walk(tree):
        if not isinstance(fn, _FUNCTIONS):
            continue
        params = fn.args.posonlyargs + fn.args.args
        self_name = params[0].arg if params else None

        def visit(stmt, tests, fn=fn, self_name=self_name):
            pairs: list[tuple[ast.expr, ast.expr | None, bool]] = []
            if isinstance(stmt, ast.Assign):
                pairs = [(target, stmt.value, False) for target in stmt.targets]
            elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
                pairs = [(stmt.target, stmt.value, isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.BitAnd))]
            for target, value, anded in pairs:
                for node in ast.walk(target):
                    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and not (
                            isinstance(node.value, ast.Name) and node.value.id == self_name):
                        known_value = value if node is target else ast.Name("?")
                        stores.setdefault(node.attr, []).append(_Assignment(known_value, anded, tests, id(fn)))
            for node in walk(stmt) if not isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)) \
                    else ():
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                        and len(node.args) >= 2:
                    name = node.args[1]
                    key = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else _ANY_NAME
                    stores.setdefault(key, []).append(_Assignment(ast.Name("?"), False, tests, id(fn)))
        _walk_block(fn.body, (), visit)
    return stores


def _flags_of(assignments: dict[str, list[_Assignment]], known_for) -> frozenset[str]:
    """Names whose every assignment is a flag value (one that is false, or true only when the
    layer has `.weight`); `x &= <flag>` makes `x` one whatever it was. Constant false values alone
    say nothing (the real value is set elsewhere). `known_for(assignment, flags)`: what is known
    there."""
    flags: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, values in assignments.items():
            if name in flags:
                continue
            anded = [a for a in values if a.anded]
            derived = any(not is_falsy(a.value) for a in values)
            if (anded and any(a.is_flag_value(known_for(a, flags)) for a in anded)) or (
                    not anded and derived and all(a.is_flag_value(known_for(a, flags)) for a in values)):
                flags.add(name)
                changed = True
            elif f"{name}()" not in flags and not anded and derived and all(
                    is_falsy(a.value) or a.is_deferred_flag_value(known_for(a, flags)) for a in values):
                flags.add(f"{name}()")  # its value, read when first used, is the flag
                changed = True
    return frozenset(flags)


def method_locals(fn) -> frozenset[str]:
    """The locals of `fn` that only ever hold the layer's quant method or scheme, or an object
    reached from it (`kernel = getattr(L.quant_method, "kernel", None)`, then `if kernel is None:
    kernel = getattr(L.scheme, "mx_linear", None)`); None counts as no object."""
    local_names: dict[str, list[_Assignment]] = {}
    _assignments_of(fn, None, {}, local_names)
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, values in local_names.items():
            if name not in found and any(not is_falsy(a.value) for a in values) and all(
                    not a.anded and (is_falsy(a.value) or method_part(a.value, frozenset(found))) for a in values):
                found.add(name)
                changed = True
    return frozenset(found)


def function_flags(fn, known: GuardKnowledge) -> frozenset[str]:
    """The local flags of one function (given what is known around it)."""
    local_names: dict[str, list[_Assignment]] = {}
    _assignments_of(fn, None, {}, local_names)
    return _flags_of(local_names, lambda _assignment, flags: known.with_flags(flags))


def predicate_names(fn, known: GuardKnowledge, name: str) -> frozenset[str]:
    """`{name}` for a predicate, `{"not " + name}` for a negated one (every value it returns is
    true, or false only when the layer has `.weight`: `return not isinstance(layer.quant_method,
    UnquantizedLinearMethod)`), else nothing. A function whose every `return` is a tuple
    (`return False, "why"`) is judged by the tuples' first elements, as `name[0]` (read as
    `ok, _ = f(layer)` or `f(layer)[0]`)."""
    returns = _returns_of(fn)
    if returns and all(isinstance(r.value, ast.Tuple) and r.value.elts and not isinstance(r.value.elts[0], ast.Starred)
                       for r, _ in returns):
        returns = [(ast.Return(value=r.value.elts[0]), tests) for r, tests in returns
                   if isinstance(r.value, ast.Tuple)]  # every one is (checked above): narrows the type
        name = f"{name}[0]"
    if is_predicate(fn, known, returns):
        return frozenset({name})
    if is_negated_predicate(fn, known, returns):
        return frozenset({f"not {name}"})
    return frozenset()


def _returns_of(fn) -> list[tuple[ast.Return, tuple]]:
    returns: list[tuple[ast.Return, tuple]] = []
    _walk_block(fn.body, (), lambda stmt, tests: returns.append((stmt, tests)) if isinstance(stmt, ast.Return)
                else None)
    return returns


def is_negated_predicate(fn, known: GuardKnowledge, returns=None) -> bool:
    """Every value `fn` returns is true, or false only when the layer has `.weight`: a value whose
    falsity implies it (`not isinstance(L.quant_method, Unquantized...)`), or a false constant
    returned only under a test that implies it. `returns`: its returns with the tests that hold
    there (those of its body when None)."""
    returns = _returns_of(fn) if returns is None else returns
    if not returns:
        return False
    known = known.with_method_locals(method_locals(fn))
    flags = function_flags(fn, known)
    here = known.with_flags(flags)
    decided = False
    for ret, tests in returns:
        value = ret.value
        if isinstance(value, ast.Constant) and value.value:
            continue  # "maybe quantized" says nothing
        if is_falsy(value):
            if not any(implies_weight(test, None, here) for test in tests):
                return False
        elif not implies_no_weight(value, None, here):
            return False
        decided = True
    return decided


def is_predicate(fn, known: GuardKnowledge, returns=None) -> bool:
    """Every value `fn` returns is false (or None), or true only when the layer has `.weight`:
    a return value that implies it, or a return dominated by such a test."""
    returns = _returns_of(fn) if returns is None else returns
    real = [(ret, tests) for ret, tests in returns if not is_falsy(ret.value)]
    if not real:
        return False
    known = known.with_method_locals(method_locals(fn))
    flags = function_flags(fn, known)
    here = known.with_flags(flags)
    return all(implies_weight(ret.value, None, here) or any(implies_weight(test, None, here) for test in tests)
               or (isinstance(ret.value, ast.Name) and ret.value.id in flags) for ret, tests in real)


def module_predicates(tree: ast.Module, config_params: tuple[str, ...]) -> frozenset[str]:
    """The module's top-level predicate functions, read with unquantized checks and config tests
    only (how an imported predicate is judged)."""
    known = GuardKnowledge(backends=BackendNames(config_params))
    return frozenset().union(*(predicate_names(node, known, node.name) for node in tree.body
                               if isinstance(node, _FUNCTIONS)))


# (the text of a module's top-level `def`s of one name, config params) -> what module_predicates
# says of that name; keyed by the text itself, so an edit is never answered from an older one.
_DEF_PREDICATES: dict[tuple[str, tuple[str, ...]], frozenset[str]] = {}


def _named_predicates(text: str, name: str, config_params: tuple[str, ...]) -> frozenset[str] | None:
    """`module_predicates` restricted to `name`, read from the text of each top-level `def name`
    parsed alone (a predicate is judged from its own body, with nothing known around it) instead
    of the whole module: None when a def cannot be cut out so that it parses alone (a cut inside a
    string or brackets never parses), and the caller parses the module."""
    bodies = top_level_defs(text, name)
    if not bodies:
        return None
    key = ("".join(bodies), config_params)
    found = _DEF_PREDICATES.get(key)
    if found is None:
        names: set[str] = set()
        for body in bodies:
            function = def_alone(body, name)
            if function is None:
                return None
            names |= module_predicates(ast.Module(body=[function], type_ignores=[]), config_params)
        found = _DEF_PREDICATES[key] = frozenset(names)
    return found


def def_alone(body: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The text of one top-level `def name` (text_facts.top_level_defs) parsed alone, or None where
    it does not parse alone (a cut inside a string or brackets) or is not that one function."""
    try:
        tree = ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    node = tree.body[0] if len(tree.body) == 1 else None
    return node if isinstance(node, _FUNCTIONS) and node.name == name else None


def imported_predicates(project, imports: dict[str, str], config_params: tuple[str, ...]) -> frozenset[str]:
    """Names this file imports that are predicates in their own (project) module, e.g.
    `from vllm.model_executor.layers.hpc.gated_mla import hpc_gated_mla_supported`."""
    return frozenset().union(*(imported_predicate(project, imports, local, config_params) for local in imports))


def imported_predicate(project, imports: dict[str, str], local: str, config_params: tuple[str, ...]) -> frozenset[str]:
    """What `imported_predicates` says of the one imported name `local`: `{local}`, `{"not " +
    local}`, `{local + "[0]"}`, `{"not " + local + "[0]"}` or nothing (the guard engine asks only
    about the names its tests call: NamesOnDemand)."""
    target = imports.get(local)
    if target is None:
        return frozenset()
    index = project.index
    module, _, name = index.canonical(target).rpartition(".")
    header = index.modules.get(module)
    if header is None or name in header.classes:
        return frozenset()
    owner = lazy_owner(project, module, name)
    if owner is not None:  # `from pkg import f`, `pkg` resolving `f` in a `__getattr__`
        module, header = owner, index.modules.get(owner)

    text = project.module_text(module)
    if text is not None and not may_define_top_level(text, name):
        return frozenset()  # no top-level `def name` there: not a predicate, and its module need not be parsed
    predicates = _named_predicates(text, name, config_params) if text is not None else None
    if predicates is None:
        def build(module=module):
            facts = project.file_facts(module)
            return module_predicates(facts.tree, config_params) if facts and facts.tree else frozenset()
        predicates = index.cached_facts(("guard-predicates", header.path, config_params), build)
    if name in predicates:
        return frozenset({local})
    if f"not {name}" in predicates:
        return frozenset({f"not {local}"})
    if f"{name}[0]" in predicates:
        return frozenset({f"{local}[0]"})
    if f"not {name}[0]" in predicates:
        return frozenset({f"not {local}[0]"})
    return frozenset()


def concrete_classes(project, module: str, imports: dict[str, str]):
    """`concrete(name)` for one file: the class, resolved through its imports, is neither a
    configured root of storage code (the preset's `QuantizeMethodBase`, `LinearMethodBase`...) nor
    a class declaring an abstract method (`@abstractmethod`, or a body that only raises
    `NotImplementedError`). A class outside the project is taken as concrete unless configured."""
    index = project.index

    def concrete(name: str) -> bool:
        qualname = index.resolve(module, name, imports)
        if index.configured(qualname, "exempt") is not None:
            return False
        class_facts = project.class_facts(qualname)
        return class_facts is None or not any(_abstract(m) for m in class_facts.methods.values())
    return concrete


def _abstract(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    if any((dotted(d) or "").rsplit(".", 1)[-1] == "abstractmethod" for d in fn.decorator_list):
        return True
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return dotted(exc) == "NotImplementedError"


class ClassGuardFlags:
    """For each function of the file, what is known there: the flags of its class (`self.X` set
    only to guard values in the class's methods: `self.is_unquantized = isinstance(
    self.quant_method, UnquantizedLinearMethod)`, `self.allow_fast = self.is_unquantized and ...`,
    `self._scale = prep(layer)` where `prep` returns None unless the weight exists), and the
    predicates it may call (module functions, nested functions, the class's own methods)."""

    def __init__(self, tree: ast.Module, imported: Part, backends: BackendNames, object_predicates=None):
        # Computed on demand, per class: most files hold no read the rule would report, and
        # reading every class's flags cost more than all the rest of the rule. Predicates are
        # judged on demand too, name by name (NamesOnDemand): `imported(local)` says what an
        # imported name is (`imported_predicate`), `object_predicates(fn, name)` what an `X.m`
        # (see `object_predicate_calls`) or `self.a.m` call in `fn` is.
        self._object_predicates: Callable[[ast.AST, str], frozenset[str]] = \
            object_predicates or (lambda _fn, _name: frozenset())
        self._by_function: dict[int, GuardKnowledge] = {}
        self._nothing = GuardKnowledge(backends=backends)
        self._tree, self._imported, self._backends = tree, imported, backends
        self._module_predicates: NamesOnDemand | None = None
        self._owners: dict[int, ast.ClassDef | ast.Module] | None = None  # function -> its class, or the module
        self._settled: set[int] = set()
        self._outside_stores: dict[str, list[_Assignment]] | None = None

    def release(self) -> None:
        """Forget what the questions built: the knowledge of each function holds predicates
        judged on demand by closures over this object (and over the file's guards, through
        `object_predicates`), a reference cycle that kept the file's tree and facts until the
        cycle collector ran (with every rule on, most of the peak RSS)."""
        self._by_function.clear()
        self._module_predicates = None
        self._object_predicates = lambda _fn, _name: frozenset()

    def _owner(self, fn: ast.AST | None) -> ast.ClassDef | ast.Module | None:
        if self._owners is None:
            owners: dict[int, ast.ClassDef | ast.Module] = {}
            self._owners = owners
            for node in self._tree.body:
                if isinstance(node, _FUNCTIONS):
                    owners[id(node)] = self._tree
            for cls in nodes_of(self._tree, ast.ClassDef):
                for method in cls.body:
                    if isinstance(method, _FUNCTIONS):
                        owners[id(method)] = cls
        return self._owners.get(id(fn))

    def _predicates(self) -> NamesOnDemand:
        """The module's top-level predicates and the imported ones, judged when asked about."""
        if self._module_predicates is None:
            defs: dict[str, list] = {}
            for node in self._tree.body:
                if isinstance(node, _FUNCTIONS):
                    defs.setdefault(node.name, []).append(node)
            nothing = self._nothing

            def top_level(base: str) -> frozenset[str]:
                return frozenset().union(*(predicate_names(node, nothing, node.name) for node in defs.get(base, ())))

            self._module_predicates = NamesOnDemand(parts=(memoised(top_level), memoised(self._imported)))
        return self._module_predicates

    def _own_predicates(self, fn, known_predicates) -> NamesOnDemand:
        """The predicates a function of the file defines inside itself, and those of the objects it
        builds or its attributes hold (`_object_predicates`), judged when asked about."""
        nested: dict[str, list] = {}
        for node in walk(fn):
            if isinstance(node, _FUNCTIONS) and node is not fn:
                nested.setdefault(node.name, []).append(node)
        backends = self._backends

        def inner(base: str) -> frozenset[str]:
            known = GuardKnowledge(frozenset(), known_predicates, backends)
            return frozenset().union(*(predicate_names(node, known, node.name) for node in nested.get(base, ())))

        return NamesOnDemand(parts=(memoised(inner), memoised(lambda base: self._object_predicates(fn, base))))

    def _settle(self, owner: ast.ClassDef | ast.Module) -> None:
        if id(owner) in self._settled:
            return
        self._settled.add(id(owner))
        predicates, backends = self._predicates(), self._backends
        if isinstance(owner, ast.ClassDef):
            self._class(owner, predicates, backends)
            return
        for node in owner.body:
            if isinstance(node, _FUNCTIONS):
                self._by_function[id(node)] = GuardKnowledge(
                    frozenset(), predicates | self._own_predicates(node, predicates), backends)

    def _class(self, cls: ast.ClassDef, module_predicates: NamesOnDemand, backends: BackendNames) -> None:
        methods = [m for m in cls.body if isinstance(m, _FUNCTIONS)]
        by_name: dict[str, list] = {}
        for method in methods:
            by_name.setdefault(f"self.{method.name}", []).append(method)

        def own_method(base: str) -> frozenset[str]:
            known = GuardKnowledge(frozenset(), module_predicates, backends)
            return frozenset().union(*(predicate_names(m, known, base) for m in by_name.get(base, ())))

        predicates = module_predicates | NamesOnDemand(parts=(memoised(own_method),))
        nested = {id(m): self._own_predicates(m, predicates) for m in methods}
        attributes: dict[str, list[_Assignment]] = {}
        local_names: dict[int, dict[str, list[_Assignment]]] = {}
        for method in methods:
            local_names[id(method)] = {}
            _assignments_of(method, method.args.args[0].arg if method.args.args else None,
                            attributes, local_names[id(method)])
        self._add_stores_from_outside(attributes)
        flags: frozenset[str] = frozenset()
        method_flags: dict[int, frozenset[str]] = {}
        for _ in range(8):  # locals feed attributes and attributes feed locals
            for method in methods:
                base = GuardKnowledge(flags, predicates | nested[id(method)], backends)
                method_flags[id(method)] = _flags_of(local_names[id(method)],
                                                     lambda _a, found, base=base: base.with_flags(found))
            new = _flags_of(attributes, lambda a, found, flags=flags: GuardKnowledge(
                flags | found | method_flags.get(a.scope, frozenset()),
                predicates | nested.get(a.scope, frozenset()), backends))
            if new == flags:
                break
            flags = new
        if any(_refuses_quantization(m, self._nothing) for m in methods if m.name == "__init__"):
            flags = flags | {"self"}  # every instance is unquantized (or of a named backend)
        for method in methods:
            self._by_function[id(method)] = GuardKnowledge(flags, predicates | nested[id(method)], backends)

    def _add_stores_from_outside(self, attributes: dict[str, list[_Assignment]]) -> None:
        """An attribute the class itself only ever sets to a false constant has handed the decision
        to other code: where this file turns it on (on an object of any class, the rule cannot
        always tell which), those values decide whether it is a flag (`mlp.fuse_act =
        supports(mlp.down_proj)`, a predicate's result, makes `self.fuse_act` one)."""
        if not any(all(is_falsy(a.value) for a in values) for values in attributes.values()):
            return  # no attribute only ever set false: nothing to extend (the stores need no walk of the file)
        if self._outside_stores is None:
            self._outside_stores = _stores_on_other_objects(self._tree)
        if _ANY_NAME in self._outside_stores:
            return
        for name, values in attributes.items():
            outside = self._outside_stores.get(name[len("self."):])
            if outside and all(is_falsy(a.value) for a in values):
                values.extend(outside)

    def of(self, fn: ast.AST | None) -> GuardKnowledge:
        """What is known in `fn` from its class and module (not yet its own local flags); None:
        outside any function, where nothing is known."""
        owner = self._owner(fn)
        if owner is not None:
            self._settle(owner)
        return self._by_function.get(id(fn), self._nothing)

    def in_function(self, fn: ast.AST) -> GuardKnowledge:
        """What is known in `fn`, its own local flags included."""
        known = self.of(fn).with_method_locals(method_locals(fn))
        return known.with_flags(function_flags(fn, known))


def _refuses_quantization(init: ast.FunctionDef | ast.AsyncFunctionDef, known: GuardKnowledge) -> bool:
    """`__init__` raises unless its quant method is unquantized (or of a backend it names): `if not
    isinstance(self.quant_method, UnquantizedLinearMethod): raise ...` (or an `assert` of the
    check)."""
    for stmt in init.body:
        if isinstance(stmt, ast.If) and implies_no_weight(stmt.test, None, known) and stmt.body \
                and isinstance(stmt.body[-1], ast.Raise):
            return True
        if isinstance(stmt, ast.Assert) and backend_check(stmt.test, known.backends):
            return True
    return False


def object_predicate_calls(fn) -> dict[str, tuple[ast.AST, str]]:
    """`"X.m"` -> (what builds X, "m") for each call `X.m(...)` in `fn` on a local `X` assigned
    once, from a call (`X = C(...)`, `X = get_kernel()`): the class it builds, or the one the
    function's return annotation names, may define `m` as a predicate (`kernel.can_run(layer)`
    false unless the layer's method is unquantized)."""
    assigned: dict[str, list[ast.expr | None]] = {}
    for node in walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name):
            assigned.setdefault(node.target.id, []).append(None)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.comprehension)):
            for bound in ast.walk(node.target if hasattr(node, "target") else node):
                if isinstance(bound, ast.Name) and isinstance(bound.ctx, ast.Store):
                    assigned.setdefault(bound.id, []).append(None)
    found: dict[str, tuple[ast.AST, str]] = {}
    for node in _deciding_method_calls(fn):
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):  # the first is always so
            values = assigned.get(func.value.id, [])
            if len(values) == 1 and isinstance(values[0], ast.Call) and dotted(values[0].func):
                found[f"{func.value.id}.{func.attr}"] = (values[0].func, func.attr)
    return found


def _deciding_method_calls(fn) -> list[ast.Call]:  # each one's `func` is an ast.Attribute
    """The calls `R.m(...)` in `fn` that decide something (a test, an operand of one, a value kept
    or returned) and are handed something to check: only those may be predicates worth resolving
    (resolving the receiver may read another module)."""
    deciding: list[ast.AST] = []
    for node in walk(fn):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            deciding.append(node.test)
        elif isinstance(node, ast.BoolOp):
            deciding.extend(node.values)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            deciding.append(node.operand)
        elif isinstance(node, (ast.Assign, ast.Return)) and node.value is not None:
            deciding.append(node.value)
    calls = []
    for node in deciding:
        if isinstance(node, ast.Subscript):
            node = node.value  # `x.check(L)[0]`
        if isinstance(node, ast.Call) and (node.args or node.keywords) and isinstance(node.func, ast.Attribute):
            calls.append(node)
    return calls


def attribute_predicate_calls(fn, self_name: str | None) -> dict[str, tuple[ast.expr, str]]:
    """`"self.a.m"` -> (`self.a`, "m") for each deciding call `self.a.m(...)` in `fn` on an
    attribute of its own object (`self.self_attn.can_fuse(x)`): the class the attribute holds may
    define `m` as a predicate."""
    found: dict[str, tuple[ast.expr, str]] = {}
    for node in _deciding_method_calls(fn):
        func = node.func
        if not isinstance(func, ast.Attribute):  # never: _deciding_method_calls keeps `R.m(...)` only
            continue
        receiver = root = func.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if receiver is not root and isinstance(root, ast.Name) and root.id == self_name \
                and (receiver_name := dotted(receiver)):
            name = f"self.{receiver_name[len(root.id) + 1:]}.{func.attr}"
            found[name] = (receiver, func.attr)
    return found

