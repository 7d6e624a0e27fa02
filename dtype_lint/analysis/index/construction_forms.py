"""The shapes of expression that hand back a layer the project itself constructs.

A class's code builds a layer in more ways than `self.x = Cls(...)`, and the attribute still
holds that construction (a quantizer replaces or repacks it all the same when the model loads):

- `Cls(...).to(dtype=...)`, `.cuda()`, `.half()`, `.requires_grad_(False)`...: an `nn.Module`
  method that returns the module itself (`MODULE_RETURNING`);
- `(layer := Cls(...))`: a walrus hands back its value;
- `A(...) if cond else B(...)`: either arm;
- a container filled after it is made: `self.layers = nn.ModuleList()` then
  `self.layers.append(Cls(...))` (`.extend([...])`, `.insert(i, ...)`), or `nn.ModuleDict` items
  `self.heads["k"] = Cls(...)`; or a local list filled first and handed over
  (`layers = []`, `layers.append(Cls(...))`, `self.layers = nn.ModuleList(layers)` or
  `nn.Sequential(*layers)`: `handed_locals`);
- an attribute named by a literal: `self.add_module("proj", Cls(...))`,
  `setattr(self, "proj", Cls(...))`.

The construction may first be bound to a local of the building method (`proj = Cls(...)`, then
`self.proj = proj.to(...)` or `self.layers.append(proj.cuda())`): `leaves(expr, local_values)`
follows a single-assignment local to its value, and a module-returning call on such a local.

`leaves(expr)` unwraps the first three; `container_fill(stmt, self_name)` and
`named_attribute(stmt, self_name)` recognise the statements of the last two. Resolving what they
give is class_facts.visit_method's and layers.LayerResolver's work.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from dtype_lint.core.records import record

# `nn.Module` methods that return the module they are called on (so `Cls(...).m(...)` is the
# `Cls` instance). Tensor methods of the same names are not confused with them: the receiver
# must itself be a construction (a call, a walrus, a conditional), never a tensor name.
MODULE_RETURNING = frozenset({"to", "cuda", "cpu", "xpu", "half", "float", "double", "bfloat16",
                              "requires_grad_", "train", "eval", "to_empty", "share_memory"})

# The module containers: what they are filled with is registered as submodules.
MODULE_CONTAINERS = frozenset({"ModuleList", "ModuleDict", "Sequential"})

_SEQUENCE_FILLS = frozenset({"append", "extend", "insert"})
_NAMED_ADDS = frozenset({"add_module", "register_module"})


def leaves(expr: ast.expr, local_values: Mapping[str, ast.expr] | None = None) -> list[ast.expr]:
    """The expressions `expr` may evaluate to, through the module-returning calls, walruses and
    conditionals above (`nn.Linear(...).to(...)` -> [the `nn.Linear(...)` call];
    `A() if c else None` -> [A(), None]). Anything else is its own one leaf.

    `local_values`: the building method's single-assignment locals (name -> the one value bound);
    a name among them stands for its value (`proj = A(...)` then `self.proj = proj.to(...)` ->
    [A(...)]), each name followed once (a local bound to an expression naming itself stops)."""
    locals_ = local_values or {}
    followed: set[str] = set()
    found: list[ast.expr] = []
    todo = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.IfExp):
            todo.extend((node.orelse, node.body))  # popped body first: the arms in source order
        elif isinstance(node, ast.NamedExpr):
            todo.append(node.value)
        elif isinstance(node, ast.Name) and node.id in locals_ and node.id not in followed:
            followed.add(node.id)
            todo.append(locals_[node.id])
        elif (receiver := _constructing_receiver(node, locals_)) is not None:
            todo.append(receiver)
        else:
            found.append(node)
    return found


def returns_receiver(node: ast.AST, local_values: Mapping[str, ast.expr] | None = None) -> bool:
    """`<construction>.to(...)` and the like: a module-returning method called on an expression
    that builds a module (a call, a walrus or a conditional, or a local of `local_values`, the
    building method's single-assignment locals; not any name, which may be a tensor)."""
    return _constructing_receiver(node, local_values or {}) is not None


def _constructing_receiver(node: ast.AST, local_values: Mapping[str, ast.expr]) -> ast.expr | None:
    """The receiver of `returns_receiver`'s calls, else None."""
    receiver = module_method_receiver(node)
    if isinstance(receiver, (ast.Call, ast.IfExp, ast.NamedExpr)) or (
            isinstance(receiver, ast.Name) and receiver.id in local_values):
        return receiver
    return None


def module_method_receiver(node: ast.AST) -> ast.expr | None:
    """The receiver of any module-returning method call (`x.to(...)`, `x.cuda()`), else None: what
    the call hands back when the receiver is a module (the resolver's question, not a syntax one)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MODULE_RETURNING:
        return node.func.value
    return None


@record(frozen=True)
class Fill:
    """One statement putting layers into `self.<attr>`: `elements` are the values put in;
    `key` the literal key of a dict-like item (`self.heads["k"] = ...`), None for a sequence
    fill; `counted` whether the statement adds exactly `len(elements)` items at the end (an
    `.append`/`.extend([...])`; not `.insert`, not a comprehension); `anywhere` whether it may
    put its item before the others (an `.insert`)."""

    attr: str
    elements: tuple[ast.expr, ...]
    key: str | None
    counted: bool
    anywhere: bool = False


def container_fill(stmt: ast.stmt, self_name: str, local: bool = False) -> Fill | None:
    """`self.X.append(v)`, `self.X.extend([...])` (or a comprehension), `self.X.insert(i, v)`,
    `self.X["k"] = v`: the Fill it makes, else None. `local`: the same statements on a local
    `X` of the method instead (`layers.append(v)`), whose Fill names the local."""
    if local:
        def receiver(node: ast.expr) -> str | None:
            return node.id if isinstance(node, ast.Name) and node.id != self_name else None
    else:
        def receiver(node: ast.expr) -> str | None:
            return _self_attr(node, self_name)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr in _SEQUENCE_FILLS and not call.keywords):
            return None
        attr = receiver(func.value)
        if attr is None:
            return None
        if func.attr == "append" and len(call.args) == 1:
            return Fill(attr, (call.args[0],), None, True)
        if func.attr == "insert" and len(call.args) == 2:
            return Fill(attr, (call.args[1],), None, False, anywhere=True)
        if func.attr == "extend" and len(call.args) == 1:
            items = call.args[0]
            if isinstance(items, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in items.elts):
                return Fill(attr, tuple(items.elts), None, True)
            if isinstance(items, (ast.ListComp, ast.GeneratorExp)):
                return Fill(attr, (items.elt,), None, False)
        return None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
        target = stmt.targets[0]
        attr = receiver(target.value)
        if attr is not None and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str):
            return Fill(attr, (stmt.value,), target.slice.value, False)
    return None


def handed_locals(value: ast.expr) -> list[str]:
    """The locals whose items `self.X = value` hands to `self.X`: `layers` itself, or the list a
    module container is made of (`nn.ModuleList(layers)`, `nn.Sequential(*layers)`,
    `nn.ModuleDict(heads)`), through the expression forms of `leaves`."""
    names: list[str] = []
    for leaf in leaves(value):
        if isinstance(leaf, ast.Name):
            names.append(leaf.id)
        elif isinstance(leaf, ast.Call) and _callee_name(leaf.func) in MODULE_CONTAINERS:
            for arg in leaf.args:
                inner = arg.value if isinstance(arg, ast.Starred) else arg
                if isinstance(inner, ast.Name):
                    names.append(inner.id)
    return names


def spliced_local(element: ast.expr, local_values: Mapping[str, ast.expr]) -> bool:
    """`*layers` in `nn.Sequential(..., *layers)` with `layers` a single-assignment local bound to a
    list display: its items are the fills `handed_locals` handed over, not one unknown slot."""
    return isinstance(element, ast.Starred) and isinstance(element.value, ast.Name) \
        and isinstance(local_values.get(element.value.id), (ast.List, ast.Tuple))


def _callee_name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def named_attribute(stmt: ast.stmt, self_name: str) -> tuple[str, ast.expr] | None:
    """`self.add_module("name", v)` / `self.register_module("name", v)` / `setattr(self, "name", v)`
    with a literal name: (name, v), else None."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)) or stmt.value.keywords:
        return None
    call = stmt.value
    func, args = call.func, call.args
    if isinstance(func, ast.Attribute) and func.attr in _NAMED_ADDS and _is_name(func.value, self_name) \
            and len(args) == 2:
        name, value = args
    elif isinstance(func, ast.Name) and func.id == "setattr" and len(args) == 3 and _is_name(args[0], self_name):
        name, value = args[1], args[2]
    else:
        return None
    if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.isidentifier():
        return name.value, value
    return None


def _self_attr(node: ast.expr, self_name: str) -> str | None:
    if isinstance(node, ast.Attribute) and _is_name(node.value, self_name):
        return node.attr
    return None


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name
