"""A closure defined under a block of a function (`if flag:`, `with`, `try`, `for`, `match`)
reads the function's locals exactly as one defined beside them does: a cast in it to a weight's
dtype held in such a local is the same site. Found by triaging trl 1.16.0 with zero configuration
(`grpo_trainer.py`: a forward hook defined under `if`, casting to `lm_head.weight.dtype` read
before it): the function's walk entered a `def` only where it was a statement of the body, so
the closure under `if` was met only by its own walk, which cannot see the local."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cli_runner import dtl  # noqa: E402
from tiny_project import STUB_MODEL_HEAD, assert_fixed_model_runs, fresh_import, stub_project  # noqa: E402

from dtype_lint.analysis.function_walk import own_nodes  # noqa: E402

BLOCKS = {
    "beside": "{body}",
    "if": "if flag:\n    {body}",
    "else": "if not flag:\n    pass\nelse:\n    {body}",
    "with": "with torch.no_grad():\n    {body}",
    "try": "try:\n    {body}\nexcept RuntimeError:\n    raise",
    "except": "try:\n    raise KeyError\nexcept KeyError:\n    {body}",
    "for": "for _ in range(1):\n    {body}",
    "while": "while flag:\n    {body}\n    break",
    "match": "match flag:\n    case True:\n        {body}\n    case _:\n        pass",
    "nested": "if flag:\n    with torch.no_grad():\n        {body}",
}

HEAD = STUB_MODEL_HEAD  # a model of a QLinear handed in, up to its `forward`

CLOSURE = "def inner(y):\n    return y.to(d)\nout = inner(x)"


def model(block: str) -> str:
    depth = BLOCKS[block].split("{body}")[0].rsplit("\n", 1)[-1]  # the indentation `{body}` stands at
    inner = textwrap.indent(CLOSURE, depth).lstrip()
    body = textwrap.indent(BLOCKS[block].format(body=inner), " " * 8)
    return (
        HEAD +
        "    def forward(self, x, flag=True):\n"
        "        d = self.proj.weight.dtype\n"
        "        out = x\n"
        f"{body}\n"
        "        return out\n"
    )


@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_a_closure_under_a_block_is_found_and_its_fix_runs(tmp_path: Path, block: str):
    root = stub_project(tmp_path, model(block))
    before = fresh_import(root)
    x = torch.ones(2, dtype=torch.float32)
    layer = fresh_import(root, "proj.layers").QLinear
    assert before.Model(layer(torch.bfloat16)).forward(x).dtype == torch.bfloat16
    found = dtl(root, "check", "proj", "--no-cache", "--output-format", "concise")
    assert found.returncode == 1 and "proj/model.py:" in found.stdout and "DTL001" in found.stdout, found.stdout
    fixed = dtl(root, "check", "proj", "--fix", "--no-cache")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert_fixed_model_runs(before, fresh_import(root), layer, x)


def test_the_walk_enters_a_def_under_a_block_as_one_beside_it():
    import ast

    beside = ast.parse("def f(x):\n    d = 1\n    def g(y):\n        return y + d\n").body[0]
    under = ast.parse("def f(x):\n    d = 1\n    if x:\n        def g(y):\n            return y + d\n").body[0]
    lam = ast.parse("def f(x):\n    d = 1\n    if x:\n        g = lambda y: y + d\n").body[0]
    deeper = ast.parse("def f(x):\n    def g(y):\n        if y:\n            def h(z):\n                return z\n").body[0]

    def names(fn):
        return sorted({n.id for n in own_nodes(fn) if isinstance(n, ast.Name)})

    assert names(beside) == ["d", "y"] and names(under) == ["d", "x", "y"]
    assert names(lam) == ["d", "g", "x", "y"]  # a lambda is a closure too: entered
    # So is a def under a block of a nested def, or beside its statements (closures at any depth).
    assert "z" in names(deeper)


SHADOWED = (
    HEAD +
    "    def forward(self, x, ref=None):\n"
    "        d = self.proj.weight.dtype\n"
    "        if ref is not None:\n"
    "            def align(t, d):\n"  # a parameter under the outer alias's name
    "                return t.to(d)\n"
    "            def own(t):\n"
    "                d = t.dtype\n"  # a local of its own under that name
    "                return t.to(d)\n"
    "            x = own(align(x, ref))\n"
    "        return x.to(d)\n"
)


def test_a_closure_s_own_name_is_not_the_function_s_alias(tmp_path: Path):
    """`def align(t, d)` beside `d = L.weight.dtype`: its `t.to(d)` casts to its argument. Read as
    the function's alias, it was reported, and fixed to `t.to(d or t.dtype)`, which raised on a
    tensor argument ("Boolean value of Tensor ... is ambiguous")."""
    root = stub_project(tmp_path, SHADOWED)
    found = dtl(root, "check", "proj", "--no-cache", "--output-format", "concise")
    lines = [line for line in found.stdout.splitlines() if "DTL001" in line]
    # Only the function's own cast; `d` is bound twice, so it gets no fix (a finding kept).
    assert len(lines) == 1 and "proj/model.py:19:" in lines[0], found.stdout
    fixed = dtl(root, "check", "proj", "--fix", "--no-cache")
    assert fixed.returncode == 1 and "wrote" not in fixed.stderr, fixed.stdout + fixed.stderr
    layer = fresh_import(root, "proj.layers").QLinear
    after = fresh_import(root)
    ref = torch.ones(2, dtype=torch.float16)
    for dtype in (torch.bfloat16, torch.float32):
        assert after.Model(layer(dtype)).forward(torch.ones(2), ref).dtype == dtype
