"""Dormant paths: branches a class never takes by itself.

A class that initialises `self.fast_tokens = 0` (or `None`, `False`) and never gives it another
value in its own code, its bases' or anywhere in the file, has handed the decision to turn that
path on to other code (a model-level `enable_...` pass, an autotuner). A branch whose test can only
be true once that happens (`if 0 < n <= self.fast_tokens:`, `if self.kernel is not None:`) is
dormant as far as the class can show; what the enabling code checks first is out of sight.

`dormant_attributes` finds such attributes from the engine's class facts; `truth` evaluates a test
with them at their constant values (True, False, or None when it cannot tell).
"""

from __future__ import annotations

import ast
import operator

from dtype_lint.analysis.function_walk import walk
from dtype_lint.analysis.index.class_facts import ProjectFacts


def _falsy_constant(value: ast.AST | None) -> bool:
    return isinstance(value, ast.Constant) and (
        value.value is None or (type(value.value) in (bool, int, float, str) and not value.value))


def enabled_in_file(tree: ast.Module) -> frozenset[str]:
    """Attribute names this file stores a value other than a falsy constant into, on any object
    (`self.x = 8`, `layer.x = n`, `x.y += 1`, `setattr(o, "x", ...)`): such an attribute is
    turned on here, by the class, a subclass or a function the rule can see."""
    out: set[str] = set()
    for node in walk(tree):
        if isinstance(node, ast.Assign):
            if not _falsy_constant(node.value):
                out.update(t.attr for t in _targets(node.targets))
        elif isinstance(node, ast.AnnAssign) and node.value is not None and not _falsy_constant(node.value):
            out.update(t.attr for t in _targets([node.target]))
        elif isinstance(node, ast.AugAssign):
            out.update(t.attr for t in _targets([node.target]))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                out.add(name.value)
            else:
                out.add("*")  # a computed name may be anything
    return frozenset(out)


def _targets(targets) -> list[ast.Attribute]:
    out = []
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                out.append(node)
    return out


def dormant_attributes(project: ProjectFacts, class_qualname: str, enabled: frozenset[str]) -> dict[str, object]:
    """attribute -> its constant, for each `self.X` that this class and its bases only ever set to
    one falsy constant in their methods, and that the file (`enabled`, from `enabled_in_file`)
    never turns on. A class-level default alone is not one (a dataclass field, or a subclass's
    class attribute, may replace it without a statement the rule sees), and a true one makes the
    attribute live."""
    if "*" in enabled:
        return {}
    values: dict[str, set] = {}
    poisoned: set[str] = set()
    for ancestor in project.index.mro(class_qualname):
        class_facts = project.class_facts(ancestor)
        if class_facts is None:
            continue
        for attr, assigned in class_facts.assigned.items():
            for v in assigned:
                if _falsy_constant(v):
                    values.setdefault(attr, set()).add(repr(v.value))
                else:
                    poisoned.add(attr)
        poisoned.update(k for k, v in class_facts.class_values.items() if not _falsy_constant(v))
    out: dict[str, object] = {}
    for attr, consts in values.items():
        if attr in poisoned or attr in enabled or len(consts) != 1:
            continue
        out[attr] = ast.literal_eval(next(iter(consts)))
    return out


_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}
_UP, _DOWN = (ast.Lt, ast.LtE), (ast.Gt, ast.GtE)
_UNKNOWN = object()


def truth(test: ast.AST, values: dict[str, object]) -> bool | None:
    """The test's truth when every expression named in `values` (by its text: `self.x`) holds its
    value; None when that does not decide it."""
    if isinstance(test, ast.BoolOp):
        parts = [truth(v, values) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in parts else (True if all(p is True for p in parts) else None)
        return True if True in parts else (False if all(p is False for p in parts) else None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = truth(test.operand, values)
        return None if inner is None else not inner
    if isinstance(test, ast.Compare):
        return _compare(test, values)
    value = _value(test, values)
    return None if value is _UNKNOWN else bool(value)


def _value(node: ast.AST, values: dict[str, object]):
    if isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (bool, int, float)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
        return -node.operand.value
    if isinstance(node, (ast.Name, ast.Attribute)):
        return values.get(ast.unparse(node), _UNKNOWN)
    return _UNKNOWN


def _compare(test: ast.Compare, values: dict[str, object]) -> bool | None:
    """A chain is the `and` of its links; besides links between two known values, a run of links
    all going up (`<`, `<=`) or all down between two known values bounds them (`0 < n <= 0` is
    false whatever `n` is)."""
    operands = [_value(n, values) for n in [test.left, *test.comparators]]
    ops = test.ops
    for i, operator_node in enumerate(ops):  # `x is None` / `x is not None` with x known
        a, b = operands[i], operands[i + 1]
        if isinstance(operator_node, (ast.Is, ast.IsNot)) and _UNKNOWN not in (a, b) and (a is None or b is None):
            if (a is b) != isinstance(operator_node, ast.Is):
                return False
    for i in range(len(operands)):
        if operands[i] is _UNKNOWN or operands[i] is None:
            continue
        for j in range(i + 1, len(operands)):
            run = ops[i:j]
            if operands[j] is _UNKNOWN or operands[j] is None:
                if all(isinstance(o, _UP) for o in run) or all(isinstance(o, _DOWN) for o in run):
                    continue  # the run may still reach a known value further on
                break
            if j == i + 1 and type(run[0]) in _CMP:
                if not _CMP[type(run[0])](operands[i], operands[j]):
                    return False
            elif all(isinstance(o, _UP) for o in run) or all(isinstance(o, _DOWN) for o in run):
                strict = any(isinstance(o, (ast.Lt, ast.Gt)) for o in run)
                up = isinstance(run[0], _UP)
                low, high = (operands[i], operands[j]) if up else (operands[j], operands[i])
                if (strict and not low < high) or (not strict and not low <= high):
                    return False
            break
    if all(o is not _UNKNOWN for o in operands) and all(type(o) in _CMP or isinstance(o, (ast.Is, ast.IsNot))
                                                        for o in ops):
        return True  # every link was checked above with known values and none failed
    return None
