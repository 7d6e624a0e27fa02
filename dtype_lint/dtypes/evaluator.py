"""A small abstract interpreter over `torch` dtypes: what does this code decide for each storage?

The linter must answer questions about code it does not run: does this guard cast the activation
to the weight's storage dtype? does this input-dtype helper ever return an integer dtype? is this
idiom the same decision as the helper? Running user code is out of the question (no torch, no
vLLM, no side effects), so the answer comes from evaluating the code's own AST over every case
that matters:

    storage of `layer.weight`: fp16, bf16, fp32, fp8 e4m3fn, fp8 e5m2, int32 (a repack into
    words), uint8 (4-bit codes), int8 (W8A8), or no `.weight` at all   ×   the fp8-input flag

(each container of the ecosystems' storage formats, dtypes/storage_formats.py). The layer's model
dtype attribute (each ecosystem names it: ecosystems/registry.py's `model_dtype_attributes`) is
bf16. Values are dtypes, booleans, None, strings, tuples/sets of those, the layer, its weight,
`torch` and `current_platform`. Anything else raises `Unsupported`: no answer is better than a wrong
one. A read of `.weight` on a layer that has none is the `AttributeError` outcome, as at run time.

Helpers are read "open" (`evaluate_helper`): what the interpreter cannot know (an import, the
layer's `quant_method`, `isinstance(...)`, a call into other code) is an `Unknown` value instead
of an error. A branch on an unknown condition is explored both ways (each unknown decided once
per path, so a path never takes `c` and `not c`), and a case's outcome is the set of what its
paths return: `"torch.float8_e4m3fn or None or unknown `qm.input_dtype`"`. Only the cases every
path agrees on are definite; `unsound_cases` reports those, `possibly_unsound_cases` the rest.
Guards (the idiom proof, DTL004) are read strictly: an unknown there is `Unsupported`.

Used by the idiom proof (truth_table.py), DTL004's rewrite offer, DTL005 (unsound helpers) and
fix safety; the helper template is evaluated from its generated source, never from a hand copy.
"""

from __future__ import annotations

import ast
from typing import Iterable

from dtype_lint.core.ast_walk import walk
from dtype_lint.core.records import record
from dtype_lint.dtypes.storage_formats import evaluated_storages, packed_storages
from dtype_lint.ecosystems.registry import model_dtype_attributes

FP8 = "float8_e4m3fn"
PARAMS = "bfloat16"  # the layer's model dtype (its model dtype attribute)
# Each container of the storage formats (dtypes/storage_formats.py), and no `.weight` (None).
STORAGES: tuple[str | None, ...] = evaluated_storages()
# Storages whose `.weight.dtype` is not the dtype the layer computes in.
PACKED: tuple[str | None, ...] = packed_storages()
FLOATS = {"float16", "bfloat16", "float32", "float64", FP8, "float8_e4m3fnuz", "float8_e5m2",
          "float8_e5m2fnuz"}
FP8_DTYPES = {FP8, "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"}
# Complex weights are data, not packed integers: a cast to their dtype is the layer's compute dtype.
COMPLEX = {"complex32", "complex64", "complex128"}
# The storages a fix must leave as the original `x.to(L.weight.dtype)` did: every one that is not
# packed, floating and complex, wider than a byte (`unpacked_disagreements`); fp8 too where the
# fix passes fp8_input=True. Evaluated only for that proof: the STORAGES above are what guards,
# DTL004 and DTL005 are judged on.
UNPACKED: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128")
_TORCH_DTYPES = FLOATS | COMPLEX | {"uint8", "int8", "int16", "int32", "int64", "bool"}
_TORCH_ALIASES = {"half": "float16", "float": "float32", "double": "float64", "int": "int32",
                  "long": "int64", "short": "int16"}
AFTER_ERROR = "AttributeError"  # outcome: `.weight` read on a layer without one


class Unsupported(Exception):
    """The code uses something this interpreter cannot evaluate: no answer."""


class _NoWeight(Exception):
    pass


