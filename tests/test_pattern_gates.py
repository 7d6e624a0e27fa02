"""Pattern gates (`Rule.pattern_gates`, analysis/pattern_gates.py): DTL001's casts to
`self.<name>` are sites only in a class whose MRO may store `<name>` from a weight or get it from
one, decided from the class index and the MRO's texts before the file is parsed.

A gate must change what is parsed, never what is found: every project here is checked with the
gates and without them, and the findings must be the same object for object. Each project holds
the shapes that make the gate keep a cast (a holder in another module, a nested holder class, a
getter in a base, `self` annotated or assigned, a function patched onto a holder) beside the ones
it drops (a class that stores no such name)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_project import write_tree

from dtype_lint.analysis.storage.stored_reads import _self_bound
from dtype_lint.api import check_paths, make_config
from dtype_lint.core import trees
from dtype_lint.rules import RULES_BY_CODE

HOLDER = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


class Tower(torch.nn.Module):
    def __init__(self, hidden, quant_config=None):
        super().__init__()
        self.proj = ColumnParallelLinear(hidden, hidden, quant_config=quant_config)
        self.dtype = self.proj.weight.dtype

    @property
    def head_dtype(self):
        return self.proj.weight.dtype
"""

FILES = {
    "gatedproj/__init__.py": "",
    "gatedproj/tower.py": HOLDER,
    # a subclass in another module: the holder is in its MRO
    "gatedproj/sub.py": """\
        from gatedproj.tower import Tower


        class SubTower(Tower):
            def embed(self, pixels):
                return pixels.to(self.dtype)

            def head(self, pixels):
                assert pixels.dtype.is_floating_point
                return pixels.to(self.head_dtype)
        """,
    # a class that stores no dtype: the only reason to parse this file is dropped
    "gatedproj/plain.py": """\
        import torch


        class Plain(torch.nn.Module):
            def __init__(self, dtype):
                super().__init__()
                self.dtype = dtype

            def forward(self, x):
                return x.to(self.dtype)
        """,
    # a nested holder class, and a plain class beside it in the same file
    "gatedproj/nested.py": """\
        import torch
        from vllm.model_executor.layers.linear import ColumnParallelLinear


        class Outer:
            class Inner(torch.nn.Module):
                def __init__(self, hidden, quant_config=None):
                    super().__init__()
                    self.proj = ColumnParallelLinear(hidden, hidden, quant_config=quant_config)
                    self.dtype = self.proj.weight.dtype

                def forward(self, x):
                    return x.to(self.dtype)


        class Other(torch.nn.Module):
            def forward(self, x):
                return x.to(self.dtype)
        """,
    # `self` given a class by an annotation, outside any class
    "gatedproj/annotated.py": """\
        from gatedproj.tower import Tower


        def embed(self: Tower, pixels):
            return pixels.to(self.dtype)
        """,
    # `self` given a class by an assignment
    "gatedproj/assigned.py": """\
        from gatedproj.tower import Tower


        def embed(pixels, hidden):
            self = Tower(hidden, quant_config=object())
            return pixels.to(self.dtype)
        """,
    # a module-level function patched onto the holder: its `self` is a Tower
    "gatedproj/patched.py": """\
        from gatedproj.tower import Tower


        def embed(self, pixels):
            return pixels.to(self.dtype)


        Tower.embed = embed
        """,
    # names no class of the file stores or gets
    "gatedproj/getters.py": """\
        import torch


        class Plain(torch.nn.Module):
            def forward(self, x):
                assert x.dtype.is_floating_point
                return x.to(self.head_dtype).to(self.acc_dtype)
        """,
    # a getter of that name defined here: kept for the parse, which finds it returns no weight dtype
    "gatedproj/own_getter.py": """\
        import torch


        class Plain(torch.nn.Module):
            @property
            def head_dtype(self):
                return torch.float16

            def forward(self, x):
                assert x.dtype.is_floating_point
                return x.to(self.head_dtype)
        """,
}


def _run(root: Path) -> list[tuple]:
    config = make_config({"helper": "gatedproj.dtypes:get_layer_input_dtype"}, root=root)
    result = check_paths([str(root)], config, jobs=1, use_cache=False)
    return sorted((Path(f.path).relative_to(root).as_posix(), f.span.line, f.code, f.message, f.evidence)
                  for f in result.findings)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_tree(tmp_path, {path: textwrap.dedent(text) for path, text in FILES.items()})


