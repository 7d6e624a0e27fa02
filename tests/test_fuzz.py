"""Property tests (#8): checking never raises; a fix parses, is idempotent, and changes nothing
but the cast sites it rewrites; a module without findings is left byte for byte alone.

Inputs: arbitrary text; arbitrary valid Python from hypothesmith's grammar; and modules shaped
like inference code (fuzz_programs.py) that are full of real sites and of names in a fix's way.

The differential test undoes a fix on the syntax tree (the helper's import removed, each helper
call `h(L, flag)` read back as `L.weight.dtype`, each variable the fix added replaced by its
value and its assignment dropped, each `if v is not None:` guard unwrapped, each `or x.dtype`
fallback dropped) and demands the original tree: the sites are the only differences.

The CI budget (tests/conftest.py, docs/testing.md) runs 40 examples per property (about 20 s in
all); DTL_FULL=1 runs 2000; DTYPE_LINT_FUZZ_EXAMPLES=N sets the number outright.
"""

from __future__ import annotations

import ast
import os

import hypothesmith
from conftest import budget
from fuzz_programs import modules
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dtype_lint.api import check_source, fix_source, make_config
from dtype_lint.run.pipeline import fix_one_text

EXAMPLES = int(os.environ.get("DTYPE_LINT_FUZZ_EXAMPLES") or budget(40, 2000))
BUDGET = settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
HELPER_MODULE = make_config().helper_spec[0]


def parses(text: str) -> bool:
    try:
        compile(text, "m.py", "exec")
        return True
    except (SyntaxError, ValueError):
        return False


@BUDGET
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=300) | st.binary(max_size=300).map(
    lambda b: b.decode("latin-1")))
def test_check_never_raises_on_any_text(text: str):
    findings = check_source(text + "\nx.to(self.kv_b_proj.weight.dtype)\n")
    assert all(f.code for f in findings)


@BUDGET
@given(hypothesmith.from_grammar())
def test_check_never_raises_and_a_clean_module_is_untouched(text: str):
    findings = check_source(text)
    if not any(f.fix for f in findings):
        outcome = fix_one_text(text, "m.py", make_config(), True)
        assert outcome.text == text and not outcome.error


@BUDGET
@given(modules())
def test_a_fix_parses_is_idempotent_and_leaves_nothing_fixable(text: str):
    assume(parses(text))
    findings = check_source(text)
    fixed = fix_source(text, unsafe_fixes=True)
    assert parses(fixed)
    if not any(f.fix for f in findings):
        assert fixed == text
        return
    assert fixed != text
    assert fix_source(fixed, unsafe_fixes=True) == fixed
    assert [f for f in check_source(fixed) if f.fix] == []
    # Line breaks stay the file's own.
    assert ("\r\n" in text) == ("\r\n" in fixed) and ("\n" not in fixed.replace("\r\n", "") or "\r\n" not in text)


@BUDGET
@given(modules())
def test_the_cast_sites_are_the_only_differences_a_fix_makes(text: str):
    assume(parses(text))
    outcome = fix_one_text(text, "m.py", make_config(), True)
    assert not outcome.error, outcome.error
    if not outcome.applied:
        return
    helpers = {local for f in outcome.applied for (_m, _n, local) in f.fix.local_names()}
    variables = {v for f in outcome.applied for v in f.fix.binds}
    undone = _Undo(helpers, variables).run(ast.parse(outcome.text))
    assert ast.dump(undone) == ast.dump(ast.parse(text))


class _Undo(ast.NodeTransformer):
    """The fixed tree with every rewrite the planner makes read back to the original cast."""

    def __init__(self, helpers: set[str], variables: set[str]):
        self.helpers = helpers
        self.variables = variables
        self.values: dict[str, ast.expr] = {}

    def run(self, tree: ast.Module) -> ast.Module:
        return ast.fix_missing_locations(self.visit(tree))

    def _added(self, s: ast.stmt) -> bool:
        """`v = h(L, flag)`: a variable the fix added (the original modules never call the helper)."""
        return isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) \
            and s.targets[0].id in self.variables and isinstance(s.value, ast.Call) \
            and isinstance(s.value.func, ast.Name) and s.value.func.id in self.helpers

    def visit_FunctionDef(self, node: ast.FunctionDef):
        # A variable's value holds in the function that assigns it (and the closures inside).
        saved = dict(self.values)
        for n in ast.walk(node):
            if isinstance(n, ast.stmt) and self._added(n):
                self.values[n.targets[0].id] = self._dtype_of(n.value)
        node = self.generic_visit(node)
        self.values = saved
        return node

    def _dtype_of(self, call: ast.expr) -> ast.expr:
        assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in self.helpers, \
            ast.dump(call)
        return ast.Attribute(ast.Attribute(call.args[0], "weight", ast.Load()), "dtype", ast.Load())

    def visit_ImportFrom(self, node: ast.ImportFrom):
        return None if node.module == HELPER_MODULE else node

    def _body(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for s in stmts:
            if self._added(s):
                continue
            if isinstance(s, ast.If) and not s.orelse and isinstance(s.test, ast.Compare) \
                    and isinstance(s.test.left, ast.Name) and isinstance(s.test.ops[0], ast.IsNot) \
                    and isinstance(s.test.comparators[0], ast.Constant) and s.test.comparators[0].value is None \
                    and len(s.body) == 1 and self._guarded_cast(s.body[0], s.test.left.id):
                out.extend(self._body(s.body))  # the guard the fix added around a cast
                continue
            s = self.visit(s)
            if s is not None:
                out.append(s)
        return out

    @staticmethod
    def _guarded_cast(stmt: ast.stmt, name: str) -> bool:
        """`r = r.to(name)` or `r = r.to(dtype=name)`, the one statement a fix's guard holds."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return False
        call = stmt.value
        return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "to" \
            and isinstance(call.func.value, ast.Name) and call.func.value.id == stmt.targets[0].id \
            and [a.id if isinstance(a, ast.Name) else None for a in call.args + [k.value for k in call.keywords]] \
            == [name] and all(k.arg == "dtype" for k in call.keywords)

    def generic_visit(self, node):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(node, field, self._body(stmts))
        for h in getattr(node, "handlers", None) or []:
            h.body = self._body(h.body)
        for field, value in ast.iter_fields(node):
            if field in ("body", "orelse", "finalbody", "handlers"):
                continue
            if isinstance(value, list):
                setattr(node, field, [self.visit(v) if isinstance(v, ast.AST) else v for v in value])
            elif isinstance(value, ast.AST):
                setattr(node, field, self.visit(value))
        return node

    def visit_Module(self, node: ast.Module):
        node.body = self._body(node.body)
        return node

    def visit_Call(self, node: ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id in self.helpers:
            return self._dtype_of(node)
        return self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp):
        # `h(L, flag) or x.dtype` (expression form) and `w or x.dtype` (alias form): the cast's dtype.
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Or) and len(node.values) == 2 and isinstance(node.values[1], ast.Attribute) \
                and node.values[1].attr == "dtype":
            return node.values[0]
        return node

    def visit_Name(self, node: ast.Name):
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return self.values[node.id]
        return node
