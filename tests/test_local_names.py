"""Local names say what they hold (#35): at most 6% of a function's local names are one or two
letters, outside comprehensions and conventional loop counters.

What is counted, per function (each `def`, nested ones on their own):
- its parameters (but `self` and `cls`), and every name its own body binds: assignment and
  augmented-assignment targets, `for` and `with ... as` targets, `except ... as` names, walrus
  targets; each distinct name once per function;
- not: names bound inside comprehensions and generator expressions (their targets live one line),
  lambda parameters (`lambda x: ...`: the lambda is the whole scope), `_`, and `i`, `j`, `k` bound
  as `for` targets (loop counters).
Scope: the linter itself, `dtype_lint/` and `rules/`. `kernels_ref/` is left out on purpose: the
reference kernels mirror CUDA and PyTorch kernels line for line and keep their names (`M, N, K`,
`a, b`, `x, w`; ruff's E741 is off there for the same reason), so a reader can set them side by side.
"""

from __future__ import annotations

import ast
from pathlib import Path

from parsed_sources import nodes

REPO = Path(__file__).resolve().parents[1]
SCOPE = ("dtype_lint", "rules")
LOOP_COUNTERS = frozenset({"i", "j", "k", "_"})
CEILING = 0.06
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def function_locals(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The local names counted for one function (see the module's docstring)."""
    arguments = function.args
    params = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
              *([arguments.vararg] if arguments.vararg else []), *([arguments.kwarg] if arguments.kwarg else [])]
    counted = {param.arg for param in params if param.arg not in ("self", "cls")}
    counters: set[str] = set()
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, _NESTED):
            continue  # its own scope: counted on its own (a def) or not at all
        if isinstance(node, (ast.For, ast.AsyncFor)):
            counters |= {target.id for target in ast.walk(node.target)
                         if isinstance(target, ast.Name) and target.id in LOOP_COUNTERS}
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            counted.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            counted.add(node.name)
        pending.extend(ast.iter_child_nodes(node))
    return counted - counters - {"_"}


def short_name_share(roots: list[Path]) -> tuple[int, int, list[str]]:
    """(short locals, all locals, where each short one is) over every function under the roots."""
    total, short = 0, []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for function in nodes(path):
                if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names = function_locals(function)
                    total += len(names)
                    short += [f"{path.relative_to(REPO)}:{function.lineno} {function.name}: {name}"
                              for name in sorted(names) if len(name) <= 2]
    return len(short), total, short


def _locals_of(source: str) -> set[str]:
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    return function_locals(function)


def test_the_measure_counts_what_the_docstring_says():
    source = '''
def f(self, a, *rest, kw=1, **extra):
    b = 1
    for i, item in enumerate(a):
        pass
    for x in a:
        pass
    with open(a) as fh:
        pass
    try:
        pass
    except OSError as e:
        pass
    squares = [n * n for n in a]
    pick = lambda y: y
    if (m := b):
        c += 1
    _ = 2
    def inner(q):
        z = 1
'''
    assert _locals_of(source) == {"a", "rest", "kw", "extra", "b", "item", "x", "fh", "e", "squares", "pick",
                                  "m", "c"}


def test_at_most_six_percent_of_local_names_are_one_or_two_letters():
    short, total, where = short_name_share([REPO / name for name in SCOPE])
    assert total > 5000  # the whole linter was read
    share = short / total
    assert share <= CEILING, (f"{short} of {total} local names ({share:.1%}) are one or two letters "
                              f"(at most {CEILING:.0%}); e.g.\n" + "\n".join(where[:40]))
