"""What a project's formatter and import sorter expect of the lines a fix adds.

Read from the project root's configuration, first found wins per setting:

- line length: `[tool.ruff] line-length` (or `.ruff.toml` / `ruff.toml` at the root), then
  `[tool.black] line-length`, then `[tool.isort] line_length`; 88 (Black's and Ruff's default)
  when one of those tables exists without it; none (no wrapping) when the project configures no
  formatter at all: its lines have no length to keep.
- first-party modules (isort's FIRSTPARTY section): `known-first-party` of `[tool.ruff.lint.isort]`
  (or `[tool.ruff.isort]`), `known_first_party` of `[tool.isort]`, plus what Ruff and isort find
  on their own: every top-level package or module at the root, in `src/` and in Ruff's `src`
  folders. `known-third-party` likewise moves a name out of first-party.
- `force-sort-within-sections` (Ruff) / `force_sort_within_sections` (isort).

Two uses: `import_edit` puts the helper's import into its isort section (first-party imports in
their own block after the third-party one, never appended to it), and `wrap_long_lines` breaks an
added line that is longer than the line length the way Black and `ruff format` do (the last
bracket pair first, then one element per line with a magic trailing comma; a `return X` or
`target = X` ending in no bracket gets parentheses of its own). Only lines the fix added are
touched, and a wrap must leave the module's AST unchanged, or it is not made. `fit_docstrings`
re-fills a created helper's docstrings to the line length (the templates are written to 100).
"""

from __future__ import annotations

import ast

# The project's style is read in core/project_style.py (the cache key reads it, below every stage);
# these names stay importable from here, where the fixes that use them live (re-exported).
from dtype_lint.core.project_style import (  # noqa: F401
    DEFAULT_LINE_LENGTH,
    FIRST_PARTY,
    FUTURE,
    LOCAL_FOLDER,
    STDLIB,
    THIRD_PARTY,
    ProjectStyle,
    line_length_for,
    project_style,
)
from dtype_lint.fix.string_lines import code_columns, single_row_statements

# ---- wrapping --------------------------------------------------------------------------------


_OPEN, _CLOSE = "([{", ")]}"


def wrap_long_lines(original: str, text: str, line_length: int, newline: str = "\n") -> str:
    """`text` with each line that is not in `original` and longer than `line_length` wrapped
    (see the module docstring); the result has the AST of `text`, else `text` is returned."""
    if all(len(line.rstrip("\r\n")) <= line_length for line in text.splitlines()):
        return text
    from dtype_lint.core.source import SourceText

    before = set(SourceText(original).lines)
    lines = list(SourceText(text).lines)
    # Only a row that is a whole logical line by the tokenizer is re-laid-out: a row that starts
    # or ends inside a string literal, a bracket or a backslash continuation is not a line `_wrap`
    # may split (string_lines.py). One tokenize of the text, whatever its number of rows.
    candidates = {row for row, line in enumerate(lines, 1)
                  if len(line.rstrip("\r\n")) > line_length and line not in before}
    whole_rows = single_row_statements(text) if candidates else None
    if not whole_rows:
        return text
    out: list[str] = []
    changed = False
    for row, line in enumerate(lines, 1):
        body = line.rstrip("\r\n")
        if row in candidates and row in whole_rows:
            wrapped = _wrap(body, line_length)
            if wrapped is not None:
                ending = line[len(body):] or ""
                out.append(newline.join(wrapped) + (ending or ""))
                changed = True
                continue
        out.append(line)
    if not changed:
        return text
    result = "".join(out)
    try:
        same = ast.dump(ast.parse(result)) == ast.dump(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError):
        same = False
    return result if same else text


