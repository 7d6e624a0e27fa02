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
"""

from __future__ import annotations

import re
from typing import TextIO

from rich.cells import cell_len
from rich.text import Text

from dtype_lint.findings import Finding
from dtype_lint.reporters import RunSummary
from dtype_lint.reporters._common import (
    RenderContext,
    SourceText,
    evidence_location,
    fix_note,
    level,
    markers,
    remaining,
    summary_line,
    tally,
)
from dtype_lint.reporters._console import make_console

CONTEXT = 2  # lines shown before and after the span
MAX_MARKED = 6  # longer spans show their first 3 and last 2 lines
TAB = 4
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

GUTTER = "blue"
NOTE = "bold cyan"


def _display(s: str) -> str:
    return _CONTROL.sub(" ", s.expandtabs(TAB))


def _width(s: str) -> int:
    return cell_len(_display(s))


def _code_style(f: Finding) -> str:
    return "bold red" if level(f) == "error" else "bold yellow"


def header(f: Finding, unsafe_fixes_enabled: bool) -> Text:
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


def frame(f: Finding, src: SourceText) -> tuple[list[Text], int] | None:
    """Rows of the code frame and the gutter width, or None when the span is not in `src`."""
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

    def numbered(n: int) -> Text:
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


def notes(f: Finding, w: int) -> list[Text]:
    prefix = " " * w + " = "
    rows = []
    for ev in f.evidence:
        where = evidence_location(ev.path, ev.line)
        rows.append(
            Text.assemble(
                (prefix, NOTE), ("evidence: ", NOTE), f"{where} {ev.message}" if where else ev.message
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
    console = make_console(out, ctx.color)
    for f in remaining(findings):
        console.print(header(f, summary.unsafe_fixes_enabled), soft_wrap=True)
        src = ctx.source(f.path)
        framed = frame(f, src) if src is not None else None
        w = 1
        if framed is not None:
            rows, w = framed
            for row in rows:
                console.print(row, soft_wrap=True)
        for row in notes(f, w):
            console.print(row, soft_wrap=True)
        console.print()
    if summary.quiet:
        return
    t = tally(findings, summary)
    style = "bold green" if t.remaining == 0 else "bold"
    console.print(Text(summary_line(t), style=style), soft_wrap=True)
