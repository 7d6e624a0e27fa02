"""Reporters: snapshot tests of real output, plus structural checks per format.

Snapshots live in tests/snapshots/. After an intended change in what users see, regenerate with
`DTYPE_LINT_UPDATE_SNAPSHOTS=1 pytest tests/test_reporters.py`, read the diff, commit it.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from golden import assert_golden

from dtype_lint import __version__
from dtype_lint.core.findings import Edit, Evidence, Finding, Fix, Span
from dtype_lint.reporters import FORMATS, RuleInfo, RunSummary, render
from dtype_lint.reporters._common import SourceText, fixable_line, summary_line, tally
from dtype_lint.reporters.github import escape_data, escape_property

SNAPSHOTS = Path(__file__).parent / "snapshots"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

MLA = "vllm/model_executor/layers/attention/mla_attention.py"
MLA_SRC = '''\
import torch
from torch import nn

from vllm.model_executor.layers.linear import ColumnParallelLinear


class MLAAttention(nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.kv_b_proj = ColumnParallelLinear(512, 1024, quant_config=quant_config)

    def forward(self, x):
        kv_c = self.norm(x)
        kv_c = kv_c.to(self.kv_b_proj.weight.dtype)
        out = torch.empty(
            x.shape[0], 1024, dtype=self.kv_b_proj.weight.dtype
        )
        return self.kv_b_proj(kv_c), out
'''

DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
DEEPSEEK_SRC = '''\
def forward(self, hidden_states):
    q = self.q_a_layernorm(hidden_states)
    q = q.to(self.q_b_proj.weight.dtype)
    return self.q_b_proj(q)
'''

UTILS = "vllm/utils.py"  # source unavailable: no frame, SARIF falls back to char offsets

SOURCES = {MLA: MLA_SRC, DEEPSEEK: DEEPSEEK_SRC}
HELPER = ("vllm.model_executor.layers.quantization.utils.dtype", "get_layer_input_dtype")

RULES = {
    "DTL001": RuleInfo(
        "DTL001",
        "weight-dtype-cast",
        "Activation cast to a quantizable layer's storage dtype",
        "# DTL001 weight-dtype-cast\n\n## What it does\nFlags casts to a layer's storage dtype.\n",
    ),
    "DTL003": RuleInfo(
        "DTL003",
        "weight-dtype-alloc",
        "Buffer allocated with a quantizable layer's storage dtype",
        "# DTL003 weight-dtype-alloc\n\n## What it does\nFlags buffers in a layer's storage dtype.\n",
    ),
}


def offset(src: str, line: int, col: int) -> int:
    lines = src.split("\n")
    return sum(len(x) + 1 for x in lines[: line - 1]) + col - 1


def sample_findings() -> list[Finding]:
    """Four findings covering every shape; deliberately not in sorted order."""
    cast = Finding(
        code="DTL001",
        message="Activation cast to the storage dtype of `self.kv_b_proj` (a quantizable layer)",
        path=MLA,
        span=Span(14, 16, 14, 52),
        evidence=(
            Evidence("`self.kv_b_proj` is a ColumnParallelLinear(quant_config=...)", MLA, 10),
            Evidence("ColumnParallelLinear inherits from LinearBase", "vllm/model_executor/layers/linear.py", 412),
        ),
        fix=Fix(
            description="Cast to get_layer_input_dtype(self.kv_b_proj) when it is not None",
            safe=True,
            edits=(
                Edit(
                    offset(MLA_SRC, 14, 9),
                    offset(MLA_SRC, 14, 52),
                    "dt = get_layer_input_dtype(self.kv_b_proj, fp8_input=True)\n"
                    "        if dt is not None:\n"
                    "            kv_c = kv_c.to(dt)",
                ),
            ),
            imports=(HELPER,),
        ),
        scope="MLAAttention.forward",
        expression="kv_c.to(self.kv_b_proj.weight.dtype)",
    )
    alloc = Finding(
        code="DTL003",
        message="Buffer allocated with the storage dtype of `self.kv_b_proj`",
        path=MLA,
        span=Span(15, 15, 17, 10),
        evidence=(Evidence("`self.kv_b_proj` is a ColumnParallelLinear(quant_config=...)", MLA, 10),),
        fix=Fix(
            description="Allocate with get_layer_input_dtype(self.kv_b_proj) or x.dtype",
            safe=False,
            edits=(
                Edit(
                    offset(MLA_SRC, 16, 37),
                    offset(MLA_SRC, 16, 64),
                    "get_layer_input_dtype(self.kv_b_proj, fp8_input=True) or x.dtype",
                ),
            ),
            imports=(HELPER,),
            unsafe_reason="the buffer's consumers may rely on the storage dtype",
        ),
        scope="MLAAttention.forward",
        expression="torch.empty(x.shape[0], 1024, dtype=self.kv_b_proj.weight.dtype)",
    )
    low = Finding(
        code="DTL001",
        message="Activation cast to the storage dtype of `self.q_b_proj`",
        path=DEEPSEEK,
        span=Span(3, 9, 3, 41),
        confidence="low",
        evidence=(Evidence("`q_b_proj` matches `*_proj`; its class did not resolve", DEEPSEEK, 3),),
        no_fix_reason="the layer's class did not resolve, so the helper's contract cannot be assumed",
        scope="forward",
        expression="q.to(self.q_b_proj.weight.dtype)",
    )
    unused = Finding(
        code="DTL902",
        message="Unused `dtype-lint: ignore` suppression (unused: DTL001)",
        path=UTILS,
        span=Span(7, 20, 7, 61),
        fix=Fix("Remove the unused suppression", True, (Edit(180, 221, ""),)),
        expression="# dtype-lint: ignore[DTL001] kept for now",
    )
    return [unused, alloc, low, cast]


SUMMARY = RunSummary(files_checked=12, files_analyzed=3, elapsed_s=0.4567)


def read_source(path: str) -> str | None:
    return SOURCES.get(path)


def run(fmt: str, findings=None, summary=SUMMARY, out=None, **kw) -> str:
    out = out if out is not None else io.StringIO()
    render(
        fmt,
        sample_findings() if findings is None else findings,
        summary,
        out,
        read_source=kw.pop("read_source", read_source),
        rules=kw.pop("rules", RULES),
        **kw,
    )
    return out.getvalue()


def check_snapshot(name: str, actual: str) -> None:
    # The tool's version is data, not output shape: a release bump must not touch the snapshots.
    actual = actual.replace(f'"{__version__}"', '"<version>"')
    # SARIF's %SRCROOT% is the folder the run happened in.
    actual = actual.replace(json.dumps(Path.cwd().as_uri().rstrip("/") + "/"), '"file:///<cwd>/"')
    assert_golden(SNAPSHOTS / name, actual)


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _plain_env(monkeypatch):
    # Environment a CI job or a user's shell might set; non-TTY output must not care.
    for var in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "37")


# --- snapshots ----------------------------------------------------------------------------------

SNAPSHOT_CASES = [
    ("text", {}, "text.txt"),
    ("text", {"statistics": True}, "statistics.txt"),  # Ruff's `count code [*] name` lines
    ("text", {"statistics": "table"}, "statistics_table.txt"),
    ("concise", {}, "concise.txt"),
    ("json", {}, "json.json"),
    ("github", {}, "github.txt"),
    ("sarif", {}, "sarif.json"),
    ("junit", {}, "junit.xml"),
    ("gitlab", {}, "gitlab.json"),
]


@pytest.mark.parametrize("fmt,kw,name", SNAPSHOT_CASES, ids=[c[2] for c in SNAPSHOT_CASES])
def test_snapshot(fmt, kw, name):
    check_snapshot(name, run(fmt, **kw))


def test_snapshot_text_unsafe_fixes_enabled():
    summary = replace(SUMMARY, unsafe_fixes_enabled=True)
    check_snapshot("text_unsafe_fixes.txt", run("text", summary=summary))


def test_snapshot_clean_run():
    assert run("text", findings=[]) == "All checks passed! (12 files checked)\n"
    assert run("concise", findings=[]) == "All checks passed! (12 files checked)\n"
    assert run("text", findings=[], statistics=True) == "All checks passed! (12 files checked)\n"
    assert run("github", findings=[]) == ""
    assert json.loads(run("gitlab", findings=[])) == []
    assert json.loads(run("json", findings=[]))["findings"] == []


def test_formats_registry():
    assert FORMATS == ("text", "concise", "json", "github", "sarif", "junit", "gitlab")
    with pytest.raises(ValueError, match="unknown output format 'xml'"):
        run("xml")


def test_output_is_deterministic_and_input_order_free():
    for fmt in FORMATS:
        a = run(fmt)
        b = run(fmt, findings=list(reversed(sample_findings())))
        assert a == b, fmt


# --- colour and TTY -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_ansi_when_not_a_tty(fmt, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich alone would obey this; we must not
    assert "\x1b" not in run(fmt)
    assert "\x1b" not in run(fmt, statistics=True)


@pytest.mark.parametrize("fmt", ["text", "concise"])
def test_colour_on_a_tty_and_when_forced(fmt, monkeypatch):
    plain = run(fmt)
    tty = run(fmt, out=FakeTTY())
    assert "\x1b[" in tty
    forced = run(fmt, color=True)
    assert "\x1b[" in forced
    # Colour changes nothing but escape codes (width: a pipe's fixed one when forced).
    assert ANSI.sub("", forced) == plain
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b" not in run(fmt, out=FakeTTY())
    assert "\x1b" not in run(fmt, out=FakeTTY(), color=False)


def test_statistics_forced_colour_strips_to_plain():
    assert ANSI.sub("", run("text", statistics=True, color=True)) == run("text", statistics=True)


def test_long_lines_are_not_wrapped():
    long_path = "a/" * 80 + "very_long_module_name.py"
    f = Finding("DTL001", "x " * 80 + "end", long_path, Span(1, 1, 1, 2))
    out = run("text", findings=[f])
    assert f"{long_path}:1:1: DTL001 {'x ' * 80}end\n" in out
    assert run("concise", findings=[f]).splitlines()[0] == f"{long_path}:1:1: DTL001 {'x ' * 80}end"


# --- text details -------------------------------------------------------------------------------


def test_text_frame_marks_span_with_tabs_and_wide_characters():
    src = 'def f(x):\n\ty = "注意"; x = x.to(L.weight.dtype)\n\treturn x\n'
    col = src.split("\n")[1].index("x.to") + 1
    end = src.split("\n")[1].index(")") + 2
    f = Finding("DTL001", "m", "t.py", Span(2, col, 2, end))
    out = run("text", findings=[f], read_source=lambda p: src)
    lines = out.splitlines()
    code_row = next(line for line in lines if line.startswith("2 | "))
    caret_row = lines[lines.index(code_row) + 1]
    # The tab shows as 4 columns, the two CJK characters as 2 cells each.
    assert code_row == '2 |     y = "注意"; x = x.to(L.weight.dtype)'
    start = caret_row.index("^")
    assert caret_row[start:] == "^" * len("x.to(L.weight.dtype)") + " DTL001"
    # Display cells before the span: 4 (tab) + 'y = "' + 4 (two wide chars) + '"; x = '
    assert start == len("2 | ") + 4 + len('y = "') + 4 + len('"; x = ')


def test_text_long_multiline_span_is_elided():
    src = "x = f(\n" + "".join(f"    a{i},\n" for i in range(10)) + ")\n"
    f = Finding("DTL001", "m", "t.py", Span(1, 5, 12, 2))
    out = run("text", findings=[f], read_source=lambda p: src)
    assert "   : ..." in out
    assert " 1 | x = f(" in out and "12 | )" in out
    assert "a3" not in out  # from the elided middle
    assert "11 |     a9,\n   |     ^^^\n12 | )\n   | ^ DTL001\n   |\n" in out


def test_text_span_outside_source_has_no_frame():
    f = Finding("DTL001", "m", "t.py", Span(99, 1, 99, 2), no_fix_reason="why")
    out = run("text", findings=[f], read_source=lambda p: "x = 1\n")
    assert out == "t.py:99:1: DTL001 m\n  = no fix: why\n\nFound 1 finding; 12 files checked\n"


def _through_rich(findings, summary=SUMMARY, src=read_source) -> str:
    """The text report as rich prints it without colour (what `text` did before it had a plain
    path): the same layout rows, each through `Console.print(row, soft_wrap=True)`."""
    from dtype_lint.reporters import text
    from dtype_lint.reporters._common import RenderContext, remaining
    from dtype_lint.reporters._console import make_console

    out = io.StringIO()
    console = make_console(out, False)
    ctx = RenderContext(read_source=src, rules=RULES, color=False, given_codes=tuple(RULES))
    for f in remaining(findings):
        console.print(text.header(f, summary.unsafe_fixes_enabled), soft_wrap=True)
        source = ctx.source(f.path)
        framed = text.frame(f, source) if source is not None else None
        w = 1
        if framed is not None:
            rows, w = framed
            for row in rows:
                console.print(row, soft_wrap=True)
        for row in text.notes(f, w):
            console.print(row, soft_wrap=True)
        console.print()
    console.print(text._rich_text()(summary_line(tally(findings, summary))), soft_wrap=True)
    if fixable_line(tally(findings, summary)):
        console.print(text._rich_text()(fixable_line(tally(findings, summary))), soft_wrap=True)
    return out.getvalue()


def test_plain_text_is_what_rich_prints():
    """Into a pipe without colour `text` writes without rich: the same characters, whatever
    the messages and sources hold (tabs after wide characters, the control characters rich
    drops, escape sequences it keeps, line breaks inside a message)."""
    odd = "t\u00e9st \u6ce8\u610f\tmid\ttab \r\x07\x08\x0b\x0c bell \x1b[31m esc\nsecond\tline  "
    src = 'def f(x):\n\ty = "\u6ce8\u610f";\tx = x.to(L.weight.dtype)\r\n\treturn x\x0c\n'
    extra = [
        Finding("DTL001", odd, "t.py", Span(2, 5, 2, 30), scope="f", expression=odd,
                evidence=(Evidence(odd, "t.py", 2), Evidence("\tno place", "", 0)), no_fix_reason=odd),
        Finding("DTL002", "m\t\u00e9", "t.py", Span(1, 1, 3, 2), fix=Fix(odd, False, (Edit(0, 1, "x"),))),
    ]
    sources = dict(SOURCES, **{"t.py": src})
    for findings in (sample_findings(), extra, sample_findings() + extra, []):
        plain = run("text", findings=findings, read_source=sources.get)
        assert plain == _through_rich(findings, src=sources.get)


def test_plain_text_does_not_import_rich():
    code = """
