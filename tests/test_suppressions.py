"""Suppression comments: parsing, coverage of findings, and DTL902 for unused/malformed ones."""

from __future__ import annotations

import textwrap

import pytest

from dtype_lint.core.findings import UNUSED_SUPPRESSION, Finding, Span
from dtype_lint.core.suppressions import Suppression, apply_suppressions, parse_suppressions


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def finding(line: int, code: str = "DTL001", end_line: int | None = None, col: int = 5,
            end_col: int = 30, path: str = "m.py") -> Finding:
    return Finding(code, "cast to storage dtype", path, Span(line, col, end_line or line, end_col))


def apply(source: str, findings, path: str = "m.py", **kw):
    return apply_suppressions(path, source, findings, **kw)


def fixed(source: str, f: Finding) -> str:
    for e in sorted(f.fix.edits, key=lambda e: e.start, reverse=True):
        source = source[: e.start] + e.text + source[e.end :]
    return source


# --- parsing ------------------------------------------------------------------------------------


def test_parse_both_forms():
    (a, b) = parse_suppressions(src('''
        x = x.to(w)  # dtype-lint: ignore[DTL001, DTL003] proj is never quantized here
        y = y.to(w)  # NOQA:DTL001,E501
    '''))
    assert (a.kind, a.line, a.codes, a.reason) == ("ignore", 1, ("DTL001", "DTL003"), "proj is never quantized here")
    assert a.text == "# dtype-lint: ignore[DTL001, DTL003] proj is never quantized here"
    assert a.problem == ""
    assert (b.kind, b.line, b.codes, b.our_codes) == ("noqa", 2, ("DTL001", "E501"), ("DTL001",))


def test_hash_inside_strings_is_not_a_comment():
    source = src('''
        s = "# dtype-lint: ignore[DTL001] not a comment"
        t = """
        # noqa: DTL001
        """
        u = '#'  # dtype-lint: ignore[DTL002] a real one
    ''')
    sups = parse_suppressions(source)
    assert [(s.line, s.codes) for s in sups] == [(5, ("DTL002",))]


def test_directive_after_another_pragma_and_reason_stops_at_next_comment():
    (s,) = parse_suppressions("x = 1  # type: ignore  # dtype-lint: ignore[DTL001] why  # pragma: no cover\n")
    assert s.reason == "why"
    assert s.text == "# dtype-lint: ignore[DTL001] why"


@pytest.mark.parametrize(
    "comment,problem",
    [
        ("# dtype-lint: ignore[DTL001]", "no reason"),
        ("# dtype-lint: ignore[DTL001]   ", "no reason"),
        ("# dtype-lint: ignore[DTL001] --", "no reason"),  # punctuation is not a reason
        ("# dtype-lint: ignore[DTL001]  # noqa: E501", "no reason"),  # another tool's pragma is not either
        ("# dtype-lint: ignore because reasons", "no codes"),
        ("# dtype-lint: ignore[] because reasons", "no codes"),
        ("# dtype-lint: ignore[DTL001] - vision tower, never quantized", ""),
        ("# dtype-lint:ignore[DTL001]: ok", ""),
    ],
)
def test_reason_and_codes_required(comment, problem):
    sups = [s for s in parse_suppressions(f"x = 1  {comment}\n") if s.kind == "ignore"]
    assert len(sups) == 1
    assert sups[0].problem == problem


def test_foreign_noqa_is_not_ours_and_a_bare_one_is_blanket():
    assert parse_suppressions("b = 2  # noqa: E501\nc = 3  # DTL001 mentioned\n") == []
    (bare,) = parse_suppressions("a = 1  # noqa\nb = 2  # noqa: E501\n")
    assert (bare.kind, bare.line, bare.blanket) == ("noqa", 1, True)


def test_files_without_directives_are_not_tokenized(monkeypatch):
    import tokenize

    def boom(*a, **k):
        raise AssertionError("tokenized")

    monkeypatch.setattr(tokenize, "generate_tokens", boom)
    assert parse_suppressions("x = 1  # just a comment\ny = 2  # noqa: E501\n") == []


