"""Apply fixes to one file's text: in rounds, verified, never half-done.

Fixes are applied in rounds (like ruff): the edits of one round never overlap; a fix skipped for
overlap is retried on the re-analysed text of the next round. Every round must parse; an import
the fixes orphaned is dropped at the end (unless another module imports it from this one); an
import the fixes added must not close an import cycle (import_graph.py); the names the fixes
introduced are then verified (scope_check.py). Any failure returns the original text with the
reason, which the run reports as DTL901. Nothing here writes: the pipeline writes the result through
writer.py, the only code that touches the user's files.
"""

from __future__ import annotations

import ast
import bisect
import os
import re
from dataclasses import field
from typing import Callable

from dtype_lint.core.findings import FIX_FAILED, Edit, Finding, Span
from dtype_lint.core.records import record
from dtype_lint.core.source import SourceText
from dtype_lint.fix.import_graph import ImportGraph
from dtype_lint.fix.parsed_texts import parsed
from dtype_lint.fix.scope_check import FixCheckError, verify_names

MAX_ROUNDS = 6


class FixError(Exception):
    pass


@record
class FixOutcome:
    """A file after fixing: its new text, the findings fixed and those left, or why it failed."""
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
        # difflib here and in _at_original_lines, not at the top: a check that fixes nothing
        # (pre-commit on an edited file) imports this module but needs neither.
        import difflib

        return "".join(difflib.unified_diff(
            self.original.splitlines(keepends=True), self.text.splitlines(keepends=True),
            fromfile=f"a/{self.path}", tofile=f"b/{self.path}"))


def _selected(f: Finding, unsafe: bool) -> bool:
    return f.fix is not None and (f.fix.safe or unsafe)


def apply_edits(text: str, findings: list[Finding]) -> tuple[str, list[Finding]]:
    """Apply the non-overlapping fixes of one round (all of a fix's edits, or none)."""
    nl = SourceText(text).newline
    accepted: list[Edit] = []
    taken = _AcceptedEdits()
    applied: list[Finding] = []
    bound: set[tuple[str, str]] = set()
    for finding in findings:
        fix = finding.fix
        if fix is None:  # never: a round applies the findings that carry a fix
            continue
        edits = [Edit(e.start, e.end, e.text.replace("\n", nl) if nl != "\n" else e.text) for e in fix.edits]
        new = [e for e in edits if e not in taken.edits]
        if edits and not new:
            applied.append(finding)  # the very fix another finding of this site carries (DTL004's and DTL001's)
            continue
        if any(taken.conflicts(e) for e in new) or _self_overlap(new):
            continue
        # Two fixes of one function planned on the same text may pick the same fresh variable;
        # the second waits for the next round, where the first's is no longer fresh.
        names = {(finding.scope, v) for v in fix.binds}
        if names & bound:
            continue
        bound |= names
        for e in new:
            taken.add(e)
        accepted.extend(new)
        applied.append(finding)
    # Apply back to front; insertions at the same offset keep their listed order. The text is
    # built from its kept and replaced pieces in one join: slicing the whole text once per edit
    # made a file's fix quadratic in its number of sites.
    order = sorted(range(len(accepted)), key=lambda i: (accepted[i].start, accepted[i].end, i), reverse=True)
    pieces: list[str] = []
    tail = len(text)
    for i in order:
        e = accepted[i]
        pieces.append(text[e.end:tail])
        pieces.append(e.text)
        tail = e.start
    pieces.append(text[:tail])
    return "".join(reversed(pieces)), applied