import io, sys
from dtype_lint.reporters import render, RunSummary
from dtype_lint.core.findings import Finding, Span
render("text", [Finding("DTL001", "m", "a.py", Span(1, 1, 1, 2))], RunSummary(1, 1, 0.0),
       io.StringIO(), read_source=lambda p: "x = 1\\n", rules={})
leaked = sorted(m for m in sys.modules if m == "rich" or m.startswith("rich."))
assert not leaked, leaked
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_read_source_errors_are_not_fatal():
    def boom(path):
        raise OSError("gone")

    for fmt in FORMATS:
        run(fmt, read_source=boom)


def test_fixed_findings_are_counted_not_listed():
    fs = sample_findings()
    del fs[3]  # the safe cast, fixed by this run: the caller passes what remains
    summary = RunSummary(SUMMARY.files_checked, SUMMARY.files_analyzed, SUMMARY.elapsed_s, fixed=1)
    out = run("text", findings=fs, summary=summary)
    assert "14:16" not in out
    assert out.endswith(
        "Found 4 findings (1 fixed, 3 remaining; 1 fixable; "
        "1 hidden fix can be enabled with --unsafe-fixes); 12 files checked\n"
        "[*] 1 fixable with `--fix`.\n"
    )
    data = json.loads(run("json", findings=fs, summary=summary))
    assert data["summary"]["fixed"] == 1 and data["summary"]["findings"] == 3


