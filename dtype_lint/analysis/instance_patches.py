"""Functions bound onto module *instances* (`mod.forward = types.MethodType(fn, mod)`).

Projects that reshape Hugging Face models at run time (axolotl's kernel patches) do not patch a
class (`Model.forward = fn`, function_walk.patched_methods): they walk a built model and bind a
module-level function onto each module of one class, found by an `isinstance` test or by the
class's name as a string, because the class belongs to a library the project does not import at
module level:

    for module in model.modules():
        if type(module).__name__ == "FooAttention":
            module.forward = types.MethodType(patched_forward, module)

`patched_forward` then runs as a method of `FooAttention`: its first parameter is an instance of
that class. `instance_patched_methods` gives, for each such function, the class as the file
spells it: a dotted name (`isinstance(module, FooAttention)`, `type(module) is FooAttention`), or
the string the test compares the class's name with, marked with `NAMED_CLASS_PREFIX`
(`type(module).__name__ == "FooAttention"`, `module.__class__.__name__ == "FooAttention"`). A
class known only by such a string, that the file neither defines nor imports, keeps the prefix in
its qualified name (`named_only`): its layers cannot be read, and a site on them is reported with
low confidence, saying so (storage/layers.py), never passed silently.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.ecosystems.registry import optional, plugins

# The qualified name of a class known only by the string its name is compared with: no module
# can be spelled so, so no class of any tree is located by it.
NAMED_CLASS_PREFIX = "<class named>."


def named_only(qualname: str | None) -> str | None:
    """The class name when `qualname` is a class known only by its name (`NAMED_CLASS_PREFIX`), else None."""
    if qualname and qualname.startswith(NAMED_CLASS_PREFIX):
        return qualname[len(NAMED_CLASS_PREFIX):]
    return None


def patched_class(index, module: str, imports: dict[str, str], spelled: str) -> str:
    """The qualified name of the class a function is patched onto, as the file spells it
    (function_walk.patched_methods), for `check` and `explain` alike. A class known by its name's
    string: the class of that name the file defines or imports, else one a family knows by name
    (the HF model catalogue), else it keeps the mark of a class known only by name."""
    name = named_only(spelled)
    if name is None:
        return index.resolve(module, spelled, imports)
    if "." not in name and name.isidentifier():
        local = index.resolve(module, name, imports)
        if index.class_location(local) is not None:
            return local
        known = next((found for family in plugins("family")
                      if (found := optional(family, "family", "class_named")(name))), None)
        if known is not None:
            return known
    return spelled


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _class_name_of(node: ast.AST, target: str) -> bool:
    """`type(target).__name__` or `target.__class__.__name__`."""
    if not (isinstance(node, ast.Attribute) and node.attr == "__name__"):
        return False
    inner = node.value
    if isinstance(inner, ast.Call) and _is_name(inner.func, "type") and len(inner.args) == 1:
        return _is_name(inner.args[0], target)
    return isinstance(inner, ast.Attribute) and inner.attr == "__class__" and _is_name(inner.value, target)


def class_tested(test: ast.expr, target: str) -> str | None:
    """The class a true `test` proves `target` an instance of, as the file spells it (a string
    name marked with NAMED_CLASS_PREFIX), or None. One conjunct of an `and` suffices."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        found = {spelled for value in test.values if (spelled := class_tested(value, target))}
        return next(iter(found)) if len(found) == 1 else None
    if isinstance(test, ast.Call) and _is_name(test.func, "isinstance") and len(test.args) == 2 \
            and _is_name(test.args[0], target):
        return dotted(test.args[1])
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        left, right = test.left, test.comparators[0]
        for subject, other in ((left, right), (right, left)):
            if _class_name_of(subject, target) and isinstance(other, ast.Constant) and isinstance(other.value, str):
                return NAMED_CLASS_PREFIX + other.value
            if isinstance(subject, ast.Call) and _is_name(subject.func, "type") and len(subject.args) == 1 \
                    and _is_name(subject.args[0], target):
                return dotted(other)
    return None


def _bound_function(value: ast.AST, target: str) -> str | None:
    """`fn` of `types.MethodType(fn, target)` / `MethodType(fn, target)`."""
    if not (isinstance(value, ast.Call) and len(value.args) == 2 and not value.keywords):
        return None
    func = value.func
    is_method_type = (isinstance(func, ast.Attribute) and func.attr == "MethodType") or _is_name(func, "MethodType")
    if is_method_type and isinstance(value.args[0], ast.Name) and _is_name(value.args[1], target):
        return value.args[0].id
    return None


def _binding(node: ast.AST) -> tuple[str, str] | None:
    """(function, instance name) for `inst.attr = MethodType(fn, inst)` or
    `setattr(inst, "attr", MethodType(fn, inst))`."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) \
            and isinstance(node.targets[0].value, ast.Name):
        target = node.targets[0].value.id
        function = _bound_function(node.value, target)
        return (function, target) if function else None
    if isinstance(node, ast.Call) and _is_name(node.func, "setattr") and len(node.args) == 3 \
            and isinstance(node.args[0], ast.Name) and isinstance(node.args[1], ast.Constant):
        target = node.args[0].id
        function = _bound_function(node.args[2], target)
        return (function, target) if function else None
    return None


def instance_patched_methods(nodes: list[ast.AST], parents: dict[int, ast.AST],
                             functions: set[str]) -> dict[str, set[str]]:
    """Each of `functions` (module-level, first parameter `self`) bound with `MethodType` onto an
    instance whose class an enclosing `if` tests: function → the classes as the file spells them.
    A binding no enclosing test names the class of is not counted (its `self` stays unknown).
    `nodes`: the module's, in ast.walk's order, and `parents` their parents (function_walk)."""
    bindings: list[tuple[ast.AST, str, str]] = []
    for node in nodes:
        found = _binding(node)
        if found is not None and found[0] in functions:
            bindings.append((node, *found))
    bound: dict[str, set[str]] = {}
    for node, function, target in bindings:
        child, parent = node, parents.get(id(node))
        spelled = None
        scope_kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
        while parent is not None and spelled is None and not isinstance(parent, scope_kinds):
            if isinstance(parent, ast.If) and any(stmt is child for stmt in parent.body):
                spelled = class_tested(parent.test, target)
            child, parent = parent, parents.get(id(parent))
        if spelled:
            bound.setdefault(function, set()).add(spelled)
    return bound