class _AcceptedEdits:
    """The edits a round has accepted, kept so that a candidate is tested against its neighbours
    only (an edit tested against every accepted one made a round quadratic in its sites).

    Accepted ranges never overlap one another, so sorted by start they are sorted by end too:
    the only range that can overlap [s, t) is the last one starting before t. An insertion
    conflicts only with a range strictly around it (`_overlaps`)."""

    def __init__(self) -> None:
        self.edits: set[Edit] = set()
        self._starts: list[int] = []  # starts of the accepted non-empty ranges, sorted
        self._ends: list[int] = []  # their ends, in the same order
        self._points: list[int] = []  # offsets of the accepted insertions, sorted

    def add(self, edit: Edit) -> None:
        self.edits.add(edit)
        if edit.start == edit.end:
            bisect.insort(self._points, edit.start)  # sites come in file order: an append
        else:
            at = bisect.bisect_left(self._starts, edit.start)
            self._starts.insert(at, edit.start)
            self._ends.insert(at, edit.end)

    def conflicts(self, edit: Edit) -> bool:
        before = bisect.bisect_left(self._starts, edit.end if edit.start != edit.end else edit.start) - 1
        if edit.start == edit.end:  # an insertion: inside a range only
            return before >= 0 and self._ends[before] > edit.start
        if before >= 0 and self._ends[before] > edit.start:
            return True
        inside = bisect.bisect_right(self._points, edit.start)
        return inside < len(self._points) and self._points[inside] < edit.end


def _overlaps(a: Edit, b: Edit) -> bool:
    if a.start == a.end or b.start == b.end:  # insertions conflict only strictly inside a range
        return (b.start < a.start < b.end) or (a.start < b.start < a.end)
    return a.start < b.end and b.start < a.end


def _self_overlap(edits: list[Edit]) -> bool:
    return any(_overlaps(a, b) for i, a in enumerate(edits) for b in edits[i + 1:])


def drop_orphaned_imports(original: str, text: str, taken_elsewhere: Callable[[str], str] | None = None) -> str:
    """Delete a top-level one-name `from m import n` whose last use the fixes removed (typically
    `current_platform`, read only by the guard the idiom fix replaces), which would otherwise fail
    an unused-import check (F401). Imports unused before the fix are the user's business and stay;
    a name still written anywhere else in the text, even in a string (`__all__`), keeps its
    import, and so does every name when `__all__` is computed rather than listed. So does a name
    `taken_elsewhere(name)` says another module imports from this one (it returns that module)."""
    tree = parsed(text)
    lines = list(SourceText(text).lines)
    starts: dict[int, list[ast.stmt]] = {}
    for stmt in tree.body:
        starts.setdefault(stmt.lineno, []).append(stmt)
        if stmt.end_lineno is not None and stmt.end_lineno != stmt.lineno:  # (set on every parsed node)
            starts.setdefault(stmt.end_lineno, []).append(stmt)
    # The cheap questions first: most one-name imports are still written elsewhere in the text,
    # and only a name written once is asked whether the original read it (a walk of its tree).
    used_before: set[str] | None = None
    drop: list[tuple[int, int]] = []
    for stmt in tree.body:
        if not (isinstance(stmt, ast.ImportFrom) and len(stmt.names) == 1 and stmt.col_offset == 0):
            continue
        end_line = stmt.end_lineno or stmt.lineno  # set on every parsed node
        bound = stmt.names[0].asname or stmt.names[0].name
        if bound == "*" or stmt.module == "__future__":
            continue
        if not _written_once(bound, text):
            continue
        if used_before is None:
            used_before = {n.id for n in ast.walk(parsed(original)) if isinstance(n, ast.Name)}
        if bound not in used_before:
            continue
        if any(other is not stmt for ln in (stmt.lineno, end_line) for other in starts.get(ln, ())):
            continue  # shares a line with another statement
        if lines[end_line - 1].rstrip("\r\n").rstrip().endswith("\\"):
            continue
        if taken_elsewhere is not None and taken_elsewhere(bound):
            continue  # `from this_module import name` in another module of the project
        drop.append((stmt.lineno, end_line))
    if drop and _computed_all(tree):
        return text
    for first, last in reversed(drop):
        del lines[first - 1 : last]
    return "".join(lines) if drop else text


_WORD_OR_DOT = re.compile(r"[\w.]")
_WORD = re.compile(r"\w")