@pytest.mark.parametrize(
    "fixes,fixed,enabled,line",
    [
        ([], 0, False, "All checks passed! (1 file checked)"),
        ([None], 0, False, "Found 1 finding; 1 file checked"),
        ([True, True, None], 0, False, "Found 3 findings (2 fixable); 1 file checked"),
        ([True, False], 0, False,
         "Found 2 findings (1 fixable; 1 hidden fix can be enabled with --unsafe-fixes); 1 file checked"),
        ([False, False], 0, False,
         "Found 2 findings (2 hidden fixes can be enabled with --unsafe-fixes); 1 file checked"),
        ([True, False], 0, True, "Found 2 findings (2 fixable); 1 file checked"),
        ([], 2, False, "Found 2 findings (2 fixed, 0 remaining); 1 file checked"),
        ([None], 3, False, "Found 4 findings (3 fixed, 1 remaining); 1 file checked"),
    ],
)
def test_summary_line(fixes, fixed, enabled, line):
    fs = [
        Finding("DTL001", "m", "a.py", Span(i + 1, 1, i + 1, 2),
                fix=None if safe is None else Fix("d", safe, ()))
        for i, safe in enumerate(fixes)
    ]
    summary = RunSummary(1, 1, 0.0, fixed=fixed, unsafe_fixes_enabled=enabled)
    assert summary_line(tally(fs, summary)) == line


