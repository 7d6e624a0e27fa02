"""The vLLM 0.33.0 patch series committed under docs/upstream/: still what the tool writes, it
applies with `git am` on a checkout of the release, each patch leaves its files compiling, and the
tree after the last patch is the in-place migration byte for byte."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cli_runner import dtl
from test_series import checkout, git, tree_bytes

ROOT = Path(__file__).resolve().parents[1]
SERIES = ROOT / "docs" / "upstream" / "vllm-0.33.0"
sys.path.insert(0, str(ROOT / "scripts"))

import upstream  # noqa: E402


@pytest.mark.network
def test_committed_series_is_fresh(vllm_0330: Path, capsys):
    assert upstream.main(["--check"]) == 0, capsys.readouterr().err


@pytest.mark.network
def test_series_applies_and_equals_in_place_migration(vllm_0330: Path, tmp_path: Path):
    patches = sorted(SERIES.glob("*.patch"))
    assert len(patches) >= 2, "the helper patch and at least one site patch"
    target = checkout(vllm_0330, tmp_path / "am")
    for k, patch in enumerate(patches, 1):
        git(target, "am", "-q", str(patch))
        touched = git(target, "show", "--name-only", "--format=", "HEAD").split()
        assert touched, patch.name
        for rel in touched:
            compile((target / rel).read_bytes(), rel, "exec")
    in_place = checkout(vllm_0330, tmp_path / "in-place")
    proc = dtl(in_place, "migrate", ".", "--no-progress", "--report", "../report.md")
    assert proc.returncode in (0, 1), proc.stderr
    assert tree_bytes(target) == tree_bytes(in_place)


def test_series_readme_lists_every_patch():
    readme = (SERIES / "README.md").read_text(encoding="utf-8")
    for patch in SERIES.glob("*.patch"):
        assert f"[`{patch.name}`]({patch.name})" in readme
    rows = [line for line in readme.split("## Findings not in the series", 1)[0].splitlines()
            if line.startswith("| [`0")]
    site_rows = [r for r in rows if "adds the helper" not in r]
    assert site_rows and all("TRUE:" in r and "not judged" not in r and "FALSE" not in r for r in site_rows)