@record(frozen=True)
class Dtype:
    """A torch dtype (`torch.<name>`) as the evaluator computes with it."""
    name: str

    @property
    def is_floating_point(self) -> bool:
        return self.name in FLOATS

    @property
    def is_complex(self) -> bool:
        return self.name in COMPLEX

    @property
    def is_packed(self) -> bool:
        return not self.is_floating_point

    def __str__(self) -> str:
        return f"torch.{self.name}"


@record(frozen=True)
class Layer:
    """A layer as the evaluator sees it: its weight's storage dtype, or no `.weight`."""
    storage: str | None  # None: no `.weight`


@record(frozen=True)
class Weight:
    """A layer's `.weight` tensor, as the evaluator sees it."""
    layer: Layer


class _Module:
    """`torch` or `current_platform`: named opaque values with known attributes."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


TORCH = _Module("torch")
PLATFORM = _Module("current_platform")
_RETURN = object()


class _Lazy:
    """A local alias, evaluated where it is read (a missing `.weight` raises there, as at run time)."""

    def __init__(self, expr: ast.expr):
        self.expr = expr


@record(frozen=True)
class Unknown:
    """A value the interpreter cannot know (open mode only), named by the code that made it."""

    what: str


class _Oracle:
    """Decides unknown conditions along one path: from a replayed prefix, then True; each unknown
    (by its text) once, so the path stays consistent."""

    def __init__(self, prefix: list[bool]):
        self.prefix = prefix
        self.taken: list[bool] = []
        self.memo: dict[str, bool] = {}

    def decide(self, key: str) -> bool:
        if key not in self.memo:
            i = len(self.taken)
            self.memo[key] = self.prefix[i] if i < len(self.prefix) else True
            self.taken.append(self.memo[key])
        return self.memo[key]


MAX_PATHS = 64


def explore(run) -> set[str]:
    """Every outcome of `run(oracle)` over all decisions of the unknown conditions it meets."""
    outcomes: set[str] = set()
    pending: list[list[bool]] = [[]]
    paths = 0
    while pending:
        prefix = pending.pop()
        paths += 1
        if paths > MAX_PATHS:
            raise Unsupported(f"more than {MAX_PATHS} paths")
        oracle = _Oracle(prefix)
        outcomes.add(run(oracle))
        for i in range(len(prefix), len(oracle.taken)):
            pending.append(oracle.taken[:i] + [not oracle.taken[i]])
    return outcomes


def outcome(value) -> str:
    """A decision as a comparable word: 'torch.<dtype>', 'None', 'AttributeError', or, in open
    mode, 'unknown `<expr>`'."""
    if value is None:
        return "None"
    if isinstance(value, Dtype):
        return str(value)
    if isinstance(value, Unknown):
        return f"unknown `{value.what}`"
    raise Unsupported(f"returns {value!r}, not a dtype or None")


def alternatives(value: str) -> tuple[str, ...]:
    """The outcomes one table entry joins ('a or b' -> ('a', 'b'))."""
    return tuple(value.split(" or "))


def _joined(outcomes: set[str]) -> str:
    return " or ".join(sorted(outcomes))


class _Raised(Exception):
    """A `raise`/failed `assert` in the evaluated code: an outcome, not an interpreter error."""

    def __init__(self, what: str):
        self.what = what


@record(frozen=True)
class Case:
    """One input of a truth table: the weight's storage and the fp8-input flag."""
    storage: str | None
    flag: bool

    def describe(self) -> str:
        w = "no `.weight`" if self.storage is None else f"{self.storage} storage"
        return f"{w}, fp8_input={self.flag}"


def cases(flags: Iterable[bool] = (False, True), storages: Iterable[str | None] = STORAGES) -> list[Case]:
    return [Case(s, f) for s in storages for f in flags]