def test_tokenize_error_falls_back_gracefully():
    source = 'x = 1  # dtype-lint: ignore[DTL001] ok\ns = """unterminated\ny = 2  # noqa: DTL003\n'
    sups = parse_suppressions(source)
    assert [(s.line, s.codes) for s in sups] == [(1, ("DTL001",)), (3, ("DTL003",))]
    broken_indent = "def f():\n  x = 1  # noqa: DTL001\n    y = 2  # noqa: DTL002\n"
    assert [s.line for s in parse_suppressions(broken_indent)] == [2, 3]
    # The fallback still skips '#' inside a one-line string.
    assert parse_suppressions('def f(:\n  s = "# noqa: DTL001"\n') == []


def test_crlf_and_cr_line_endings():
    crlf = "a = 1\r\nb = 2  # noqa: DTL001\r\n"
    (s,) = parse_suppressions(crlf)
    assert s.line == 2 and s.text == "# noqa: DTL001"


# --- applying -----------------------------------------------------------------------------------


def test_suppresses_named_code_on_its_line_only():
    source = src('''
        a = a.to(w)  # dtype-lint: ignore[DTL001] the layer is a vision conv
        b = b.to(w)
        c = c.to(w)  # dtype-lint: ignore[DTL003] wrong code for this finding
    ''')
    f1, f2, f3 = finding(1), finding(2), finding(3)
    kept, new = apply(source, [f1, f2, f3])
    assert kept == [f2, f3]
    assert [(n.code, n.span.line) for n in new] == [(UNUSED_SUPPRESSION, 3)]
    assert "unused: DTL003" in new[0].message


def test_noqa_with_codes_and_bare_noqa_suppress_like_ruff():
    source = "a = a.to(w)  # noqa: DTL001\nb = b.to(w)  # noqa\nc = c.to(w)  # noqa: E501\nd = 1  # noqa\n"
    f1, f2, f3 = finding(1), finding(2, "DTL003"), finding(3)
    kept, new = apply(source, [f1, f2, f3])
    assert kept == [f3]  # a bare noqa covers every code on its line; E501 is another tool's
    assert new == []  # an unused bare noqa (line 4) is never reported: other tools read it too


@pytest.mark.parametrize("comment_line", [1, 2, 3])
def test_multiline_span_any_line_of_the_expression(comment_line):
    lines = ["x = torch.empty(", "    n, dtype=L.weight.dtype,", ")", "y = 1"]
    lines[comment_line - 1] += "  # dtype-lint: ignore[DTL003] buffer feeds the packed kernel"
    source = "\n".join(lines) + "\n"
    f = finding(1, "DTL003", end_line=3, col=5, end_col=2)
    kept, new = apply(source, [f])
    assert kept == [] and new == []


def test_multiline_span_does_not_reach_past_its_end():
    source = "x = f(\n    a,\n)\ny = 1  # dtype-lint: ignore[DTL001] not this one\n"
    f = finding(1, end_line=3, col=5, end_col=2)
    kept, new = apply(source, [f])
    assert kept == [f]
    assert len(new) == 1 and new[0].span.line == 4


def test_exclusive_end_at_column_one_does_not_cover_that_line():
    source = "x = f(\n    a)\ny = 1  # dtype-lint: ignore[DTL001] next statement\n"
    f = finding(1, end_line=3, col=5, end_col=1)  # ends at the very start of line 3
    kept, _ = apply(source, [f])
    assert kept == [f]


def test_missing_reason_does_not_suppress_and_is_reported():
    source = "a = a.to(w)  # dtype-lint: ignore[DTL001]\n"
    f = finding(1)
    kept, new = apply(source, [f])
    assert kept == [f]
    (n,) = new
    assert n.code == UNUSED_SUPPRESSION and n.fix is None
    assert "has no reason" in n.message and "a reason is required" in n.message
    assert n.no_fix_reason
    assert (n.span.line, n.span.col, n.span.end_col) == (1, 14, 14 + len("# dtype-lint: ignore[DTL001]"))


def test_missing_codes_is_reported():
    kept, new = apply("a = 1  # dtype-lint: ignore because\n", [])
    (n,) = new
    assert "names no codes" in n.message and n.fix is None


