"""`check --add-noqa[=REASON]`: suppress every remaining finding where it is, as Ruff's
`--add-noqa` does, to adopt dtype-lint on a tree without fixing it first.

Each finding gets a directive at the end of its first line that holds a comment-able end (not
inside a multi-line string), or of a later line of its span: `# noqa: DTL001` without a reason,
`# dtype-lint: ignore[DTL001] REASON` with one (the form that says why). Codes of one line are
merged into one directive. A file whose directives would not suppress its findings (the line
ends inside a string on every line of the span) is left unchanged for those findings.
"""

from __future__ import annotations

from collections import defaultdict

from dtype_lint.core.findings import UNUSED_SUPPRESSION, Finding


def directive(codes: list[str], reason: str) -> str:
    joined = ", ".join(codes)
    return f"# dtype-lint: ignore[{joined}] {reason}" if reason else f"# noqa: {joined}"


def add_noqa(text: str, findings: list[Finding], reason: str = "") -> tuple[str, int]:
    """(new text, directives added). DTL902 (about suppressions themselves) and file-level
    findings of the engine are not suppressed: they are fixed by editing the comment."""
    from dtype_lint.core.source import SourceText

    src = SourceText(text)
    ok_lines = _comment_safe_lines(text, len(src.lines))
    by_line: dict[int, list[str]] = defaultdict(list)
    for finding in findings:
        if finding.code == UNUSED_SUPPRESSION:
            continue
        span = finding.span
        last = span.end_line - 1 if span.end_line > span.line and span.end_col <= 1 else span.end_line
        line = next((n for n in range(finding.span.line, max(finding.span.line, last) + 1) if n in ok_lines), None)
        if line is not None and finding.code not in by_line[line]:
            by_line[line].append(finding.code)
    if not by_line:
        return text, 0
    lines = list(src.lines)
    added = 0
    for n, codes in sorted(by_line.items()):
        raw = lines[n - 1]
        body = raw.rstrip("\r\n")
        ending = raw[len(body):]
        if not ending and n < len(lines):
            ending = src.newline
        lines[n - 1] = f"{body.rstrip()}  {directive(codes, reason)}{ending}"
        added += 1
    return "".join(lines), added


def _comment_safe_lines(text: str, count: int) -> set[int]:
    """Lines whose end is outside any string: a `#` appended there starts a comment."""
    import io
    import tokenize

    inside: set[int] = set()
    fstring_start = getattr(tokenize, "FSTRING_START", None)  # 3.12+: an f-string is many tokens
    fstring_end = getattr(tokenize, "FSTRING_END", None)
    opened: list[int] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
                inside.update(range(tok.start[0], tok.end[0]))
            elif fstring_start is not None and tok.type == fstring_start:
                opened.append(tok.start[0])
            elif fstring_end is not None and tok.type == fstring_end and opened:
                inside.update(range(opened.pop(), tok.end[0]))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return set()
    lines = text.splitlines()
    # A backslash continuation takes no comment after it.
    inside.update(n for n in range(1, min(count, len(lines)) + 1) if lines[n - 1].rstrip().endswith("\\"))
    return {n for n in range(1, count + 1) if n not in inside}
