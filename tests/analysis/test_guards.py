"""The one guard engine (analysis/guard_engine/dominance.py, guards.py, guard_flags.py, file_guards.py): what
dominates a site, what a test proves under each question, flags and predicates, and the one policy
where DTL001 and DTL003 answer differently."""

from __future__ import annotations

import ast
import textwrap

import pytest

from dtype_lint.analysis.function_walk import parent_map
from dtype_lint.analysis.guard_engine.dominance import dominators, same_expression
from dtype_lint.analysis.guard_engine.guard_flags import ClassGuardFlags, is_predicate, module_predicates
from dtype_lint.analysis.guard_engine.guards import (
    NOTHING_KNOWN,
    STORAGE_UNPACKED,
    WEIGHT_PRESENT,
    BackendNames,
    GuardKnowledge,
    assigned_before,
    backend_check,
    implies_no_weight,
    implies_weight,
    names_unquantized_class,
    unpacked_storage_guard,
    weight_present_at,
)
from dtype_lint.api import check_source


def _parse(code: str) -> ast.Module:
    return ast.parse(textwrap.dedent(code))


def _expr(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _site(tree: ast.Module, text: str) -> ast.AST:
    """The first node whose source is `text`."""
    return next(n for n in ast.walk(tree) if isinstance(n, (ast.expr, ast.stmt)) and ast.unparse(n) == text)


LAYER = _expr("self.proj")


def test_parent_map_maps_every_child_to_its_parent():
    tree = _parse("def f(x):\n    return x + 1\n")
    parents = parent_map(tree)
    ret = tree.body[0].body[0]
    assert parents[id(ret)] is tree.body[0]
    assert parents[id(ret.value.left)] is ret.value
    assert id(tree) not in parents


def test_dominators_innermost_first_with_polarity_and_kind():
    tree = _parse("""
        def f(self, a, b):
            if not a:
                return None
            try:
                if b:
                    pass
                else:
                    y = a and self.proj.weight
            except AttributeError:
                pass
        """)
    site = _site(tree, "self.proj.weight")
    found = [(ast.unparse(d.test) if d.test is not None else None, d.holds, d.kind)
             for d in dominators(site, parent_map(tree))]
    assert found == [("a", True, "operand"), ("b", False, "branch"), (None, True, "handler"),
                     ("not a", False, "exit")]


def test_dominators_or_operand_failed_and_stop_at_the_function():
    tree = _parse("""
        if outer:
            def f(a):
                return a or g()
        """)
    site = _site(tree, "g()")
    found = [(ast.unparse(d.test), d.holds) for d in dominators(site, parent_map(tree))]
    assert found == [("a", False)]  # the module-level `if outer` is outside the function


def test_same_expression_ignores_store_or_load():
    stored = ast.parse("self.proj = 1").body[0].targets[0]
    assert same_expression(stored, LAYER)
    assert not same_expression(_expr("self.other"), LAYER)


@pytest.mark.parametrize("name", ["UnquantizedLinearMethod", "FusedUnquantizedLinearMethod",
                                  "m.UnquantizedEmbeddingMethod", "(UnquantizedLinearMethod, FusedUnquantizedLinearMethod)"])
def test_unquantized_class_names(name):
    assert names_unquantized_class(_expr(name))


@pytest.mark.parametrize("name", ["Fp8LinearMethod", "(UnquantizedLinearMethod, Fp8LinearMethod)", "()"])
def test_not_unquantized_class_names(name):
    assert not names_unquantized_class(_expr(name))


def test_backend_check_trusts_concrete_backends_only_when_told():
    fp8 = _expr("isinstance(self.proj.quant_method, Fp8LinearMethod)")
    assert not backend_check(fp8, BackendNames(("quant_config",)))
    assert backend_check(fp8, BackendNames(("quant_config",), concrete=lambda name: name == "Fp8LinearMethod"))
    assert backend_check(_expr("quant_config is None"), BackendNames(("quant_config",)))
    assert not backend_check(_expr("cfg is None"), BackendNames(("quant_config",)))


def test_implies_weight_and_its_negation():
    known = GuardKnowledge(flags=frozenset({"self.fast"}), predicates=frozenset({"ready"}))
    for test in ("hasattr(self.proj, 'weight')", "self.fast", "ready(self.proj)", "self.fast and n > 2",
                 "not (self.fast is None)", "hasattr(self.proj, 'weight') or self.fast"):
        assert implies_weight(_expr(test), LAYER, known), test
    for test in ("hasattr(other, 'weight')", "n > 2 or self.fast", "self.slow"):
        assert not implies_weight(_expr(test), LAYER, known), test
    assert implies_no_weight(_expr("not hasattr(self.proj, 'weight')"), LAYER, known)
    assert implies_no_weight(_expr("quant_config is not None"), LAYER,
                             GuardKnowledge(backends=BackendNames(("quant_config",))))


def test_weight_present_at_reads_every_dominator_kind():
    code = """
        def f(self, n):
            if not hasattr(self.proj, "weight"):
                return n
            return self.proj.weight.shape
        def g(self):
            try:
                return self.proj.weight
            except AttributeError:
                return None
        def h(self):
            return self.proj.weight
        """
    tree = _parse(code)
    parents = parent_map(tree)
    reads = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "weight"),
                   key=lambda n: n.lineno)
    assert [weight_present_at(r, r.value, parents, NOTHING_KNOWN) for r in reads] == [True, True, False]