def test_summary_counts_from_caller_are_lower_bounds():
    summary = RunSummary(1, 1, 0.0, fixes_available_safe=2, fixes_available_unsafe=1)
    fs = [Finding("DTL001", "m", "a.py", Span(1, 1, 1, 2))] * 3
    assert summary_line(tally(fs, summary)) == (
        "Found 3 findings (2 fixable; 1 hidden fix can be enabled with --unsafe-fixes); 1 file checked"
    )


def test_summary_line_says_how_many_files_and_never_passes_over_nothing():
    def line(files, findings=()):
        return summary_line(tally(list(findings), RunSummary(files, 0, 0.0)))

    assert line(12) == "All checks passed! (12 files checked)"
    assert line(0) == "No Python files checked."
    assert "passed" not in line(0)
    one = Finding("DTL001", "m", "a.py", Span(1, 1, 1, 2))
    assert line(2, [one]) == "Found 1 finding; 2 files checked"
    # A caller that gives no count (a Tally built by hand) gets the bare line.
    assert summary_line(replace(tally([], RunSummary(1, 0, 0.0)), files=None)) == "All checks passed!"


def test_statistics_lines_are_ruffs_format():
    out = run("text", statistics=True)
    assert out.splitlines()[:3] == [
        "2\tDTL001\t[-] weight-dtype-cast",  # one of the two is fixable now
        "1\tDTL003\t[ ] weight-dtype-alloc",  # only an unsafe fix
        "1\tDTL902\t[*] unused-suppression",
    ]
    assert "14:16" not in out and "\x1b" not in out