class Interpreter:
    """Evaluates expressions and simple function bodies against one `Case`."""

    def __init__(self, case: Case, names: dict[str, object], globals_: "ModuleGlobals | None" = None,
                 layer_exprs: Iterable[str] = (), oracle: _Oracle | None = None,
                 dumps: dict[int, tuple[ast.AST, str]] | None = None):
        self.case = case
        self.layer = Layer(case.storage)
        self.names = dict(names)
        self.globals = globals_
        # ast.dump of expressions that denote the layer (`self.kv_b_proj`)
        self.layer_exprs = set(layer_exprs)
        # Their node types: a dump starts with the node's class name and "(", so a node of another
        # type is never one of them, and is not dumped (ev sees every node of the function).
        self._layer_types = {e.partition("(")[0] for e in self.layer_exprs}
        # id(node) -> (node, its dump), shared by the interpreters of one question (one per case
        # evaluate the same nodes): holding the node keeps its id from being reused meanwhile.
        self._dumps = {} if dumps is None else dumps
        # Open mode: unknowns are values, and branches on them are decided by the oracle.
        self.oracle = oracle

    @property
    def open(self) -> bool:
        return self.oracle is not None

    def _unknown(self, node: ast.AST) -> Unknown:
        if not self.open:
            raise Unsupported(ast.unparse(node))
        return Unknown(ast.unparse(node))

    def truth(self, value) -> bool:
        if isinstance(value, Unknown):
            return self.oracle.decide(value.what)  # type: ignore[union-attr]  # Unknowns exist in open mode only
        if isinstance(value, (Layer, Weight, _Module)):
            return True
        return bool(value)

    # ---- expressions -------------------------------------------------------------------------
    def ev(self, node: ast.AST):
        if type(node).__name__ in self._layer_types:
            kept = self._dumps.get(id(node))
            if kept is None or kept[0] is not node:
                kept = self._dumps[id(node)] = (node, ast.dump(node))
            if kept[1] in self.layer_exprs:
                return self.layer
        if isinstance(node, ast.Constant):
            if node.value is None or isinstance(node.value, (bool, str, int)):
                return node.value
            raise Unsupported(ast.unparse(node))
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Attribute):
            base = self.ev(node.value)
            if isinstance(base, Unknown):
                return Unknown(ast.unparse(node))
            return self._attribute(base, node.attr, node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.BoolOp):
            result = isinstance(node.op, ast.And)
            for value in node.values:
                result = self.ev(value)
                if isinstance(node.op, ast.And) and not self.truth(result):
                    return result
                if isinstance(node.op, ast.Or) and self.truth(result):
                    return result
            return result
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not self.truth(self.ev(node.operand))
        if isinstance(node, ast.IfExp):
            return self.ev(node.body) if self.truth(self.ev(node.test)) else self.ev(node.orelse)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.ev(e) for e in node.elts)
        if isinstance(node, ast.Set):
            return frozenset(self.ev(e) for e in node.elts)
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            return tuple(self._comprehension(node))
        if isinstance(node, ast.Compare):
            left = self.ev(node.left)
            for op, comp in zip(node.ops, node.comparators):
                right = self.ev(comp)
                if isinstance(left, Unknown) or isinstance(right, Unknown):
                    verdict = self.truth(self._unknown(node))
                else:
                    verdict = _compare(op, left, right, node)
                if not verdict:
                    return False
                left = right
            return True
        raise Unsupported(ast.unparse(node))

    def _name(self, name: str):
        if name in self.names:
            value = self.names[name]
            return self.ev(value.expr) if isinstance(value, _Lazy) else value
        if self.globals is not None:
            found, value = self.globals.lookup(name)
            if found:
                return value
            if self.open and self.globals.binds(name):
                return Unknown(name)
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        raise Unsupported(name)

    def _attribute(self, base, attr: str, node: ast.AST):
        if base is TORCH:
            attr = _TORCH_ALIASES.get(attr, attr)
            if attr in _TORCH_DTYPES:
                return Dtype(attr)
            raise Unsupported(ast.unparse(node))
        if isinstance(base, Layer):
            if attr == "weight":
                if base.storage is None:
                    raise _NoWeight()
                return Weight(base)
            if attr in model_dtype_attributes():
                return Dtype(PARAMS)
            return self._unknown(node)  # quant_method, input_size...: open mode only
        if isinstance(base, Weight) and attr == "dtype":
            return Dtype(base.layer.storage)  # type: ignore[arg-type]  # a Weight is made only with a storage
        if isinstance(base, Dtype):
            if attr == "is_floating_point":
                return base.is_floating_point
            if attr == "is_complex":
                return base.is_complex
            if attr == "itemsize":
                return 1 if base.name in FP8_DTYPES or base.name in ("uint8", "int8") else 2
        raise Unsupported(ast.unparse(node))

    def _call(self, node: ast.Call):
        callee = node.func
        if isinstance(callee, ast.Attribute) and callee.attr == "fp8_dtype" and not node.args:
            if self.ev(callee.value) is PLATFORM:
                return Dtype(FP8)
        if isinstance(callee, ast.Attribute) and callee.attr in ("is_floating_point", "is_complex") and not node.args:
            base = self.ev(callee.value)
            if isinstance(base, Dtype):
                return getattr(base, callee.attr)
        if isinstance(callee, ast.Name) and callee.id in ("getattr", "hasattr") and len(node.args) in (2, 3):
            obj, attr = self.ev(node.args[0]), self.ev(node.args[1])
            if not isinstance(attr, str):
                raise Unsupported(ast.unparse(node))
            if callee.id == "hasattr":
                try:
                    self._attribute(obj, attr, node)
                    return True
                except _NoWeight:
                    return False
            try:
                return self._attribute(obj, attr, node)
            except _NoWeight:
                if len(node.args) == 3:
                    return self.ev(node.args[2])
                raise
        if isinstance(callee, ast.Name) and callee.id in ("frozenset", "set", "tuple", "list") and len(node.args) <= 1:
            if not node.args:
                return ()
            value = self.ev(node.args[0])
            if isinstance(value, (tuple, frozenset)):
                return frozenset(value) if callee.id in ("frozenset", "set") else tuple(value)
        if isinstance(callee, ast.Name) and callee.id == "bool" and len(node.args) == 1:
            return self.truth(self.ev(node.args[0]))
        # isinstance(...), a call into other code: its value is unknown (open mode only).
        return self._unknown(node)

    def _comprehension(self, node):
        if len(node.generators) != 1 or node.generators[0].is_async:
            raise Unsupported(ast.unparse(node))
        gen = node.generators[0]
        if not isinstance(gen.target, ast.Name):
            raise Unsupported(ast.unparse(node))
        items = self.ev(gen.iter)
        if not isinstance(items, (tuple, frozenset)):
            raise Unsupported(ast.unparse(node))
        saved = self.names.get(gen.target.id, _RETURN)
        try:
            for item in items:
                self.names[gen.target.id] = item
                if all(self.truth(self.ev(cond)) for cond in gen.ifs):
                    yield self.ev(node.elt)
        finally:
            if saved is _RETURN:
                self.names.pop(gen.target.id, None)
            else:
                self.names[gen.target.id] = saved

    # ---- statements ---------------------------------------------------------------------------
    def run_body(self, body: list[ast.stmt]):
        """Execute statements; returns (_RETURN, value) on `return`, else None."""
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring
            if isinstance(stmt, ast.Pass):
                continue
            if isinstance(stmt, ast.Return):
                return _RETURN, (self.ev(stmt.value) if stmt.value is not None else None)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if stmt.value is None or not all(isinstance(t, ast.Name) for t in targets):
                    raise Unsupported(ast.unparse(stmt))
                value = self.ev(stmt.value)
                for target in targets:
                    if isinstance(target, ast.Name):  # every one is (checked above)
                        self.names[target.id] = value
                continue
            if isinstance(stmt, ast.If):
                done = self.run_body(stmt.body if self.truth(self.ev(stmt.test)) else stmt.orelse)
                if done is not None:
                    return done
                continue
            if self.open and isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    self.names[bound] = TORCH if alias.name == "torch" and not alias.asname else Unknown(bound)
                continue
            if self.open and isinstance(stmt, ast.Raise):
                exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
                raise _Raised(f"raise {ast.unparse(exc)}" if exc is not None else "raise")
            if self.open and isinstance(stmt, ast.Assert):
                if not self.truth(self.ev(stmt.test)):
                    raise _Raised("AssertionError")
                continue
            if self.open and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                continue  # logging and the like: no bearing on the returned dtype
            raise Unsupported(ast.unparse(stmt).splitlines()[0])
        return None