# `conv.weight = ...` earlier in the function, then a read of `conv.weight` (the last line of
# each body): (body, whether the read is proven to find a weight).
ASSIGNED = {
    "set, then read": ("conv.weight = nn.Parameter(w)\nuse(conv.weight)", True),
    "set as one target of a tuple": ("conv.weight, conv.bias = fold(w, b)\nuse(conv.weight)", True),
    "set in an enclosing block": ("conv.weight = nn.Parameter(w)\nif norm:\n    use(conv.weight)", True),
    "the read inside the statement that sets it again":
        ("conv.weight = P(w)\nif norm:\n    conv.weight, conv.bias = fold(conv.weight, conv.bias)", True),
    "a method of the weight tensor between": ("conv.weight = P(w)\nconv.weight.data.zero_()\nuse(conv.weight)",
                                              True),
    "another attribute stored between": ("conv.weight = P(w)\nconv.bias = P(b)\nuse(conv.weight)", True),
    "set to None": ("conv.weight = None\nuse(conv.weight)", False),
    "set to None between": ("conv.weight = P(w)\nconv.weight = None\nuse(conv.weight)", False),
    "rebound between": ("conv.weight = P(w)\nconv = make()\nuse(conv.weight)", False),
    "rebound by a `for` between": ("conv.weight = P(w)\nfor conv in convs:\n    use(conv.weight)", False),
    "rebound after the read in a loop": ("conv.weight = P(w)\nwhile more():\n    use(conv.weight)\n"
                                         "    conv = make()", False),
    "rebound by an `except ... as`": ("conv.weight = P(w)\ntry:\n    pass\nexcept E as conv:\n    pass\n"
                                      "use(conv.weight)", False),
    "handed on bare between": ("conv.weight = P(w)\nrequantize(conv)\nuse(conv.weight)", False),
    "aliased between": ("conv.weight = P(w)\nother = conv\nuse(conv.weight)", False),
    "a method of the layer between": ("conv.weight = P(w)\nconv.reset_parameters()\nuse(conv.weight)", False),
    "deleted between": ("conv.weight = P(w)\ndel conv.weight\nuse(conv.weight)", False),
    "deleted through a private attribute": ("conv.weight = P(w)\ndel conv._parameters['weight']\n"
                                            "use(conv.weight)", False),
    "set only in a branch": ("if c:\n    conv.weight = P(w)\nuse(conv.weight)", False),
    "set in a `try`, read in its handler": ("try:\n    conv.weight = P(w)\nexcept E:\n    use(conv.weight)", False),
    "read before it is set": ("use(conv.weight)\nconv.weight = P(w)", False),
    "a nested function names it": ("def drop():\n    del conv.weight\nconv.weight = P(w)\ndrop()\n"
                                   "use(conv.weight)", False),
    "declared nonlocal": ("nonlocal conv\nconv.weight = P(w)\nuse(conv.weight)", False),
}


