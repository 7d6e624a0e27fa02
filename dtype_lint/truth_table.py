"""Prove a guarded-cast idiom equivalent to the shared helper before rewriting it (DESIGN.md §4).

The old code is `alias = <weight dtype, maybe with a hasattr fallback>; if <guard>: x = x.to(<dtype>)`.
We evaluate the guard and the cast target symbolically, with no torch and no user code run, over
every weight storage {fp16, bf16, fp32, fp8, uint8, int32, int8, no `.weight`} × the flag, and
compare with the helper's answer. They must agree on every unpacked storage; on the packed ones
(int32 Marlin, uint8 NVFP4, int8, no `.weight`) the helper's answer is the fix.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

FP8 = "float8_e4m3fn"
PARAMS = "bfloat16"  # the layer's params_dtype in the model
STORAGES = ("float16", "bfloat16", "float32", FP8, "uint8", "int32", "int8", None)
PACKED = ("uint8", "int32", "int8", None)
_TORCH_DTYPES = {"float16", "half", "bfloat16", "float32", "float", "float64", "double", FP8,
                 "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "uint8", "int8", "int16", "int32", "int64"}
_ALIASES = {"half": "float16", "float": "float32", "double": "float64"}


class Unsupported(Exception):
    """The expression uses something we cannot evaluate symbolically: no proof."""


class _NoWeight(Exception):
    pass


@dataclass(frozen=True)
class Dtype:
    name: str


@dataclass
class FakeLayer:
    storage: str | None

    @property
    def weight_dtype(self):
        if self.storage is None:
            raise _NoWeight()
        return Dtype(self.storage)


def helper_answer(storage: str | None, flag: bool) -> str | None:
    """The shared helper's decision (DESIGN.md §3)."""
    if storage is None or storage == "int32":
        return PARAMS
    if storage == "uint8":
        return None
    if storage in ("int8", "int16", "int64"):
        return PARAMS
    if storage == FP8 and not flag:
        return None
    return storage


@dataclass(frozen=True)
class Row:
    storage: str | None
    flag: bool
    old: str  # "cast:<dtype>" | "keep" | "AttributeError"
    new: str
    agrees: bool


class _Eval:
    def __init__(self, layer_dump: str, layer: FakeLayer, aliases: dict[str, ast.expr], flag_name: str | None, flag: bool):
        self.layer_dump = layer_dump
        self.layer = layer
        self.aliases = aliases
        self.flag_name = flag_name
        self.flag = flag

    def ev(self, node: ast.AST):
        if ast.dump(node) == self.layer_dump:
            return self.layer
        if isinstance(node, ast.Constant) and node.value in (None, True, False):
            return node.value
        if isinstance(node, ast.Name):
            if node.id == self.flag_name:
                return self.flag
            if node.id in self.aliases:
                return self.ev(self.aliases[node.id])
            if node.id == "torch":
                return "torch"
            if node.id == "current_platform":
                return "platform"
            raise Unsupported(node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr in _TORCH_DTYPES:
                return Dtype(_ALIASES.get(node.attr, node.attr))
            base = self.ev(node.value)
            if isinstance(base, FakeLayer) and node.attr == "weight":
                if base.storage is None:
                    raise _NoWeight()
                return ("weight", base)
            if isinstance(base, FakeLayer) and node.attr == "params_dtype":
                return Dtype(PARAMS)
            if isinstance(base, tuple) and base[0] == "weight" and node.attr == "dtype":
                return base[1].weight_dtype
            raise Unsupported(ast.unparse(node))
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Attribute) and fn.attr == "fp8_dtype" and self.ev(fn.value) == "platform":
                return Dtype(FP8)
            if isinstance(fn, ast.Name) and fn.id in ("hasattr", "getattr") and len(node.args) >= 2:
                obj = self.ev(node.args[0])
                if not (isinstance(obj, FakeLayer) and isinstance(node.args[1], ast.Constant)
                        and node.args[1].value == "weight"):
                    raise Unsupported(ast.unparse(node))
                if fn.id == "hasattr":
                    return obj.storage is not None
                if obj.storage is None:
                    if len(node.args) == 3:
                        return self.ev(node.args[2])
                    raise _NoWeight()
                return ("weight", obj)
            raise Unsupported(ast.unparse(node))
        if isinstance(node, ast.BoolOp):
            vals = node.values
            if isinstance(node.op, ast.And):
                result = True
                for v in vals:
                    result = self.ev(v)
                    if not result:
                        return result
                return result
            result = False
            for v in vals:
                result = self.ev(v)
                if result:
                    return result
            return result
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not self.ev(node.operand)
        if isinstance(node, ast.IfExp):
            return self.ev(node.body) if self.ev(node.test) else self.ev(node.orelse)
        if isinstance(node, ast.Tuple):
            return tuple(self.ev(e) for e in node.elts)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = self.ev(node.left), self.ev(node.comparators[0])
            op = node.ops[0]
            if isinstance(op, (ast.Eq, ast.Is)):
                return a == b
            if isinstance(op, (ast.NotEq, ast.IsNot)):
                return a != b
            if isinstance(op, ast.In) and isinstance(b, tuple):
                return a in b
            if isinstance(op, ast.NotIn) and isinstance(b, tuple):
                return a not in b
        raise Unsupported(ast.unparse(node))


def prove_guarded_cast(guard: ast.expr, cast_dtype: ast.expr, layer: ast.expr,
                       aliases: dict[str, ast.expr], flag_name: str | None, flag_default: bool) -> tuple[bool, list[Row], str]:
    """(proven, truth table, reason when not proven)."""
    rows: list[Row] = []
    flags = (False, True) if flag_name else (flag_default,)
    layer_dump = ast.dump(layer)
    for storage in STORAGES:
        for flag in flags:
            ev = _Eval(layer_dump, FakeLayer(storage), aliases, flag_name, flag)
            try:
                try:
                    if ev.ev(guard):
                        target = ev.ev(cast_dtype)
                        if not isinstance(target, Dtype):
                            raise Unsupported(ast.unparse(cast_dtype))
                        old = f"cast:{target.name}"
                    else:
                        old = "keep"
                except _NoWeight:
                    old = "AttributeError"
            except Unsupported as e:
                return False, rows, f"cannot evaluate `{e}` symbolically"
            answer = helper_answer(storage, flag)
            new = "keep" if answer is None else f"cast:{answer}"
            rows.append(Row(storage, flag, old, new, old == new))
    bad = [r for r in rows if not r.agrees and r.storage not in PACKED]
    if bad:
        r = bad[0]
        return False, rows, (f"the guard disagrees with the helper for a {r.storage} weight with flag={r.flag} "
                             f"(old: {r.old}, helper: {r.new})")
    return True, rows, ""
