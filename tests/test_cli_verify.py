"""`dtype-lint verify` through the real console entry point (the matrix itself: test_verify.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _verify(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "dtype_lint", "verify", *args], capture_output=True, text=True, timeout=timeout)


def test_verify_offline_runs_the_fixture_and_writes_its_report(tmp_path):
    report = tmp_path / "verify.json"
    out = _verify("--no-upstream", "--scenarios", "B", "--seeds", "0", "--backends", "bf16,marlin,awq",
                  "--no-table", "--json", str(report))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    data = json.loads(report.read_text())
    assert data["ok"] and data["upstream"] is None
    assert {r["backend"] for r in data["runs"]} == {"bf16", "marlin", "awq"}
    assert "unsupported `a` scalar_type" in json.dumps(data)


@pytest.mark.network
def test_verify_runs_vllms_functions_and_prints_both_tables(vllm_0271, vllm_0280):
    out = _verify("--scenarios", "S", "--backends", "bf16,marlin,awq,int8")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    text = out.stdout
    assert "fixture (offline)" in text and "vLLM's own MLA prefill" in text
    assert "ours≡0.28.0" in text and "helpers differ" in text  # int8: ours bf16, 0.28.0 int8
    assert "verify: all assertions hold" in text


def test_verify_help_is_the_harness_help():
    out = _verify("--help")
    assert out.returncode == 0
    assert "--device" in out.stdout and "--scenarios" in out.stdout and "--no-upstream" in out.stdout


def test_verify_on_cuda_runs_the_gpu_check_and_fails_cleanly_without_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():  # on a GPU machine the same command is the real check
        return
    report = tmp_path / "r.json"
    out = _verify("--device", "cuda", "--json", str(report), timeout=300)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr + out.stdout
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert "torch.cuda.is_available() is False" in json.dumps(data)
