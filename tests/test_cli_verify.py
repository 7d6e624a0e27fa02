"""`dtype-lint verify` through the real console entry point (the matrix itself: test_verify.py)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_verify_subcommand_runs_the_harness_and_writes_its_report(tmp_path):
    report = tmp_path / "verify.json"
    out = subprocess.run(
        [sys.executable, "-m", "dtype_lint", "verify", "--scenarios", "B", "--seeds", "0",
         "--backends", "bf16,marlin,awq", "--no-table", "--json", str(report)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    data = json.loads(report.read_text())
    assert data, "empty report"
    text = json.dumps(data)
    for backend in ("bf16", "marlin", "awq"):
        assert backend in text
    assert "unsupported `a` scalar_type" in text


def test_verify_help_is_the_harness_help():
    out = subprocess.run([sys.executable, "-m", "dtype_lint", "verify", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "--device" in out.stdout and "--scenarios" in out.stdout
