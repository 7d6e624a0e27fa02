"""A run leaves its trees to reference counting, not to the cycle collector (issue #37).

A run raises the collector's threshold (run/pipeline.py `_gc_tuned`): with vLLM 0.27.1's 219
analysed files no collection happens at all, so whatever an analysis leaves in a reference
cycle stays until the run ends. Closures that called themselves (`is_attr` in
`Flows._class_uses`, the guards' `visit`) and classes made per call (`Rebase`) were such cycles:
each held the method tree, scope or text it closed over, about 0.3 MiB at the cold check's peak
with `-j 1` (diffusion_gemma.py's), 2 MiB in all with `--select ALL`.

The behavioural test runs the shapes project (our own code in the shapes those came from) with
every rule and the fixes, and asks the collector what was left; the static one keeps the two
forms out of the code.
"""

from __future__ import annotations

import ast
import gc
import types
from pathlib import Path

import pytest

from dtype_lint.api import check_paths, make_config

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ROOT / "fixtures" / "shapes"


def _left_in_cycles(run) -> list:
    """What `run()` leaves for the cycle collector (objects only a collection frees)."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def _ours(obj) -> bool:
    """A function of dtype-lint's code. The standard library's `ast.dump` and `ast.literal_eval`
    leave their own closures in a cycle on every call; those hold no tree (the node is their
    argument), and are not ours to change."""
    return isinstance(obj, types.FunctionType) and obj.__module__.startswith(("dtype_lint", "rules"))


@pytest.mark.parametrize("select", [None, ["ALL"]], ids=["default rules", "every rule"])
def test_a_run_leaves_no_tree_or_closure_in_a_cycle(select):
    settings = {"select": select} if select else {}
    config = make_config(settings, root=SHAPES)
    outcome = {}

    def run():
        outcome["result"] = check_paths([str(SHAPES)], config, jobs=1, use_cache=False, diff=True)

    left = _left_in_cycles(run)
    assert outcome["result"].findings, "the shapes project has findings: the analysis ran"
    trees = [type(o).__name__ for o in left if isinstance(o, ast.AST)]
    functions = sorted({o.__qualname__ for o in left if _ours(o)})
    classes = sorted({o.__qualname__ for o in left if isinstance(o, type)})
    assert not trees and not functions and not classes, (len(trees), functions, classes)


def _code_files() -> list[Path]:
    return sorted((ROOT / "dtype_lint").rglob("*.py")) + sorted((ROOT / "rules").glob("*.py"))


def test_no_nested_function_calls_itself():
    """A function defined in a function that calls itself by name closes over its own cell: a
    reference cycle made on every call of the outer function, holding all it closes over."""
    found = []
    for path in _code_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for outer in ast.walk(tree):
            if not isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(outer):
                if inner is not outer and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                        isinstance(n, ast.Name) and n.id == inner.name and isinstance(n.ctx, ast.Load)
                        for n in ast.walk(inner)):
                    found.append(f"{path.relative_to(ROOT)}:{inner.lineno} {outer.name}.{inner.name}")
    assert not found, "write these at module level, with what they close over as arguments: " + ", ".join(found)


def test_no_class_statement_inside_an_analysis_function():
    """A class made per call is a reference cycle (a class refers to itself through its method
    resolution order), with what its methods close over. The analysis and the rules run per
    site; the stand-ins of ecosystems/*/stand_ins.py and the proofs are made once a run."""
    found = []
    for path in _code_files():
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(("dtype_lint/analysis/", "dtype_lint/fix/", "dtype_lint/run/", "dtype_lint/core/",
                               "rules/")):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [f"{rel}:{c.lineno} {fn.name}: class {c.name}" for c in ast.walk(fn) if isinstance(c, ast.ClassDef)]
    assert not found, found
