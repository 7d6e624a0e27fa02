"""Flows._flows hands an argument to the recognisers only when `may_carry` passes it (most of the
9,664 calls DTL001 and DTL002 ask about on vLLM 0.34.0 have no such argument). The pre-test must
pass every argument either recogniser answers for: checked here over every argument of every call
in every function of the fixtures and of the package's own source."""

from __future__ import annotations

import ast
from pathlib import Path

from dtype_lint.analysis.flow.flows import may_carry
from dtype_lint.analysis.flow.recognisers import weight_dtype_source, weight_expr
from dtype_lint.analysis.function_walk import own_nodes
from dtype_lint.analysis.index.class_facts import FunctionScope

ROOT = Path(__file__).resolve().parents[1]


def _arguments():
    for path in sorted([*ROOT.joinpath("fixtures").rglob("*.py"), *ROOT.joinpath("dtype_lint").rglob("*.py")]):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeError):
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for scope in (FunctionScope(fn, None), FunctionScope(fn, "m.C")):
                for node in own_nodes(fn):
                    if isinstance(node, ast.Call):
                        yield from ((arg, scope) for arg in node.args)
                        yield from ((kw.value, scope) for kw in node.keywords)


def test_the_pretest_passes_every_argument_a_recogniser_answers_for():
    passed = skipped = answered = 0
    for arg, scope in _arguments():
        found = weight_dtype_source(arg, scope) is not None or weight_expr(arg, scope) is not None
        answered += found
        if may_carry(arg, scope.assigns):
            passed += 1
        else:
            assert not found, ast.unparse(arg)
            skipped += 1
    assert answered > 50, answered  # the fixtures' weights and dtypes are among them
    assert skipped > passed, (skipped, passed)  # and most arguments are spared the recognisers


def test_the_pretest_on_the_shapes_it_reads():
    scope = FunctionScope(ast.parse("def f(x):\n    w = self.proj.weight\n    n = 3\n").body[0], None)
    carrying = ["self.proj.weight", "self.proj.weight.dtype", "m.get_base_layer().weight.data", "w", "n",
                "getattr(self.proj, 'weight')", "a if c else b", "cast(T, w)"]
    spared = ["x", "self.proj", "1", "x.shape", "x[0]", "-w", "(w, w)", "lambda: w"]
    for text in carrying:
        assert may_carry(ast.parse(text, mode="eval").body, scope.assigns), text
    for text in spared:
        assert not may_carry(ast.parse(text, mode="eval").body, scope.assigns), text


def test_a_callee_is_walked_once_for_its_scope_and_its_uses(monkeypatch):
    # `_param_uses` reads the callee's scope and its calls from one walk (each walked it: 0.24 G of
    # vLLM 0.34.0's 24.06 G cold check).
    from types import SimpleNamespace

    from dtype_lint.analysis import function_walk
    from dtype_lint.analysis.flow import flows

    walked: list[str] = []
    real = function_walk.own_nodes

    def counted(fn):
        walked.append(fn.name)
        return real(fn)

    monkeypatch.setattr(function_walk, "own_nodes", counted)
    monkeypatch.setattr(flows, "own_nodes", counted, raising=False)
    fn = ast.parse("def f(x, dtype):\n    d = dtype\n    y = x.to(d)\n    return torch.empty(3, dtype=dtype)\n").body[0]
    found = flows.Flows(SimpleNamespace(index=None), "m", {}, SimpleNamespace(exempt_functions=[]))
    uses = found._param_uses(fn, "m.py", "dtype")
    assert sorted((u.kind, u.what, u.line) for u in uses) == [("alloc", "dtype", 4), ("cast", "dtype", 3)]
    assert walked == ["f"], walked
