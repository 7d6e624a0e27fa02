"""DTL003 unguarded-weight-access: `.weight` is read on a quantizable layer without a fallback.

## What it does
Flags reads of `L.weight` (and `getattr(L, "weight")` without a default) in forward-path code —
any function that is not storage code: quant methods, weight loaders, `create_weights` and
`process_weights_after_loading` are exempt — when `L` resolves to a quantizable layer (the same
resolution as DTL001: a configured class or a subclass found across the scanned files, or a layer
constructed with `quant_config=`), unless a guard dominates the read:
- an enclosing `if hasattr(L, "weight"):` (or its `else` after `if not hasattr(...)`), also as
  one operand of an `and`;
- a conditional expression `L.weight... if hasattr(L, "weight") else ...`;
- an earlier `if not hasattr(L, "weight"): return` (or `raise`, `continue`, `break`) in the same
  or an enclosing block;
- an enclosing `try:` with an `except AttributeError` (or a bare/`Exception` handler);
- a check of the layer's quant method, `isinstance(L.quant_method, UnquantizedLinearMethod)` (or
  `type(...) is`), or a flag only ever set from one — in any method of the class
  (`self.is_unquantized = isinstance(...)`, `self.use_fast = self.is_unquantized and ...`,
  `ok &= self.is_unquantized`) or in the function — used as any of the guards above;
- `w = getattr(L, "weight", None)` checked for None is not a `.weight` read at all.
A read that only feeds a cast or an allocation's dtype (`x.to(L.weight.dtype)`,
`torch.empty(n, dtype=L.weight.dtype)`, directly or through a local alias) is left to DTL001 and
DTL002, whose fixes route it through the helper, which handles a missing `.weight` too. The
message names the storages that have no `.weight`.

## Why is this bad?
Not every quantized layer has a `.weight`: AWQ and GPTQ layers store `qweight`, `qzeros` and
`scales`; compressed-tensors WNA16 stores `weight_packed` (linear layers and embeddings); GGUF
stores `qweight`. On those, `layer.weight` raises `AttributeError` (`nn.Module.__getattr__`).
vLLM's MLA crashed that way on AWQ/GPTQ DeepSeek checkpoints (PR #34695), in code that read
`self.kv_b_proj.weight.dtype` to choose a cast.

## Example
```python
if self.kv_b_proj.weight.dtype == torch.float8_e4m3fn:
    q = q.to(torch.float8_e4m3fn)
```

## Use instead
```python
weight = getattr(self.kv_b_proj, "weight", None)
if weight is not None and weight.dtype == torch.float8_e4m3fn:
    q = q.to(torch.float8_e4m3fn)
```
or, for the dtype an activation needs, the shared helper
(`get_layer_input_dtype(self.kv_b_proj, fp8_input)`), which handles a missing `.weight`.

## Fix safety
No automatic fix: what the code should do for a layer without `.weight` (skip a fast path, use
`params_dtype`, refuse the configuration) depends on what it reads the weight for. The finding
names the layer and how it resolved.

## Known limits
- `hasattr` guards are recognised on the same layer expression (`hasattr(self.kv_b_proj,
  "weight")`), not on an alias of it; a guard in a caller (a kernel's `apply` called only after
  its `can_run`) is not seen.
- A quant-method check counts whichever layer it names, and a flag counts when every assignment
  of it (in this class's methods, not its bases') is such a check: a flag also set elsewhere, or
  a check of a quant method other than an `Unquantized*` class (a kernel type, an fp8 scheme
  whose weight exists), is not seen.
- Reads in a class's own methods (`self.weight` inside a layer class) are reported like any other
  when the class is quantizable.
- Storage code is recognised by name (`exempt-functions`) and class (`exempt-classes`); a helper
  that prepares weights under another name is checked as forward-path code.
- The `.weight` of a layer reached through a container (`self.layers[i].weight`) resolves only
  when the container's element type is known.

## Options
The layer-resolution options of DTL001: `preset`, `quantizable`, `exempt-classes`,
`not-quantizable`, `exempt-functions`, `name-heuristics`, `name-patterns`.
"""

from __future__ import annotations

import ast

from dtype_lint.patterns import cast_dtype_args
from dtype_lint.rule import Invalid, Rule, RuleContext, Valid