def test_statistics_table():
    out = run("text", statistics="table")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("DTL")}
    assert rows["DTL001"][:3] == ["DTL001", "weight-dtype-cast", "2"] and rows["DTL001"][3] == "1"
    assert rows["DTL003"][:4] == ["DTL003", "weight-dtype-alloc", "1", "0"]
    assert "(+1 unsafe)" in " ".join(rows["DTL003"])
    assert rows["DTL902"][:3] == ["DTL902", "unused-suppression", "1"]
    codes = [line.split()[0] for line in out.splitlines() if line.startswith("DTL")]
    assert codes == ["DTL001", "DTL003", "DTL902"]  # count desc, then code
    assert "14:16" not in out  # no per-finding listing
    assert run("concise", statistics="table") == out
    # Machine formats ignore statistics: they carry every finding already.
    assert run("json", statistics=True) == run("json")


# --- json ---------------------------------------------------------------------------------------

FINDING_KEYS = [
    "code", "message", "path", "line", "col", "end_line", "end_col", "confidence", "scope",
    "expression", "evidence", "fix", "no_fix_reason",
]


def test_json_schema():
    data = json.loads(run("json"))
    assert list(data) == ["version", "summary", "findings"]
    assert data["version"] == 1
    assert data["summary"] == {
        "files": 12, "analyzed": 3, "findings": 4, "fixable": 3, "fixed": 0, "elapsed_s": 0.457,
    }
    assert list(data["summary"]) == ["files", "analyzed", "findings", "fixable", "fixed", "elapsed_s"]
    keys = [(f["path"], f["line"], f["col"], f["code"]) for f in data["findings"]]
    assert keys == sorted(keys)
    for f in data["findings"]:
        assert list(f) == FINDING_KEYS
        for ev in f["evidence"]:
            assert list(ev) == ["message", "path", "line"]
        if f["fix"] is not None:
            assert list(f["fix"]) == ["description", "applicability", "unsafe_reason", "edits", "imports"]
            assert f["fix"]["applicability"] in ("safe", "unsafe")
            for e in f["fix"]["edits"]:
                assert list(e) == ["start", "end", "text"]
    by_code = {(f["code"], f["confidence"]): f for f in data["findings"]}
    cast = by_code[("DTL001", "high")]
    assert cast["fix"]["applicability"] == "safe" and cast["fix"]["unsafe_reason"] == ""
    assert cast["fix"]["imports"] == [list(HELPER)]
    alloc = by_code[("DTL003", "high")]
    assert alloc["fix"]["applicability"] == "unsafe" and alloc["fix"]["unsafe_reason"]
    low = by_code[("DTL001", "low")]
    assert low["fix"] is None and low["no_fix_reason"]
    assert [f["path"] for f in data["findings"]] == [MLA, MLA, DEEPSEEK, UTILS]


def test_json_is_indented_and_ends_with_newline():
    out = run("json")
    assert out.startswith('{\n  "version": 1,\n') and out.endswith("}\n")


# --- github -------------------------------------------------------------------------------------


def test_github_escaping():
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("a,b:c%d\ne") == "a%2Cb%3Ac%25d%0Ae"
    f = Finding(
        "DTL001", "cast: 100% wrong,\nreally", "dir,1/a:b%.py", Span(3, 4, 5, 6), confidence="low"
    )
    assert run("github", findings=[f]) == (
        "::warning file=dir%2C1/a%3Ab%25.py,line=3,col=4,endLine=5,endColumn=6,"
        "title=dtype-lint (DTL001)::cast: 100%25 wrong,%0Areally\n"
    )


