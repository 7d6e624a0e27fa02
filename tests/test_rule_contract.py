"""The rule contract (dtype_lint/rule.py): facts are declared, scope and kind are the engine's,
fix availability is enforced, examples may be dedented triple-quoted blocks."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.analysis.index.class_facts import ProjectFacts
from dtype_lint.analysis.index.class_index import QuantizableLayerIndex
from dtype_lint.api import make_config
from dtype_lint.core.findings import Edit, Fix
from dtype_lint.core.source import SourceFile
from dtype_lint.rule import (
    FixAvailability,
    Invalid,
    Rule,
    RuleContext,
    RuleContractError,
    RuleFacts,
    Valid,
    lines_holding,
)

CODE = """\
def outer(x):
    def inner(y):
        return y.weight
    return x.weight


class Block:
    @staticmethod
    def forward(x):
        return x.weight
"""


class _Probe(Rule):
    code = "DTL999"
    name = "probe"
    summary = "test rule"
    facts = frozenset()


def _context(rule=_Probe, text: str = CODE):
    tree = ast.parse(text)
    facts = RuleFacts(SourceFile("m.py", text, "m"), tree, make_config(), ProjectFacts(QuantizableLayerIndex([], [], [])),
                      {}, frozenset({"weight"}))
    sink: list = []
    return RuleContext(rule(), facts, sink), tree, sink


def _reads(tree):
    return sorted((n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "weight"),
                  key=lambda n: n.lineno)


def test_report_derives_the_scope_of_the_innermost_function():
    ctx, tree, sink = _context()
    for node in _reads(tree):
        ctx.report(node, "m")
    ctx.report(tree.body[1], "at module level")
    assert [f.scope for f in sink] == ["outer.inner", "outer", "Block.forward", "<module>"]
    assert {f.kind for f in sink} == {"site"}


def test_report_takes_a_given_scope_and_kind():
    ctx, tree, sink = _context()
    finding = ctx.report(tree.body[0], "def", scope="outer", kind="definition")
    assert (finding.scope, finding.kind) == ("outer", "definition")
    with pytest.raises(RuleContractError, match="kind"):
        ctx.report(tree.body[0], "m", kind="function")


def test_undeclared_tree_and_imports_are_refused():
    ctx, _tree, _sink = _context()
    with pytest.raises(RuleContractError, match="tree"):
        _ = ctx.tree
    with pytest.raises(RuleContractError, match="imports"):
        _ = ctx.imports
    assert not hasattr(ctx, "project")

    class Declared(_Probe):
        facts = frozenset({"tree", "imports"})

    ctx, tree, _ = _context(Declared)
    assert ctx.tree is tree and ctx.imports == {}


def test_a_rule_declaring_no_fix_cannot_report_one():
    ctx, tree, _sink = _context()
    fix = Fix("x", True, (Edit(0, 0, ""),))
    with pytest.raises(RuleContractError, match="fix_availability"):
        ctx.report(tree.body[0], "m", fix=fix)

    class Fixing(_Probe):
        fix_availability = FixAvailability.SOMETIMES
        fix_note = "safe"

    ctx, tree, sink = _context(Fixing)
    ctx.report(tree.body[0], "m", fix=fix)
    assert sink[0].fix is fix
    assert Fixing.fix_column() == "sometimes: safe" and _Probe.fix_column() == "none"


def test_examples_accept_dedented_triple_quoted_blocks():
    valid = Valid("""
        import torch
        x = torch.ones(2)
        """)
    assert valid.code == "import torch\nx = torch.ones(2)\n"
    invalid = Invalid("""
        if a:
            b = 1
        """, expected_replacement="""
        b = 1
        """)
    assert invalid.code == "if a:\n    b = 1\n" and invalid.expected_replacement == "b = 1\n"
    assert Valid("x = 1\n").code == "x = 1\n"  # written as is


@pytest.mark.parametrize("text", [
    "a = 1\nw = x.weight\n\ny = dtype\nweight",
    "w = x.weight\r\nz = 1\r\nv = m.parameters()\r\n",
    "w = x.weight\rz = 1\rweight\n\rweight",
    "x = 1\x0cweight = 2\n\x85weight\u2028weight\nweightweight\n\n",
    "",
    "no marker here\n",
])
def test_marker_lines_are_the_lines_holding_a_marker_whatever_the_line_breaks(text):
    # Lines break at \r\n, \r and \n only (core/source.py), as `ast` counts them.
    facts = RuleFacts(SourceFile("m.py", text, "m"), ast.Module(body=[], type_ignores=[]), make_config(),
                      ProjectFacts(QuantizableLayerIndex([], [], [])), {}, frozenset({"weight", "parameters()"}))
    expected = [i for i, line in enumerate(SourceFile("m.py", text, "m").lines, 1)
                if "weight" in line or "parameters()" in line]
    assert facts._marker_lines == expected


# Pieces that make markers, overlapping ones, parts of them, and several on a line or at its end.
MARKER_PIECES = st.sampled_from(["weight", "weigh", "t", ".dtype", ".", "dtype", "parameters()", "parameters(",
                                 ")", "\n", "\n\n", " ", "é", "x", "w"])


@settings(max_examples=500, deadline=None)
@given(st.lists(MARKER_PIECES, max_size=40).map("".join),
       st.sampled_from([("weight",), (".dtype", "weight"), (".dtype", "parameters()", "weight"), ("t", "weight")]))
def test_lines_holding_finds_the_lines_a_test_per_line_finds(text, markers):
    # Each marker is found by `str.find` and the search goes on from the next line: the lines are
    # those holding a marker, in order, each once, however markers overlap or share a line.
    assert lines_holding(text, markers) == [i for i, line in enumerate(text.split("\n"), 1)
                                            if any(m in line for m in markers)]


NAMING = """\
def casts(x):
    return x.to(torch.float16)  # no marker word: no candidate


def reads(layer):
    d = layer.dtype
    return layer.weight


def spelled(layer):
    d = layer.dtype
    return getattr(layer, "wei" "ght")


def neither(layer):
    return layer.dtype
"""


def test_the_candidates_naming_a_word_are_those_whose_lines_spell_it():
    # With every rule on, every function saying `dtype` is a candidate; DTL003 walks only those
    # whose own lines spell `weight` or `getattr` (a read must), DTL004 those saying `dtype`.
    facts = RuleFacts(SourceFile("m.py", NAMING, "m"), ast.parse(NAMING), make_config(),
                      ProjectFacts(QuantizableLayerIndex([], [], [])), {}, frozenset({"dtype"}))
    assert [c.fn.name for c in facts.candidates] == ["reads", "spelled", "neither"]
    assert [c.fn.name for c in facts.candidates_naming(("weight", "getattr"))] == ["reads", "spelled"]
    assert [c.fn.name for c in facts.candidates_naming(("dtype",))] == ["reads", "spelled", "neither"]
    assert facts.candidates_naming(("weight", "getattr")) is facts.candidates_naming(("weight", "getattr"))
    # An identifier may be spelled in characters the parser normalises: a text that is not ASCII
    # keeps every candidate.
    text = NAMING + "\n\ndef other(layer):\n    return layer.ｗｅｉｇｈｔ.dtype\n"
    facts = RuleFacts(SourceFile("m.py", text, "m"), ast.parse(text), make_config(),
                      ProjectFacts(QuantizableLayerIndex([], [], [])), {}, frozenset({"dtype"}))
    assert [c.fn.name for c in facts.candidates_naming(("weight", "getattr"))] == \
        ["reads", "spelled", "neither", "other"]
    facts.release()  # the answers go with the file's other facts
    assert "_naming" not in facts.__dict__