def _compare(op: ast.cmpop, a, b, node: ast.AST) -> bool:
    if isinstance(op, (ast.Eq, ast.Is)):
        return a == b if isinstance(op, ast.Eq) else (a is b if a is None or b is None else a == b)
    if isinstance(op, (ast.NotEq, ast.IsNot)):
        return not _compare(ast.Eq() if isinstance(op, ast.NotEq) else ast.Is(), a, b, node)
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(b, (tuple, frozenset)):
        return (a in b) == isinstance(op, ast.In)
    raise Unsupported(ast.unparse(node))


class ModuleGlobals:
    """The names a module binds that the interpreter understands: `torch`, `current_platform`,
    and module-level constants (evaluated on first use; a constant that cannot be evaluated is
    unknown, and so is any name the module does not bind that way)."""

    def __init__(self, module: ast.Module | None, imports: dict[str, str] | None = None):
        self._values: dict[str, object] = {}
        self._pending: dict[str, ast.expr] = {}
        self._imports = dict(imports or {})
        self._defs: set[str] = set()
        if module is not None:
            for stmt in module.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self._defs.add(stmt.name)
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    for alias in stmt.names:
                        target = alias.name if isinstance(stmt, ast.Import) else f"{stmt.module or ''}.{alias.name}"
                        self._imports[alias.asname or alias.name.split(".")[0]] = (
                            target if alias.asname or isinstance(stmt, ast.ImportFrom) else alias.name.split(".")[0])
                elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    self._pending[stmt.targets[0].id] = stmt.value
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                    self._pending[stmt.target.id] = stmt.value

    def binds(self, name: str) -> bool:
        """Does the module bind `name` at all (import, assignment, def, class)?"""
        return name in self._imports or name in self._pending or name in self._values or name in self._defs

    def lookup(self, name: str) -> tuple[bool, object]:
        if name in self._values:
            return True, self._values[name]
        target = self._imports.get(name)
        if target == "torch":
            return True, TORCH
        if target is not None and target.rsplit(".", 1)[-1] == "current_platform":
            return True, PLATFORM
        if name in self._pending:
            expr = self._pending.pop(name)
            try:
                value = Interpreter(Case(None, False), {}, self).ev(expr)
            except (Unsupported, _NoWeight, RecursionError):
                self._defs.add(name)  # bound, to something the interpreter cannot know
                return False, None
            self._values[name] = value
            return True, value
        return False, None


