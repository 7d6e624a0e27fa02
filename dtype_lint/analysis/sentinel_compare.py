"""A branch on a layer's storage dtype (DTL004's question): which comparisons test a weight's dtype
against a packed or quantized dtype (a sentinel: int32, uint8, int8, an fp8 dtype), the sentinels a
statement names, and the other parameters its test requires. Read from the code, the dtypes
through the dtype evaluator (module constants, `current_platform.fp8_dtype()`)."""

from __future__ import annotations

import ast
import re

from dtype_lint.analysis.flow.recognisers import WeightDtypeSource, weight_dtype_source
from dtype_lint.analysis.guard_engine.dominance import same_expression
from dtype_lint.analysis.index.class_facts import FunctionScope
from dtype_lint.dtypes.evaluator import FP8_DTYPES, Case, Dtype, Interpreter, ModuleGlobals, Unsupported

SENTINELS = frozenset({"int32", "uint8", "int8"} | FP8_DTYPES)


def required_params(stmt: ast.stmt, layer: ast.expr) -> frozenset[str]:
    """The layer's parameters, other than `weight`, an `if`'s test requires along with the storage
    test (`... and hasattr(L, "weight_scale_inv")`, `getattr(L, "weight_scale_inv", None) is not
    None`): operands of its top-level `and`."""
    test = getattr(stmt, "test", None)
    operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else []
    out = set()
    for operand in operands:
        call = operand
        if isinstance(operand, ast.Compare) and len(operand.ops) == 1 and isinstance(operand.ops[0], ast.IsNot) \
                and isinstance(operand.comparators[0], ast.Constant) and operand.comparators[0].value is None:
            call = operand.left
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id in ("hasattr", "getattr") and len(call.args) >= 2):
            continue
        if call.func.id == "getattr" and call is operand:
            continue  # `getattr(L, "x")` alone tests the value, not the presence
        name = call.args[1].value if isinstance(call.args[1], ast.Constant) else None
        if isinstance(name, str) and name != "weight" and same_expression(call.args[0], layer):
            out.add(name)
    return frozenset(out)


def sentinel_values(expr: ast.expr, globals_: ModuleGlobals) -> list[str] | None:
    """The packed/quantized dtypes `expr` holds (a dtype, or a tuple/set/list of them)."""
    try:
        value = Interpreter(Case(None, False), {}, globals_).ev(expr)
    except (Unsupported, RecursionError, Exception):  # noqa: BLE001 - whatever it cannot read is no sentinel
        return None
    values = value if isinstance(value, (tuple, frozenset)) else (value,)
    found = [v for v in values if isinstance(v, Dtype) and v.name in SENTINELS]
    return [_spell(expr, v) for v in found] or None


def _spell(expr: ast.expr, value: Dtype) -> str:
    text = ast.unparse(expr)
    return "current_platform.fp8_dtype()" if "fp8_dtype()" in text and value.name == "float8_e4m3fn" else str(value)


def sentinel_compare(node: ast.Compare, scope: FunctionScope, globals_: ModuleGlobals):
    operands = [node.left, *node.comparators]
    for i, op in enumerate(node.ops):
        if not isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)):
            continue
        a, b = operands[i], operands[i + 1]
        for storage, other in ((a, b), (b, a)):
            if isinstance(op, (ast.In, ast.NotIn)) and storage is b:
                continue  # `x in w.dtype` is not a membership test of the storage dtype
            wds = weight_dtype_source(storage, scope)
            if wds is None or wds.form == "tensor":
                continue
            sentinels = sentinel_values(other, globals_)
            if sentinels:
                return wds, sentinels
    return None


def all_sentinels(stmt: ast.stmt, wds: WeightDtypeSource, scope: FunctionScope, globals_) -> list[str]:
    """Every sentinel the statement's comparisons of this layer name, in order, once each."""
    layer = ast.dump(wds.layer)
    out: list[str] = []
    test = stmt.test if isinstance(stmt, (ast.If, ast.While)) else stmt
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            hit = sentinel_compare(node, scope, globals_)
            if hit and ast.dump(hit[0].layer) == layer:
                out += [s for s in hit[1] if s not in out]
    return out


def statement_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.stmt:
    while not isinstance(node, ast.stmt):
        node = parents[id(node)]
    return node


def is_test_code(path: str) -> bool:
    """A test module: `test_*.py` / `*_test.py`, or a file under a `test`/`tests` folder."""
    parts = path.replace("\\", "/").split("/")
    name = parts[-1]
    return name.startswith("test_") or name.endswith("_test.py") or any(p in ("test", "tests") for p in parts[:-1])


# What DTL004's pattern matches: a line naming a sentinel dtype (its functions are never blanked).
SENTINEL_WORDS = re.compile(r"\b(?:int32|uint8|int8|float8_e\w+|fp8_dtype)\b")


def may_compare_in_blanked(tree: ast.Module, text: str, imports: dict[str, str]) -> bool:
    """Might a function body blanked in the reduced tree `tree` of `text` (core/regions.py) hold
    a comparison `sentinel_compare` finds? Such a body names no sentinel dtype (else a line of it
    would match DTL004's pattern and it would be kept), so its sentinel can only be a name the
    module binds at its top level from a statement naming one (`PACKED = (torch.int32,
    torch.uint8)`, `from torch import int8 as I8`), and its storage side holds `dtype` (the
    attribute, or a local alias assigned from it in the same function). A body that is not ASCII
    may spell either in other characters."""
    from dtype_lint.analysis.weight_reads import blanked_bodies

    bodies = [body for body in blanked_bodies(tree, text) if not body.isascii() or "dtype" in body]
    if not bodies:
        return False
    names = {local for local, target in imports.items() if SENTINEL_WORDS.search(target)}
    lines = text.splitlines(keepends=True)  # (once: ast.get_source_segment splits the text per call)
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        # The statement's whole lines (a superset of its text: errs towards a name too many).
        if SENTINEL_WORDS.search("".join(lines[stmt.lineno - 1:stmt.end_lineno or stmt.lineno])):
            names |= {node.id for node in ast.walk(stmt)
                      if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
            names |= {(alias.asname or alias.name).split(".")[0] for node in ast.walk(stmt)
                      if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    if not names:
        return any(not body.isascii() for body in bodies)
    word = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b")
    return any(not body.isascii() or word.search(body) for body in bodies)
