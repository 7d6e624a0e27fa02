"""The order files are analysed in: the largest first, the others in path order.

A run's peak memory is what its analyses keep plus the tree of the file being analysed, so the
largest files go first, while little is kept (run/pipeline.py, ANALYZE_FIRST_BYTES). What a run
finds must not depend on that order.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dtype_lint.core.config import load_config
from dtype_lint.run import pipeline
from dtype_lint.run.pipeline import largest_first

KIB = 1 << 10


def test_the_large_files_go_first_largest_first_and_the_others_keep_their_order(monkeypatch):
    monkeypatch.setattr(pipeline, "ANALYZE_FIRST_BYTES", 100)
    paths = ["a.py", "b.py", "c.py", "d.py", "e.py", "f.py"]
    sizes = [10, 300, 50, 100, 300, 20]
    # b and e are as large: they keep their order; d is exactly at the bound and goes first too.
    assert largest_first(paths, sizes) == ["b.py", "e.py", "d.py", "a.py", "c.py", "f.py"]


def test_nothing_moves_when_no_file_is_large():
    paths = ["b.py", "a.py", "c.py"]
    assert largest_first(paths, [3 * KIB, 2 * KIB, 1 * KIB]) == paths
    assert largest_first([], []) == []


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "project"


def _run(root: Path, jobs: int) -> pipeline.RunResult:
    old = os.getcwd()
    os.chdir(root)
    try:
        return pipeline.run(load_config(Path(".")), pipeline.RunOptions(paths=["."], use_cache=False, jobs=jobs))
    finally:
        os.chdir(old)


def test_a_run_analyses_its_largest_file_first_and_finds_the_same(tmp_path: Path, monkeypatch):
    root = tmp_path / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", ".dtype_lint_cache"))
    decoder = root / "minillm" / "models" / "decoder.py"
    decoder.write_text(decoder.read_text() + "# padding\n" * 800)  # past the bound below, no site added
    before = [f.to_dict() for f in _run(root, jobs=1).findings]
    assert any(f["path"].endswith("decoder.py") for f in before) and len({f["path"] for f in before}) == 3

    analysed: list[str] = []
    analyze_path = pipeline.analyze_path

    def recorded(path, *args, **kwargs):
        analysed.append(Path(path).as_posix())
        return analyze_path(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "analyze_path", recorded)
    monkeypatch.setattr(pipeline, "ANALYZE_FIRST_BYTES", 6 * KIB)
    assert decoder.stat().st_size >= 6 * KIB > max(p.stat().st_size for p in root.rglob("*.py") if p != decoder)
    after = [f.to_dict() for f in _run(root, jobs=1).findings]
    assert analysed[0] == "minillm/models/decoder.py"
    assert analysed[1:] == sorted(analysed[1:])  # the others in path order
    assert after == before
