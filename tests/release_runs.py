"""One zero-configuration `dtype-lint check` per release tree per test session.

A whole-tree check of a vLLM release takes seconds; test_vllm_real_world.py and test_triage.py read
the same run instead of each making its own.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from cli_runner import dtl


@functools.cache
def check_tree(tree: Path) -> subprocess.CompletedProcess:
    """`dtype-lint check TREE --output-format json --no-cache --exit-zero`, run in the tree as a user
    would (no project configuration of ours applies there)."""
    return dtl(tree, "check", str(tree), "--output-format", "json", "--no-cache", "--exit-zero")
