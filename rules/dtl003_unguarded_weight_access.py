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
  `type(...) is`, or on `getattr(L, "quant_method", None)`), used as any of the guards above;
- a predicate: a function (of the module, nested in the function, a method of the class, or
  imported from the project) whose every true or non-None result is itself such a check or is
  returned only after one (`if weight is None: return False` with `weight = getattr(L,
  "weight", None)`);
- a flag: a name or `self.X` attribute only ever set, in the function or in any method of the
  class, to such a check, a predicate's result, `getattr(L, "weight", None)`, `hasattr(...)`, a
  value assigned only where such a check holds, or false (`self.is_unquantized = isinstance(...)`,
  `self.use_fast = self.is_unquantized and ...`, `ok &= self.is_unquantized`, `self._scale =
  prep(layer)`), tested as `flag`, `flag is not None`, or in the negations above;
- for `self.weight` in a layer class's own methods: an `__init__` that raises (or asserts) unless
  its quant method is unquantized;
- `w = getattr(L, "weight", None)` checked for None is not a `.weight` read at all.
Not reported either: a read of a parameter of a private function or method (`_f`) when every
call of it in the file passes a layer that is never quantized (the engine's verdict on the
argument, followed through callers that pass their own parameter on); a wrapper's `weight`
property returning its base layer's `.weight` (it raises exactly when the base has none, so
`hasattr(wrapper, "weight")` stays right); and a read that only feeds a cast's or an
allocation's dtype (`x.to(L.weight.dtype)`, `torch.empty(n, dtype=L.weight.dtype)`, directly,
through a local alias or `typing.cast`, returned by a dtype getter, or a weight handed to a
function that casts with it), which DTL001 and DTL002 report, and whose fixes handle a missing
`.weight` too. The message names the storages that have no `.weight`.

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
  "weight")`), not on an alias of it. A guard in a caller (a fast path called only under a flag,
  a kernel's `apply` called only after its `can_run`), or state set by another module, is not
  seen: on vLLM 0.33.0, 6 of the 9 false findings among 29 are such
  (docs/triage/rules-dtl003-005.md judges each finding there and on 0.27.1, 38 of 39 true).
- A quant-method check (and a `hasattr` in a flag's value) counts whichever layer it names, and a
  flag counts when every assignment
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
import os

from dtype_lint.layers import NONE
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
    facts = frozenset({"candidates", "functions", "layers", "flows"})

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
        # A predicate imported or defined in the module, through a flag and `is not None`.
        Valid(_HEAD + "def ready(layer):\n    weight = getattr(layer, 'weight', None)\n"
              "    if weight is None or weight.dtype != torch.bfloat16:\n        return False\n    return True\n"
              "def prep(layer):\n    w = getattr(layer, 'weight', None)\n    if w is None:\n        return None\n"
              "    return w.abs().amax()\n"
              "class Block(Attn):\n    def __init__(self, kv_b_proj: ColumnParallelLinear):\n"
              "        super().__init__(kv_b_proj)\n        self.fast = ready(self.kv_b_proj)\n"
              "        self._scale = None\n    def load(self):\n        self._scale = prep(self.kv_b_proj)\n"
              "    def forward(self, x):\n        if self.fast:\n            x = x @ self.kv_b_proj.weight.t()\n"
              "        if self._scale is not None:\n            x = x * self.kv_b_proj.weight.shape[0]\n        return x\n"),
        # A private helper whose every caller passes a layer built without a quantization config.
        Valid("from vllm.model_executor.layers.linear import ReplicatedLinear\n"
              "def _res(proj: ReplicatedLinear, x):\n    return x @ proj.weight.t()\n"
              "class Block:\n    def __init__(self):\n        self.res_proj = ReplicatedLinear(8, 1, quant_config=None)\n"
              "    def forward(self, x):\n        return _res(self.res_proj, x)\n"),
        # An annotated attribute: its construction (here without a config) says more than `X | None`.
        Valid("from vllm.model_executor.layers.linear import ReplicatedLinear\n"
              "class Pool(ReplicatedLinear):\n    pass\n"
              "class Block:\n    def __init__(self):\n"
              "        self.pooler: Pool | None = Pool(8, 8, quant_config=None)\n"
              "    def _cols(self, layer: Pool, x):\n        return x @ layer.weight.t()\n"
              "    def forward(self, x):\n        return self.pooler.weight.sum() + self._cols(self.pooler, x)\n"),
        # A wrapper forwarding its base layer's `.weight`.
        Valid(_HEAD + "class WithLoRA:\n    def __init__(self, base: ColumnParallelLinear):\n        self.base = base\n"
              "    @property\n    def weight(self):\n        return self.base.weight\n"),
        # A layer class that refuses quantization in its __init__.
        Valid("import torch\nfrom vllm.model_executor.layers.linear import QKVParallelLinear, UnquantizedLinearMethod\n"
              "class Fused(QKVParallelLinear):\n    def __init__(self, quant_config):\n"
              "        super().__init__(8, 2, 4, quant_config=quant_config)\n"
              "        if not isinstance(self.quant_method, UnquantizedLinearMethod):\n"
              "            raise ValueError('cannot be quantized')\n"
              "    def forward(self, x):\n        return torch.nn.functional.linear(x, self.weight)\n"),
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
        class_flags = _ClassFlags(ctx.tree, _imported_predicates(ctx))
        by_name = _CallSites(ctx)
        for c in ctx.candidates:
            known = class_flags.of(c.fn)
            flags = known.with_flags(_function_flags(c.fn, known))
            for node in c.nodes:
                layer = _weight_read(node)
                if layer is None:
                    continue
                if _feeds_dtype_site(node, c) or _guarded(node, layer, c.parents, flags) or _flows_on(ctx, node, c):
                    continue
                if c.fn.name == "weight" and isinstance(c.parents.get(id(node)), ast.Return):
                    continue  # a wrapper's `weight` property forwarding its base's: raises exactly as the base
                if "self" in flags.flags and isinstance(layer, ast.Name) and layer.id == c.scope.self_name:
                    continue  # a layer class whose __init__ refuses quantization
                # The engine's verdict also drops reads dominated by a check that proves the layer
                # unquantized (a quant-method dispatch, a storage test).
                verdict = ctx.layer_verdict(layer, c, site=node)
                if verdict is not None and _callers_pass_unquantized(ctx, c, layer, by_name):
                    continue
                if verdict is None:
                    continue
                confidence, evidence = verdict
                text = ast.unparse(layer)
                ctx.report(node, f"`{text}.weight` is read with no `hasattr`/`getattr` fallback; {_NO_WEIGHT}, "
                           f"so this raises AttributeError on them: guard it with `hasattr({text}, \"weight\")` "
                           f"or read `getattr({text}, \"weight\", None)`",
                           scope=c.scope_name, confidence=confidence, evidence=evidence,
                           no_fix_reason="what a layer without `.weight` should do here depends on why it is read")


