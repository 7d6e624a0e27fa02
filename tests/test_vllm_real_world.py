"""dtype-lint on real vLLM releases, through the CLI as a user runs it.

vLLM 0.27.1's MLA prefill cast `kv_c_normed` to `kv_b_proj`'s stored weight dtype and crashed on
Marlin FP8 (int32-packed weights; vLLM issue #38658). PR #38771, first released in 0.28.0, routes
both prefill-context paths through `_get_kv_b_proj_input_dtype`. So: both sites are found in
0.27.1, neither in 0.28.0, and the whole 0.27.1 tree is analysed without an internal error.

The cast lines are located in the fetched file's text, not hard-coded, so a re-packaged wheel
with shifted lines still tests the same thing.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from release_runs import check_tree

# One worker makes the whole-tree checks of 0.27.1 and 0.28.0 once (session fixtures below).
pytestmark = [pytest.mark.network, pytest.mark.xdist_group("vllm-real-world")]

MLA = "vllm/model_executor/layers/attention/mla_attention.py"
PREFILL_FUNCS = ("_compute_prefill_context", "_context_parallel_compute_prefill_context")
# The statement both 0.27.1 paths end in: `kv_c_normed = kv_c_normed.to(<kv_b_proj's dtype>)`.
CAST = re.compile(r"^\s*kv_c_normed\s*=\s*kv_c_normed\.to\(")

FINDING_KEYS = {
    "code", "message", "path", "line", "col", "end_line", "end_col", "confidence", "scope",
    "expression", "evidence", "fix", "no_fix_reason",
}
SUMMARY_KEYS = {"files", "analyzed", "findings", "fixable", "fixed", "elapsed_s"}


class CliRun:
    def __init__(self, tree: Path, proc: subprocess.CompletedProcess):
        self.tree = tree
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        try:
            self.report = json.loads(proc.stdout)
        except ValueError:
            self.report = None

    def describe(self) -> str:
        return (
            f"exit {self.returncode}\n--- stdout (head) ---\n{self.stdout[:2000]}"
            f"\n--- stderr (tail) ---\n{self.stderr[-4000:]}"
        )

    def findings(self) -> list[dict]:
        assert self.report is not None, f"stdout is not JSON\n{self.describe()}"
        return self.report["findings"]

    def findings_in(self, rel: str) -> list[dict]:
        want = os.path.normpath(self.tree / rel)
        return [f for f in self.findings() if os.path.normpath(f["path"]) == want]


def run_check(tree: Path) -> CliRun:
    # cwd = the tree: no project config of ours applies, as when a user runs it in their checkout.
    # The run is shared with test_triage.py (one whole-tree check per session).
    return CliRun(tree, check_tree(tree))


@pytest.fixture(scope="session")
def check_0271(vllm_0271: Path) -> CliRun:
    return run_check(vllm_0271)


@pytest.fixture(scope="session")
def check_0280(vllm_0280: Path) -> CliRun:
    return run_check(vllm_0280)


def function_spans(path: Path) -> dict[str, tuple[str, int, int]]:
    """name -> (enclosing class, first line, last line) for the MLA prefill functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    spans = {}
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in PREFILL_FUNCS:
                assert fn.name not in spans, f"{fn.name} defined twice in {path}"
                spans[fn.name] = (cls.name, fn.lineno, fn.end_lineno)
    assert set(spans) == set(PREFILL_FUNCS), f"{path}: found {sorted(spans)}"
    return spans


def cast_lines(path: Path, first: int, last: int) -> list[int]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [n for n in range(first, last + 1) if CAST.match(lines[n - 1])]


def in_scope(finding: dict, func: str) -> bool:
    return finding["scope"].endswith("." + func)


@pytest.mark.parametrize("func", PREFILL_FUNCS)
def test_0271_mla_prefill_cast_is_found(check_0271: CliRun, func: str):
    path = check_0271.tree / MLA
    cls, first, last = function_spans(path)[func]
    casts = cast_lines(path, first, last)
    assert len(casts) == 1, f"{cls}.{func}: expected one kv_c_normed cast, found lines {casts}"
    (cast,) = casts

    dtl001 = [f for f in check_0271.findings_in(MLA) if f["code"] == "DTL001"]
    here = [f for f in dtl001 if in_scope(f, func)]
    assert any(f["line"] <= cast <= f["end_line"] for f in here), (
        f"no DTL001 covering line {cast} (`{path.read_text().splitlines()[cast - 1].strip()}`) "
        f"in {cls}.{func}; DTL001 in {MLA}: "
        + json.dumps([(f["scope"], f["line"], f["end_line"], f["expression"]) for f in dtl001])
    )
    for f in here:
        assert f["scope"] == f"{cls}.{func}" or f["scope"].endswith(f".{cls}.{func}"), f["scope"]
        assert first <= f["line"] <= f["end_line"] <= last, f
        assert f["evidence"], f"DTL001 at line {f['line']} carries no evidence"


@pytest.mark.parametrize("func", PREFILL_FUNCS)
def test_0280_mla_prefill_is_clean(check_0280: CliRun, func: str):
    path = check_0280.tree / MLA
    cls, first, last = function_spans(path)[func]
    lines = path.read_text(encoding="utf-8").splitlines()
    body = "\n".join(lines[first - 1 : last])
    # Not a vacuous pass: the cast is still there, now fed by the helper PR #38771 added, so
    # the linter has a cast to look at and must see that it is safe.
    assert "_get_kv_b_proj_input_dtype(" in body, f"{cls}.{func} does not call the helper"
    casts = cast_lines(path, first, last)
    assert len(casts) == 1, f"{cls}.{func}: expected one kv_c_normed cast, found lines {casts}"
    assert "kv_b_proj_input_dtype" in lines[casts[0] - 1], lines[casts[0] - 1]

    assert check_0280.returncode == 0, check_0280.describe()
    assert check_0280.report["summary"]["analyzed"] > 0, check_0280.report["summary"]
    left = [
        f for f in check_0280.findings_in(MLA) if f["code"] == "DTL001" and in_scope(f, func)
    ]
    assert left == [], json.dumps(left, indent=1)


def test_0271_whole_tree_runs_clean(check_0271: CliRun):
    run = check_0271
    assert run.returncode == 0, run.describe()
    assert "Traceback (most recent call last)" not in run.stderr, run.stderr[-4000:]
    assert run.report is not None, f"stdout is not JSON\n{run.describe()}"

    report = run.report
    assert report["version"] == 1
    assert SUMMARY_KEYS <= report["summary"].keys(), report["summary"]
    py_files = sum(1 for _ in run.tree.rglob("*.py"))
    assert report["summary"]["files"] == py_files

    for f in report["findings"]:
        assert FINDING_KEYS <= f.keys(), f
        for ev in f["evidence"]:
            assert {"message", "path", "line"} <= ev.keys(), ev

    # DTL900 means "could not parse": only acceptable for a file Python itself rejects.
    bogus = []
    for f in report["findings"]:
        if f["code"] != "DTL900":
            continue
        source = Path(f["path"]).read_bytes()
        try:
            compile(source, f["path"], "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue
        bogus.append(f"{f['path']}:{f['line']}: {f['message']}")
    assert bogus == [], "DTL900 on files that compile:\n" + "\n".join(bogus)
