"""Whole-tree round trips (#8): `--fix --unsafe-fixes` over a copy of a real vLLM release.

On vLLM 0.27.1 (before upstream's own fix) and 0.33.0 (the current release): no fix fails
(no DTL901), every file the run changed compiles, a second run has nothing left to fix and
writes nothing, and every file the run did not fix is byte for byte what it was (the new helper
module aside). Each tree is copied whole; the copy and both runs take about 20 s on two cores.
The CI budget runs 0.33.0 (tests/conftest.py); DTL_FULL=1 adds 0.27.1.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_runner import dtl
from conftest import full_only

pytestmark = pytest.mark.network


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.py"))}


@pytest.mark.parametrize("release", [full_only("vllm_0271", "CI: test_vllm_migrate.py fixes the whole 0.27.1 tree"),
                                     full_only("vllm_0330", "CI: test_fuzz.py's unsafe round trip on generated "
                                               "modules; test_vllm_migrate.py fixes the whole 0.27.1 tree")])
def test_fix_unsafe_round_trip_on_a_whole_release(release: str, request, tmp_path: Path):
    source: Path = request.getfixturevalue(release)
    tree = tmp_path / "tree"
    shutil.copytree(source / "vllm", tree / "vllm")
    before = snapshot(tree)

    # With the cache, as a user runs it: the second run re-analyses exactly the files the first changed.
    first = dtl(tree, "check", "--fix", "--unsafe-fixes", "--output-format", "json")
    assert first.returncode in (0, 1), first.stderr
    report = json.loads(first.stdout)
    failed = [f for f in report["findings"] if f["code"] == "DTL901"]
    assert failed == [], failed
    written = {line.split(" ", 2)[2].rsplit(" (", 1)[0] for line in first.stderr.splitlines()
               if line.startswith(("dtype-lint: wrote ", "dtype-lint: created "))}
    assert written, "the release has sites to fix"

    after = snapshot(tree)
    changed = {p for p in after if before.get(p) != after[p]}
    assert changed == {p for p in written if p.endswith(".py")}
    for p in changed:
        compile(after[p], p, "exec")
    assert set(before) <= set(after)
    new_files = set(after) - set(before)
    assert all("layer_input_dtype" in p for p in new_files), new_files

    second = dtl(tree, "check", "--fix", "--unsafe-fixes", "--output-format", "json")
    assert second.returncode in (0, 1), second.stderr
    assert [f for f in json.loads(second.stdout)["findings"] if f.get("fix")] == []
    assert "dtype-lint: wrote" not in second.stderr and "dtype-lint: created" not in second.stderr
    assert snapshot(tree) == after
