"""The vLLM 0.33.0 patch series committed under tests/goldens/upstream/: still what the tool writes, it
applies with `git am` on a checkout of the release, each patch leaves its files compiling, the
tree after the last patch is the in-place migration byte for byte (plus the tests the series
adds), every commit message is a vLLM one (tagged title, Purpose / Test Plan / Test Result,
sign-off, no rule code), and each test a patch adds fails on the release before the patch and
passes after it (vLLM imported through dtype_lint/migrate/release_stubs.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from cli_runner import dtl
from test_series import added_tests, checkout, git, tree_bytes

ROOT = Path(__file__).resolve().parents[1]
SERIES = ROOT / "tests" / "goldens" / "upstream" / "vllm-0.33.0"
sys.path.insert(0, str(ROOT / "scripts"))

import upstream  # noqa: E402


def committed_patches() -> list[Path]:
    patches = sorted(SERIES.glob("*.patch"))
    assert len(patches) >= 2, "the helper patch and at least one site patch"
    return patches


def apply_series(tree: Path, dest: Path, patches: list[Path]) -> Path:
    """A git checkout of `tree` with every patch applied by `git am`; each touched file compiles."""
    target = checkout(tree, dest)
    for patch in patches:
        git(target, "am", "-q", str(patch))
        touched = git(target, "show", "--name-only", "--format=", "HEAD").split()
        assert touched, patch.name
        for rel in touched:
            compile((target / rel).read_bytes(), rel, "exec")
    return target


@pytest.mark.network
@pytest.mark.full("CI: test_committed_series_applies applies every committed patch with `git am` and "
                  "compiles what it touches; regenerating the series migrates the whole release")
def test_committed_series_is_fresh(vllm_0330: Path, capsys):
    assert upstream.main(["--check"]) == 0, capsys.readouterr().err


@pytest.mark.network
def test_committed_series_applies(vllm_0330: Path, tmp_path: Path):
    apply_series(vllm_0330, tmp_path / "am", committed_patches())


@pytest.mark.network
@pytest.mark.full("CI: test_series.py proves series == in-place on our projects for every grouping, and "
                  "test_committed_series_applies applies every patch of this series with `git am`")
def test_series_applies_and_equals_in_place_migration(vllm_0330: Path, tmp_path: Path):
    patches = committed_patches()
    target = apply_series(vllm_0330, tmp_path / "am", patches)
    in_place = checkout(vllm_0330, tmp_path / "in-place")
    # The rules the series was made with (scripts/upstream.py: the opt-in ones are triaged on 0.33.0).
    settings = tmp_path / "select.toml"
    settings.write_text("[tool.dtype-lint]\nselect = " + str(list(upstream.SELECT)).replace("'", '"') + "\n")
    proc = dtl(in_place, "migrate", ".", "--no-progress", "--report", "../report.md", "--config", str(settings))
    assert proc.returncode in (0, 1), proc.stderr
    assert tree_bytes(target, added_tests(patches)) == tree_bytes(in_place)


def test_series_readme_lists_every_patch():
    readme = (SERIES / "README.md").read_text(encoding="utf-8")
    for patch in SERIES.glob("*.patch"):
        assert f"[`{patch.name}`]({patch.name})" in readme
    rows = [line for line in readme.split("## Findings not in the series", 1)[0].splitlines()
            if line.startswith("| [`0")]
    site_rows = [r for r in rows if "adds the helper" not in r]
    assert site_rows and all("TRUE:" in r and "not judged" not in r and "FALSE" not in r for r in site_rows)


def _messages():
    for patch in sorted(SERIES.glob("*.patch")):
        yield patch, patch.read_text(encoding="utf-8").split("\n---\n", 1)[0]


def test_commit_messages_are_vllm_pull_requests():
    subjects = []
    for patch, message in _messages():
        subject = " ".join(re.search(r"^Subject: \[PATCH \d+/\d+\] (.*(?:\n .*)*)", message, re.M).group(1).split())
        subjects.append(subject)
        assert re.match(r"\[(Bugfix|Model|Quantization)\] ", subject), subject
        for section in ("Purpose:", "Test Plan:", "Test Result:"):
            assert f"\n{section}\n" in message, (patch.name, section)
        assert re.search(r"^Signed-off-by: [^<>]+ <[^<>@]+@[^<>]+>$", message, re.M), patch.name
        author = re.search(r"^From: (.*(?:\n .*)*)", message, re.M).group(1)
        assert "dtype-lint@users.noreply" not in author
        assert not re.search(r"DTL\d{3}", message), patch.name
        assert "dtype-lint's" not in message and "dtype evaluator" not in message
    assert subjects[0].startswith("[Quantization] Add get_layer_input_dtype()")
    assert subjects[1].startswith("[Bugfix] Fix _get_kv_b_proj_input_dtype()")
    pr = (SERIES / "PR.md").read_text(encoding="utf-8")
    for section in ("## Purpose", "## Test Plan", "## Test Result"):
        assert section in pr
    assert "vllm/issues/38658" in pr and "vllm/pull/38771" in pr


def test_helper_patch_shows_the_release_prefill_before_and_after():
    """The MLA helper's patch quotes 0.33.0's own _compute_prefill_context: INT8 crashing before,
    running after; and its unit test's cases before and after."""
    (patch, message), = [(p, m) for p, m in _messages() if "_get_kv_b_proj_input_dtype" in m.split("\n\n", 1)[0]]
    assert "vLLM 0.33.0's own _compute_prefill_context" in message
    rows = {line.strip().split("  ")[0]: line for line in message.splitlines() if line.startswith("    W8A8-INT8")
            or line.startswith("    NVFP4, fp8 prefill")}
    int8 = rows["W8A8-INT8"]
    assert "RuntimeError" in int8 and int8.rstrip().endswith(" ok")
    assert rows["NVFP4, fp8 prefill"].rstrip().endswith(" ok") and "AssertionError" in rows["NVFP4, fp8 prefill"]
    assert re.search(r"Before: 13/16 pass; after: 16/16 pass", message)
    assert "+++ b/tests/model_executor/layers/attention/test_get_kv_b_proj_input_dtype.py" in patch.read_text()


