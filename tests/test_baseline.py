"""Baseline: keyed on path + scope + code + normalised expression, never lines; may only shrink."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from dtype_lint.core.findings import Finding, Span
from dtype_lint.core.writer import ProjectWriter
from dtype_lint.run.baseline import (
    BASELINE_VERSION,
    Baseline,
    BaselineEntry,
    BaselineError,
    BaselineGrowthError,
    BaselineKey,
    baseline_path,
    finding_key,
    normalise_expression,
    write_baseline,
)


def WRITE(path, data: bytes) -> None:  # noqa: N802 - stands for the run's writer
    ProjectWriter(Path(path).parent).write(path, data, "baseline")


def save(baseline, path) -> None:
    WRITE(path, baseline.to_json().encode("utf-8"))


def f(path="vllm/mla.py", line=10, code="DTL001", scope="MLAAttention.forward",
      expression="kv_c.to(self.kv_b_proj.weight.dtype)", **kw) -> Finding:
    return Finding(code, "m", path, Span(line, 5, line, 40), scope=scope, expression=expression, **kw)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


# --- keys ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a,b",
    [
        ("x.to(L.weight.dtype)", "x.to( L.weight.dtype )"),
        ("x.to(L.weight.dtype)", "x.to(\n    L.weight.dtype,\n)"),  # black's magic trailing comma
        ("x.to(L.weight.dtype)", "x.to(\n    L.weight.dtype  # why\n)"),
        ("torch.empty(n, dtype=L.weight.dtype)", "torch.empty(n,dtype = L.weight.dtype)"),
    ],
)
def test_normalisation_is_whitespace_and_comment_insensitive(a, b):
    assert normalise_expression(a) == normalise_expression(b)
    assert normalise_expression(normalise_expression(b)) == normalise_expression(b)


@pytest.mark.parametrize(
    "a,b",
    [
        ("a if not b else c", "a if notb else c"),
        ('f("a b")', 'f("ab")'),
        ("x.to(A.weight.dtype)", "x.to(B.weight.dtype)"),
    ],
)
def test_normalisation_keeps_distinct_code_distinct(a, b):
    assert normalise_expression(a) != normalise_expression(b)


def test_normalisation_of_untokenizable_text_collapses_whitespace():
    assert normalise_expression('x.to("open  \n  string') == 'x.to("open string'


def test_paths_are_posix_and_relative_to_root(root: Path):
    inside = root / "vllm" / "mla.py"
    assert baseline_path(str(inside), root) == "vllm/mla.py"
    assert baseline_path("./vllm/mla.py", None) == "vllm/mla.py"
    cwd = os.getcwd()
    try:
        os.chdir(root)
        assert baseline_path("vllm/mla.py", root) == "vllm/mla.py"
    finally:
        os.chdir(cwd)
    outside = root.parent / "elsewhere.py"
    assert baseline_path(str(outside), root) == outside.as_posix()


def test_key_has_no_line_number(root: Path):
    a = finding_key(f(path=str(root / "vllm/mla.py"), line=10), root)
    b = finding_key(f(path=str(root / "vllm/mla.py"), line=99), root)
    assert a == b == BaselineKey("vllm/mla.py", "MLAAttention.forward", "DTL001",
                                 "kv_c.to(self.kv_b_proj.weight.dtype)")


# --- filter -------------------------------------------------------------------------------------


def test_filter_survives_unrelated_edits(root: Path):
    p = str(root / "vllm/mla.py")
    base = Baseline.from_findings([f(path=p, line=10)], root)
    moved = f(path=p, line=57, expression="kv_c.to(\n    self.kv_b_proj.weight.dtype,\n)")
    new, matched, stale = base.filter([moved])
    assert (new, matched, stale) == ([], 1, [])


def test_filter_counts_and_reports_new_and_stale(root: Path):
    p = str(root / "vllm/mla.py")
    base = Baseline.from_findings([f(path=p, line=10), f(path=p, line=20), f(path=p, code="DTL003")], root)
    assert len(base) == 3
    # The same cast now three times: two accepted, the last (by position) is new; DTL003 fixed.
    now = [f(path=p, line=30), f(path=p, line=10), f(path=p, line=20)]
    new, matched, stale = base.filter(now)
    assert matched == 2
    assert [x.span.line for x in new] == [30]
    assert stale == [BaselineEntry("vllm/mla.py", "MLAAttention.forward", "DTL003",
                                   "kv_c.to(self.kv_b_proj.weight.dtype)", 1)]


def test_scope_is_part_of_the_key(root: Path):
    base = Baseline.from_findings([f(path=str(root / "a.py"), scope="A.forward")], root)
    new, matched, _ = base.filter([f(path=str(root / "a.py"), scope="B.forward")])
    assert matched == 0 and len(new) == 1


def test_engine_codes_are_never_baselined(root: Path):
    parse_error = f(path=str(root / "bad.py"), code="DTL900", scope="", expression="")
    fix_failed = f(path=str(root / "a.py"), code="DTL901")
    unused = f(path=str(root / "a.py"), code="DTL902", scope="", expression="# noqa: DTL001")
    base = Baseline.from_findings([parse_error, fix_failed, unused], root)
    assert [e.code for e in base.entries()] == ["DTL902"]
    new, matched, _ = base.filter([parse_error, fix_failed, unused])
    assert new == [parse_error, fix_failed] and matched == 1


def test_filter_root_override(root: Path, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("ci")
    base = Baseline.from_findings([f(path=str(root / "a.py"))], root)
    save(base, elsewhere / "baseline.json")
    loaded = Baseline.load(elsewhere / "baseline.json")  # root defaults to the file's directory
    assert loaded.filter([f(path=str(root / "a.py"))])[1] == 0
    assert loaded.filter([f(path=str(root / "a.py"))], root)[1] == 1
    assert Baseline.load(elsewhere / "baseline.json", root=root).filter([f(path=str(root / "a.py"))])[1] == 1


# --- file format --------------------------------------------------------------------------------


def test_file_is_sorted_versioned_json_without_lines(root: Path):
    findings = [
        f(path=str(root / "z.py"), line=5),
        f(path=str(root / "a.py"), line=9, code="DTL003", expression="torch.empty(n,  dtype=L.weight.dtype)"),
        f(path=str(root / "a.py"), line=1),
        f(path=str(root / "a.py"), line=2),
    ]
    path = root / "dtype-lint-baseline.json"
    save(Baseline.from_findings(findings, root), path)
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert data["version"] == BASELINE_VERSION
    assert data["entries"] == [
        {"path": "a.py", "scope": "MLAAttention.forward", "code": "DTL001",
         "expression": "kv_c.to(self.kv_b_proj.weight.dtype)", "count": 2},
        {"path": "a.py", "scope": "MLAAttention.forward", "code": "DTL003",
         "expression": "torch.empty(n, dtype=L.weight.dtype)", "count": 1},
        {"path": "z.py", "scope": "MLAAttention.forward", "code": "DTL001",
         "expression": "kv_c.to(self.kv_b_proj.weight.dtype)", "count": 1},
    ]
    assert '"line"' not in text and text.endswith("}\n")
    # Round trip, and writing the same findings again produces the same bytes.
    assert Baseline.load(path) == Baseline.from_findings(findings, root)
    save(Baseline.load(path), path)
    assert path.read_text(encoding="utf-8") == text
    assert not [p for p in root.iterdir() if p.name.endswith(".dtl-tmp")]


def test_write_keeps_mode(root: Path):
    path = root / "b.json"
    save(Baseline(), path)
    os.chmod(path, 0o640)
    save(Baseline.from_findings([f(path=str(root / "a.py"))], root), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.parametrize(
    "content,match",
    [
        (None, "does not exist"),
        ("{not json", "cannot be read"),
        ("[]", "not a dtype-lint baseline"),
        ('{"version": 99, "entries": []}', "version 99"),
        ('{"version": 1, "entries": [{"scope": "x"}]}', "entry 0 is malformed"),
    ],
)
def test_load_errors(root: Path, content, match):
    path = root / "b.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(BaselineError, match=match):
        Baseline.load(path)


# --- may only shrink ----------------------------------------------------------------------------


def test_write_baseline_creates_then_may_only_shrink(root: Path):
    path = root / "baseline.json"
    a, b = f(path=str(root / "a.py")), f(path=str(root / "b.py"))
    write_baseline(path, [a, b], root, WRITE)
    # Shrinking (b fixed) is allowed and drops the stale entry.
    write_baseline(path, [a], root, WRITE)
    assert [e.path for e in Baseline.load(path).entries()] == ["a.py"]
    before = path.read_text(encoding="utf-8")
    # Growing back is refused, with the new key named, and nothing is written.
    with pytest.raises(BaselineGrowthError) as info:
        write_baseline(path, [a, b], root, WRITE)
    msg = str(info.value)
    assert "may only shrink" in msg
    assert "b.py::MLAAttention.forward DTL001 `kv_c.to(self.kv_b_proj.weight.dtype)` (0 -> 1)" in msg
    assert [k.path for k, _, _ in info.value.growth] == ["b.py"]
    assert path.read_text(encoding="utf-8") == before
    # So is a higher count for an existing key.
    with pytest.raises(BaselineGrowthError, match=r"\(1 -> 2\)"):
        write_baseline(path, [a, replace(a, span=Span(50, 1, 50, 2))], root, WRITE)
    # Growing on purpose.
    write_baseline(path, [a, b], root, WRITE, allow_growth=True)
    assert len(Baseline.load(path)) == 2


def test_unrelated_edits_do_not_count_as_growth(root: Path):
    path = root / "baseline.json"
    write_baseline(path, [f(path=str(root / "a.py"), line=10)], root, WRITE)
    write_baseline(path, [f(path=str(root / "a.py"), line=80, expression="kv_c.to( self.kv_b_proj.weight.dtype )")], root, WRITE)
    assert len(Baseline.load(path)) == 1


def test_growth_error_is_a_value_error():
    assert issubclass(BaselineGrowthError, BaselineError)
    assert issubclass(BaselineError, ValueError)
