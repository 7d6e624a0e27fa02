"""The text edits of the language server's quick-fixes (server.py): minimal and idempotent.

- `changed_line_edits`: a fix changes a few lines (the cast, the import); the edit replaces those
  lines only, never the whole document, so an editor keeps its cursor, folds and undo history
  elsewhere, and the edit composes with the user's other pending edits.
- `helper_definition_edit`: the shared helper's module is created by the quick-fix that first
  needs it. Two quick-fixes computed before either is applied (in two files, each finding the
  helper missing) would each insert it: defined twice, the module no longer compiles (its
  `from __future__` import is not first) and the next `dtype-lint check` exits 2. So the edit does
  not insert at the start of the file; it replaces the file's first N lines (N: the helper
  module's lines) with the helper module. On the new, empty file that range is clamped to the
  empty document's end by the client (VS Code validates every range against the document,
  Neovim and Emacs clamp a line past the end), which inserts the helper; on a file the first
  quick-fix already filled, it replaces the helper with itself. `CreateFile(ignoreIfExists)`
  before it keeps the second quick-fix from failing on the existing file.
"""

from __future__ import annotations

import difflib
from typing import Callable

from lsprotocol import types

# server.DtypeLintServer.position: (lines, 1-based line, 1-based column) -> Position in the
# encoding agreed with the client.
PositionOf = Callable[[list[str], int, int], types.Position]


def _line_start(lines: list[str], index: int, position: PositionOf) -> types.Position:
    """The start of 0-based line `index`; the document's end when `index` is past its last line
    (a last line without a newline ends mid-line, not at the start of a next one)."""
    if index < len(lines):
        return types.Position(line=index, character=0)
    if lines and not lines[-1].endswith(("\n", "\r")):
        return position(lines, len(lines), len(lines[-1]) + 1)
    return types.Position(line=len(lines), character=0)


def changed_line_edits(before: str, after: str, position: PositionOf) -> list[types.TextEdit]:
    """The TextEdits that turn `before` into `after`, one per run of changed lines, as ranges of
    `before` (LSP applies all edits of one TextDocumentEdit against the original text)."""
    old_lines = before.splitlines(keepends=True)
    new_lines = after.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    edits = []
    for op, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if op == "equal":
            continue
        edits.append(types.TextEdit(
            range=types.Range(_line_start(old_lines, old_start, position), _line_start(old_lines, old_end, position)),
            new_text="".join(new_lines[new_start:new_end])))
    return edits


def defines(text: str, func: str) -> bool:
    """`text` already holds a definition of `func` (a quick-fix applied before this one)."""
    return any(line.startswith(f"def {func}(") for line in text.splitlines())


def helper_definition_edit(helper_source: str, current: str, position: PositionOf) -> types.TextEdit:
    """The edit that defines the helper in its module, whose text the editor holds as `current`
    ("" for the file the quick-fix creates): see the module docstring for why a range of the
    helper's own length, and not an insertion."""
    if current:
        # Open in the editor with text of its own: inserted before it, under the version named
        # beside this edit (a second quick-fix names the same version and is rejected).
        return types.TextEdit(range=types.Range(types.Position(0, 0), types.Position(0, 0)), new_text=helper_source)
    helper_lines = helper_source.splitlines(keepends=True)
    return types.TextEdit(range=types.Range(types.Position(0, 0), types.Position(len(helper_lines), 0)),
                          new_text=helper_source)
