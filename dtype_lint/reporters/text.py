"""`text` (default): ruff-style findings with code frames, evidence and fix notes.

    vllm/attention/mla.py:14:16: DTL001 [*] Activation cast to the storage dtype of ...
       |
    12 |     def forward(self, x):
    13 |         kv_c = self.norm(x)
    14 |         kv_c = kv_c.to(self.kv_b_proj.weight.dtype)
       |                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ DTL001
    15 |         return self.kv_b_proj(kv_c)
       |
       = evidence: vllm/attention/mla.py:10 `self.kv_b_proj` is a ColumnParallelLinear
       = fix: Use get_layer_input_dtype(...) [safe]

    Found 1 finding (1 fixable)

A span over several lines marks each of its lines (a long one shows its first three and last
two). Tabs display as 4 columns; control characters as spaces, so markers stay aligned.

The layout is built once, as lines of (text, style) pieces, through a `Text` class that is either
rich's (colour, a terminal) or `_PlainText` here: into a pipe without colour (pre-commit, CI) rich
would write the same characters, so it is not imported (about 0.04 s of a 0.2 s pre-commit run).
`_PlainText` does to the text what rich's `Console.print(text, soft_wrap=True)` does without
colour: the control characters rich drops are dropped, tabs expanded to 4-cell stops, no wrapping.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TextIO

from dtype_lint.core.findings import Finding
from dtype_lint.reporters import RunSummary
from dtype_lint.reporters._common import (
    RenderContext,
    SourceText,
    evidence_location,
    fix_note,
    fixable_line,
    is_tty,
    level,
    markers,
    remaining,
    summary_line,
    tally,
    want_color,
)

CONTEXT = 2  # lines shown before and after the span
MAX_MARKED = 6  # longer spans show their first 3 and last 2 lines
TAB = 4

GUTTER = "blue"
NOTE = "bold cyan"


def _display(s: str) -> str:
    return _control().sub(" ", s.expandtabs(TAB))


@cache
def _control() -> re.Pattern[str]:
    """The control characters a terminal line must not hold; compiled on first use (a run with
    nothing to show renders no line)."""
    return re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _width(s: str) -> int:
    return _cells(_display(s))


def _cells(s: str) -> int:
    """Terminal cells of a displayed string: one per character when ASCII (no control character
    is left by `_display`), else rich's count (wide characters take two)."""
    if s.isascii():
        return len(s)
    from rich.cells import cell_len

    return cell_len(s)


# What rich's Text drops from every string it is given (rich.control.STRIP_CONTROL_CODES: bell,
# backspace, vertical tab, form feed, carriage return).
_RICH_STRIPPED = {7: None, 8: None, 11: None, 12: None, 13: None}


class _PlainText:
    """The part of rich's `Text` the layout below uses, for output without colour: the styles are
    dropped, the text kept as rich keeps it."""

    __slots__ = ("parts",)

    def __init__(self, text: str = "", style: str | None = None):
        self.parts = [text.translate(_RICH_STRIPPED)] if text else []

    def append(self, text: str, style: str | None = None) -> "_PlainText":
        self.parts.append(text.translate(_RICH_STRIPPED))
        return self

    @classmethod
    def assemble(cls, *pieces: "str | tuple[str, str]") -> "_PlainText":
        out = cls()
        for piece in pieces:
            out.append(piece if isinstance(piece, str) else piece[0])
        return out

    def line(self) -> str:
        """The characters rich would print for this text (before the line's end)."""
        text = "".join(self.parts)
        if "\t" not in text:
            return text
        return "\n".join(_expand_tabs(row) for row in text.split("\n"))


def _expand_tabs(row: str) -> str:
    """Tabs to the next 4-cell stop, counting cells as rich does (rich.text.Text.expand_tabs)."""
    if row.isascii():
        return row.expandtabs(TAB)
    out = []
    cells = 0
    for part in row.split("\t")[:-1]:
        cells += _cells(part) + 1
        pad = -cells % TAB
        out.append(part + " " * (1 + pad))
        cells += pad
    out.append(row.rsplit("\t", 1)[-1])
    return "".join(out)


def _rich_text():
    from rich.text import Text

    return Text


def _code_style(f: Finding) -> str:
    return "bold red" if level(f) == "error" else "bold yellow"