_PREDICATES: dict[tuple, frozenset[str]] = {}  # (path, mtime, size) -> the module's predicate functions


def _imported_predicates(ctx: RuleContext) -> frozenset[str]:
    """Names this file imports that are predicates in their own (project) module, e.g.
    `from vllm.model_executor.layers.hpc.gated_mla import hpc_gated_mla_supported`."""
    index = ctx.project.index
    out = set()
    for local, target in ctx.imports.items():
        module, _, name = index.canonical(target).rpartition(".")
        header = index.modules.get(module)
        if header is None or name in header.classes:
            continue
        if name in _module_predicates(header.path, ctx.project.load_file):
            out.add(local)
    return frozenset(out)


def _module_predicates(path: str, load_file) -> frozenset[str]:
    try:
        st = os.stat(path)
        key = (path, st.st_mtime_ns, st.st_size)
    except OSError:
        return frozenset()
    if key not in _PREDICATES:
        text = load_file(path) if load_file is not None else None
        try:
            tree = ast.parse(text) if text else None
        except (SyntaxError, ValueError, RecursionError):
            tree = None
        _PREDICATES[key] = frozenset(
            n.name for n in (tree.body if tree else []) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and _is_predicate(n, _NOTHING))
    return _PREDICATES[key]


class _CallSites:
    """The calls of each private function or method of this file (`_f(...)`, `self._f(...)`), with
    the candidate function each call is in."""

    def __init__(self, ctx: RuleContext):
        self.calls: dict[str, list[tuple[ast.Call, object]]] = {}
        for c in ctx.functions:
            for node in c.nodes:
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.id if isinstance(f, ast.Name) else (
                        f.attr if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                        and f.value.id in ("self", "cls") else None)
                    if name and name.startswith("_") and not name.startswith("__"):
                        self.calls.setdefault(name, []).append((node, c))