def test_warning_severity_reads_as_a_warning_everywhere():
    """A finding of a warning-severity rule (or one reported as lower severity) is a warning in
    every format that has levels, however confident it is."""
    f = Finding("DTL004", "sentinel", "a.py", Span(1, 1, 1, 2), severity="warning")
    assert run("github", findings=[f]).startswith("::warning file=a.py,")
    sarif = json.loads(run("sarif", findings=[f]))
    assert sarif["runs"][0]["results"][0]["level"] == "warning"
    assert Finding.from_dict(f.to_dict()).severity == "warning"
    error = replace(f, severity="error")
    assert run("github", findings=[error]).startswith("::error file=a.py,")


def test_github_one_command_per_finding():
    lines = run("github").splitlines()
    assert len(lines) == 4
    assert all(re.match(r"::(error|warning) file=[^:]+,line=\d+,col=\d+,endLine=\d+,endColumn=\d+,title=dtype-lint \(DTL\d+\)::", x) for x in lines)
    assert lines[0].startswith(f"::error file={MLA},line=14,col=16,endLine=14,endColumn=52,")
    assert lines[2].startswith(f"::warning file={DEEPSEEK},")  # low confidence
    assert lines[3].startswith(f"::warning file={UTILS},")  # unused suppression


# --- sarif --------------------------------------------------------------------------------------


def apply_sarif_replacements(text: str, replacements: list[dict]) -> str:
    src = SourceText(text)

    def off(line: int, col: int) -> int:
        return src.starts[line - 1] + col - 1

    for r in sorted(replacements, key=lambda r: (r["deletedRegion"]["startLine"], r["deletedRegion"]["startColumn"]), reverse=True):
        d = r["deletedRegion"]
        text = text[: off(d["startLine"], d["startColumn"])] + r["insertedContent"]["text"] + text[off(d["endLine"], d["endColumn"]) :]
        src = SourceText(text)
    return text


def test_sarif_structure():
    log = json.loads(run("sarif"))
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run_,) = log["runs"]
    driver = run_["tool"]["driver"]
    assert driver["name"] == "dtype-lint"
    ids = [r["id"] for r in driver["rules"]]
    assert ids == ["DTL001", "DTL003", "DTL902"]  # given rules + engine codes that occur
    for r in driver["rules"]:
        assert r["name"] and r["shortDescription"]["text"]
    # The rule's documentation itself travels: a repo path would not resolve for the reader.
    assert driver["rules"][0]["help"] == {"text": RULES["DTL001"].doc, "markdown": RULES["DTL001"].doc}
    assert "helpUri" not in driver["rules"][0]
    assert "DTL902" in driver["rules"][2]["help"]["text"]
    assert run_["columnKind"] == "unicodeCodePoints"
    results = run_["results"]
    assert len(results) == 4
    for res in results:
        assert ids[res["ruleIndex"]] == res["ruleId"]
        assert res["level"] in ("error", "warning")
        (loc,) = res["locations"]
        assert set(loc["physicalLocation"]["region"]) == {"startLine", "startColumn", "endLine", "endColumn"}
        assert res["partialFingerprints"]["dtypeLint/v1"]
    low = results[2]
    assert low["level"] == "warning" and low["properties"]["confidence"] == "low" and "fixes" not in low


def test_sarif_related_locations_from_evidence():
    results = json.loads(run("sarif"))["runs"][0]["results"]
    cast = next(r for r in results if r["ruleId"] == "DTL001" and r["level"] == "error")
    rel = cast["relatedLocations"]
    assert [r["id"] for r in rel] == [1, 2]
    assert rel[1]["physicalLocation"]["artifactLocation"]["uri"] == "vllm/model_executor/layers/linear.py"
    assert rel[1]["physicalLocation"]["region"] == {"startLine": 412}
    assert rel[0]["message"]["text"].startswith("`self.kv_b_proj` is a ColumnParallelLinear")


def test_sarif_fixes_reproduce_the_edits():
    findings = sample_findings()
    results = json.loads(run("sarif"))["runs"][0]["results"]
    for res, f in zip(results, sorted(findings, key=Finding.sort_key)):
        if f.fix is None:
            assert "fixes" not in res
            continue
        (fix,) = res["fixes"]
        assert fix["properties"]["applicability"] == ("safe" if f.fix.safe else "unsafe")
        (change,) = fix["artifactChanges"]
        source = read_source(f.path)
        if source is None:  # unavailable: character offsets instead of line/column
            (r,) = change["replacements"]
            assert r["deletedRegion"] == {"charOffset": 180, "charLength": 41}
            continue
        expected = source
        for e in sorted(f.fix.edits, key=lambda e: e.start, reverse=True):
            expected = expected[: e.start] + e.text + expected[e.end :]
        assert apply_sarif_replacements(source, change["replacements"]) == expected
        if f.fix.imports:
            assert fix["properties"]["imports"] == [list(i) for i in f.fix.imports]
            assert "also adds `from vllm.model_executor" in fix["description"]["text"]