def _wrap(line: str, limit: int) -> list[str] | None:
    """One logical line, wrapped: a `from x import a` line gets parentheses (isort's style), any
    other splits at its last bracket pair that closes at the end of the line (Black's right-hand
    split), then, when the body is still too long, at its top-level commas. None: no such split."""
    indent = line[: len(line) - len(line.lstrip())]
    stripped = line.strip()
    # A trailing comment moves to the closing bracket's line, as Black and `ruff format` leave it.
    # Where strings and the comment are is the tokenizer's call (string_lines.py): a `#` or a
    # bracket inside any string literal, prefixed, nested or escaped, is text, not code.
    columns = code_columns(stripped)
    if columns is None:
        return None
    comment = ""
    if columns[1] < len(stripped):
        stripped, comment = stripped[: columns[1]].rstrip(), "  " + stripped[columns[1]:]
    if not stripped or "\\" in stripped or '"""' in stripped or "'''" in stripped:
        return None
    if stripped.startswith("from ") and " import " in stripped and "(" not in stripped:
        head, _, names = stripped.partition(" import ")
        items = [n.strip() for n in names.split(",") if n.strip()]
        wrapped: list[str] | None = [f"{indent}{head} import ("] + [f"{indent}    {n}," for n in items] + [f"{indent})"]
    else:
        wrapped = _right_hand_split(indent, stripped, limit)
    if wrapped is None or not comment:
        return wrapped
    return wrapped[:-1] + [wrapped[-1] + comment]


def _right_hand_split(indent: str, code: str, limit: int) -> list[str] | None:
    """Black's right-hand split: at the last bracket pair whose closing bracket ends the line,
    or, when what stays before it is still too long, at an earlier pair followed only by
    trailers (`(...)[0]`: the subscript stays on the closing line, as Black leaves it)."""
    if not code:
        return None
    if code[-1] not in _CLOSE:
        return _invisible_parentheses(indent, code, limit)
    pairs = _bracket_pairs(code)
    if pairs is None:
        return None
    by_close = {c: o for o, c in pairs.items()}
    candidates = []
    close = len(code) - 1
    while close in by_close:
        opening = by_close[close]
        candidates.append((opening, close))
        close = opening - 1  # a trailer `(...)[0]`: the pair right before this one
    for opening, close in candidates:
        head, body, tail = code[: opening + 1], code[opening + 1: close].strip(), code[close:]
        if not body:
            continue
        if len(indent + head) <= limit or (opening, close) == candidates[-1]:
            return _split_body(indent, head, body, tail, limit)
    return None


def _split_body(indent: str, head: str, body: str, tail: str, limit: int) -> list[str]:
    inner = indent + "    "
    if len(inner) + len(body) <= limit:
        return [indent + head, inner + body, indent + tail]
    parts = _top_level_split(body)
    if len(parts) > 1:
        return [indent + head] + [f"{inner}{p}," for p in parts] + [indent + tail]
    # Black's next delimiters by priority: a conditional expression, then `or`/`and`, a
    # comparison, then arithmetic; the operator starts each continuation line, and a piece still
    # too long is split at its own last bracket pair.
    for words in _DELIMITERS:
        pieces = _split_at_words(body, words)
        if len(pieces) > 1:
            rows = []
            for piece in pieces:
                deeper = _right_hand_split(inner, piece, limit) if len(inner + piece) > limit else None
                rows.extend(deeper if deeper is not None else [inner + piece])
            return [indent + head] + rows + [indent + tail]
    deeper = _right_hand_split(inner, body, limit)
    if deeper is None:
        return [indent + head, inner + body, indent + tail]
    return [indent + head] + deeper + [indent + tail]


_DELIMITERS = ((" if ", " else "), (" or ", " and "),
               (" == ", " != ", " < ", " <= ", " > ", " >= ", " is ", " in "),
               (" + ", " - "), (" * ", " / ", " // ", " % ", " @ "))


def _invisible_parentheses(indent: str, code: str, limit: int) -> list[str] | None:
    """A `return X` or `target = X` whose value ends in no bracket, wrapped as Black wraps it:
    the value in parentheses of its own (`return (`, the value, `)`). None for other lines."""
    head = ""
    if code.startswith("return "):
        head = "return ("
        body = code[len("return "):]
    else:
        # One top-level ` = ` (not a chained assignment): `_split_at_words` starts the value
        # with the `=` it split before.
        pieces = _split_at_words(code, (" = ",))
        if len(pieces) == 2 and pieces[1].startswith("= "):
            head, body = pieces[0] + " = (", pieces[1][2:].strip()
    if not head or not body:
        return None
    return _split_body(indent, head, body, ")", limit)


