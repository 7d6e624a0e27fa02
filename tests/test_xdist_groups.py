"""tests/xdist_groups.py: the tests of one `xdist_group` run on one worker (docs/testing.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_a_group_runs_on_one_worker_and_the_rest_spreads(tmp_path: Path):
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\npytestmark = pytest.mark.xdist_group('one')\n"
        "@pytest.mark.parametrize('i', range(6))\ndef test_grouped(i): pass\n")
    (tmp_path / "test_free.py").write_text(
        "import pytest\n@pytest.mark.parametrize('i', range(12))\ndef test_free(i): pass\n")
    # Only the plugins the check needs: the environment's others (hypothesis, anyio, ...) cost each of
    # the three processes seconds of imports.
    env = {**os.environ, "PYTHONPATH": str(TESTS), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "xdist", "-n", "2", "--dist", "loadgroup", "-p", "xdist_groups",
                           "-p", "no:cacheprovider", "-v", "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    workers = {}
    for worker, test in re.findall(r"\[(gw\d)\] .*?PASSED (\S+)", proc.stdout):
        workers.setdefault(test.split("::")[1].split("[")[0], set()).add(worker)
    assert workers["test_grouped"] and len(workers["test_grouped"]) == 1, workers
    assert len(re.findall(r"PASSED \S+test_grouped\[\d\]@one", proc.stdout)) == 6, proc.stdout[-3000:]