def _written_once(name: str, text: str) -> bool:
    """Is `name` written exactly once in `text` as a whole name (not after a word character or
    a dot, not before a word character)? The question a regex with a look-behind asked before,
    answered by `str.find` and stopped at the second: the look-behind made the regex engine try
    every position of a 100 KB text, for every import."""
    found = 0
    at = text.find(name)
    while at >= 0:
        end = at + len(name)
        if (at == 0 or not _WORD_OR_DOT.match(text, at - 1)) and not _WORD.match(text, end):
            found += 1
            if found > 1:
                return False
        at = text.find(name, at + 1)
    return found == 1


def _computed_all(tree: ast.Module) -> bool:
    """Does the module build `__all__` other than as one literal list or tuple of strings?"""
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):  # no target
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and target.id == "__all__":
                value = node.value
                if isinstance(node, ast.AugAssign) or not (
                        isinstance(value, (ast.List, ast.Tuple))
                        and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts)):
                    return True
    return False


def verify_parses(text: str, path: str) -> None:
    try:
        parsed(text)  # the tree the later checks of this text read (parsed_texts.py)
    except SyntaxError as error:
        raise FixError(f"the fixed text does not parse ({error.msg}, line {error.lineno})") from None


def fix_text(path: str, text: str, analyze: Callable[[str], list[Finding]], unsafe: bool,
             first: list[Finding] | None = None, line_length: int | None = None,
             graph: ImportGraph | None = None, module: str = "") -> FixOutcome:
    """Fix one file's text in rounds; `analyze(text)` gives the findings of a version of it.
    `line_length`: the project's (formatting.project_style); added lines longer than it are
    wrapped as its formatter would. `graph`: the project's imports (module `module` is this
    file's): an import the fixes add must not close a cycle, and one they orphan stays when
    another module imports the name from this one."""
    out = FixOutcome(path, text, text)
    findings = first if first is not None else analyze(text)
    try:
        for _ in range(MAX_ROUNDS):
            todo = [f for f in findings if _selected(f, unsafe)]
            if not todo:
                break
            new_text, applied = apply_edits(out.text, todo)
            if not applied:
                break
            verify_parses(new_text, path)
            # A later round's findings are spans of the text the earlier rounds made: report
            # them where they are in the file as it was (the series and the summary cite them).
            out.applied.extend(_at_original_lines(text, out.text, applied) if out.text != text else applied)
            out.text = new_text
            findings = analyze(new_text)
        # A package's __init__ may import a name only to re-export it: keep its imports.
        if graph is not None and module:
            for helper_module, _name in sorted({i for f in out.applied if f.fix is not None for i in f.fix.imports}):
                if not _imports_module(text, helper_module, module, os.path.basename(path) == "__init__.py"):
                    problem = graph.cycle_problem(module, helper_module)
                    if problem:
                        raise FixError(problem)
        if out.applied and os.path.basename(path) != "__init__.py":
            taken = None
            if graph is not None and module:
                taken = lambda name: graph.importers_of(module, name, skip=module)
            cleaned = drop_orphaned_imports(text, out.text, taken)
            if cleaned != out.text:
                verify_parses(cleaned, path)
                out.text = cleaned
                findings = analyze(out.text)
        if out.applied and line_length:
            from dtype_lint.fix.formatting import wrap_long_lines

            wrapped = wrap_long_lines(text, out.text, line_length, SourceText(text).newline)
            if wrapped != out.text:
                verify_parses(wrapped, path)
                out.text = wrapped
                findings = analyze(out.text)
        if graph is not None and module and out.applied:
            _check_star_importers(text, out.text, out.applied, graph, module)
        try:
            verify_names(text, out.text, out.applied)
        except FixCheckError as error:
            raise FixError(str(error)) from None
    except Exception as error:  # nothing may escape and lose the file
        why = str(error) if isinstance(error, FixError) else f"{type(error).__name__}: {error}"
        return failed(path, text, why, first if first is not None else analyze(text))
    out.remaining = findings
    return out


