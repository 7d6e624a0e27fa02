"""The scan's records per file keep only what is not the common answer (issue #37).

A record per file lives as long as the run: on vLLM 0.27.1 three dicts of every path (the
prefilter's verdict, suppressions, helper links) were 150 KiB at 1x, and each census's word test
kept one more set of every path it tested, 0.25 MiB in all. The scan now keeps the paths that pass
or hold a suppression, the links of the files that have some, and, where a word test tested every
file, the scan's own set of scanned paths.
"""

from __future__ import annotations

from pathlib import Path

from dtype_lint.api import check_paths, make_config
from dtype_lint.core.prefilter import for_rules
from dtype_lint.core.source import read_file
from dtype_lint.run import pipeline
from dtype_lint.run.file_analysis import enabled_rules

SHAPES = Path(__file__).resolve().parents[1] / "fixtures" / "shapes"


def test_the_scan_keeps_the_answers_that_differ_and_one_set_of_paths(monkeypatch):
    scans = []
    real_scan = pipeline._scan

    def recording(*args, **kwargs):
        scans.append(real_scan(*args, **kwargs))
        return scans[-1]

    monkeypatch.setattr(pipeline, "_scan", recording)
    config = make_config(root=SHAPES)
    result = check_paths([str(SHAPES)], config, jobs=1, use_cache=False)
    assert result.findings
    scan = scans[0]
    paths = sorted(str(p) for p in SHAPES.rglob("*.py"))
    assert len(scan.scanned) == len(paths)

    prefilter = for_rules(tuple(enabled_rules(config)))
    passing = {p for p in paths if prefilter.might_match(read_file(p).text)}
    assert scan.passes == passing and 0 < len(passing) < len(paths)  # the verdict, for the files it holds for
    assert not scan.suppressing  # the shapes hold no suppression comment
    assert all(links[0] or links[1] for links in scan.links.values())
    assert scan.word_tests and all(test.read is scan.scanned for test in scan.word_tests)


def test_files_a_census_passed_over_unstamped_share_one_record():
    """A run without a cache stamps nothing, so the files a census passed over by the same tests
    hold equal (stamp, tests) pairs: one tuple serves them all (vLLM 0.27.1, cold: 4,500 of them,
    0.3 MiB until the run ends). Stamped pairs stay each file's own, and a file's tests add up."""
    from dtype_lint.analysis.index.class_index import Reads

    tests, more = frozenset({"quant"}), frozenset({"compile"})
    reads = Reads()
    for n in range(3):
        reads.pass_over(f"/p/{n}.py", "", tests)
    pairs = list(reads.passed.values())
    assert pairs[0] == ("", tests) and all(pair is pairs[0] for pair in pairs)
    reads.pass_over("/p/0.py", "", more)
    assert reads.passed["/p/0.py"] == ("", tests | more) and reads.passed["/p/1.py"] == ("", tests)
    stamped = Reads()
    stamped.pass_over("/p/a.py", "s1", tests)
    stamped.pass_over("/p/b.py", "s2", tests)
    assert stamped.passed == {"/p/a.py": ("s1", tests), "/p/b.py": ("s2", tests)}
