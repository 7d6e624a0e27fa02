"""Per-line suppression comments, and the findings that police them (DTL902).

Two forms are recognised, anywhere in a comment (so they combine with other tools' pragmas)::

    x = x.to(self.proj.weight.dtype)  # dtype-lint: ignore[DTL001] proj is never quantized here
    x = x.to(self.proj.weight.dtype)  # noqa: DTL001

- ``# dtype-lint: ignore[CODES] <reason>``: one or more comma-separated codes, and a **reason**
  (any text with a letter or digit after the bracket, up to the end of the comment or the next
  `` #``). Without a reason, or without codes, the comment suppresses nothing and is itself
  reported (DTL902, with a message saying what is missing): a suppression of a dtype bug must
  tell the next reader why the cast is safe.
- ``# noqa: CODES`` (flake8/ruff syntax, codes separated by commas or spaces, no reason
  required): only the DTL codes it names matter to dtype-lint; ``# noqa: E501`` is ignored
  entirely. A bare ``# noqa`` (no codes) suppresses every finding on its line, as in Ruff.
- ``# dtype-lint: ignore-file[CODES] <reason>`` on any line: the file-level form, for every
  finding of those codes in the file (codes and a reason are required, as for ``ignore``).

Codes are matched case-insensitively (``# noqa: dtl001`` is ``DTL001``), as are the words
``noqa``, ``dtype-lint``, ``ignore`` and ``ignore-file``.

**Which findings a comment covers.** A suppression on line L applies to a finding whose span
covers L: ``span.line <= L <= last line``, where the last line is ``span.end_line`` (or the line
before it when the exclusive end sits at column 1). For a one-line finding that is its own
line; for an expression split over lines the comment may sit on any of its lines, the first
or the last (where formatters keep trailing comments) included. A comment on a line of its
own covers nothing outside the spans that include that line; there is no "next line" form.

**Unused suppressions.** A valid suppression that suppressed nothing is reported as DTL902 for
the codes it did not use: any code in ``dtype-lint: ignore[...]`` or ``ignore-file[...]``
(including codes that are not dtype-lint codes at all, reported as unknown), and the DTL codes of
a ``noqa``. A bare ``# noqa`` is never reported unused: other tools read it too. It comes with a
safe fix that deletes the directive (or only the unused codes). When the run's enabled codes
are given (`enabled_codes`), a suppression for a DTL code that was not enabled is not reported:
nothing could have used it. DTL902 itself is never reported unused, and a DTL902 finding is
suppressed like any other (``# dtype-lint: ignore[DTL001, DTL902] <reason>``).

Comments are found with :mod:`tokenize`, so ``#`` inside strings is not a comment. When the file
does not tokenize (a syntax error), comments before the error come from the tokens and the
remaining lines are scanned with a simple quote-aware pass: best effort, never an exception.
Lines break at \\r\\n, \\r and \\n, like libcst and Python count them.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from functools import cache
from typing import Collection, Iterable

from dtype_lint.core.findings import UNUSED_SUPPRESSION, Edit, Finding, Fix, Span
from dtype_lint.core.records import record
from dtype_lint.core.source import SourceText, iter_code

# A code list never holds `#`: each directive's scan stops at the next one (linear per comment).


@cache
def _comment_patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """An ignore directive, a noqa, and where a reason ends; compiled on first use (only a file
    that may hold a suppression is read for them: most runs of pre-commit's never are)."""
    return (re.compile(r"#\s*(?i:dtype-lint\s*:\s*ignore(?P<file>-file)?)(?![\w-])(?:\s*\[(?P<codes>[^\]\n#]*)\])?"),
            re.compile(r"#\s*(?i:noqa)(?![\w-])"
                       r"(?:\s*:\s*(?P<codes>[A-Za-z]+[0-9]+(?:(?:\s*,\s*|[ \t]+)[A-Za-z]+[0-9]+)*))?"),
            re.compile(r"\s#"))

_DTL_CODE = re.compile(r"^DTL[0-9]+$", re.I)
_BARE_NOQA = re.compile(r"noqa(?!\s*:)")
BLANKET = "*"  # the code key of a bare noqa comment (no codes)
_SEPARATORS = " \t:;,-\u2013\u2014"


@record(frozen=True)
class Suppression:
    """One directive in a comment. Columns are 0-based character offsets within the line."""

    kind: str  # "ignore" (dtype-lint: ignore[...]), "file" (dtype-lint: ignore-file[...]) or "noqa"
    line: int
    start: int  # the directive's "#"
    end: int  # exclusive: after the reason (ignore) or the codes (noqa)
    codes: tuple[str, ...]  # as listed; for noqa also other tools' codes
    reason: str  # "" for noqa
    text: str  # the directive as written
    codes_start: int = -1  # where the code list sits in the line (-1: no list)
    codes_end: int = -1

    @property
    def problem(self) -> str:
        """Why this directive suppresses nothing ("" when it is valid)."""
        if self.kind in ("ignore", "file"):
            if not self.codes:
                return "no codes"
            if not self.reason:
                return "no reason"
        return ""

    @property
    def blanket(self) -> bool:
        return self.kind == "noqa" and not self.codes

    @property
    def our_codes(self) -> tuple[str, ...]:
        """The codes dtype-lint answers for, upper-cased: all of an ignore's, a noqa's DTL codes
        (a bare noqa: BLANKET)."""
        if self.blanket:
            return (BLANKET,)
        if self.kind in ("ignore", "file"):
            return tuple(_norm(c) for c in self.codes)
        return tuple(c.upper() for c in self.codes if _DTL_CODE.match(c))

    def suppresses(self, code: str) -> bool:
        return not self.problem and (code in self.our_codes or self.blanket)


def _norm(code: str) -> str:
    return code.upper() if _DTL_CODE.match(code) else code


# What every `dtype-lint: ignore` directive holds (the first of _comment_patterns, lowered): a mere mention is none.
DIRECTIVE = re.compile(r"dtype-lint\s*:\s*ignore")


def might_hold_suppression(source: str) -> bool:
    """Substring tests only (linear): could `source` hold a directive that concerns us?"""
    lowered = source.lower()
    # A noqa comment naming only other tools' codes (E501) does not count: such files are not tokenized.
    return ("dtype-lint" in lowered and DIRECTIVE.search(lowered) is not None) or ("noqa" in lowered
                                       and ("dtl" in lowered or _BARE_NOQA.search(lowered) is not None))


# --- finding comments ---------------------------------------------------------------------------


def _crude_comment(line: str) -> tuple[int, str] | None:
    """First '#' outside a string literal, for text that does not tokenize."""
    for i, c in iter_code(line):
        if c == "#":
            return i, line[i:].rstrip("\r\n")
    return None


def _comments(lines: list[str]) -> list[tuple[int, int, str]]:
    """(1-based line, 0-based column, text) of every comment."""
    import tokenize

    found: list[tuple[int, int, str]] = []
    done = 0  # lines fully tokenized
    remaining_lines = iter(lines)
    try:
        for tok in tokenize.generate_tokens(lambda: next(remaining_lines, "")):
            if tok.type == tokenize.COMMENT:
                found.append((tok.start[0], tok.start[1], tok.string))
            done = max(done, tok.start[0] - 1)
        return found
    except (tokenize.TokenError, SyntaxError, ValueError):
        pass
    for n in range(done + 1, len(lines) + 1):
        hit = _crude_comment(lines[n - 1])
        if hit is not None and not any(c[0] == n for c in found):
            found.append((n, hit[0], hit[1]))
    return sorted(found)


def _split_codes(text: str) -> tuple[str, ...]:
    return tuple(c for c in re.split(r"[\s,]+", text) if c)


def _parse_comment(line: int, col: int, comment: str) -> list[Suppression]:
    out = []
    ignore, noqa, reason_end = _comment_patterns()
    ignores = list(ignore.finditer(comment))
    # A reason ends at the next ` #` or where the next directive starts; the ends are found in
    # one pass each, so a comment of many directives costs its length, not its length squared.
    ends = [m.start() for m in reason_end.finditer(comment)]
    starts = [m.start() for m in ignores]
    for i, match in enumerate(ignores):
        j = bisect_left(ends, match.end())
        stop = min(ends[j] if j < len(ends) else len(comment), starts[i + 1] if i + 1 < len(starts) else len(comment))
        rest = comment[match.end() : stop]
        reason = rest.strip().lstrip(_SEPARATORS).strip()
        if not re.search(r"\w", reason):
            reason = ""
        end = match.end() + len(rest.rstrip())
        codes = _split_codes(match["codes"] or "")
        cs, ce = (col + match.start("codes"), col + match.end("codes")) if match["codes"] is not None else (-1, -1)
        out.append(
            Suppression("file" if match["file"] else "ignore", line, col + match.start(), col + end, codes, reason,
                        comment[match.start() : end], cs, ce)
        )
    for match in noqa.finditer(comment):
        codes = _split_codes(match["codes"] or "")
        if codes and not any(_DTL_CODE.match(c) for c in codes):
            continue  # another tool's noqa: not ours
        cs, ce = (col + match.start("codes"), col + match.end("codes")) if match["codes"] is not None else (-1, -1)
        out.append(
            Suppression("noqa", line, col + match.start(), col + match.end(), codes, "",
                        match.group(0), cs, ce)
        )
    return out


def parse_suppressions(source: str) -> list[Suppression]:
    """The directives in `source` that concern dtype-lint, in line order: every
    ``dtype-lint: ignore`` / ``ignore-file`` (valid or not), every bare ``noqa`` and every
    ``noqa`` naming at least one DTL code."""
    # Every directive that concerns us contains one of these; plain substring tests keep the
    # scan of files without any (nearly all) at memory speed, and those are never tokenized.
    if not might_hold_suppression(source):
        return []
    out: list[Suppression] = []
    for line, col, text in _comments(SourceText(source).lines):
        out.extend(_parse_comment(line, col, text))
    return sorted(out, key=lambda s: (s.line, s.start))


# --- applying them ------------------------------------------------------------------------------


class _File(SourceText):
    def __init__(self, source: str):
        super().__init__(source)
        # Cheap for the common file without directives: parse_suppressions prefilters.
        self.suppressions = parse_suppressions(source)
        # (line, code) -> the valid suppressions of that code on that line: a lookup per line
        # of a finding, however many directives one line holds.
        self.by_line: dict[tuple[int, str], list[Suppression]] = {}
        self.file_wide: dict[str, list[Suppression]] = {}  # code -> its valid ignore-file directives
        for suppression in self.suppressions:
            if suppression.problem:
                continue
            for code in dict.fromkeys(suppression.our_codes):
                if suppression.kind == "file":
                    self.file_wide.setdefault(code, []).append(suppression)
                else:
                    self.by_line.setdefault((suppression.line, code), []).append(suppression)

    def covering(self, f: Finding) -> list[Suppression]:
        found = list(self.file_wide.get(f.code, ()))
        if not self.by_line:
            return found
        sp = f.span
        last = sp.end_line - 1 if sp.end_line > sp.line and sp.end_col <= 1 else sp.end_line
        for n in range(sp.line, max(sp.line, last) + 1):
            found += self.by_line.get((n, f.code), ())
            found += self.by_line.get((n, BLANKET), ())
        return found

    def removal(self, s: Suppression) -> Edit:
        """Delete the directive, with the whitespace that separated it (or its whole line)."""
        raw = self.lines[s.line - 1]
        text = raw.rstrip("\r\n")
        before, after = text[: s.start], text[s.end :]
        if not before.strip() and not after.strip():
            return Edit(self.offset(s.line, 0), self.offset(s.line, len(raw)), "")
        if not after.strip():
            return Edit(self.offset(s.line, len(before.rstrip())), self.offset(s.line, len(text)), "")
        gap = len(after) - len(after.lstrip())
        return Edit(self.offset(s.line, s.start), self.offset(s.line, s.end + gap), "")


def _unused_finding(path: str, file: _File, s: Suppression, unused: list[str]) -> Finding:
    unknown = [c for c in unused if not _DTL_CODE.match(c)]
    ours = [c for c in unused if _DTL_CODE.match(c)]
    detail = "; ".join(
        part
        for part in (
            f"unused: {', '.join(ours)}" if ours else "",
            f"unknown code: {', '.join(unknown)}" if unknown else "",
        )
        if part
    )
    form = {"ignore": "`dtype-lint: ignore` suppression", "file": "`dtype-lint: ignore-file` suppression"}.get(
        s.kind, "`noqa` code")
    # A noqa keeps other tools' codes; either form keeps the codes that were used.
    keep = [c for c in s.codes if _norm(c) not in unused and c not in unused]
    if keep:
        edit = Edit(file.offset(s.line, s.codes_start), file.offset(s.line, s.codes_end), ", ".join(keep))
        description = f"Remove {', '.join(unused)} from the suppression"
    else:
        edit = file.removal(s)
        description = "Remove the unused suppression"
    return Finding(
        code=UNUSED_SUPPRESSION,
        message=f"Unused {form} ({detail})",
        path=path,
        span=Span(s.line, s.start + 1, s.line, s.end + 1),
        fix=Fix(description=description, safe=True, edits=(edit,)),
        expression=s.text,
    )


def _problem_finding(path: str, s: Suppression) -> Finding:
    if s.problem == "no codes":
        message = (
            f"Suppression `{s.text}` names no codes, so it suppresses nothing; name them: "
            f"`# dtype-lint: {'ignore-file' if s.kind == 'file' else 'ignore'}[DTL001] <reason>`"
        )
        no_fix = "which codes to suppress cannot be guessed"
    else:
        message = (
            f"Suppression `{s.text}` has no reason, so it suppresses nothing; a reason is "
            f"required: `# dtype-lint: {'ignore-file' if s.kind == 'file' else 'ignore'}[{', '.join(s.codes)}] "
            "<why this is safe>`"
        )
        no_fix = "only a person can write the reason"
    return Finding(
        code=UNUSED_SUPPRESSION,
        message=message,
        path=path,
        span=Span(s.line, s.start + 1, s.line, s.end + 1),
        no_fix_reason=no_fix,
        expression=s.text,
    )


def apply_suppressions(
    path: str,
    text: str,
    findings: Iterable[Finding],
    *,
    enabled_codes: Collection[str] | None = None,
) -> tuple[list[Finding], list[Finding]]:
    """Drop the findings of one file that a valid suppression covers; report its suppressions
    that are unused or malformed.

    Returns ``(kept, new)``: `kept` are the findings no valid suppression covers, in input
    order; `new` are DTL902 findings, sorted, for suppressions that suppressed nothing (with a
    safe fix removing them) and for ``dtype-lint: ignore`` comments missing their reason or
    codes (no fix). DTL902 findings that a suppression naming DTL902 covers are left out.
    `enabled_codes`: the codes this run checked, if known; suppressions for other DTL codes are
    then not reported as unused (nothing could have used them).
    """
    findings = list(findings)
    file = _File(text)
    if not file.suppressions:
        return findings, []
    used: dict[int, set[str]] = {}
    kept = []
    for finding in findings:
        covering = file.covering(finding)
        if not covering:
            kept.append(finding)
        for suppression in covering:
            used.setdefault(id(suppression), set()).add(finding.code)

    def reportable(code: str) -> bool:
        if code == UNUSED_SUPPRESSION:
            return False
        if enabled_codes is not None and _DTL_CODE.match(code) and code not in enabled_codes:
            return False
        return True

    new: list[Finding] = []
    for suppression in file.suppressions:
        if suppression.problem:
            new.append(_problem_finding(path, suppression))
            continue
        if suppression.blanket:
            continue  # other tools read a bare noqa too: never reported unused
        done = used.get(id(suppression), set())
        unused = [c for c in suppression.our_codes if c not in done and reportable(c)]
        if unused:
            new.append(_unused_finding(path, file, suppression, unused))
    new = [g for g in new if not file.covering(g)]
    return kept, sorted(new, key=Finding.sort_key)
