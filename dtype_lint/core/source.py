"""One file's text: how it is decoded, and the line/offset arithmetic every stage shares.

Lines break only at \\r\\n, \\r and \\n, as Python's tokenizer, `ast` and libcst count them;
`str.splitlines` also breaks at \\f, \\v, \\x1c-\\x1e, \\x85, \\u2028 and \\u2029, which would
shift every later line against `ast`'s line numbers.
"""

from __future__ import annotations

import io
import re
import tokenize
from bisect import bisect_right
from functools import cache, cached_property

from dtype_lint.core.records import record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (this module is on the fast path)
if TYPE_CHECKING:
    from typing import Protocol

    class Positioned(Protocol):
        """An `ast` node with a source span (`ast.AST` itself has none: `ast.mod`, `ast.operator`)."""

        lineno: int
        col_offset: int
        end_lineno: int | None
        end_col_offset: int | None

@cache
def _line() -> re.Pattern[str]:
    """A line and its break; compiled on first use (only a text holding a character that
    `str.splitlines` also breaks at is split by it)."""
    return re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


@cache
def _break() -> re.Pattern[str]:
    """A line break; compiled on first use (a pre-commit run of a file with no finding asks no
    offset of a line)."""
    return re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """The text's lines with their ends, split where Python's tokenizer splits them: by
    `str.splitlines` (C, about three times faster than the regex) when the text holds no
    character other than \\n that it would also break at."""
    if "\r" in text or "\v" in text or "\f" in text or "\x1c" in text or "\x1d" in text or "\x1e" in text or \
            (not text.isascii() and ("\x85" in text or "\u2028" in text or "\u2029" in text)):
        return _line().findall(text)
    return text.splitlines(True)


@record(frozen=True)
class FileText:
    """A decoded file and what it takes to write it back byte-compatibly."""

    text: str
    encoding: str = "utf-8"
    bom: bool = False

    @classmethod
    def decode(cls, data: bytes) -> "FileText":
        """Decode like Python does: PEP 263 cookie or BOM, default UTF-8. Raises on bad bytes."""
        # Most files have neither a BOM nor the word `coding` in the two lines a cookie may be
        # on: `detect_encoding` answers UTF-8 for them, so they are decoded as that directly
        # (half the cost of reading a tree's text). Bytes that do not decode take the full path,
        # which raises what it always raised.
        first = data.find(b"\n")
        second = data.find(b"\n", first + 1) if first >= 0 else -1
        if b"coding" not in (data if second < 0 else data[:second]) and not data.startswith(b"\xef\xbb\xbf"):
            try:
                return cls(data.decode("utf-8"))
            except UnicodeDecodeError:
                pass
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        bom = encoding == "utf-8-sig"
        text = data.decode(encoding)
        if text.startswith("\ufeff"):
            text = text[1:]
        return cls(text, "utf-8" if bom else encoding, bom)

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return (b"\xef\xbb\xbf" + data) if self.bom else data


# What reading a source file can raise on bad input: all become DTL900, never a traceback.
READ_ERRORS = (OSError, UnicodeDecodeError, SyntaxError, LookupError, ValueError)