_HEAD = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


class Attn:
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        self.kv_b_proj = kv_b_proj
"""
_NO_WEIGHT = "AWQ/GPTQ (`qweight`), compressed-tensors WNA16 (`weight_packed`) and GGUF layers have no `.weight`"
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_DTYPE_KEYWORDS = ("dtype", "out_dtype", "output_dtype")


class UnguardedWeightAccess(Rule):
    code = "DTL003"
    name = "unguarded-weight-access"
    summary = "`.weight` read on a quantizable layer with no `hasattr`/`getattr` fallback (AWQ/GPTQ have none)"
    patterns = (r"\.weight\b", r"getattr\(\s*[^,()]+,(?:\s|#[^\n]*)*[\"']weight[\"']\s*\)")
    facts = frozenset({"candidates", "layers"})

    VALID = [
        Valid(_HEAD + "    def f(self, q):\n        if hasattr(self.kv_b_proj, \"weight\"):\n"
              "            if self.kv_b_proj.weight.dtype == torch.float8_e4m3fn:\n                q = q.float()\n"
              "        return q\n"),
        Valid(_HEAD + "    def f(self, q):\n        if not hasattr(self.kv_b_proj, \"weight\"):\n            return q\n"
              "        for _ in range(2):\n            q = q * self.kv_b_proj.weight.shape[0]\n        return q\n"),
        Valid(_HEAD + "    def f(self):\n        return self.kv_b_proj.weight.shape if hasattr(self.kv_b_proj, \"weight\") else None\n"),
        Valid(_HEAD + "    def f(self):\n        w = getattr(self.kv_b_proj, \"weight\", None)\n"
              "        return w is not None and w.dtype == torch.int8\n"),
        Valid(_HEAD + "    def f(self, q):\n        try:\n            n = self.kv_b_proj.weight.shape[0]\n"
              "        except AttributeError:\n            n = 0\n        return n\n"),
        Valid(_HEAD + "    def f(self):\n        return hasattr(self.kv_b_proj, \"weight\") and self.kv_b_proj.weight.is_contiguous()\n"),
        # A flag only ever set from an unquantized check, through a local `&=`.
        Valid("from vllm.model_executor.layers.linear import ReplicatedLinear, UnquantizedLinearMethod\n"
              "class Gate(ReplicatedLinear):\n    def __init__(self, n, quant_config):\n"
              "        super().__init__(n, n, quant_config=quant_config)\n"
              "        self.is_unquantized = isinstance(self.quant_method, UnquantizedLinearMethod)\n"
              "        fast = n % 8 == 0\n        fast &= self.is_unquantized\n        self.use_fast = fast\n"
              "    def forward(self, x):\n        if not self.use_fast:\n            return super().forward(x)\n"
              "        return x @ self.weight.t()\n"),
        # Storage code owns the format.
        Valid(_HEAD + "    def process_weights_after_loading(self):\n        self.kv_b_proj.weight.data.mul_(2)\n"),
        # DTL001's site: its fix handles the missing `.weight`.
        Valid(_HEAD + "    def f(self, x):\n        w = self.kv_b_proj.weight.dtype\n        return x.to(w)\n",
              ),
        # Plain torch layers always have `.weight`.
        Valid("from torch import nn\nclass V(nn.Module):\n    def __init__(self):\n        self.proj = nn.Linear(2, 2)\n"
              "    def f(self):\n        return self.proj.weight.t()\n"),
    ]
    INVALID = [
        Invalid(_HEAD + "    def f(self, q):\n        if self.kv_b_proj.weight.dtype == torch.float8_e4m3fn:\n"
                "            q = q.float()\n        return q\n",
                message_contains=("self.kv_b_proj.weight", "AWQ/GPTQ")),
        Invalid(_HEAD + "    def f(self, x):\n        return torch.matmul(x, self.kv_b_proj.weight.t())\n"),
        Invalid(_HEAD + "    def f(self):\n        return getattr(self.kv_b_proj, \"weight\").shape\n"),
        # A guard on another layer does not count; the early return comes after the read.
        Invalid(_HEAD + "    def f(self, other, q):\n        if hasattr(other, \"weight\"):\n"
                "            q = q * self.kv_b_proj.weight.shape[0]\n        return q\n"),
        # A flag that is also set from something else says nothing about the quant method.
        Invalid("from vllm.model_executor.layers.linear import ReplicatedLinear, UnquantizedLinearMethod\n"
                "class Gate(ReplicatedLinear):\n    def __init__(self, n, quant_config):\n"
                "        super().__init__(n, n, quant_config=quant_config)\n"
                "        self.use_fast = isinstance(self.quant_method, UnquantizedLinearMethod)\n"
                "    def enable(self):\n        self.use_fast = True\n"
                "    def forward(self, x):\n        if self.use_fast:\n            return x @ self.weight.t()\n"
                "        return super().forward(x)\n"),
        Invalid(_HEAD + "    def f(self, q):\n        n = self.kv_b_proj.weight.shape[0]\n"
                "        if not hasattr(self.kv_b_proj, \"weight\"):\n            return q\n        return q * n\n"),
    ]

    def check(self, ctx: RuleContext) -> None:
        class_flags = _ClassFlags(ctx.tree)
        for c in ctx.candidates:
            known = class_flags.of(c.fn)
            flags = known | _local_flags(c, known)
            for node in c.nodes:
                layer = _weight_read(node)
                if layer is None:
                    continue
                if _feeds_dtype_site(node, c) or _guarded(node, layer, c.parents, flags):
                    continue
                verdict = ctx.layer_verdict(layer, c.scope)
                if verdict is None:
                    continue
                confidence, evidence = verdict
                text = ast.unparse(layer)
                ctx.report(node, f"`{text}.weight` is read with no `hasattr`/`getattr` fallback; {_NO_WEIGHT}, "
                           f"so this raises AttributeError on them: guard it with `hasattr({text}, \"weight\")` "
                           f"or read `getattr({text}, \"weight\", None)`",
                           scope=c.scope_name, confidence=confidence, evidence=evidence,
                           no_fix_reason="what a layer without `.weight` should do here depends on why it is read")


def _weight_read(node: ast.AST) -> ast.expr | None:
    """The layer of `L.weight` (a load) or `getattr(L, "weight")` (no default)."""
    if isinstance(node, ast.Attribute) and node.attr == "weight" and isinstance(node.ctx, ast.Load):
        return node.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 2 and not node.keywords and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == "weight"):
        return node.args[0]
    return None


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a).replace("Store()", "Load()") == ast.dump(b).replace("Store()", "Load()")


def _is_hasattr(test: ast.AST, layer: ast.AST) -> bool:
    return (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr"
            and len(test.args) == 2 and isinstance(test.args[1], ast.Constant) and test.args[1].value == "weight"
            and _same(test.args[0], layer))


def _unquantized_check(test: ast.AST) -> bool:
    """`isinstance(X.quant_method, UnquantizedLinearMethod)` (a tuple of Unquantized* too), or
    `type(X.quant_method) is Unquantized*`: the layer keeps its plain `.weight`."""
    def unquantized_names(node: ast.AST) -> bool:
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        return bool(elts) and all("Unquantized" in (ast.unparse(e).rsplit(".", 1)[-1]) for e in elts)

    def quant_method(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "quant_method"

    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" \
            and len(test.args) == 2 and quant_method(test.args[0]):
        return unquantized_names(test.args[1])
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.Eq)):
        left = test.left
        return (isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "type"
                and len(left.args) == 1 and quant_method(left.args[0]) and unquantized_names(test.comparators[0]))
    return False


def _implies_weight(test: ast.AST, layer: ast.AST, flags: frozenset[str] = frozenset()) -> bool:
    """`test` true ⇒ L has `.weight`: `hasattr(L, "weight")`, an unquantized check of a quant
    method, or a flag only ever set from one; as the test or one of its `and`s."""
    if _is_hasattr(test, layer) or _unquantized_check(test):
        return True
    if isinstance(test, (ast.Name, ast.Attribute)) and ast.unparse(test) in flags:
        return True
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(
        _implies_weight(v, layer, flags) for v in test.values)


def _implies_no_weight(test: ast.AST, layer: ast.AST, flags: frozenset[str] = frozenset()) -> bool:
    """`test` false ⇒ L has `.weight`: the negation of a guard, alone or in an `or`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _implies_weight(test.operand, layer, flags)
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(
        _implies_no_weight(v, layer, flags) for v in test.values)


