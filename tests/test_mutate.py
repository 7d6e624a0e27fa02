"""scripts/mutate.py: the committed mutant set applies to this tree, and the CI subset is killed.

The whole set (a few minutes per mutant group, documented in docs/kernels.md) is run locally with
``.venv/bin/python scripts/mutate.py``; CI runs the mutants marked ``ci = true``: one that only
verify's exact crash-row check sees, one in a CUDA kernel that only the emulation sees, one in the
reference merge that only the tests see.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import mutate  # noqa: E402
import pkgroot  # noqa: E402


def test_every_mutant_applies_to_this_tree():
    mutants = mutate.load_mutants()
    assert len(mutants) >= 30
    for m in mutants:
        assert (REPO / m.file).read_text().count(m.find) == m.count, m.id
        assert m.find != m.replace, m.id
        for t in m.tests:
            assert (REPO / t.split("::")[0]).is_file(), (m.id, t)
    files = {m.file for m in mutants}
    # Barrier removal in every CUDA file that has a barrier, and a mutant in every kernel family.
    for f in ("attention.cu", "fp8_linear.cu", "gemm_tile.cuh", "marlin_fp8.cu", "nvfp4.cu", "linear_basic.cu"):
        assert f"kernels_ref/cuda/{f}" in files, f
    assert {"dtype_lint/fix/helper_template.py", "dtype_lint/fix/planner.py"} <= files
    assert sum(m.ci for m in mutants) == 3


def test_pkgroot_fallback_matches_pyproject():
    assert pkgroot.package_dirs(REPO) == pkgroot.FALLBACK_PACKAGE_DIRS


def test_a_stale_mutant_is_reported_not_killed(tmp_path):
    m = mutate.Mutant(id="x", what="x", file="kernels_ref/formats.py", find="no such text", replace="y")
    (tmp_path / "kernels_ref").mkdir()
    (tmp_path / "kernels_ref" / "formats.py").write_text("something else\n")
    with pytest.raises(LookupError, match="occurs 0 time"):
        mutate.apply(m, tmp_path)


@pytest.mark.slow
def test_the_ci_mutants_are_killed_as_required():
    res = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "mutate.py"), "--ci", "--jobs", "2",
         "--verify-args=--no-upstream --scenarios B --backends marlin,bf16"],
        capture_output=True, text=True, timeout=900,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "3/3 killed as required" in res.stdout
    lines = {l.split()[0]: l for l in res.stdout.splitlines() if l and l.split()[0] in ("marlin-dequant-scale-up-1pct", "cu-marlin-group-scale-index")}
    assert "killed    killed" in lines["marlin-dequant-scale-up-1pct"]  # verify's exact check
    assert "test_cuda_emulated" in lines["cu-marlin-group-scale-index"]
