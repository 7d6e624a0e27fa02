"""scripts/mutate.py: the committed mutant set applies to this tree, the CI subset is killed, and
the committed report is the set's.

The whole set (about half an hour on two cores; benchmarks/mutation/mutation-report.md is its committed report)
runs locally with ``.venv/bin/python scripts/mutate.py --report benchmarks/mutation/mutation-report.md``, or here
with ``DTL_FULL=1`` (``test_the_whole_set_bites_at_run_time``, beyond the CI budget: docs/testing.md). CI runs the mutants marked
``ci = true`` (about two minutes): one that only verify's exact crash-row check sees, one in a CUDA
kernel that verify's matrix on the emulated kernels sees, one in the reference merge that only the
tests see, and the k_scale gather mutant that survived everything while every k_scale was 1.
"""

from __future__ import annotations

import json
import re
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
    assert {"dtype_lint/ecosystems/vllm/template.py", "dtype_lint/fix/planner.py"} <= files  # the helper template, the planner
    assert sum(m.ci for m in mutants) == 4
    # The classes the runtime matrix must reach, each with mutants.
    kinds = {m.kind for m in mutants}
    assert {"helper", "fixer", "fixer proof", "chunk planning", "gather/k_scale", "marlin padding", "quantizer",
            "dcp emulation", "attention bounds", "cuda barrier"} <= kinds
    assert all(m.kind for m in mutants)
    assert all(m.verify == "emulated" for m in mutants if m.file.startswith("kernels_ref/cuda/"))
    assert sum(m.must == "runtime" for m in mutants) >= 0.8 * len(mutants)


def _outcome(**kw):
    return mutate.Outcome("x", "x", **kw)


def test_what_killed_a_mutant_is_read_from_the_checks_that_fired():
    k = mutate.killed_by
    assert k(_outcome(verify="killed (exit 1)", verify_checks={"bounds": 3})) == "verify runtime"
    assert k(_outcome(verify="killed (exit 1)", verify_checks={"helper": 1}, verify_mode="emulated")) == \
        "verify runtime (emulated CUDA)"
    # With the fixer refusing, the post == pre crashes follow from the refusal: only the helper counts.
    assert k(_outcome(verify="killed (exit 1)", verify_checks={"fixer": 2, "outcome": 9})) == "fixer refusal"
    assert k(_outcome(verify="killed (exit 1)", verify_checks={"fixer": 2, "outcome": 9, "helper": 1})) == "verify runtime"
    assert k(_outcome(verify="killed (exit 2: error)", verify_checks={})) == "fixer refusal"
    assert k(_outcome(verify="survived", tests_failed=["t::a"])) == "unit tests"
    assert k(_outcome(verify="survived")) == ""


def test_the_committed_report_is_of_this_mutant_set():
    report = (REPO / "benchmarks" / "mutation" / "mutation-report.md").read_text()
    ids = [m.id for m in mutate.load_mutants()]
    rows = [line for line in report.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == ids
    assert all("| killed |" in r for r in rows), [r for r in rows if "| killed |" not in r]
    share = re.search(r"Killed at run time by verify's matrix: (\d+) of (\d+)", report)
    assert share and int(share.group(1)) >= 0.8 * int(share.group(2))


def test_pkgroot_fallback_matches_pyproject():
    assert pkgroot.package_dirs(REPO) == pkgroot.FALLBACK_PACKAGE_DIRS


def test_a_stale_mutant_is_reported_not_killed(tmp_path):
    m = mutate.Mutant(id="x", what="x", file="kernels_ref/formats.py", find="no such text", replace="y")
    (tmp_path / "kernels_ref").mkdir()
    (tmp_path / "kernels_ref" / "formats.py").write_text("something else\n")
    with pytest.raises(LookupError, match="occurs 0 time"):
        mutate.apply(m, tmp_path)


@pytest.mark.slow
def test_the_ci_mutants_are_killed_as_required(tmp_path):
    res = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "mutate.py"), "--ci", "--until-killed", "--jobs", "2",
         "--json", str(tmp_path / "m.json"),
         "--verify-args=--no-upstream --scenarios B --backends marlin,bf16"],
        capture_output=True, text=True, timeout=900,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "4/4 killed as required" in res.stdout
    got = {o["id"]: o for o in json.loads((tmp_path / "m.json").read_text())["outcomes"]}
    assert got["marlin-dequant-scale-up-1pct"]["killed_by"] == "verify runtime"  # verify's exact check
    assert got["marlin-dequant-scale-up-1pct"]["verify_checks"].get("bit-identity")
    assert got["cu-marlin-group-scale-index"]["killed_by"] == "verify runtime (emulated CUDA)"
    assert got["gather-drops-k-scale"]["killed_by"] == "verify runtime" and got["gather-drops-k-scale"]["verify_checks"]["bounds"]
    assert got["merge-suffix-plus-inf"]["killed_by"] == "unit tests"
    # --until-killed: the tests ran only for the mutant verify did not kill.
    assert [i for i, o in got.items() if o["tests_run"]] == ["merge-suffix-plus-inf"]


@pytest.mark.slow
@pytest.mark.full("the whole set takes about half an hour; CI kills the `ci = true` mutants above")
def test_the_whole_set_bites_at_run_time(tmp_path):
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "mutate.py"), "--json", str(tmp_path / "m.json")],
                         capture_output=True, text=True, timeout=5400)
    assert res.returncode == 0, res.stdout[-6000:]
    summary = json.loads((tmp_path / "m.json").read_text())["summary"]
    assert summary["survived"] == 0 and summary["runtime_share"] >= 0.8, summary