class SourceText:
    """A text with its line starts: 1-based lines, 0-based character columns, offsets."""

    def __init__(self, text: str):
        self.text = text

    @cached_property
    def lines(self) -> list[str]:
        """Lines with their line breaks."""
        return split_lines(self.text)

    @cached_property
    def starts(self) -> list[int]:
        """Offset of each line's first character; one more entry: the end of the text."""
        return [0] + [m.end() for m in _break().finditer(self.text)]

    @property
    def line_count(self) -> int:
        # A trailing line break does not start a further (empty) line worth showing.
        n = len(self.starts)
        return n - 1 if n > 1 and self.starts[-1] == len(self.text) else n

    def line(self, n: int) -> str:
        """1-based line `n` without its line break ("" when out of range)."""
        if not 1 <= n <= len(self.lines):
            return ""
        return self.lines[n - 1].rstrip("\r\n")

    def offset(self, line: int, col: int) -> int:
        """Character offset of a 1-based line and 0-based character column."""
        return self.starts[line - 1] + col

    def position(self, offset: int) -> tuple[int, int]:
        """Character offset -> (1-based line, 1-based column)."""
        offset = max(0, min(offset, len(self.text)))
        i = bisect_right(self.starts, offset) - 1
        return i + 1, offset - self.starts[i] + 1

    def line_at(self, offset: int) -> int:
        return bisect_right(self.starts, offset)

    def indent_of(self, line: int) -> str:
        text = self.line(line)
        return text[: len(text) - len(text.lstrip())]

    @property
    def newline(self) -> str:
        """The file's line break style, from its first line break (LF when it has none)."""
        match = _break().search(self.text)
        return match.group(0) if match else "\n"


class SourceFile(SourceText):
    """A module's text as the rules and the fix planner see it, with `ast` position helpers."""

    def __init__(self, path: str, text: str, module: str = ""):
        super().__init__(text)
        self.path = path  # as the user named it (display and report path)
        self.module = module  # dotted module name, "" when unknown

    def char_col(self, line: int, byte_col: int) -> int:
        """`ast` gives UTF-8 byte columns; reports and edits need character columns (0-based)."""
        text = self.line(line)
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def node_offsets(self, node: Positioned) -> tuple[int, int]:
        start = self.offset(node.lineno, self.char_col(node.lineno, node.col_offset))
        end_line, end_col = node.end_lineno, node.end_col_offset
        if end_line is None or end_col is None:  # a node built by hand, never parsed: no span to read
            raise TypeError(f"{type(node).__name__} node has no end position")
        end = self.offset(end_line, self.char_col(end_line, end_col))
        return start, end

    def segment(self, node: Positioned) -> str:
        start, end = self.node_offsets(node)
        return self.text[start:end]

    # Kept for the planner's vocabulary: a line of text without its break.
    line_text = SourceText.line


# A file that may hold a site is parsed only if no line is longer than this (a minified or
# generated one-liner costs the parser gigabytes and holds no inference code).
MAX_LINE_CHARS = 100_000


# The one safe reader lives in safe_read.py (standard library only, so that the pre-commit fast
# path can use it before anything heavy is imported); re-exported here for every other reader.
from dtype_lint.core.safe_read import MAX_SOURCE_BYTES, NotRegularFile, read_bytes  # noqa: E402, F401


def read_file(path: str, limit: int = MAX_SOURCE_BYTES) -> FileText:
    """Read and decode one source file; refuses special files and files over `limit` bytes
    (READ_ERRORS, which the run reports as DTL900)."""
    return FileText.decode(read_bytes(path, limit))


def too_long_line(text: str, limit: int = MAX_LINE_CHARS) -> int:
    """The 1-based number of the first line longer than `limit` characters, or 0."""
    if len(text) <= limit:
        return 0
    for n, line in enumerate(text.splitlines(), 1):
        if len(line) > limit:
            return n
    return 0


def iter_code(text: str, start: int = 0):
    """Yield (offset, char) for every character from `start` that is code: outside string
    literals and comments, except that each comment's `#` is yielded (so a consumer can find
    comments) before its text is skipped. Quote-aware, triple quotes included; one linear pass.
    The consumer stops when it has what it needs."""
    i, n, quote = start, len(text), ""
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
            if c == "\n" and len(quote) == 1:  # an unterminated one-line string ends here
                quote = ""
                yield i, c
            i += 1
            continue
        if c in "\"'":
            quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else c
            i += len(quote)
            continue
        if c == "#":
            yield i, c
            nl = text.find("\n", i)
            if nl < 0:
                return
            i = nl
            continue
        yield i, c
        i += 1
