"""The only code that writes user files: apply fixes, add the helper import, verify, write atomically.

A file is rewritten only when the result parses (stdlib ast and libcst both) and every applied
fix's site is gone on re-analysis; otherwise it is left byte-for-byte untouched and the failure
becomes a DTL901 finding. Fixes are applied in rounds (like ruff): edits of one round never
overlap; a fix skipped for overlap is retried on the re-analysed text of the next round.
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import re
import stat
import tempfile
import tokenize
from dataclasses import dataclass, field
from typing import Callable

from .findings import FIX_FAILED, Edit, Finding, Span
from .source import SourceFile, detect_newline

MAX_ROUNDS = 6


class FixError(Exception):
    pass


@dataclass
class FileText:
    text: str
    encoding: str = "utf-8"
    bom: bool = False

    @classmethod
    def read(cls, path: str) -> "FileText":
        with open(path, "rb") as f:
            data = f.read()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        bom = encoding == "utf-8-sig"
        text = data.decode(encoding)
        if text.startswith("\ufeff"):
            text = text[1:]
        return cls(text, "utf-8" if bom else encoding, bom)

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return (b"\xef\xbb\xbf" + data) if self.bom else data


@dataclass
class FixOutcome:
    path: str
    original: str
    text: str
    applied: list[Finding] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    error: str = ""

    @property
    def changed(self) -> bool:
        return self.text != self.original and not self.error

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.original.splitlines(keepends=True), self.text.splitlines(keepends=True),
            fromfile=f"a/{self.path}", tofile=f"b/{self.path}"))


def _selected(f: Finding, unsafe: bool) -> bool:
    return f.fix is not None and (f.fix.safe or unsafe)


def apply_edits(text: str, findings: list[Finding]) -> tuple[str, list[Finding]]:
    """Apply the non-overlapping fixes of one round (all of a fix's edits, or none)."""
    nl = detect_newline(text)
    accepted: list[Edit] = []
    applied: list[Finding] = []
    for f in findings:
        edits = [Edit(e.start, e.end, e.text.replace("\n", nl) if nl != "\n" else e.text) for e in f.fix.edits]
        new = [e for e in edits if e not in accepted]
        if any(_overlaps(e, a) for e in new for a in accepted) or _self_overlap(new):
            continue
        accepted.extend(new)
        applied.append(f)
    # Apply back to front; insertions at the same offset keep their listed order.
    order = sorted(range(len(accepted)), key=lambda i: (accepted[i].start, accepted[i].end, i), reverse=True)
    for i in order:
        e = accepted[i]
        text = text[: e.start] + e.text + text[e.end:]
    return text, applied


def _overlaps(a: Edit, b: Edit) -> bool:
    if a.start == a.end or b.start == b.end:  # insertions conflict only strictly inside a range
        return (b.start < a.start < b.end) or (a.start < b.start < a.end)
    return a.start < b.end and b.start < a.end


def _self_overlap(edits: list[Edit]) -> bool:
    return any(_overlaps(a, b) for i, a in enumerate(edits) for b in edits[i + 1:])


def add_imports(text: str, imports: set[tuple[str, str]]) -> str:
    """`from module import name` for each pair, never duplicated: where the file already has
    top-level `from` imports of the same package, in sorted position among them (no libcst
    needed); otherwise via libcst's AddImportsVisitor (after the other imports).

    libcst only needs the module's leading import block: running the visitor over a 3,000-line
    module costs seconds, over its header milliseconds. So the text is cut after the last
    top-level import that precedes the first def/class, and only that prefix goes through libcst.
    """
    tree = ast.parse(text)
    present = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0
               for a in n.names if a.asname is None}
    needed = sorted(set(imports) - present)
    rest = []
    for mod, name in needed:
        placed = _insert_sorted(text, tree, mod, name)
        if placed is None:
            rest.append((mod, name))
        else:
            text = placed
            tree = ast.parse(text)
    needed = rest
    if not needed:
        return text
    import libcst as cst
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    cut = 0
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            break
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            cut = stmt.end_lineno
    lines = SourceFile("", text).lines
    if cut == 0 or (cut < len(lines) and not lines[cut - 1].endswith(("\n", "\r"))):
        head, tail = text, ""
    else:
        head, tail = "".join(lines[:cut]), "".join(lines[cut:])
    ctx = CodemodContext()
    for mod, name in needed:
        AddImportsVisitor.add_needed_import(ctx, mod, name)
    return AddImportsVisitor(ctx).transform_module(cst.parse_module(head)).code + tail


