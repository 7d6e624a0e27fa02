"""gpu_check.py's own logic, on the CPU (its ``--device cpu`` dry run), at tiny sizes.

The dry run takes the same code path as the GPU run with the PyTorch ops standing in for the CUDA
ones; these tests hold the JSON report's shape, the plain-checkout bootstrap (``python3
kernels_ref/harness/gpu_check.py`` with nothing installed), and the rule that a missing or broken
verify step is recorded as a failure instead of crashing the script.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from dtype_lint.kernels_ref.harness import gpu_check

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "kernels_ref" / "harness" / "gpu_check.py"


def _report(out: Path) -> dict:
    return json.loads((out / "gpu_check.json").read_text())


def _assert_shape(rep: dict) -> None:
    assert set(rep) >= {"date", "argv", "mode", "sizes", "environment", "steps", "ok", "elapsed_s"}
    env = rep["environment"]
    assert {"python", "torch", "torch_cuda", "device", "device_name", "import"} <= set(env)
    for step in rep["steps"]:
        assert {"name", "kind", "status", "seconds"} <= set(step), step
        assert step["kind"] in {"build", "kernel", "verify", "setup"}
        assert step["status"] in {"pass", "fail", "skipped"}
    kinds = {s["kind"] for s in rep["steps"]}
    assert {"build", "kernel"} <= kinds


def test_dry_run_passes_and_reports(tmp_path: Path) -> None:
    rc = gpu_check.main(["--device", "cpu", "--sizes", "tiny", "--skip-verify", "--out", str(tmp_path)])
    rep = _report(tmp_path)
    _assert_shape(rep)
    failed = [s["name"] for s in rep["steps"] if s["status"] != "pass"]
    assert rc == 0 and rep["ok"] and not failed, failed
    names = [s["name"] for s in rep["steps"]]
    for prefix in ("marlin.", "fp8.", "nvfp4.", "unquantized.", "awq.", "attention[", "attention.merge", "attention.mask", "contract."):
        assert any(n.startswith(prefix) for n in names), prefix
    exact = [s for s in rep["steps"] if "mismatches" in s]
    close = [s for s in rep["steps"] if "max_ratio" in s and s["max_ratio"] is not None]
    assert exact and close
    assert rep["mode"] == "cpu" and rep["sizes"] == "tiny"


def test_out_defaults_to_env_OUT(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OUT", str(tmp_path))
    args = gpu_check.build_parser().parse_args(["--dry-run"])
    assert args.out == str(tmp_path) and args.device == "cpu"


def test_verify_not_importable_is_a_recorded_failure(tmp_path: Path, monkeypatch) -> None:
    real = importlib.import_module

    def fake(name, *a, **k):
        if name == "dtype_lint.kernels_ref.harness.verify":
            raise ImportError("No module named 'libcst'")
        return real(name, *a, **k)

    monkeypatch.setattr(gpu_check.importlib, "import_module", fake)
    rc = gpu_check.main(["--device", "cpu", "--sizes", "tiny", "--scenarios", "A", "--out", str(tmp_path)])
    rep = _report(tmp_path)
    verify = [s for s in rep["steps"] if s["kind"] == "verify"]
    assert rc == 1 and not rep["ok"]
    assert len(verify) == 2 and all(s["status"] == "fail" for s in verify)
    assert all("verify is not importable" in s["error"] and "libcst" in s["error"] for s in verify)


def test_spent_budget_skips_verify(tmp_path: Path) -> None:
    rc = gpu_check.main(["--device", "cpu", "--sizes", "tiny", "--scenarios", "A", "--budget-s", "0", "--out", str(tmp_path)])
    rep = _report(tmp_path)
    assert rc == 1
    assert [s["status"] for s in rep["steps"] if s["kind"] == "verify"] == ["skipped", "skipped"]


def test_plain_checkout_invocation_bootstraps(tmp_path: Path) -> None:
    """``python3 kernels_ref/harness/gpu_check.py`` with dtype_lint not installed (``-S`` skips the
    editable install's .pth; torch and rich come from PYTHONPATH), from the repo root."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OUT")}
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]
    res = subprocess.run(
        [sys.executable, "-S", str(SCRIPT.relative_to(REPO)), "--device", "cpu", "--sizes", "tiny",
         "--skip-verify", "--out", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rep = _report(tmp_path)
    assert rep["environment"]["import"] == "bootstrapped from the checkout"
    assert "gpu_check: PASS" in res.stdout


def test_bootstrap_maps_every_package_dir() -> None:
    dirs = gpu_check._package_dirs()
    assert dirs["dtype_lint.kernels_ref"] == "kernels_ref"
    assert dirs["dtype_lint.kernels_ref.harness"] == "kernels_ref/harness"
    assert set(gpu_check._PACKAGE_DIRS) <= set(dirs)


def test_script_is_runnable_as_a_module_path() -> None:
    text = SCRIPT.read_text()
    assert 'if __name__ == "__main__":' in text and "sys.exit(main())" in text


@pytest.mark.slow
def test_dry_run_with_verify(tmp_path: Path) -> None:
    pytest.importorskip("libcst")
    try:
        importlib.import_module("dtype_lint.kernels_ref.harness.verify")
        importlib.import_module("dtype_lint.api")
    except ImportError as e:
        pytest.skip(f"verify harness not importable yet: {e}")
    rc = gpu_check.main(["--device", "cpu", "--sizes", "tiny", "--scenarios", "A", "--out", str(tmp_path)])
    rep = _report(tmp_path)
    verify = [s for s in rep["steps"] if s["kind"] == "verify"]
    assert len(verify) == 2
    assert rc == 0, [(s["name"], s.get("error"), s.get("violations")) for s in verify]
