"""One file's text and the position arithmetic every later stage shares."""

from __future__ import annotations

import ast
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cached_property

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


@dataclass
class SourceFile:
    path: str  # as the user named it (display and report path)
    text: str
    module: str = ""  # dotted module name, "" when unknown
    newline: str = field(default="\n")

    @cached_property
    def lines(self) -> list[str]:
        # Python (ast, tokenize, libcst) breaks lines only at \r\n, \r and \n; str.splitlines
        # also breaks at \f, \v, \x1c-\x1e, \x85, \u2028 and \u2029, which would shift every
        # later line against ast's line numbers.
        return _LINE.findall(self.text)

    @cached_property
    def _line_starts(self) -> list[int]:
        starts = [0]
        for line in self.lines:
            starts.append(starts[-1] + len(line))
        return starts

    def line_text(self, line: int) -> str:
        """1-based line without its newline."""
        if 1 <= line <= len(self.lines):
            return self.lines[line - 1].rstrip("\r\n")
        return ""

    def char_col(self, line: int, byte_col: int) -> int:
        """ast gives UTF-8 byte columns; reports and edits need character columns (0-based)."""
        text = self.line_text(line)
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def offset(self, line: int, char_col: int) -> int:
        """Character offset into text of a 1-based line and 0-based character column."""
        return self._line_starts[line - 1] + char_col

    def node_offsets(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, self.char_col(node.lineno, node.col_offset))
        end = self.offset(node.end_lineno, self.char_col(node.end_lineno, node.end_col_offset))
        return start, end

    def segment(self, node: ast.AST) -> str:
        start, end = self.node_offsets(node)
        return self.text[start:end]

    def line_at(self, offset: int) -> int:
        return bisect_right(self._line_starts, offset)

    def indent_of(self, line: int) -> str:
        text = self.line_text(line)
        return text[: len(text) - len(text.lstrip())]


def detect_newline(text: str) -> str:
    first = text.find("\n")
    if first > 0 and text[first - 1] == "\r":
        return "\r\n"
    return "\n"


def decode(data: bytes) -> str:
    """Decode like Python does: PEP 263 cookie or BOM, default UTF-8. Raises on bad bytes."""
    import io
    import tokenize

    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    if text.startswith("\ufeff"):
        text = text[1:]
    return text