@pytest.mark.parametrize("case", sorted(ASSIGNED))
def test_a_weight_the_function_set_itself_is_present(case):
    """A read dominated by `conv.weight = <not None>` in the same function, `conv` a plain name
    that nothing between rebinds, deletes from, hands on or calls a method of, finds the weight
    (torch's `to_float`: `conv.weight = nn.Parameter(...)`, then `fuse_conv_bn_weights(conv.weight, ...)`)."""
    body, expected = ASSIGNED[case]
    tree = _parse("def f(conv, w, b, c, norm, convs):\n" + textwrap.indent(body, "    ") + "\n")
    parents = parent_map(tree)
    read = max((n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "weight"
                and isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)),
               key=lambda n: (n.lineno, n.col_offset))  # the last read of `conv.weight`
    assert assigned_before(read, read.value, parents) is expected
    assert weight_present_at(read, read.value, parents, NOTHING_KNOWN) is expected


def test_an_assigned_weight_counts_for_a_plain_name_only():
    """`self.proj.weight = ...` proves nothing: any call between may rebind `self.proj`."""
    tree = _parse("def f(self, w):\n    self.proj.weight = P(w)\n    return self.proj.weight.t()\n")
    read = _site(tree, "self.proj.weight.t").value
    assert not assigned_before(read, read.value, parent_map(tree))


def test_storage_unpacked_does_not_trust_hasattr_or_handlers():
    """STORAGE_UNPACKED asks more than WEIGHT_PRESENT: `.weight` may exist and be int32."""
    assert WEIGHT_PRESENT.hasattr_counts and not STORAGE_UNPACKED.hasattr_counts
    assert WEIGHT_PRESENT.handler_counts and not STORAGE_UNPACKED.handler_counts
    tree = _parse("""
        def f(self, x):
            if hasattr(self.proj, "weight"):
                try:
                    return x.to(self.proj.weight.dtype)
                except AttributeError:
                    return x
        """)
    site = _site(tree, "x.to(self.proj.weight.dtype)")
    parents = parent_map(tree)
    assert unpacked_storage_guard(site, parents, LAYER, {}, None, "m.py") is None
    assert weight_present_at(site, LAYER, parents, NOTHING_KNOWN)


def test_storage_unpacked_evidence_names_the_test():
    tree = _parse("""
        def f(self, x):
            if isinstance(self.proj.quant_method, FusedUnquantizedLinearMethod):
                return x.to(self.proj.weight.dtype)
        """)
    site = _site(tree, "x.to(self.proj.weight.dtype)")
    evidence = unpacked_storage_guard(site, parent_map(tree), LAYER, {}, None, "m.py")
    assert evidence is not None and "FusedUnquantizedLinearMethod" in evidence.message and evidence.line == 3


def test_predicates_and_module_predicates():
    tree = _parse("""
        def ready(layer):
            weight = getattr(layer, "weight", None)
            if weight is None:
                return False
            return True
        def always(layer):
            return True
        def unquantized(layer):
            return isinstance(layer.quant_method, UnquantizedLinearMethod)
        """)
    assert is_predicate(tree.body[0], NOTHING_KNOWN)
    assert not is_predicate(tree.body[1], NOTHING_KNOWN)
    assert module_predicates(tree, ("quant_config",)) == {"ready", "unquantized"}


def test_class_flags_reach_a_fixed_point_across_methods():
    tree = _parse("""
        class Gate:
            def __init__(self, n):
                self.is_unquantized = isinstance(self.quant_method, UnquantizedLinearMethod)
                fast = n % 8 == 0
                fast &= self.is_unquantized
                self.use_fast = fast
            def enable(self):
                self.other = True
            def forward(self, x):
                return x
        """)
    flags = ClassGuardFlags(tree, lambda: frozenset(), BackendNames())
    forward = tree.body[0].body[2]
    known = flags.of(forward)
    assert {"self.is_unquantized", "self.use_fast"} <= known.flags
    assert "self.other" not in known.flags