def test_sarif_columns_are_characters_not_bytes():
    src = 'x = "é€😀"; y = y.to(L.weight.dtype)\n'
    start = src.index("y.to")
    f = Finding("DTL001", "m", "u.py", Span(1, start + 1, 1, start + 21),
                fix=Fix("d", True, (Edit(start, start + 20, "y"),)))
    res = json.loads(run("sarif", findings=[f], read_source=lambda p: src))["runs"][0]["results"][0]
    region = res["fixes"][0]["artifactChanges"][0]["replacements"][0]["deletedRegion"]
    assert region == {"startLine": 1, "startColumn": start + 1, "endLine": 1, "endColumn": start + 21}
    assert start + 1 == 16  # 3 non-ASCII characters, 9 UTF-8 bytes, count as 3


def test_sarif_uris():
    from dtype_lint.reporters.sarif import artifact_uri

    assert artifact_uri("a dir/b#c.py") == "a%20dir/b%23c.py"
    assert artifact_uri("./x.py") == "x.py"
    assert artifact_uri("/abs/p.py") == "file:///abs/p.py"


# --- junit --------------------------------------------------------------------------------------


def test_junit_parses_and_carries_findings():
    root = ET.fromstring(run("junit").encode("utf-8"))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    # One testcase per finding (as Ruff's junit), then the passing summary case.
    expected = sorted(sample_findings(), key=Finding.sort_key)
    assert [(c.get("classname"), c.get("file"), c.get("line")) for c in cases[:-1]] == [
        (f.path, f.path, str(f.span.line)) for f in expected]
    assert cases[0].get("name") == f"DTL001 at {MLA}:14:16"
    assert suite.get("tests") == str(len(cases)) and suite.get("failures") == str(len(cases) - 1)
    mla, alloc = cases[0].find("failure"), cases[1].find("failure")
    assert (mla.get("type"), mla.get("message")) == (
        "DTL001", "Activation cast to the storage dtype of `self.kv_b_proj` (a quantizable layer)")
    assert mla.text.splitlines()[0] == (
        f"{MLA}:14:16: DTL001 Activation cast to the storage dtype of `self.kv_b_proj` (a quantizable layer)")
    assert alloc.text.splitlines()[0] == f"{MLA}:15:15: DTL003 Buffer allocated with the storage dtype of `self.kv_b_proj`"
    assert cases[-1].get("name") == "12 files checked, 3 analyzed" and cases[-1].find("failure") is None


def test_junit_escapes_and_drops_invalid_xml_characters():
    f = Finding("DTL001", 'a <b> & "c" \x1b[31m\x00 end', "p&<q>.py", Span(1, 1, 1, 2))
    out = run("junit", findings=[f])
    root = ET.fromstring(out.encode("utf-8"))
    case = root.find("testsuite/testcase")
    assert case.get("file") == "p&<q>.py" and case.get("name") == "DTL001 at p&<q>.py:1:1"
    assert 'a <b> & "c" ' in case.find("failure").text
    assert "\x1b" not in out and "\x00" not in out


def test_junit_clean_run_has_one_passing_case():
    root = ET.fromstring(run("junit", findings=[]).encode("utf-8"))
    cases = root.findall("testsuite/testcase")
    assert len(cases) == 1 and cases[0].find("failure") is None
    assert root.find("testsuite").get("failures") == "0"


# --- gitlab -------------------------------------------------------------------------------------


def test_gitlab_report():
    issues = json.loads(run("gitlab"))
    assert len(issues) == 4
    for i in issues:
        assert set(i) == {"description", "check_name", "fingerprint", "severity", "location"}
        assert i["severity"] in ("info", "minor", "major", "critical", "blocker")
        assert isinstance(i["location"]["lines"]["begin"], int)
        assert i["description"].startswith(i["check_name"] + " ")
    assert [i["severity"] for i in issues] == ["major", "major", "minor", "minor"]
    assert issues[0]["location"] == {"path": MLA, "lines": {"begin": 14, "end": 14}}
    assert issues[1]["location"] == {"path": MLA, "lines": {"begin": 15, "end": 17}}


