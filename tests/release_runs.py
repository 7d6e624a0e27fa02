"""Whole-tree runs of the release trees, each made once per test session.

A whole-tree check of a vLLM release takes seconds (its `--select ALL` run, tens of seconds on two
cores): the tests that read the same run share it instead of each making its own.
"""

from __future__ import annotations

import functools
import subprocess
import types
from pathlib import Path

from cli_runner import dtl


@functools.cache
def check_tree(tree: Path) -> subprocess.CompletedProcess:
    """`dtype-lint check TREE --output-format json --no-cache --exit-zero`, run in the tree as a user
    would (no project configuration of ours applies there)."""
    return dtl(tree, "check", str(tree), "--output-format", "json", "--no-cache", "--exit-zero")


@functools.cache
def check_all(tree: Path):
    """Every rule over TREE with no configuration but `select = ["ALL"]`, no cache: the run of
    `dtype-lint check TREE --select ALL --output-format json --no-cache` (scripts/triage.py's),
    made through the API so that both its JSON findings (`findings_json`: test_triage.py's DTL001-
    DTL005 verdicts) and its Finding objects (`only`: test_rules_real_world.py) come from one run.
    What a rule reports does not depend on which other rules run."""
    from dtype_lint.api import check_paths, make_config

    result = check_paths([str(tree)], make_config({"select": ["ALL"]}, root=tree), use_cache=False)
    # Only what the tests read: the run's class index is not held for the whole session.
    return types.SimpleNamespace(findings=result.findings, analyzed=result.analyzed)


def findings_json(result) -> list[dict]:
    """The findings as the JSON report lists them (the same function the CLI prints them with)."""
    from dtype_lint.reporters._common import remaining
    from dtype_lint.reporters.json_report import finding_dict

    return [finding_dict(f) for f in remaining(result.findings)]


def only(result, codes: str):
    """The run's findings of the comma-separated `codes`, with its count of analysed files."""
    wanted = set(codes.split(","))
    return types.SimpleNamespace(findings=[f for f in result.findings if f.code in wanted], analyzed=result.analyzed)