def test_gates_change_no_finding(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gated = _run(project)
    monkeypatch.setattr(RULES_BY_CODE["DTL001"], "pattern_gates", {})
    assert _run(project) == gated
    # not a vacuous comparison: the kept shapes are found, the dropped one is not
    found = {(path, line) for path, line, *_ in gated}
    assert {("gatedproj/sub.py", 6), ("gatedproj/sub.py", 10), ("gatedproj/nested.py", 13), ("gatedproj/annotated.py", 5),
            ("gatedproj/assigned.py", 6), ("gatedproj/patched.py", 5)} <= found
    assert not {path for path, *_ in gated} & {"gatedproj/plain.py", "gatedproj/getters.py", "gatedproj/own_getter.py"}


def test_a_file_whose_casts_no_class_can_hold_is_not_parsed(project: Path) -> None:
    with mock.patch.object(trees, "parse_reduced", wraps=trees.parse_reduced) as parse_reduced:
        _run(project)
    parsed = {Path(call.args[0]).name for call in parse_reduced.call_args_list}
    assert "plain.py" not in parsed and "getters.py" not in parsed
    assert {"sub.py", "nested.py", "annotated.py", "assigned.py", "patched.py", "own_getter.py"} <= set(parsed)


@pytest.mark.parametrize(("code", "bound"), [
    ("self = Tower()", True),
    ("if c: self = X()", True),
    ("a = self = X()", True),
    ("x = y; self = z", True),
    ("    self: Tower = t", True),
    ("(self := make())", True),
    ("def f(self: Tower):", True),
    ("def f(\n    self: Tower,", True),
    ("def f(a,\n   self: Tower)", True),
    ("def f(*, self: Tower)", True),
    ("x.self = 1", False),
    ("x.\\\n self = 1", False),
    ("myself = 1", False),
    ("for a in self:", False),
    ("if x in self: pass", False),
    ("if a == self:", False),
    ("if self:", False),
    ("lambda self: 1", False),
    ("f(x, self=self)", False),
])
def test_what_binds_self(code: str, bound: bool) -> None:
    assert _self_bound("\n" + code + "\n") is bound


def test_gates_change_no_finding_in_the_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every shape the bundled fixtures hold, the stored dtypes and getters of #39 among them."""
    root = Path(__file__).resolve().parent.parent / "fixtures"
    gated = _run(root)
    monkeypatch.setattr(RULES_BY_CODE["DTL001"], "pattern_gates", {})
    assert _run(root) == gated and gated


def test_a_pattern_another_rule_reads_ungated_keeps_every_match() -> None:
    """A gate answers for a pattern only when every active rule reading it gates it alike: one
    rule's gate must not take a site from another rule (nor a gate no rule asked for run)."""
    from dtype_lint.run.file_analysis import _gated

    pattern = r"\.to\(self\.dtype\)"

    def rule(name: str, gates: dict) -> type:
        return type(name, (), {"marker": ".dtype", "patterns": (pattern,), "pattern_gates": gates,
                               "reads_helper_callers": False})
    text = "class A:\n    def f(self, x):\n        return x.to(self.dtype)\n"
    gated, plain = rule("Gated", {pattern: "no-such-gate"}), rule("Plain", {})
    for active in ([gated, plain], [plain, gated], [gated, rule("Other", {pattern: "another-gate"})]):
        still, spans = _gated(active, text, ({}, {}), None, "m", lambda: False)  # type: ignore[arg-type]
        assert still == active and spans is None
    with pytest.raises(ValueError, match="no pattern gate named"):
        _gated([gated], text, ({}, {}), None, "m", lambda: False)  # type: ignore[arg-type]


# Statements that bind `self` (or look as if they might), and ones that only use it, each in a
# form the tokenizer accepts: blanks, line continuations and brackets across lines.
_BINDS = ["self = make()", "self: Holder = make()", "self: Holder", "a = self = make()", "y = (self := make())",
          "if c: self = make()", "x = 1; self = make()", "def f(a, self: Holder): pass", "def f(*, self: Holder): pass",
          "def f(\n    a,\n    self: Holder,\n): pass", "self \\\n    = make()", "def f(a,\\\n   self: Holder): pass"]
_USES = ["x = self.dtype", "obj.self = 1", "obj. self = 1", "f(a, self=self)", "if a == self: pass",
         "for a in self: pass", "lambda self: 1", "myself = 1", "return_self = self", "y = [self, a]",
         "d = {'self': 1}", "z = self if c else a", "def f(self, x): return self"]


def _class_giving_binding(tree: ast.Module) -> bool:
    """Does the code bind the name `self` where FunctionScope would take a class from it: an
    assignment, an annotated assignment or a walrus to the bare name, or a parameter's annotation?"""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "self" for t in node.targets):
            return True
        if isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name) \
                and node.target.id == "self":
            return True
        if isinstance(node, ast.arg) and node.arg == "self" and node.annotation is not None:
            return True
    return False


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_BINDS + _USES), min_size=1, max_size=5))
def test_every_binding_the_resolver_follows_is_seen(statements: list[str]) -> None:
    """The gate keeps every cast where a statement gives `self` a class (a superset: a keyword
    argument or a dict key may read as one, which only keeps more)."""
    code = "\n".join(statements) + "\n"
    tree = ast.parse(code)
    if _class_giving_binding(tree):
        assert _self_bound("\n" + code)
    if not any(s in _BINDS for s in statements):
        assert not _class_giving_binding(tree)
