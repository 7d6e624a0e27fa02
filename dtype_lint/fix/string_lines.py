"""Where string literals are, as Python's tokenizer sees them: what an edit that re-indents or
wraps lines must never touch.

A fix that puts a statement under a new `if` re-indents the statement's continuation lines, and a
wrap breaks an added line at its brackets. Both are whitespace changes only where the whitespace
lies between tokens: a line that starts inside a string literal (a backslash-newline in a quoted
string, a triple-quoted string, an f-string and, from Python 3.12, the nested strings of its
replacement fields; bytes and raw strings alike) carries its leading spaces into the string's
value, so indenting it changes what the string says (`"hidden_\\` + newline + `states"` gains four
spaces and every lookup with it raises KeyError). The tokenizer, not a scan for quote characters,
decides where a string starts and ends: prefixes, escapes and nesting are its to know.
"""

from __future__ import annotations

import io
import token
import tokenize
from typing import Iterator

from dtype_lint.core.source import split_lines

# Python 3.12 tokenizes an f-string as FSTRING_START … FSTRING_END with the replacement fields'
# tokens between (3.14's template strings likewise); before 3.12 it is one STRING token.
_OPENERS = {getattr(token, name) for name in ("FSTRING_START", "TSTRING_START") if hasattr(token, name)}
_CLOSERS = {getattr(token, name) for name in ("FSTRING_END", "TSTRING_END") if hasattr(token, name)}

Position = tuple[int, int]  # (1-based row, 0-based column), as tokenize gives them


def _tokens(text: str) -> Iterator[tokenize.TokenInfo]:
    """`text`'s tokens, its lines split where Python splits them (\\r, \\n, \\r\\n) and each line
    end given to the tokenizer as \\n, so rows are the parser's line numbers. Raises
    tokenize.TokenError, SyntaxError (an IndentationError too) where it does not lex."""
    lines = [line.rstrip("\r\n") + "\n" if line.endswith(("\r", "\n")) else line for line in split_lines(text)]
    for tok in tokenize.generate_tokens(io.StringIO("".join(lines)).readline):
        if tok.type == token.ERRORTOKEN:  # before 3.12, how a string left open (`f(")`) comes out
            raise tokenize.TokenError(f"cannot lex {tok.string!r}", tok.start)
        yield tok


def string_spans(text: str) -> list[tuple[Position, Position]] | None:
    """The (start, end) of each outermost string literal of `text`, an f-string with all it holds
    being one; None when `text` does not tokenize (then nothing about it can be trusted)."""
    try:
        return _spans_of(list(_tokens(text)))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None


def _spans_of(tokens: list[tokenize.TokenInfo]) -> list[tuple[Position, Position]]:
    spans: list[tuple[Position, Position]] = []
    depth, opened = 0, (0, 0)
    for tok in tokens:
        if tok.type in _OPENERS:
            if depth == 0:
                opened = tok.start
            depth += 1
        elif tok.type in _CLOSERS:
            depth -= 1
            if depth == 0:
                spans.append((opened, tok.end))
        elif tok.type == token.STRING and depth == 0:
            spans.append((tok.start, tok.end))
    return spans


def rows_starting_in_strings(text: str) -> set[int] | None:
    """The 1-based rows of `text` whose first character is inside a string literal (its leading
    whitespace, if any, belongs to the string's value); None when `text` does not tokenize."""
    spans = string_spans(text)
    if spans is None:
        return None
    return {row for (first, _c0), (last, _c1) in spans for row in range(first + 1, last + 1)}


def rows_starting_in_strings_of(lines: list[str], first: int, last: int) -> set[int] | None:
    """`rows_starting_in_strings` of the whole text, restricted to rows `first`..`last` (1-based),
    where `lines` are the text's lines (with their ends) and row `first` starts a statement that
    rows `first`..`last` hold whole (a `def` or its first decorator, to the function's end): the
    tokenizer stands outside every string and bracket where a statement starts, so those rows lex
    alone as they do in the file. An indented statement is lexed under an `if 1:` line. Lexing a
    function instead of its file spares a fix planned in a 2,000-line module most of the tokenizer's
    work (vLLM 0.27.1's `mla_attention.py`: a tenth of a pre-commit run). None when the rows do not
    lex (where the file would not either)."""
    block = "".join(lines[first - 1:last])
    indented = block[:1] in (" ", "\t", "\f")
    rows = rows_starting_in_strings("if 1:\n" + block if indented else block)
    if rows is None:
        return None
    shift = first - 2 if indented else first - 1
    return {row + shift for row in rows}


def single_row_statements(text: str) -> set[int] | None:
    """The 1-based rows of `text` that hold whole logical lines and nothing else: the line starts
    no earlier and ends no later than the row (no bracket, string or backslash carries it over).
    Only these can be re-laid-out one row at a time. None when `text` does not tokenize."""
    rows: set[int] = set()
    first_row = 0  # the row where the current logical line's first token is; 0 between lines
    skip = {token.NL, token.COMMENT, token.INDENT, token.DEDENT, token.ENCODING, token.ENDMARKER}
    try:
        for tok in _tokens(text):
            if tok.type == token.NEWLINE:
                if first_row == tok.start[0]:
                    rows.add(first_row)
                first_row = 0
            elif first_row == 0 and tok.type not in skip:
                first_row = tok.start[0]
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None
    return rows


def code_columns(line: str) -> tuple[list[int], int] | None:
    """For one logical line: the indices of its characters outside string literals (quotes,
    prefixes and contents left out, and a comment too), and the index where its comment
    starts (len(line) when it has none). None when the line does not tokenize alone."""
    try:
        tokens = list(_tokens(line.rstrip("\r\n") + "\n"))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None
    spans = _spans_of(tokens)
    if any(tok.start[0] != 1 for tok in tokens if tok.type not in (token.NEWLINE, token.NL, token.ENDMARKER,
                                                                      token.DEDENT)):
        return None  # not one row: a string or a bracket went on past it
    comment = next((tok.start[1] for tok in tokens if tok.type == token.COMMENT), len(line))
    inside = [False] * len(line)
    for (_r0, c0), (_r1, c1) in spans:
        for index in range(c0, min(c1, len(line))):
            inside[index] = True
    return [index for index in range(comment) if not inside[index]], comment