def _outside_strings(code: str) -> tuple[list[int], bool]:
    """The indices of `code`'s characters outside string literals (a string's prefix, quotes and
    contents left out), and whether it lexes as one row whose strings all close: the one scan,
    by the tokenizer, that the bracket matcher and the splitters share."""
    columns = code_columns(code)
    if columns is None:
        return [], False
    return columns[0], True


def _bracket_pairs(code: str) -> dict[int, int] | None:
    """Opening index -> closing index, outside strings; None when the brackets do not balance."""
    positions, closed = _outside_strings(code)
    if not closed:
        return None
    pairs, stack = {}, []
    for i in positions:
        if code[i] in _OPEN:
            stack.append(i)
        elif code[i] in _CLOSE:
            if not stack:
                return None
            pairs[stack.pop()] = i
    return None if stack else pairs


def _split_at_words(body: str, words: tuple[str, ...]) -> list[str]:
    """`body` split before each of `words` outside brackets and strings."""
    pieces, depth, start = [], 0, 0
    for i in _outside_strings(body)[0]:
        c = body[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0 and any(body.startswith(w, i) for w in words):
            pieces.append(body[start:i].strip())
            start = i + 1
    pieces.append(body[start:].strip())
    return [p for p in pieces if p]


def _top_level_split(body: str) -> list[str]:
    """`body` split at its commas outside brackets and strings (a trailing comma dropped)."""
    return _split_at_words(body, (",",))


# ---- a template's docstrings ------------------------------------------------------------------


def fit_docstrings(source: str, line_length: int | None) -> str:
    """`source` (a helper template) with each docstring paragraph that has a line longer than
    `line_length` re-filled to it, as a person keeping the project's E501 would write it: the
    templates are written to 100 columns, and a project that lints at 88 must not get a created
    helper it then reports. Code lines and paragraphs that fit are left as they are; no limit, or
    text that does not parse, is returned unchanged."""
    import textwrap

    lines = source.split("\n")
    if not line_length or all(len(line) <= line_length for line in lines):
        return source
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return source
    spans = []  # (first row, last row), 0-based, of each docstring written over several rows
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str) and first.end_lineno is not None:
                spans.append((first.lineno - 1, first.end_lineno - 1))
    for start, end in sorted(spans, reverse=True):
        lines[start:end + 1] = _fill_docstring(lines[start:end + 1], line_length, textwrap)
    fitted = "\n".join(lines)
    try:
        same = ast.dump(_without_docstrings(ast.parse(fitted))) == ast.dump(_without_docstrings(tree))
    except (SyntaxError, ValueError, RecursionError):
        same = False
    return fitted if same else source


def _fill_docstring(rows: list[str], limit: int, textwrap) -> list[str]:
    """The rows of one docstring, each paragraph (rows between blank ones) that has a row over
    `limit` re-filled at the docstring's indentation; the opening quotes stay on the first row."""
    indent = rows[0][: len(rows[0]) - len(rows[0].lstrip())]
    out: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        if any(len(row) > limit for row in paragraph):
            opening = paragraph[0].lstrip()[:3] if paragraph[0].lstrip().startswith(('"""', "'''")) else ""
            words = " ".join(row.strip() for row in paragraph)
            out.extend(textwrap.wrap(words, width=limit, initial_indent=indent, subsequent_indent=indent,
                                     break_long_words=False, break_on_hyphens=False) if not opening else
                       textwrap.wrap(words[3:], width=limit, initial_indent=indent + opening,
                                     subsequent_indent=indent, break_long_words=False, break_on_hyphens=False))
        else:
            out.extend(paragraph)
        paragraph.clear()

    for row in rows:
        if not row.strip() or row.strip() in ('"""', "'''"):
            flush()
            out.append(row)
        else:
            paragraph.append(row)
    flush()
    return out


def _without_docstrings(tree: ast.AST) -> ast.AST:
    """`tree` with each docstring's text blanked: a re-filled docstring changes only that."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                first.value.value = ""
    return tree