def test_gitlab_fingerprints_stable_and_distinct():
    first = [i["fingerprint"] for i in json.loads(run("gitlab"))]
    assert len(set(first)) == len(first)
    assert first == [i["fingerprint"] for i in json.loads(run("gitlab"))]
    # Unrelated edits move lines; the fingerprints must not change.
    moved = []
    for f in sample_findings():
        s = f.span
        moved.append(replace(f, span=Span(s.line + 40, s.col, s.end_line + 40, s.end_col)))
    assert sorted(first) == sorted(i["fingerprint"] for i in json.loads(run("gitlab", findings=moved)))
    # Reformatting the expression does not change them either.
    f = sample_findings()[3]
    g = replace(f, expression="kv_c.to(\n    self.kv_b_proj.weight.dtype,\n)")
    (a,) = json.loads(run("gitlab", findings=[f]))
    (b,) = json.loads(run("gitlab", findings=[g]))
    assert a["fingerprint"] == b["fingerprint"]
    # The same key twice in one scope: two issues, two fingerprints.
    twin = replace(f, span=Span(20, 16, 20, 52))
    fps = [i["fingerprint"] for i in json.loads(run("gitlab", findings=[f, twin]))]
    assert len(set(fps)) == 2 and fps[0] == a["fingerprint"]
    # The fingerprint is the same one SARIF carries.
    sarif = json.loads(run("sarif"))["runs"][0]["results"]
    assert [r["partialFingerprints"]["dtypeLint/v1"] for r in sarif] == first


# --- import cost --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "github", "concise", "gitlab", "sarif", "junit"])
def test_machine_formats_do_not_import_rich(fmt):
    code = f"""
import io, sys
from dtype_lint.reporters import render, RunSummary
assert "rich" not in sys.modules, "importing dtype_lint.reporters imported rich"
from dtype_lint.core.findings import Finding, Span
render({fmt!r}, [Finding("DTL001", "m", "a.py", Span(1, 1, 1, 2))], RunSummary(1, 1, 0.0),
       io.StringIO(), read_source=lambda p: "x = 1\\n", rules={{}})
leaked = sorted(m for m in sys.modules if m == "rich" or m.startswith("rich."))
assert not leaked, leaked
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_evidence_without_a_place_in_a_file():
    f = Finding(
        "DTL001", "m", "a.py", Span(2, 1, 2, 6),
        evidence=(
            Evidence("`ColumnParallelLinear` is a configured quantizable class", "", 0),
            Evidence("from the preset", "pyproject.toml", 0),
        ),
    )
    src = "x = 1\n\ny = x.to(w)\n"
    out = run("text", findings=[f], read_source=lambda p: src)
    assert "  = evidence: `ColumnParallelLinear` is a configured quantizable class\n" in out
    assert "  = evidence: pyproject.toml from the preset\n" in out
    assert not [line for line in out.splitlines() if line != line.rstrip()]  # no trailing blanks
    (res,) = json.loads(run("sarif", findings=[f]))["runs"][0]["results"]
    a, b = res["relatedLocations"]
    assert a == {"id": 1, "message": {"text": "`ColumnParallelLinear` is a configured quantizable class"}}
    assert b["physicalLocation"] == {"artifactLocation": {"uri": "pyproject.toml", "uriBaseId": "%SRCROOT%"}}


def test_sarif_paths_resolve_against_srcroot():
    f = Finding("DTL001", "m", "pkg/a.py", Span(1, 1, 1, 2))
    g = Finding("DTL001", "m", "/abs/b.py", Span(1, 1, 1, 2))
    (sarif_run,) = json.loads(run("sarif", findings=[f, g]))["runs"]
    assert sarif_run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": Path.cwd().as_uri().rstrip("/") + "/"}}
    locations = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in sarif_run["results"]]
    assert locations == [{"uri": "file:///abs/b.py"}, {"uri": "pkg/a.py", "uriBaseId": "%SRCROOT%"}]


def test_sarif_no_empty_fixes():
    rules = {"DTL001": RuleInfo("DTL001", "n", "s", "# DTL001\n")}
    f = Finding("DTL001", "m", "a.py", Span(1, 1, 1, 2), fix=Fix("nothing to do", True, ()))
    log = json.loads(run("sarif", findings=[f], rules=rules))
    (rule,) = log["runs"][0]["tool"]["driver"]["rules"]
    assert rule["help"] == {"text": "# DTL001\n", "markdown": "# DTL001\n"}
    assert "fixes" not in log["runs"][0]["results"][0]