def _insert_sorted(text: str, tree: ast.Module, mod: str, name: str) -> str | None:
    """`from mod import name` among the module's top-level `from` imports of the same top-level
    package, in module order, as isort/ruff would sort it: AddImportsVisitor appends after the
    last import, which fails an isort check in the user's CI. None: no such sibling (or an
    import from `mod` to extend), left to libcst."""
    top = mod.split(".")[0]
    header = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            break
        header.append(stmt)
    siblings = [s for s in header if isinstance(s, ast.ImportFrom) and s.level == 0 and s.col_offset == 0
                and s.module and s.module.split(".")[0] == top]
    if not siblings or any(s.module == mod for s in siblings):
        return None
    lines = SourceFile("", text).lines
    before = [s for s in siblings if s.module.lower() < mod.lower()]
    if before:
        anchor = before[-1]
        line = anchor.end_lineno + 1  # insert at the start of the line after it
        if line > len(lines) + 1 or not lines[anchor.end_lineno - 1].endswith(("\n", "\r")):
            return None
    else:
        anchor = siblings[0]
        line = anchor.lineno
    if any(s is not anchor and (s.lineno == anchor.end_lineno or s.end_lineno == anchor.lineno) for s in header):
        return None  # `a; b` on one line
    offset = sum(len(x) for x in lines[: line - 1])
    return text[:offset] + f"from {mod} import {name}" + detect_newline(text) + text[offset:]


def drop_orphaned_imports(original: str, text: str) -> str:
    """Delete a top-level one-name `from m import n` whose last use the fixes removed (typically
    `current_platform`, read only by the guard the idiom fix replaces), which would otherwise fail
    an unused-import check (F401). Imports unused before the fix are the user's business and stay;
    a name still written anywhere else in the text, even in a string, keeps its import."""
    tree = ast.parse(text)
    used_before = {n.id for n in ast.walk(ast.parse(original)) if isinstance(n, ast.Name)}
    lines = list(SourceFile("", text).lines)
    starts = {}
    for stmt in tree.body:
        starts.setdefault(stmt.lineno, []).append(stmt)
        if stmt.end_lineno != stmt.lineno:
            starts.setdefault(stmt.end_lineno, []).append(stmt)
    drop: list[tuple[int, int]] = []
    for stmt in tree.body:
        if not (isinstance(stmt, ast.ImportFrom) and len(stmt.names) == 1 and stmt.col_offset == 0):
            continue
        bound = stmt.names[0].asname or stmt.names[0].name
        if bound == "*" or bound not in used_before or stmt.module == "__future__":
            continue
        if len(re.findall(rf"(?<![\w.]){re.escape(bound)}(?!\w)", text)) != 1:
            continue
        if any(other is not stmt for ln in (stmt.lineno, stmt.end_lineno) for other in starts.get(ln, ())):
            continue  # shares a line with another statement
        if lines[stmt.end_lineno - 1].rstrip("\r\n").rstrip().endswith("\\"):
            continue
        drop.append((stmt.lineno, stmt.end_lineno))
    for first, last in reversed(drop):
        del lines[first - 1 : last]
    return "".join(lines) if drop else text


def verify_parses(text: str, path: str) -> None:
    try:
        ast.parse(text, filename=path)
    except SyntaxError as e:
        raise FixError(f"the fixed text does not parse ({e.msg}, line {e.lineno})") from None


def fix_text(path: str, text: str, analyze: Callable[[str], list[Finding]], unsafe: bool,
             first: list[Finding] | None = None) -> FixOutcome:
    """Fix one file's text in rounds; `analyze(text)` re-runs the rules on a version of it.

    Rounds are checked with stdlib ast; the helper import is added once at the end by libcst,
    whose output is valid by construction and is checked once more with ast. (libcst parses
    are the expensive step: one per fixed file.)"""
    out = FixOutcome(path, text, text)
    findings = first if first is not None else analyze(text)
    imports: set[tuple[str, str]] = set()
    try:
        for _ in range(MAX_ROUNDS):
            todo = [f for f in findings if _selected(f, unsafe)]
            if not todo:
                break
            new_text, applied = apply_edits(out.text, todo)
            if not applied:
                break
            verify_parses(new_text, path)
            out.text = new_text
            out.applied.extend(applied)
            imports |= {i for f in applied for i in f.fix.imports}
            findings = analyze(new_text)
        if out.applied:
            with_imports = add_imports(out.text, imports)
            # A package's __init__ may import a name only to re-export it: keep its imports.
            if os.path.basename(path) != "__init__.py":
                with_imports = drop_orphaned_imports(text, with_imports)
            if with_imports != out.text:
                verify_parses(with_imports, path)
                out.text = with_imports
                # The import shifts every line below it: report what remains at its new place.
                findings = analyze(out.text)
    except Exception as e:  # libcst raises several types; none may escape and lose the file
        why = str(e) if isinstance(e, FixError) else f"{type(e).__name__}: {e}"
        out.text, out.error, out.applied = text, why, []
        out.remaining = (first if first is not None else analyze(text)) + [_fix_failed(path, why)]
        return out
    out.remaining = findings
    return out


def _fix_failed(path: str, why: str) -> Finding:
    return Finding(FIX_FAILED, f"fix not applied, file left untouched: {why}", path, Span(1, 1, 1, 2),
                   scope="<module>", expression=why)


def write_atomic(path: str, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename over: readers see the old or the new file."""
    st = os.stat(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".dtl")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