@pytest.mark.network
def test_each_added_test_fails_before_its_patch_and_passes_after(vllm_0330: Path, tmp_path: Path):
    pytest.importorskip("torch")
    from dtype_lint.migrate.release_stubs import run_tests

    target = checkout(vllm_0330, tmp_path / "am")
    ran = 0
    for patch in sorted(SERIES.glob("*.patch")):
        git(target, "am", "-q", str(patch))
        tests = added_tests([patch])
        if not tests:
            continue
        after = run_tests(target, list(tests))
        assert after.returncode == 0 and " passed" in after.stdout and after.stderr == "", (
            patch.name, after.stdout[-3000:], after.stderr[-2000:])
        sources = [p for p in git(target, "show", "--name-only", "--format=", "HEAD").split() if p not in tests]
        # The patch's code undone, its tests kept: what the release itself does.
        for rel in sources:
            if git(target, "ls-tree", "HEAD~1", "--", rel).strip():
                git(target, "checkout", "HEAD~1", "--", rel)
            else:
                (target / rel).unlink()
        before = run_tests(target, list(tests))
        # A failing case (1), or for the helper the series adds, its module missing at import (2).
        assert (before.returncode == 1 and re.search(r"\d+ failed", before.stdout)) or (
            before.returncode == 2 and "ModuleNotFoundError" in before.stdout), (
            patch.name, before.stdout[-3000:], before.stderr[-2000:])
        git(target, "checkout", "HEAD", "--", ".")
        ran += 1
    assert ran >= 2, "the helper patch and the MLA helper's fix each add a test"