def _flag_value(value: ast.AST | None, flags: frozenset[str]) -> bool:
    """A value that, when true, says the layer is unquantized (or a constant false/None)."""
    if value is None:
        return False
    if isinstance(value, ast.Constant) and not value.value:
        return True
    return _implies_weight(value, ast.Constant(None), flags)


class _Assign:
    """One assignment to a would-be flag: its value, whether it is `&=`, and the tests of the
    `if`s whose body holds it (an assignment made only when a guard holds is a guarded value)."""

    __slots__ = ("value", "anded", "tests")

    def __init__(self, value, anded, tests):
        self.value, self.anded, self.tests = value, anded, tests

    def flag(self, flags: frozenset[str]) -> bool:
        return _flag_value(self.value, flags) or any(_implies_weight(t, ast.Constant(None), flags) for t in self.tests)


def _collect(body: list[ast.stmt], self_name: str | None, attrs: dict, local: dict, tests: tuple = ()) -> None:
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        targets: list[tuple[ast.AST, ast.AST, bool]] = []
        if isinstance(stmt, ast.Assign):
            targets = [(t, stmt.value, False) for t in stmt.targets]
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets = [(stmt.target, stmt.value, False)]
        elif isinstance(stmt, ast.AugAssign):
            targets = [(stmt.target, stmt.value, isinstance(stmt.op, ast.BitAnd))]
        for target, value, anded in targets:
            a = _Assign(value, anded, tests)
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == self_name:
                attrs.setdefault(f"self.{target.attr}", []).append(a)
            elif isinstance(target, ast.Name):
                local.setdefault(target.id, []).append(a)
            elif isinstance(target, (ast.Tuple, ast.List)):
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        local.setdefault(n.id, []).append(_Assign(None, False, ()))
        if isinstance(stmt, ast.If):
            _collect(stmt.body, self_name, attrs, local, tests + (stmt.test,))
            _collect(stmt.orelse, self_name, attrs, local, tests)
        else:
            for field in ("body", "orelse", "finalbody"):
                _collect(getattr(stmt, field, None) or [], self_name, attrs, local, tests)
            for h in getattr(stmt, "handlers", None) or []:
                _collect(h.body, self_name, attrs, local, tests)
            if isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
                for n in ast.walk(stmt.target if isinstance(stmt, (ast.For, ast.AsyncFor)) else stmt):
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        local.setdefault(n.id, []).append(_Assign(None, False, ()))