def test_unused_suppression_in_file_without_findings_is_reported():
    source = "a = 1  # dtype-lint: ignore[DTL001] stale\n"
    kept, new = apply(source, [])
    assert kept == [] and [n.code for n in new] == [UNUSED_SUPPRESSION]


def test_enabled_codes_limit_unused_reports():
    source = "a = 1  # dtype-lint: ignore[DTL001, DTL005, E501] why\n"
    _, new = apply(source, [], enabled_codes={"DTL001"})
    (n,) = new
    assert n.message == "Unused `dtype-lint: ignore` suppression (unused: DTL001; unknown code: E501)"
    assert fixed(source, n) == "a = 1  # dtype-lint: ignore[DTL005] why\n"


def test_dtl902_can_be_suppressed_and_is_never_itself_unused():
    source = "a = 1  # dtype-lint: ignore[DTL001, DTL902] kept while #123 lands\n"
    assert apply(source, []) == ([], [])


def test_every_suppression_covering_a_finding_counts_as_used():
    source = "x = f(  # noqa: DTL001\n    a,\n)  # dtype-lint: ignore[DTL001] reason\n"
    kept, new = apply(source, [finding(1, end_line=3, end_col=2)])
    assert kept == [] and new == []


# --- fixes for unused suppressions --------------------------------------------------------------


@pytest.mark.parametrize(
    "line,after",
    [
        ("a = 1  # dtype-lint: ignore[DTL001] why\n", "a = 1\n"),
        ("a = 1  # noqa: DTL001\n", "a = 1\n"),
        ("a = 1  # noqa: DTL001, E501\n", "a = 1  # noqa: E501\n"),
        ("a = 1  # noqa: E501,DTL001\n", "a = 1  # noqa: E501\n"),
        ("a = 1  # type: ignore  # dtype-lint: ignore[DTL001] why\n", "a = 1  # type: ignore\n"),
        ("a = 1  # dtype-lint: ignore[DTL001] why  # type: ignore\n", "a = 1  # type: ignore\n"),
        ("b = 0\n# dtype-lint: ignore[DTL001] on its own line\nc = 2\n", "b = 0\nc = 2\n"),
        ("a = 1  # dtype-lint: ignore[DTL001] why\r\nb = 2\r\n", "a = 1\r\nb = 2\r\n"),
    ],
)
def test_unused_fix_removes_only_the_unused_part(line, after):
    _, new = apply(line, [])
    (n,) = new
    assert n.fix is not None and n.fix.safe
    assert fixed(line, n) == after
    # The fixed text has nothing left to report.
    assert apply(after, []) == ([], [])


def test_partially_used_suppression_drops_unused_codes():
    source = "a = a.to(w)  # dtype-lint: ignore[DTL001, DTL003] vision tower\n"
    kept, new = apply(source, [finding(1)])
    (n,) = new
    assert kept == [] and "unused: DTL003" in n.message
    assert n.fix.description == "Remove DTL003 from the suppression"
    assert fixed(source, n) == "a = a.to(w)  # dtype-lint: ignore[DTL001] vision tower\n"


def test_offsets_are_characters_with_non_ascii_before_the_comment():
    source = 'x = "é€😀"\na = "注意"  # noqa: DTL001\n'
    _, new = apply(source, [])
    assert fixed(source, new[0]) == 'x = "é€😀"\na = "注意"\n'


def test_a_file_without_directives_keeps_every_finding():
    f = finding(1)
    assert apply_suppressions("m.py", "x = x.to(w)\n", [f]) == ([f], [])


def test_results_sorted_and_kept_in_input_order():
    source = "a = 1  # noqa: DTL001\nb = 2  # noqa: DTL002\n"
    fs = [finding(1, "DTL009", end_col=6), finding(1, "DTL008", end_col=3)]
    kept, new = apply(source, fs, path="a.py")
    assert kept == fs
    assert [(n.path, n.span.line) for n in new] == [("a.py", 1), ("a.py", 2)]


def test_suppression_is_plain_data():
    (s,) = parse_suppressions("a = 1  # noqa: DTL001\n")
    assert isinstance(s, Suppression) and s.start == 7 and s.end == 21


