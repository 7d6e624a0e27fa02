"""A top-level class of an analysed file that holds no site line is blanked whole in the reduced
text (core/regions.py: its body becomes one `pass` and blank lines, line numbers kept; its facts
come from its own text). What reads a file's functions from the tree reads such a class back
where it must: the callers of a function (analysis/flow/callers.py), a finding's scope, what a
file compiles (analysis/compiled_code.py reads the whole tree).

Each test holds the reduced tree to the whole one: the same functions, the same scopes, the same
callers found."""

from __future__ import annotations

import ast

from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.analysis.flow.callers import GenericHolders
from dtype_lint.analysis.index.class_facts import ProjectFacts
from dtype_lint.analysis.index.class_index import QuantizableLayerIndex
from dtype_lint.api import make_config
from dtype_lint.core import regions, trees
from dtype_lint.core.source import SourceFile
from dtype_lint.rule import RuleFacts

TEXT = """\
import torch


def project(x, layer):
    return layer(x.to(layer.weight.dtype))


class Site(torch.nn.Module):
    def forward(self, x):
        return x.to(self.proj.weight.dtype)


@decorated
class Quiet(torch.nn.Module):
    \"\"\"A class no rule reads.\"\"\"

    scale = 2

    def __init__(self, layer):
        super().__init__()
        self.layer = layer
        self.a = 1
        self.b = 2

    def short(self, x):
        return project(x, self.layer)

    def long(self, x):
        def inner(y):
            return y * self.a
        y = inner(x)
        y = y + self.b
        return project(y, self.layer)
"""
SITE_LINES = [(5, 5), (10, 10)]


def _facts(tree: ast.Module, text: str = TEXT) -> RuleFacts:
    return RuleFacts(SourceFile("m.py", text, "m"), tree, make_config(),
                     ProjectFacts(QuantizableLayerIndex([], [], [])), {}, frozenset({"weight"}))


def _reduced(text: str = TEXT, spans=SITE_LINES) -> ast.Module:
    trees.release("m.py")
    return trees.parse_reduced("m.py", text, spans, lazy_classes=True)


def test_a_class_without_a_site_line_is_blanked_whole_and_read_back_alike():
    tree = _reduced()
    quiet = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Quiet")
    assert [type(s) for s in quiet.body] == [ast.Pass] and quiet.lineno == 14
    site = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Site")
    assert site.body[0].body[0].lineno == 10  # kept where it stands
    facts = _facts(tree)
    region, last = facts._blanked_classes[14]
    assert last == 33
    whole = _facts(ast.parse(TEXT))
    read_back = {(c.fn.name, c.fn.lineno, c.class_qualname, c.scope_name) for c in facts.blanked_class_functions(region)}
    assert read_back == {(c.fn.name, c.fn.lineno, c.class_qualname, c.scope_name) for c in whole.functions
                         if 14 <= c.fn.lineno <= 33}


def test_a_scope_inside_a_class_blanked_whole_is_its_function():
    whole_tree = ast.parse(TEXT)
    reduced, whole = _facts(_reduced()), _facts(whole_tree)
    for node in ast.walk(whole_tree):
        if isinstance(node, (ast.expr, ast.stmt)):
            assert reduced.scope_of(node) == whole.scope_of(node), ast.unparse(node)


def test_the_callers_in_a_class_blanked_whole_are_found():
    reduced, whole = _facts(_reduced()), _facts(ast.parse(TEXT))
    found = GenericHolders(reduced.functions, ("m.py", TEXT), reduced._blanked_callers)
    every = GenericHolders(whole.functions, ("m.py", TEXT))
    function = next(c for c in whole.functions if c.fn.name == "project")
    got = sorted((ast.unparse(arg), caller.scope_name, caller.exempt) for arg, caller, _ in found.passed(function, "layer"))
    want = sorted((ast.unparse(arg), caller.scope_name, caller.exempt) for arg, caller, _ in every.passed(function, "layer"))
    assert got == want == [("self.layer", "Quiet.long", False), ("self.layer", "Quiet.short", False)]


def test_a_class_that_holds_a_site_line_is_not_blanked_whole():
    tree = _reduced(spans=SITE_LINES + [(26, 26)])  # a line of Quiet.short
    quiet = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Quiet")
    assert len(quiet.body) > 1 and not getattr(tree, trees.BLANKED_CLASSES, {})


METHOD = st.sampled_from([
    "    def f(self, x):\n        return x\n",
    "    def g(self, x):\n        y = x\n        y = y + 1\n        y = y * 2\n        return y\n",
    "    scale = 2\n",
    "    '''doc'''\n",
    "    @property\n    def p(self):\n        return self.a\n",
    "    def s(self):\n        s = '''\nx = 1\n'''\n        return s\n",
    "    def k(self, x):\n        return (\n            x\n        )\n",
])


@settings(max_examples=60, deadline=None)
@given(st.lists(METHOD, min_size=1, max_size=6), st.lists(METHOD, min_size=1, max_size=4))
def test_a_reduced_tree_with_classes_blanked_whole_keeps_every_kept_line(quiet, site):
    """Whatever the classes hold, the reduced parse checks out (or the whole file is parsed), and
    every statement of the class with a site stands at its line in both trees."""
    text = ("class Quiet:\n" + "".join(quiet) + "\n\nclass Site:\n" + "".join(site)
            + "    def w(self):\n        return self.proj.weight.dtype\n")
    lines = text.count("\n")
    tree = _reduced(text, [(lines, lines)])
    whole = ast.parse(text)
    reduced_site = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Site")
    whole_site = next(n for n in whole.body if isinstance(n, ast.ClassDef) and n.name == "Site")
    assert [(type(s), s.lineno) for s in reduced_site.body] == [(type(s), s.lineno) for s in whole_site.body]
    blanked = getattr(tree, trees.BLANKED_CLASSES, {})
    reduced_quiet = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Quiet")
    if blanked:
        assert [type(s) for s in reduced_quiet.body] == [ast.Pass]
        assert regions.class_regions(text) is not None