def _flags_of(assigns: dict[str, list[_Assign]], known: frozenset[str], prefix: str = "") -> frozenset[str]:
    """Names whose every assignment is a flag value; `x &= <flag>` makes `x` one whatever it was."""
    flags = set(known)
    changed = True
    while changed:
        changed = False
        for name, values in assigns.items():
            key = prefix + name
            if key in flags:
                continue
            now = frozenset(flags)
            anded = [a for a in values if a.anded]
            if (anded and any(a.flag(now) for a in anded)) or (not anded and all(a.flag(now) for a in values)):
                flags.add(key)
                changed = True
    return frozenset(flags)


class _ClassFlags:
    """Per class of the file: `self.X` attributes only ever set to an unquantized check, a value
    derived from one, or false, in any method (`self.is_unquantized = isinstance(self.quant_method,
    UnquantizedLinearMethod)`, `self.allow_fast = self.is_unquantized and ...`, `ok &= ...`)."""

    def __init__(self, tree: ast.Module):
        self._by_fn: dict[int, frozenset[str]] = {}
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            methods = [m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
            attrs: dict[str, list[_Assign]] = {}
            locals_: list[dict[str, list[_Assign]]] = []
            for m in methods:
                local: dict[str, list[_Assign]] = {}
                _collect(m.body, m.args.args[0].arg if m.args.args else None, attrs, local)
                locals_.append(local)
            flags: frozenset[str] = frozenset()
            for _ in range(8):  # locals feed attributes and attributes feed locals
                with_locals = set(flags)
                for local in locals_:
                    with_locals |= _flags_of(local, flags) - flags
                new = _flags_of(attrs, frozenset(with_locals)) & frozenset(k for k in attrs) | flags
                if new == flags:
                    break
                flags = new
            for m in methods:
                self._by_fn[id(m)] = flags

    def of(self, fn: ast.AST) -> frozenset[str]:
        return self._by_fn.get(id(fn), frozenset())


def _local_flags(c, known: frozenset[str]) -> frozenset[str]:
    local: dict[str, list[_Assign]] = {}
    _collect(c.fn.body, None, {}, local)
    return _flags_of(local, known)


def _catches_attribute_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("AttributeError", "Exception", "BaseException") for n in names)