def test_codes_are_case_insensitive():
    source = ("a = a.to(w)  # dtype-lint: ignore[dtl001] lower case\nb = b.to(w)  # noqa: dtl001\n"
              "c = c.to(w)  # NoQA: Dtl003\n")
    f1, f2, f3 = finding(1), finding(2), finding(3)
    kept, new = apply(source, [f1, f2, f3])
    assert kept == [f3]  # line 3 names DTL003, the finding is DTL001
    (n,) = new
    assert n.span.line == 3 and n.message == "Unused `noqa` code (unused: DTL003)"
    assert fixed(source, n).splitlines()[2] == "c = c.to(w)"


def test_file_level_directive_covers_its_codes_everywhere():
    source = ("# dtype-lint: ignore-file[DTL001] this module only runs unquantized reference layers\n"
              "a = a.to(w)\nb = b.to(w)\n")
    kept, new = apply(source, [finding(2), finding(3), finding(3, "DTL003")])
    assert [(f.span.line, f.code) for f in kept] == [(3, "DTL003")] and new == []
    # Unused, it is reported (with a fix deleting the line); without a reason it suppresses nothing.
    (n,) = apply(source, [])[1]
    assert n.message == "Unused `dtype-lint: ignore-file` suppression (unused: DTL001)"
    assert fixed(source, n) == "a = a.to(w)\nb = b.to(w)\n"
    kept, (n,) = apply("# dtype-lint: ignore-file[DTL001]\na = a.to(w)\n", [finding(2)])
    assert len(kept) == 1 and "has no reason" in n.message and "ignore-file[DTL001]" in n.message


def test_suppression_test_on_any_text_is_the_lowered_texts():
    # prefilter.has_suppression reads a text that is not ASCII by its UTF-8 bytes lowered: it must
    # answer what the test on `text.lower()` answers, whatever other characters stand around.
    from dtype_lint.core.prefilter import DIRECTIVE, has_suppression

    def reference(text: str) -> bool:
        lowered = text.lower()
        return ("dtype-lint" in lowered and DIRECTIVE.search(lowered) is not None) or \
            ("dtl" in lowered and "noqa" in lowered)

    words = ["dtype-lint: ignore", "DTYPE-LINT:IGNORE", "Dtype-Lint :\u00a0ignore", "dtype-lint\u3000:\tignore",
             "# noqa: DTL001", "NOQA", "DtL", "dtype-lİnt: ignore", "dtype-l\u0130nt: ignore", "\u212aDTL noqa",
             "dtype\u2014lint: ignore", "dt\u00e9l", "no\u0301qa dtl", "\udcff dtl noqa", "x = 1  # → dtype-lint"]
    fillers = ["", "x = 1\n", "é → ", "\u0130", "\u212a", "\U0001f600"]
    for a in words:
        for b in words + [""]:
            for f in fillers:
                text = f + a + f + "\n" + b + f
                assert has_suppression(text) == reference(text), text
                # The scan hands over the bytes it decoded (UTF-8, perhaps after a BOM).
                data = text.encode("utf-8", "surrogatepass")
                assert has_suppression(text, data) == has_suppression(text, b"\xef\xbb\xbf" + data) == \
                    reference(text), text


def test_the_scan_reads_a_suppression_in_any_encoding(tmp_path):
    # The scan tests a UTF-8 file's bytes for a suppression, another encoding's text: both find it.
    from dtype_lint.run import pipeline

    pipeline._init_scan(pipeline.for_rules(()), [], links=False)
    for name, data in [("u.py", "x = 1  # → DTYPE-LINT: ignore[DTL001] why\n".encode()),
                       ("bom.py", b"\xef\xbb\xbf# dtype-lint: ignore-file[DTL001] why\n"),
                       ("l1.py", "# -*- coding: latin-1 -*-\ns = 'é'  # dtype-lint: ignore\n".encode("latin-1")),
                       ("none.py", "# -*- coding: latin-1 -*-\ns = 'é'  # dtype lint\n".encode("latin-1"))]:
        (tmp_path / name).write_bytes(data)
        path, _passes, suppressing, _hits, _links, _words, err = pipeline._scan_job((str(tmp_path / name), "m"))
        assert err is None and suppressing == (name != "none.py"), name
    pipeline.worker_state().clear()