def _callers_pass_unquantized(ctx: RuleContext, c, layer: ast.expr, sites: _CallSites, depth: int = 0) -> bool:
    """`layer` is a parameter of a private function (or method) of this file, and every call of it
    here passes a layer that is never quantized (built with `quant_config=None`, say): only those
    calls can reach it, so its annotation's class says too much."""
    if depth > 3 or not isinstance(layer, ast.Name) or layer.id not in c.scope.params:
        return False
    fn = c.fn
    if not fn.name.startswith("_") or fn.name.startswith("__"):
        return False
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    is_method = c.class_qualname is not None and params[:1] in (["self"], ["cls"])
    if is_method:
        params = params[1:]
    calls = sites.calls.get(fn.name, [])
    if not calls:
        return False
    for call, caller in calls:
        arg = next((k.value for k in call.keywords if k.arg == layer.id), None)
        if arg is None and layer.id in params:
            i = params.index(layer.id)
            arg = call.args[i] if i < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:i + 1]) \
                else None
        if arg is None:
            return False
        scope = caller.scope
        if isinstance(arg, ast.Name) and arg.id not in scope.params and arg.id not in scope.assigns:
            # A free variable of a nested function: the enclosing function's local.
            outer = _enclosing(ctx, caller)
            if outer is not None and arg.id in outer.scope.assigns:
                caller, scope = outer, outer.scope
        inst = ctx.layers.resolve(arg, scope)
        known = inst.qualname is not None or inst.config == NONE
        if known and ctx.layers.quantizable(inst, ast.unparse(arg), None) is None:
            continue  # resolved, and never quantized
        if not _callers_pass_unquantized(ctx, caller, arg, sites, depth + 1):
            return False
    return True


def _enclosing(ctx: RuleContext, c):
    """The function of the file that `c`'s function is nested in (the innermost), or None."""
    best = None
    for o in ctx.functions:
        if o.fn is not c.fn and o.fn.lineno < c.fn.lineno and c.fn.end_lineno <= o.fn.end_lineno \
                and any(n is c.fn for n in ast.walk(o.fn)):
            if best is None or o.fn.lineno > best.fn.lineno:
                best = o
    return best


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


class _Known:
    """What guards mean here: `flags`, names and `self.X` attributes that, when true (or not
    None), say the layer has a plain `.weight`; `predicates`, functions whose result is true (not
    None) only then (`supports(layer)` that returns False unless unquantized)."""

    __slots__ = ("flags", "predicates")

    def __init__(self, flags: frozenset[str] = frozenset(), predicates: frozenset[str] = frozenset()):
        self.flags, self.predicates = flags, predicates

    def with_flags(self, more) -> "_Known":
        return _Known(self.flags | frozenset(more), self.predicates)


_NOTHING = _Known()


def _is_hasattr(test: ast.AST, layer: ast.AST | None) -> bool:
    """`hasattr(L, "weight")` (of any layer when `layer` is None: a flag's value)."""
    return (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr"
            and len(test.args) == 2 and isinstance(test.args[1], ast.Constant) and test.args[1].value == "weight"
            and (layer is None or _same(test.args[0], layer)))


def _is_getattr_weight(value: ast.AST) -> bool:
    """`getattr(L, "weight", None)`: true (not None) only when the layer has `.weight`."""
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr"
            and len(value.args) == 3 and isinstance(value.args[1], ast.Constant) and value.args[1].value == "weight"
            and isinstance(value.args[2], ast.Constant) and value.args[2].value is None)


def _unquantized_check(test: ast.AST) -> bool:
    """`isinstance(X.quant_method, UnquantizedLinearMethod)` (`getattr(X, "quant_method", None)`,
    a tuple of Unquantized* classes too), or `type(X.quant_method) is Unquantized*`."""
    def unquantized_names(node: ast.AST) -> bool:
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        return bool(elts) and all("Unquantized" in (ast.unparse(e).rsplit(".", 1)[-1]) for e in elts)

    def quant_method(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "quant_method":
            return True
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == "quant_method")

    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" \
            and len(test.args) == 2 and quant_method(test.args[0]):
        return unquantized_names(test.args[1])
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.Eq)):
        left = test.left
        return (isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "type"
                and len(left.args) == 1 and quant_method(left.args[0]) and unquantized_names(test.comparators[0]))
    return False