def _guarded(node: ast.AST, layer: ast.AST, parents: dict[int, ast.AST], flags: frozenset[str]) -> bool:
    """A guard (see `_implies_weight`) dominates the read: an enclosing `if`/conditional, an
    earlier operand of `and`, an earlier `if not <guard>: return`, or a `try` that catches it."""
    child, parent = node, parents.get(id(node))
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)):
            if child in _as_list(parent.body) and _implies_weight(parent.test, layer, flags):
                return True
            if child in _as_list(parent.orelse) and _implies_no_weight(parent.test, layer, flags):
                return True
        elif isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            idx = next(i for i, v in enumerate(parent.values) if v is child)
            if any(_implies_weight(v, layer, flags) for v in parent.values[:idx]):
                return True
        elif isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or):
            idx = next(i for i, v in enumerate(parent.values) if v is child)
            if any(_implies_no_weight(v, layer, flags) for v in parent.values[:idx]):
                return True
        elif isinstance(parent, (ast.Try, getattr(ast, "TryStar", ast.Try))) and child in parent.body:
            if any(_catches_attribute_error(h) for h in parent.handlers):
                return True
        if isinstance(child, ast.stmt):
            for block in _blocks(parent):
                if child in block:
                    for earlier in block[: block.index(child)]:
                        if (isinstance(earlier, ast.If) and _implies_no_weight(earlier.test, layer, flags)
                                and earlier.body and isinstance(earlier.body[-1], _EXITS)):
                            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
        child, parent = parent, parents.get(id(parent))
    return False


def _as_list(x) -> list:
    return x if isinstance(x, list) else [x]


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    out = [getattr(node, f, None) for f in ("body", "orelse", "finalbody")]
    out += [h.body for h in getattr(node, "handlers", None) or []]
    out += [c.body for c in getattr(node, "cases", None) or []]
    return [b for b in out if isinstance(b, list)]


def _feeds_dtype_site(node: ast.AST, c) -> bool:
    """`L.weight.dtype` used as a cast's or an allocation's dtype, directly or through a local name
    (DTL001/DTL002 report those, and their fixes handle a missing `.weight`)."""
    parents = c.parents
    up = parents.get(id(node))
    if not (isinstance(up, ast.Attribute) and up.attr == "dtype"):
        return _is_cast_arg(node, parents)  # `.to(L.weight)`
    expr: ast.AST = up
    while True:
        parent = parents.get(id(expr))
        if isinstance(parent, (ast.IfExp, ast.BoolOp)) or (isinstance(parent, ast.keyword)):
            if isinstance(parent, ast.keyword):
                call = parents.get(id(parent))
                return isinstance(call, ast.Call) and (parent.arg in _DTYPE_KEYWORDS or parent.value in cast_dtype_args(call))
            expr = parent
            continue
        break
    if _is_cast_arg(expr, parents):
        return True
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        return bool(names) and _name_feeds_dtype_site(names, c)
    return False


def _is_cast_arg(expr: ast.AST, parents) -> bool:
    call = parents.get(id(expr))
    return isinstance(call, ast.Call) and any(a is expr for a in cast_dtype_args(call))


def _name_feeds_dtype_site(names: set[str], c) -> bool:
    for sub in ast.walk(c.fn):
        if not isinstance(sub, ast.Call):
            continue
        args = list(cast_dtype_args(sub)) + [k.value for k in sub.keywords if k.arg in _DTYPE_KEYWORDS]
        if any(isinstance(n, ast.Name) and n.id in names for a in args for n in ast.walk(a)):
            return True
    return False
