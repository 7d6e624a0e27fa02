"""The GPU command's CPU dry run in an environment built like the device image.

The device image has Python 3.12, torch 2.11, CuPy, NVRTC, numpy and rich, **no libcst**, no
vLLM trees and no registry. Here: a fresh ``python3 -m venv`` that sees only torch (2.13.0 CPU),
numpy and rich and what they require (linked from this environment's install of the same wheels),
an empty release cache, and nothing of this
project installed; the variants are emitted first by this checkout's environment (which has libcst
and the trees), as docs/kernels.md says to do before the device run. The command is
``gpu_check.DEVICE_COMMAND`` with ``--device cpu`` appended, run exactly as the device tool would
run it from the repository root.

Torch for this machine's disk exists only for CPython 3.11, so the venv is 3.11; what Python 3.12
can be checked without torch (every module compiles, the script stops cleanly before any work
when torch is missing) runs under this machine's 3.12 where there is one.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dtype_lint.kernels_ref.harness import gpu_check

REPO = Path(__file__).resolve().parents[2]
PY312 = [p for p in ("/root/.pyenv/versions/3.12.1/bin/python3", shutil.which("python3.12")) if p and Path(p).is_file()]


def _image_env(python: str, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OUT", "VIRTUAL_ENV", "DTYPE_LINT_CACHE_DIR")}
    env["PYTHON"] = python
    env["DTYPE_LINT_CACHE_DIR"] = str(tmp / "no-release-cache")  # no vLLM trees, as on the device
    env["OUT"] = str(tmp / "out")
    return env


IMAGE_DISTRIBUTIONS = ("torch", "numpy", "rich")


def _requirement_closure(names: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    """The installed distributions `names` need (their requirements' closure, markers applied)."""
    from packaging.requirements import Requirement

    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional requirement this environment does not have: nor will the image
        seen[name] = dist
        for line in dist.requires or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(seen.values())


@pytest.fixture(scope="session")
def image_venv(tmp_path_factory) -> Path:
    """python3 -m venv + torch 2.13.0 (CPU), numpy, rich: nothing else, and no libcst.

    The three distributions (and what they require) are the ones this environment installed from
    the same wheels; the venv sees them through a folder of links to their files, named in one .pth,
    instead of a second pip install of torch (minutes of CI for the same bytes)."""
    root = tmp_path_factory.mktemp("image") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=300)
    python = root / "bin" / "python"
    shown = root.parent / "site"
    shown.mkdir()
    for dist in _requirement_closure(IMAGE_DISTRIBUTIONS):
        for entry in {Path(str(file)).parts[0] for file in dist.files or ()}:
            source = Path(str(dist.locate_file(entry)))
            if entry not in ("..", "__pycache__") and source.exists() and not (shown / entry).exists():
                (shown / entry).symlink_to(source)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "image_site.pth").write_text(f"{shown}\n")
    probe = subprocess.run([str(python), "-c", "import libcst"], capture_output=True, text=True)
    assert probe.returncode != 0, "the image-like venv must not have libcst"
    probe = subprocess.run([str(python), "-c", "import torch, numpy, rich; print(torch.__version__)"],
                           capture_output=True, text=True)
    assert probe.returncode == 0 and probe.stdout.startswith("2.13.0"), probe.stdout + probe.stderr
    return python


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.full("the image's other checks here and tests/kernels/test_gpu_check_cpu.py's dry runs")
def test_the_device_command_dry_runs_without_libcst(tmp_path, image_venv, vllm_0271, vllm_0280):
    variants_dir = tmp_path / "variants"
    emitted = subprocess.run([sys.executable, "-m", "dtype_lint", "verify", "--emit-variants", str(variants_dir)],
                             capture_output=True, text=True, timeout=300)
    assert emitted.returncode == 0, emitted.stderr
    env = _image_env(str(image_venv), tmp_path)
    env["DTL_VARIANTS"] = str(variants_dir)
    command = shlex.split(gpu_check.DEVICE_COMMAND) + ["--device", "cpu"]
    res = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-6000:]
    assert "Traceback" not in log
    # The preflight, printed before anything runs: what it found, what it checked, what it runs.
    head = log[: log.index("preflight: ok, starting")]
    assert "libcst   absent" in head and "cupy     absent" in head
    assert "fixture not regenerated: LibcstUnavailable" in head
    assert "vLLM's functions not regenerated: no cached vLLM trees here" in head
    assert "ok   saved vLLM functions load" in head and "verify passes    A/torch ops" in head
    rep = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert rep["ok"] and rep["preflight"]["ok"]
    verify = [s for s in rep["steps"] if s["kind"] == "verify"]
    assert len(verify) == 2 and all(s["status"] == "pass" and s["upstream"] for s in verify), verify
    assert str(image_venv.parent.parent) in rep["preflight"]["found"]["python"]


@pytest.mark.slow
def test_without_variants_and_libcst_the_run_stops_before_any_work(tmp_path, image_venv):
    env = _image_env(str(image_venv), tmp_path)
    env["DTL_VARIANTS"] = str(tmp_path / "none")
    res = subprocess.run(shlex.split(gpu_check.DEVICE_COMMAND) + ["--device", "cpu"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stdout[-3000:]
    assert "FAIL the fixer's output is available: FileNotFoundError: no saved variants and no libcst here" in res.stdout
    assert "preflight: FAILED, nothing was run on the device" in res.stdout
    rep = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert [s["name"] for s in rep["steps"]] == ["preflight"]


@pytest.mark.skipif(not PY312, reason="no CPython 3.12 on this machine")
def test_python_312_compiles_the_package_and_stops_cleanly_without_torch(tmp_path):
    py = PY312[0]
    for folder in ("dtype_lint", "kernels_ref", "rules", "scripts"):
        res = subprocess.run([py, "-m", "compileall", "-q", "-f", "-d", folder, str(REPO / folder)],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc")})
        assert res.returncode == 0, res.stdout[-3000:]
    env = _image_env(py, tmp_path)
    res = subprocess.run(shlex.split(gpu_check.DEVICE_COMMAND) + ["--device", "cpu"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stdout + res.stderr
    assert "python   3.12" in res.stdout and "FAIL torch importable" in res.stdout