def _none_test(test: ast.AST, op) -> str | None:
    """`X is None` / `X is not None` (op: ast.Is / ast.IsNot) -> the text of X."""
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], op)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        return ast.unparse(test.left)
    return None


def _callee(call: ast.AST) -> str | None:
    if isinstance(call, ast.Call):
        f = call.func
        if isinstance(f, ast.Name):
            return f.id
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("self", "cls"):
            return f"self.{f.attr}"
    return None


def _implies_weight(test: ast.AST, layer: ast.AST | None, known: _Known = _NOTHING) -> bool:
    """`test` true ⇒ the layer has a plain `.weight`: `hasattr(L, "weight")`, an unquantized check
    of a quant method, a flag or a predicate's result (see `_Known`); as the test, one of its
    `and`s, or the negation of a no-weight test."""
    if _is_hasattr(test, layer) or _unquantized_check(test):
        return True
    if isinstance(test, (ast.Name, ast.Attribute)) and ast.unparse(test) in known.flags:
        return True
    if _none_test(test, ast.IsNot) in known.flags:
        return True
    if _callee(test) in known.predicates:
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _implies_no_weight(test.operand, layer, known)
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(
        _implies_weight(v, layer, known) for v in test.values)


def _implies_no_weight(test: ast.AST, layer: ast.AST | None, known: _Known = _NOTHING) -> bool:
    """`test` false ⇒ the layer has a plain `.weight`: the negation of a guard, `flag is None`,
    alone or in an `or`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _implies_weight(test.operand, layer, known)
    if _none_test(test, ast.Is) in known.flags:
        return True
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(
        _implies_no_weight(v, layer, known) for v in test.values)


def _falsy(value: ast.AST | None) -> bool:
    return value is None or (isinstance(value, ast.Constant) and not value.value)


class _Assign:
    """One assignment to a would-be flag: its value, whether it is `&=`, and the tests that hold
    wherever it runs (enclosing `if`s, and the negations of earlier `if ...: return`s)."""

    __slots__ = ("value", "anded", "tests", "scope")

    def __init__(self, value, anded, tests, scope=None):
        self.value, self.anded, self.tests, self.scope = value, anded, tests, scope

    def flag(self, known: _Known) -> bool:
        if _falsy(self.value) or _is_getattr_weight(self.value) or _implies_weight(self.value, None, known):
            return True
        return any(_implies_weight(t, None, known) for t in self.tests)


_NOT = ast.Not()


def _walk_block(body: list[ast.stmt], tests: tuple, visit) -> None:
    """Call `visit(stmt, tests)` for every statement, `tests` being what holds there; nested
    functions and classes are not entered."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        visit(stmt, tests)
        if isinstance(stmt, ast.If):
            _walk_block(stmt.body, tests + (stmt.test,), visit)
            _walk_block(stmt.orelse, tests + (ast.UnaryOp(op=_NOT, operand=stmt.test),), visit)
            if stmt.body and isinstance(stmt.body[-1], _EXITS):
                tests = tests + (ast.UnaryOp(op=_NOT, operand=stmt.test),)
        else:
            for field in ("body", "orelse", "finalbody"):
                _walk_block(getattr(stmt, field, None) or [], tests, visit)
            for h in getattr(stmt, "handlers", None) or []:
                _walk_block(h.body, tests, visit)
            for case in getattr(stmt, "cases", None) or []:
                _walk_block(case.body, tests, visit)