# ---- what the callers ask -----------------------------------------------------------------------

@record(frozen=True)
class Table:
    """A decision per case: 'torch.<dtype>', 'None', 'AttributeError', 'raise X', 'unknown `e`',
    or several of these joined by ' or ' when the case's paths disagree (open mode)."""

    rows: tuple[tuple[Case, str], ...]

    def get(self, case: Case) -> str:
        for c, v in self.rows:
            if c == case:
                return v
        raise KeyError(case)

    def as_dict(self) -> dict[Case, str]:
        return dict(self.rows)

    @property
    def flags(self) -> tuple[bool, ...]:
        return tuple(sorted({c.flag for c, _ in self.rows}))


@record(frozen=True)
class HelperShape:
    """A function of the input-dtype helper's shape: which parameter is the layer, which the flag."""

    layer_param: str
    flag_param: str | None
    other_params: tuple[str, ...] = ()


def helper_shape(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> HelperShape | None:
    """A function that takes a layer, reads that layer's weight dtype (`layer.weight.dtype`,
    `getattr(layer, "weight", ...)`, `hasattr(layer, "weight")`) or its model dtype attribute, and
    returns a value. Whether what it returns is a dtype or None is for `evaluate_helper` to say."""
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    if not params or len(params) > 3:
        return None
    layer = params[0]

    def is_layer(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == layer

    reads_weight = False
    # One walk through the child-field table (core/ast_walk.py), the same nodes as `ast.walk`:
    # its generators were most of this test, asked of every function a file's helper facts read.
    nodes, attributes = walk(fn), model_dtype_attributes()
    for node in nodes:
        if isinstance(node, ast.Attribute) and (node.attr == "weight" or node.attr in attributes) \
                and is_layer(node.value):
            reads_weight = True
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2 and is_layer(node.args[0]) and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value == "weight":
            reads_weight = True
        if reads_weight:
            break
    if not reads_weight or not any(isinstance(n, ast.Return) and n.value is not None for n in nodes):
        return None
    flag = params[1] if len(params) > 1 else None
    return HelperShape(layer, flag, tuple(params[2:]))


def evaluate_helper(fn: ast.FunctionDef | ast.AsyncFunctionDef, module: ast.Module | None,
                    shape: HelperShape | None = None, imports: dict[str, str] | None = None,
                    storages: Iterable[str | None] = STORAGES) -> Table:
    """The helper's decision for every case, evaluated open from its own AST: every path of
    every case (see the module docstring). Raises Unsupported when its code is beyond the
    interpreter even so."""
    shape = shape or helper_shape(fn)
    if shape is None:
        raise Unsupported(f"`{fn.name}` does not have the input-dtype helper's shape")
    globals_ = ModuleGlobals(module, imports)
    rows = []
    for case in cases((False, True) if shape.flag_param else (False,), storages):
        def run(oracle: _Oracle, case=case) -> str:
            names: dict[str, object] = {shape.layer_param: Layer(case.storage)}
            if shape.flag_param:
                names[shape.flag_param] = case.flag
            for other_param in shape.other_params:
                names[other_param] = Unknown(other_param)
            interp = Interpreter(case, names, globals_, oracle=oracle)
            try:
                done = interp.run_body(fn.body)
                return outcome(done[1] if done else None)
            except _NoWeight:
                return AFTER_ERROR
            except _Raised as error:
                return error.what

        rows.append((case, _joined(explore(run))))
    return Table(tuple(rows))


def evaluate_guarded_cast(guard: ast.expr | None, cast_dtype: ast.expr, layer: ast.expr,
                          aliases: dict[str, ast.expr], flag_name: str | None, flags: Iterable[bool],
                          globals_: ModuleGlobals | None = None,
                          storages: tuple[str | None, ...] = STORAGES) -> Table:
    """`if guard: x = x.to(cast_dtype)` as a decision: the dtype cast to, 'None' (no cast), or
    'AttributeError'. `aliases`: local names standing for expressions (`w_dtype = ...`)."""
    rows = []
    layer_dump = ast.dump(layer)
    dumps: dict[int, tuple[ast.AST, str]] = {}
    for flag in flags:
        for storage in storages:
            case = Case(storage, flag)
            names: dict[str, object] = {} if flag_name is None else {flag_name: flag}
            interp = Interpreter(case, names,
                                 globals_ or ModuleGlobals(None, {"torch": "torch",
                                                                  "current_platform": "current_platform"}),
                                 {layer_dump}, dumps=dumps)
            for name, value in aliases.items():
                interp.names[name] = _Lazy(value)
            try:
                taken = True if guard is None else interp.ev(guard)
                rows.append((case, outcome(interp.ev(cast_dtype)) if taken else "None"))
            except _NoWeight:
                rows.append((case, AFTER_ERROR))
    rows.sort(key=lambda r: (storages.index(r[0].storage), r[0].flag))
    return Table(tuple(rows))


def _unsound(case: Case, value: str, flagged: bool) -> bool:
    """An integer storage dtype (not a compute dtype); an AttributeError (`.weight` read on a layer
    without one); or, when the input may be fp8 (the flag is true), None for a packed storage:
    the fp8 activation is kept and reaches a layer whose kernel takes only fp16/bf16 input
    (a 4-bit format's input quantization, a W4A16/W8A16 kernel)."""
    if value == AFTER_ERROR:
        return True
    if flagged and case.flag and case.storage in PACKED and value == "None":
        return True
    return value.startswith("torch.") and value[len("torch."):] not in FLOATS | COMPLEX


def unsound_cases(table: Table) -> list[tuple[Case, str]]:
    """Cases where a helper is certainly wrong (every path of the case is; see `_unsound`)."""
    flagged = len(table.flags) > 1
    return [(case, value) for case, value in table.rows
            if all(_unsound(case, v, flagged) for v in alternatives(value))]


def possibly_unsound_cases(table: Table) -> list[tuple[Case, str]]:
    """Cases where some path, but not every one, is unsound (it depends on what the evaluator
    could not know: a quant method, an import)."""
    flagged = len(table.flags) > 1
    out = []
    for case, value in table.rows:
        bad = [_unsound(case, v, flagged) for v in alternatives(value)]
        if any(bad) and not all(bad):
            out.append((case, value))
    return out


def describe_case(case: Case, value: str, flagged: bool = True) -> str:
    """'int8 storage → returns torch.int8' (with the flag when the helper takes one and the two
    values of the flag decide differently)."""
    what = "raises AttributeError" if value == AFTER_ERROR else f"returns {value}"
    if value == "None" and case.flag:
        what += " (keeps the fp8 activation)"
    w = "no `.weight`" if case.storage is None else f"{case.storage} storage"
    return f"{w}{f', fp8_input={case.flag}' if flagged else ''} → {what}"


def summarize_cases(bad: list[tuple[Case, str]], flags: tuple[bool, ...] = (False, True)) -> list[str]:
    """One line per storage, naming the flag only when the storage is not wrong for every value of
    it alike: ['int8 storage → returns torch.int8']."""
    by_storage: dict[str | None, list[tuple[Case, str]]] = {}
    for case, value in bad:
        by_storage.setdefault(case.storage, []).append((case, value))
    out = []
    for rows in by_storage.values():
        if len(rows) == len(flags) and len({v for _, v in rows}) == 1:
            out.append(describe_case(rows[0][0], rows[0][1], flagged=False))
        else:
            out.extend(describe_case(c, v, flagged=len(flags) > 1) for c, v in rows)
    return out


def _guard_values(test: ast.expr, layer: ast.expr, aliases: dict[str, ast.expr],
                  unknown: bool | None, raised: bool | None) -> list[bool] | None:
    """The test's truth for each packed storage, or None when it cannot be evaluated. `unknown`:
    the value an operand of a top-level `and` that cannot be evaluated takes (True: it cannot make
    the chain false; None: such an operand makes the whole test unknown). `raised`: the value of a
    test that reads `.weight` on a layer without one: it raises there, so what it guards is not
    reached (`use_fast = L.weight.dtype == torch.bfloat16`: that read is the finding, DTL003), the
    value that says so (False for a guard the site runs under, True for an early exit); None: the
    test is then no guard at all (the read that raises is the site's own, reported with it)."""
    globals_ = ModuleGlobals(None, {"torch": "torch", "current_platform": "current_platform"})
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    out = []
    layer_dumps = {ast.dump(layer)}
    dumps: dict[int, tuple[ast.AST, str]] = {}
    for storage in PACKED:
        interp = Interpreter(Case(storage, False), {k: _Lazy(v) for k, v in aliases.items()}, globals_,
                             layer_dumps, dumps=dumps)
        value = True
        for part in parts:  # short-circuit, in order, as Python evaluates `and`
            try:
                value = bool(interp.ev(part))
            except Unsupported:
                if unknown is None:
                    return None
                value = unknown
            except _NoWeight:
                if raised is None:
                    return None
                value = raised
                break
            except RecursionError:
                return None
            if not value:
                break
        out.append(value)
    return out


def guard_excludes_packed(test: ast.expr, layer: ast.expr, aliases: dict[str, ast.expr],
                          raising_counts: bool = False) -> bool:
    """Is the test false for every packed storage of `layer` (so code it guards sees floats)?
    Operands of an `and` chain the evaluator cannot read (a kernel-support check) cannot make it
    true, so they are skipped. `raising_counts`: a test that raises for a storage (it reads a
    missing `.weight`) keeps the site from running there."""
    values = _guard_values(test, layer, aliases, unknown=True, raised=False if raising_counts else None)
    return values is not None and not any(values)


def guard_includes_packed(test: ast.expr, layer: ast.expr, aliases: dict[str, ast.expr],
                          raising_counts: bool = False) -> bool:
    """Is the test true for every packed storage of `layer` (an early exit that leaves floats)?"""
    values = _guard_values(test, layer, aliases, unknown=None, raised=True if raising_counts else None)
    return values is not None and all(values)
