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


def test_verify_on_cuda_runs_the_gpu_check_and_fails_cleanly_without_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():  # on a GPU machine the same command is the real check
        return
    report = tmp_path / "r.json"
    out = subprocess.run([sys.executable, "-m", "dtype_lint", "verify", "--device", "cuda", "--json", str(report)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr + out.stdout
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert "torch.cuda.is_available() is False" in json.dumps(data)