def _assignments_of(fn, self_name: str | None, attrs: dict, local: dict) -> None:
    def visit(stmt, tests):
        pairs: list[tuple[ast.AST, ast.AST | None, bool]] = []
        if isinstance(stmt, ast.Assign):
            pairs = [(t, stmt.value, False) for t in stmt.targets]
        elif isinstance(stmt, ast.AnnAssign):
            pairs = [(stmt.target, stmt.value, False)]
        elif isinstance(stmt, ast.AugAssign):
            pairs = [(stmt.target, stmt.value, isinstance(stmt.op, ast.BitAnd))]
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            for n in ast.walk(stmt.target if isinstance(stmt, (ast.For, ast.AsyncFor)) else stmt):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    local.setdefault(n.id, []).append(_Assign(ast.Name("?"), False, (), id(fn)))
        for target, value, anded in pairs:
            a = _Assign(value, anded, tests, id(fn))
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == self_name:
                attrs.setdefault(f"self.{target.attr}", []).append(a)
            elif isinstance(target, ast.Name):
                local.setdefault(target.id, []).append(a)
            elif isinstance(target, (ast.Tuple, ast.List)):
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        local.setdefault(n.id, []).append(_Assign(ast.Name("?"), False, (), id(fn)))
    _walk_block(fn.body, (), visit)


def _flags_of(assigns: dict[str, list[_Assign]], known_for) -> frozenset[str]:
    """Names whose every assignment is a flag value (one that is false, or true only when the
    layer has `.weight`); `x &= <flag>` makes `x` one whatever it was. Constant false values alone
    say nothing (the real value is set elsewhere). `known_for(assign)`: what is known there."""
    flags: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, values in assigns.items():
            if name in flags:
                continue
            anded = [a for a in values if a.anded]
            derived = any(not _falsy(a.value) for a in values)
            if (anded and any(a.flag(known_for(a, flags)) for a in anded)) or (
                    not anded and derived and all(a.flag(known_for(a, flags)) for a in values)):
                flags.add(name)
                changed = True
    return frozenset(flags)


def _function_flags(fn, known: _Known) -> frozenset[str]:
    """The local flags of one function (given what is known around it)."""
    local: dict[str, list[_Assign]] = {}
    _assignments_of(fn, None, {}, local)
    return _flags_of(local, lambda _a, fl: known.with_flags(fl))


def _is_predicate(fn, known: _Known) -> bool:
    """Every value `fn` returns is false (or None), or true only when the layer has `.weight`:
    a return value that implies it, or a return dominated by such a test."""
    flags = _function_flags(fn, known)
    here = known.with_flags(flags)
    returns: list[tuple[ast.Return, tuple]] = []
    _walk_block(fn.body, (), lambda stmt, tests: returns.append((stmt, tests)) if isinstance(stmt, ast.Return) else None)
    real = [(r, t) for r, t in returns if not _falsy(r.value)]
    if not real:
        return False
    return all(_implies_weight(r.value, None, here) or any(_implies_weight(x, None, here) for x in t)
               or (isinstance(r.value, ast.Name) and r.value.id in flags) for r, t in real)