# ---- the rules agree where they should, and differ by the one policy ---------------------------

_MODULE = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear, FusedUnquantizedLinearMethod
from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod


class Attn(torch.nn.Module):
    def __init__(self, proj: ColumnParallelLinear):
        super().__init__()
        self.proj = proj

    def forward(self, x):
        if isinstance(self.proj.quant_method, {method}):
            x = x.to(self.proj.weight.dtype)
            n = self.proj.weight.shape[0]
        return x
"""


def _codes(code: str) -> list[str]:
    return sorted(f.code for f in check_source(code, filename="attn.py", settings={"select": ["DTL001", "DTL003"]}))


def test_dtl001_and_dtl003_both_silent_under_fused_unquantized_method():
    """`FusedUnquantizedLinearMethod` proves the layer unquantized: its storage is the plain float
    weight, so neither the cast (DTL001) nor the read (DTL003) is reported."""
    assert _codes(_MODULE.format(method="FusedUnquantizedLinearMethod")) == []
    unguarded = _MODULE.replace("        if isinstance(self.proj.quant_method, {method}):\n", "        if True:\n")
    assert _codes(unguarded) == ["DTL001", "DTL003"]


def test_policy_a_named_backend_check_guards_the_read_but_not_the_cast():
    """Under `isinstance(L.quant_method, Fp8LinearMethod)` the weight exists (DTL003 silent) but
    is float8: the cast to it is still wrong (DTL001 reports)."""
    assert _codes(_MODULE.format(method="Fp8LinearMethod")) == ["DTL001"]


def test_no_rule_module_holds_engine_code():
    """Rules ask the guard engine; none builds a parent map, walks dominators, iterates flags to a
    fixed point or keeps a module-level cache of its own (and DTL003 stays a rule-sized module)."""
    from pathlib import Path

    rules = sorted((Path(__file__).resolve().parents[2] / "rules").glob("dtl*.py"))
    assert rules
    for path in rules:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        calls = {ast.unparse(n.func).rsplit(".", 1)[-1] for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert not calls & {"iter_child_nodes", "dominators", "parent_map", "stat"}, path.name
        for stmt in tree.body:
            value = getattr(stmt, "value", None)
            empty = (isinstance(value, ast.Dict) and not value.keys) or (
                isinstance(value, ast.Call) and ast.unparse(value.func) in ("dict", "set", "OrderedDict") and not value.args)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and empty:  # a cache filled at run time
                raise AssertionError(f"{path.name}: module-level mutable `{ast.unparse(stmt)[:60]}`")
        classes = [stmt.name for stmt in tree.body if isinstance(stmt, ast.ClassDef)]
        assert len(classes) == 1, f"{path.name}: classes besides the rule (an engine of its own?): {classes}"
    # Rule-sized: its own code, not its documentation (the docstring docs/rules/ is made from) or
    # its VALID/INVALID examples, which live beside it by design.
    assert _code_lines(rules[0].parent / "dtl003_unguarded_weight_access.py") < 150


def _code_lines(path) -> int:
    """Non-blank, non-comment lines of a rule module outside docstrings, multi-line example strings
    and the rule's VALID/INVALID lists."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    skip: set[int] = set()

    def mark(node: ast.AST) -> None:
        skip.update(range(node.lineno, node.end_lineno + 1))

    def is_doc(stmt: ast.stmt) -> bool:
        return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)

    for stmt in tree.body:
        if is_doc(stmt) or (isinstance(stmt, ast.Assign) and any(
                isinstance(n, ast.Constant) and isinstance(n.value, str) and "\n" in n.value for n in ast.walk(stmt.value))):
            mark(stmt)
        if isinstance(stmt, ast.ClassDef):
            for item in stmt.body:
                target = item.targets[0] if isinstance(item, ast.Assign) else getattr(item, "target", None)
                if is_doc(item) or (isinstance(target, ast.Name) and target.id in ("VALID", "INVALID")):
                    mark(item)
    return sum(1 for number, line in enumerate(text.splitlines(), 1)
               if number not in skip and line.strip() and not line.lstrip().startswith("#"))
