"""gpu_check.py's own logic, on the CPU (its ``--device cpu`` dry run), at tiny sizes.

The dry run takes the same code path as the GPU run with the PyTorch ops standing in for the CUDA
ones; these tests hold the JSON report's shape, ``scripts/gpu_check.sh`` end to end with nothing
installed, the verify passes from saved variants, and the rule that a missing or broken verify
step is recorded as a failure instead of crashing the script.
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
    verify = [s for s in rep["steps"] if s["name"].startswith("verify[")]
    assert rc == 1 and not rep["ok"]
    assert len(verify) == 2 and all(s["status"] == "fail" for s in verify)
    assert all("verify is not importable" in s["error"] and "libcst" in s["error"] for s in verify)


def test_spent_budget_skips_verify(tmp_path: Path) -> None:
    rc = gpu_check.main(["--device", "cpu", "--sizes", "tiny", "--scenarios", "A", "--budget-s", "0", "--out", str(tmp_path)])
    rep = _report(tmp_path)
    assert rc == 1
    assert [s["status"] for s in rep["steps"] if s["name"].startswith("verify[")] == ["skipped", "skipped"]


def _plain_env(tmp_path: Path) -> dict:
    """An environment where dtype_lint is *not* importable from site-packages, as on the GPU
    machine: ``PYTHON`` is a wrapper that starts the interpreter with ``-S`` (no .pth files, so no
    editable install), and PYTHONPATH holds only the site-packages folder (torch, rich)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OUT")}
    shim = tmp_path / "pyshim"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    (shim / "python3").chmod(0o755)
    env["PYTHON"] = str(shim / "python3")
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]
    return env


def test_the_shell_script_runs_end_to_end_on_cpu(tmp_path: Path) -> None:
    """``scripts/gpu_check.sh`` itself, with nothing of this project installed: it builds the
    package root with scripts/pkgroot.py and runs ``python -m ...gpu_check``; here with
    ``--device cpu`` (every step but the NVRTC build, at tiny sizes)."""
    env = _plain_env(tmp_path)
    env["OUT"] = str(tmp_path / "out")
    res = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--device", "cpu", "--sizes", "tiny", "--skip-verify"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rep = _report(tmp_path / "out")
    assert rep["ok"]
    assert "dtl_pkg." in rep["environment"]["import"], rep["environment"]["import"]
    assert "gpu_check: PASS" in (tmp_path / "out" / "gpu_check.log").read_text()
    assert (tmp_path / "out" / "nvidia-smi.csv").exists()


def test_the_script_has_no_import_bootstrap() -> None:
    # No sys.path/importlib bootstrap: the script is a module of the package.
    text = SCRIPT.read_text()
    assert "sys.path.insert" not in text and "spec_from_file_location" not in text


def test_script_is_runnable_as_a_module_path() -> None:
    text = SCRIPT.read_text()
    assert 'if __name__ == "__main__":' in text and "sys.exit(main())" in text


@pytest.mark.slow
def test_dry_run_with_verify_and_saved_variants(tmp_path: Path, vllm_0271, vllm_0280) -> None:
    """The verify passes as the GPU machine runs them: from variants saved here (fixer output and
    vLLM's functions)."""
    from dtype_lint.kernels_ref.harness import variants

    variants.write_variants(tmp_path / "v")
    rc = gpu_check.main(["--device", "cpu", "--sizes", "tiny", "--scenarios", "S", "--out", str(tmp_path),
                         "--variants", str(tmp_path / "v"), "--cuda-backends", "marlin,nvfp4_p,int8"])
    rep = _report(tmp_path)
    verify = [s for s in rep["steps"] if s["kind"] == "verify"]
    assert [s["name"] for s in verify] == ["verify[S/torch ops]", "verify[S/CUDA kernels]"]
    assert rc == 0, [(s["name"], s.get("error"), s.get("violations")) for s in verify]
    assert all(s["upstream"] for s in verify)
    assert rep["upstream"] == f"saved in {tmp_path / 'v'}"


def test_without_variants_or_trees_the_upstream_step_fails_and_the_rest_runs(tmp_path: Path, monkeypatch) -> None:
    from dtype_lint.kernels_ref.harness import variants

    monkeypatch.setattr(variants, "_trees_cached", lambda: False)
    rc = gpu_check.main(["--device", "cpu", "--sizes", "tiny", "--scenarios", "B", "--out", str(tmp_path),
                         "--cuda-backends", "bf16", "--seeds", "0"])
    rep = _report(tmp_path)
    assert rc == 1
    (up,) = [s for s in rep["steps"] if s["name"] == "vLLM's own functions"]
    assert up["status"] == "fail" and "no cached vLLM trees" in up["error"]
    others = [s for s in rep["steps"] if s["kind"] == "verify" and s is not up]
    assert others and all(s["status"] == "pass" and not s["upstream"] for s in others)


def test_the_preflight_says_what_it_found_and_will_run_before_any_work(tmp_path: Path, capsys) -> None:
    from dtype_lint.kernels_ref.harness import variants

    variants.write_variants(tmp_path / "v", upstream=False)
    rc = gpu_check.main(["--device", "cpu", "--preflight-only", "--out", str(tmp_path), "--variants", str(tmp_path / "v")])
    out = capsys.readouterr().out
    assert rc == 0
    head = out[: out.index("preflight: ok, starting")]
    for line in ("python ", "torch ", "libcst ", "ok   torch: float8_e4m3fn round-to-nearest-even",
                 "ok   saved variants load", "fixture only (emitted with --no-upstream)", "verify passes    A/torch ops",
                 "no verify pass starts after 150 s"):
        assert line in head, line
    rep = _report(tmp_path)
    assert [s["name"] for s in rep["steps"]] == ["preflight"] and rep["preflight"]["ok"]


def test_tampered_variants_stop_the_run_in_the_preflight(tmp_path: Path) -> None:
    from dtype_lint.kernels_ref.harness import variants

    variants.write_variants(tmp_path / "v", upstream=False)
    (post,) = (tmp_path / "v").glob("*/post.py")
    post.write_text(post.read_text() + "\n# edited\n")
    rc = gpu_check.main(["--device", "cpu", "--sizes", "tiny", "--out", str(tmp_path), "--variants", str(tmp_path / "v")])
    rep = _report(tmp_path)
    assert rc == 2 and not rep["ok"]
    assert [s["name"] for s in rep["steps"]] == ["preflight"]  # no build, no kernel check, no verify
    assert "differ from the recorded sha256" in rep["steps"][0]["error"]


def test_the_time_limits_leave_room_for_a_rerun() -> None:
    # A machine start costs minutes; the call's timeout must cover the kill, and two calls plus a
    # start of up to five minutes must fit the 15 minutes of device time.
    assert gpu_check.DEFAULT_BUDGET_S < gpu_check.KILL_TIMEOUT_S < gpu_check.DEVICE_TIMEOUT_S
    assert 2 * gpu_check.DEVICE_TIMEOUT_S + 300 <= 15 * 60
    script = (REPO / "scripts" / "gpu_check.sh").read_text()
    assert f'GPU_CHECK_TIMEOUT:-{gpu_check.KILL_TIMEOUT_S}' in script
    assert f"timeout_s={gpu_check.DEVICE_TIMEOUT_S}" in script
    doc = (REPO / "docs" / "kernels.md").read_text()
    assert f'run(command="{gpu_check.DEVICE_COMMAND}", carry=[".dtl_variants"], timeout_s={gpu_check.DEVICE_TIMEOUT_S})' in doc