def header(f: Finding, unsafe_fixes_enabled: bool, Text=None):
    Text = Text or _rich_text()
    text = Text()
    text.append(f"{f.path}:{f.span.line}:{f.span.col}:", style="bold")
    text.append(" ")
    text.append(f.code, style=_code_style(f))
    for tag in markers(f, unsafe_fixes_enabled):
        text.append(" ")
        text.append(tag, style="cyan" if tag == "[*]" else "yellow")
    text.append(" ")
    text.append(f.message)
    return text


def _last_marked_line(f: Finding) -> int:
    # The end is exclusive: a span ending at column 1 does not cover its end line.
    s = f.span
    if s.end_line > s.line and s.end_col <= 1:
        return s.end_line - 1
    return max(s.line, s.end_line)


def frame(f: Finding, src: SourceText, Text=None) -> tuple[list, int] | None:
    """Rows of the code frame and the gutter width, or None when the span is not in `src`."""
    Text = Text or _rich_text()
    s = f.span
    count = src.line_count
    if not 1 <= s.line <= count:
        return None
    last_marked = min(_last_marked_line(f), count)
    marked: list[int | None] = list(range(s.line, last_marked + 1))
    if len(marked) > MAX_MARKED:
        marked = marked[:3] + [None] + marked[-2:]
    before = range(max(1, s.line - CONTEXT), s.line)
    after = range(last_marked + 1, min(count, last_marked + CONTEXT) + 1)
    w = len(str(after[-1] if after else last_marked))
    pad = " " * w
    style = _code_style(f)

    def numbered(n: int):
        code = _display(src.line(n)).rstrip()
        return Text.assemble((f"{n:>{w}} |" + (" " if code else ""), GUTTER), code)

    rows = [Text(f"{pad} |", style=GUTTER)]
    rows += [numbered(n) for n in before]
    for n in marked:
        if n is None:
            rows.append(Text(f"{pad} : ...", style=GUTTER))
            continue
        rows.append(numbered(n))
        line = src.line(n)
        if n == s.line:
            start = min(s.col - 1, len(line))
        else:
            start = len(line) - len(line.lstrip())
        if n == s.end_line:
            end = min(max(s.end_col - 1, 0), len(line))
        else:
            end = len(line.rstrip())
        lead = _width(line[:start])
        carets = max(1, _width(line[:end]) - lead)
        caret = Text.assemble((f"{pad} | ", GUTTER), " " * lead, ("^" * carets, style))
        if n == marked[-1]:
            caret.append(f" {f.code}", style=style)
        rows.append(caret)
    rows += [numbered(n) for n in after]
    rows.append(Text(f"{pad} |", style=GUTTER))
    return rows, w


def notes(f: Finding, w: int, Text=None) -> list:
    Text = Text or _rich_text()
    prefix = " " * w + " = "
    rows = []
    for evidence_item in f.evidence:
        where = evidence_location(evidence_item.path, evidence_item.line)
        rows.append(
            Text.assemble(
                (prefix, NOTE), ("evidence: ", NOTE),
                f"{where} {evidence_item.message}" if where else evidence_item.message
            )
        )
    note = fix_note(f)
    if note is not None:
        label, body = note
        if f.fix is None:
            body_style = "dim"
        else:
            body_style = "green" if f.fix.safe else "yellow"
        rows.append(Text.assemble((prefix, NOTE), (f"{label}: ", NOTE), (body, body_style)))
    return rows


def render(findings: list[Finding], summary: RunSummary, out: TextIO, ctx: RenderContext) -> None:
    if want_color(out, ctx.color) or is_tty(out):
        from dtype_lint.reporters._console import make_console

        console = make_console(out, ctx.color)
        Text = _rich_text()

        def emit(text=None) -> None:
            if text is None:
                console.print()
            else:
                console.print(text, soft_wrap=True)
    else:
        Text = _PlainText

        def emit(text=None) -> None:
            out.write("\n" if text is None else text.line() + "\n")
    for finding in remaining(findings):
        emit(header(finding, summary.unsafe_fixes_enabled, Text))
        src = ctx.source(finding.path)
        framed = frame(finding, src, Text) if src is not None else None
        w = 1
        if framed is not None:
            rows, w = framed
            for row in rows:
                emit(row)
        for row in notes(finding, w, Text):
            emit(row)
        emit()
    if summary.quiet:
        return
    t = tally(findings, summary)
    style = "bold green" if t.remaining == 0 else "bold"
    emit(Text(summary_line(t), style=style))
    next_step = fixable_line(t)
    if next_step:
        emit(Text(next_step))