def _check_star_importers(original: str, fixed: str, applied: list[Finding], graph: ImportGraph, module: str) -> None:
    """The helper's name a fix imports is fresh in every module that `from <this> import *`
    carries it into: there it would replace that module's own binding of the name (its own
    function, an earlier import) or capture a read that meant another. A name with a leading
    underscore, one a literal `__all__` leaves out, or one the module bound before is carried
    nowhere new. Raises FixError naming the module."""
    from dtype_lint.fix.bound_names import identifiers
    from dtype_lint.fix.import_graph import star_exports

    locals_added = {(m, n, local) for f in applied if f.fix is not None for m, n, local in f.fix.local_names()}
    if not locals_added:
        return
    before, after = parsed(original), parsed(fixed)
    bound_before = {name for stmt in before.body for name in _top_level_binds(stmt)}
    for helper_module, func, local in sorted(locals_added):
        if local in bound_before or not star_exports(after, local):
            continue
        for importer, tree in sorted(graph.star_importers(module, local).items()):
            if tree is None:
                raise FixError(f"`{importer}` star-imports `{module}` and cannot be parsed: the helper's name "
                               f"`{local}` might replace one of its own")
            own = [stmt for stmt in tree.body if isinstance(stmt, ast.ImportFrom) and stmt.level == 0
                   and stmt.module == helper_module and any(a.name == func and (a.asname or a.name) == local
                                                           for a in stmt.names)]
            if local in identifiers(tree) and not own:
                raise FixError(f"`from {module} import *` in `{importer}` would carry the helper's name `{local}` "
                               f"there, where `{local}` already names something; give `{module}` an `__all__` "
                               "or set `helper` to another function name")


def _top_level_binds(stmt: ast.stmt):
    """Names a top-level statement binds (imports, definitions, assignments)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for alias in stmt.names:
            yield alias.asname or alias.name.split(".")[0]
    elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield stmt.name
    else:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                yield node.id


def _at_original_lines(original: str, current: str, findings: list[Finding]) -> list[Finding]:
    """The findings of `current` with their lines moved to `original`'s, where their first line
    is one the earlier rounds left as it was (else kept as found)."""
    import difflib
    from dataclasses import replace

    old_lines, new_lines = original.splitlines(), current.splitlines()
    moved: dict[int, int] = {}
    for block in difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            moved[block.b + k + 1] = block.a + k + 1
    out = []
    for finding in findings:
        line = moved.get(finding.span.line)
        if line is None:
            out.append(finding)
            continue
        shift = line - finding.span.line
        span = finding.span
        out.append(replace(finding, span=Span(line, span.col, span.end_line + shift, span.end_col)))
    return out


def _imports_module(text: str, module: str, importer: str = "", package: bool = False) -> bool:
    """Does the text already import from `module` at its top level (no new edge in the graph)?
    A relative import (`from ..utils.torch_utils import x` in `importer`) counts too."""
    try:
        tree = parsed(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False

    def absolute(s: ast.ImportFrom) -> str | None:
        if s.level == 0:
            return s.module
        parts = importer.split(".") if importer else []
        base = parts if package else parts[:-1]
        if s.level - 1 > len(base) or not importer:
            return None
        base = base[:len(base) - (s.level - 1)]
        return ".".join(base + ([s.module] if s.module else []))

    return any((isinstance(s, ast.ImportFrom) and absolute(s) == module)
               or (isinstance(s, ast.Import) and any(a.name == module for a in s.names)) for s in tree.body)


def failed(path: str, text: str, why: str, remaining: list[Finding]) -> FixOutcome:
    """The outcome of a fix that was not applied: the text as it was, the reason as DTL901."""
    out = FixOutcome(path, text, text, error=why)
    out.remaining = list(remaining) + [_fix_failed(path, why)]
    return out


def _fix_failed(path: str, why: str) -> Finding:
    return Finding(FIX_FAILED, f"fix not applied, file left untouched: {why}", path, Span(1, 1, 1, 2),
                   scope="<module>", expression=why)