class _ClassFlags:
    """For each function of the file, what is known there: the flags of its class (`self.X` set
    only to guard values in the class's methods: `self.is_unquantized = isinstance(
    self.quant_method, UnquantizedLinearMethod)`, `self.allow_fast = self.is_unquantized and ...`,
    `self._scale = prep(layer)` where `prep` returns None unless the weight exists), and the
    predicates it may call (module functions, nested functions, the class's own methods)."""

    def __init__(self, tree: ast.Module, imported):
        self._by_fn: dict[int, _Known] = {}
        module_preds = frozenset(n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                                 and _is_predicate(n, _NOTHING)) | imported
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._by_fn[id(node)] = _Known(frozenset(), module_preds | _nested_predicates(node, module_preds))
        for cls in ast.walk(tree):
            if isinstance(cls, ast.ClassDef):
                self._class(cls, module_preds)

    def _class(self, cls: ast.ClassDef, module_preds: frozenset[str]) -> None:
        methods = [m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        preds = module_preds | frozenset(f"self.{m.name}" for m in methods if _is_predicate(m, _Known(frozenset(), module_preds)))
        nested = {id(m): _nested_predicates(m, preds) for m in methods}
        attrs: dict[str, list[_Assign]] = {}
        locals_: dict[int, dict[str, list[_Assign]]] = {}
        for m in methods:
            locals_[id(m)] = {}
            _assignments_of(m, m.args.args[0].arg if m.args.args else None, attrs, locals_[id(m)])
        flags: frozenset[str] = frozenset()
        method_flags: dict[int, frozenset[str]] = {}
        for _ in range(8):  # locals feed attributes and attributes feed locals
            for m in methods:
                base = _Known(flags, preds | nested[id(m)])
                method_flags[id(m)] = _flags_of(locals_[id(m)], lambda _a, fl, base=base: base.with_flags(fl))
            new = _flags_of(attrs, lambda a, fl: _Known(flags | fl | method_flags.get(a.scope, frozenset()),
                                                        preds | nested.get(a.scope, frozenset())))
            if new == flags:
                break
            flags = new
        if any(_refuses_quantization(m) for m in methods if m.name == "__init__"):
            flags = flags | {"self"}  # every instance is unquantized: its own `.weight` exists
        for m in methods:
            self._by_fn[id(m)] = _Known(flags, preds | nested[id(m)])

    def of(self, fn: ast.AST) -> _Known:
        return self._by_fn.get(id(fn), _NOTHING)


def _nested_predicates(fn, known_preds: frozenset[str]) -> frozenset[str]:
    return frozenset(n.name for n in ast.walk(fn) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and n is not fn and _is_predicate(n, _Known(frozenset(), known_preds)))


def _refuses_quantization(init: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """`__init__` raises unless its quant method is unquantized: `if not isinstance(
    self.quant_method, UnquantizedLinearMethod): raise ...` (or an `assert` of the check)."""
    for stmt in init.body:
        if isinstance(stmt, ast.If) and _implies_no_weight(stmt.test, None) and stmt.body \
                and isinstance(stmt.body[-1], ast.Raise):
            return True
        if isinstance(stmt, ast.Assert) and _unquantized_check(stmt.test):
            return True
    return False


def _catches_attribute_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("AttributeError", "Exception", "BaseException") for n in names)


def _guarded(node: ast.AST, layer: ast.AST, parents: dict[int, ast.AST], known: _Known) -> bool:
    """A guard (see `_implies_weight`) dominates the read: an enclosing `if`/conditional, an
    earlier operand of `and`, an earlier `if not <guard>: return`, or a `try` that catches it."""
    child, parent = node, parents.get(id(node))
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)):
            if child in _as_list(parent.body) and _implies_weight(parent.test, layer, known):
                return True
            if child in _as_list(parent.orelse) and _implies_no_weight(parent.test, layer, known):
                return True
        elif isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            idx = next(i for i, v in enumerate(parent.values) if v is child)
            if any(_implies_weight(v, layer, known) for v in parent.values[:idx]):
                return True
        elif isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or):
            idx = next(i for i, v in enumerate(parent.values) if v is child)
            if any(_implies_no_weight(v, layer, known) for v in parent.values[:idx]):
                return True
        elif isinstance(parent, (ast.Try, getattr(ast, "TryStar", ast.Try))) and child in parent.body:
            if any(_catches_attribute_error(h) for h in parent.handlers):
                return True
        if isinstance(child, ast.stmt):
            for block in _blocks(parent):
                if child in block:
                    for earlier in block[: block.index(child)]:
                        if (isinstance(earlier, ast.If) and _implies_no_weight(earlier.test, layer, known)
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


def _flows_on(ctx: RuleContext, node: ast.AST, c) -> bool:
    """The weight is handed to a project function that casts or allocates with it: DTL001/DTL002
    report the call (its message names the missing `.weight` too)."""
    call = c.parents.get(id(node))
    if isinstance(call, ast.keyword):
        call = c.parents.get(id(call))
    if not isinstance(call, ast.Call):
        return False
    return any(f.arg is node for f in ctx.flows.flows(call, c.scope))


def _is_typing_cast(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (ast.unparse(node.func) in ("cast", "typing.cast")) and len(node.args) == 2


def _feeds_dtype_site(node: ast.AST, c) -> bool:
    """`L.weight.dtype` used as a cast's or an allocation's dtype, directly, through a local name
    or `typing.cast`, or returned by a dtype getter (DTL001/DTL002 report those, and their fixes
    handle a missing `.weight`)."""
    parents = c.parents
    up = parents.get(id(node))
    if not (isinstance(up, ast.Attribute) and up.attr == "dtype"):
        return _is_cast_arg(node, parents)  # `.to(L.weight)`
    expr: ast.AST = up
    while True:
        parent = parents.get(id(expr))
        if _is_typing_cast(parent) and parent.args[1] is expr:
            expr = parent
            continue
        if isinstance(parent, ast.Return):
            return True
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
