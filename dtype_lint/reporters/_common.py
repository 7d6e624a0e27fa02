"""Helpers every format shares. Must not import rich (json/github/concise use it)."""

from __future__ import annotations

import os
from dataclasses import field
from typing import Callable, Iterable, Mapping, TextIO

from dtype_lint.core import digests
from dtype_lint.core.findings import UNUSED_SUPPRESSION, Finding
from dtype_lint.core.records import record
from dtype_lint.core.source import SourceText

# Width used when not writing to a terminal, so snapshot output does not depend on $COLUMNS.
PIPE_WIDTH = 100


@record
class RunSummary:
    """What a report's closing line counts."""
    files_checked: int
    files_analyzed: int
    elapsed_s: float
    fixed: int = 0
    fixes_available_safe: int = 0
    fixes_available_unsafe: int = 0
    unsafe_fixes_enabled: bool = False
    quiet: bool = False  # `-q`: findings only, no closing line


@record(frozen=True)
class RuleInfo:
    """A rule's code, name, summary and documentation, as reporters show them."""
    code: str
    name: str
    summary: str
    # The rule's documentation (markdown): SARIF carries it whole, so help works outside this repo.
    doc: str = ""


@record
class RenderContext:
    """What a reporter reads besides the findings: the sources, the rules' metadata, colour."""
    read_source: Callable[[str], "str | None"]
    rules: Mapping[str, RuleInfo]
    color: bool | None = None
    # Codes the caller gave metadata for (rules lists these, not every engine code).
    given_codes: tuple[str, ...] = ()
    _sources: dict[str, SourceText | None] = field(default_factory=dict)

    def source(self, path: str) -> SourceText | None:
        """The file's text, read once per render; None when unavailable."""
        if path not in self._sources:
            try:
                text = self.read_source(path)
            except (OSError, UnicodeDecodeError, ValueError):
                text = None
            self._sources[path] = SourceText(text) if text is not None else None
        return self._sources[path]

    def rule(self, code: str) -> RuleInfo:
        return self.rules.get(code) or RuleInfo(code, "", "")

    def use_color(self, out: TextIO) -> bool:
        return want_color(out, self.color)


def want_color(out: TextIO, color: bool | None) -> bool:
    """Explicit `color` wins; else colour only on a TTY, and never when NO_COLOR is set."""
    if color is not None:
        return color
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(out, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # closed stream
        return False


def is_tty(out: TextIO) -> bool:
    isatty = getattr(out, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):
        return False


# --- selection and counts -----------------------------------------------------------------------


def remaining(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in (path, line, col, code) order."""
    return sorted(findings, key=Finding.sort_key)


@record(frozen=True)
class Tally:
    """The counts of a run's findings that the summary line is made of."""
    remaining: int
    fixed: int
    # Remaining findings whose fix `--fix` would apply now (safe, or unsafe when enabled).
    applicable: int
    # Remaining findings with an unsafe fix that needs --unsafe-fixes.
    hidden_unsafe: int
    # Remaining findings with any fix at all (Finding.fixable).
    with_fix: int
    # Files the run checked (None: the caller did not say).
    files: int | None = None


def fix_applicable(f: Finding, unsafe_fixes_enabled: bool) -> bool:
    return f.fix is not None and (f.fix.safe or unsafe_fixes_enabled)


def tally(findings: Iterable[Finding], summary: RunSummary) -> Tally:
    findings = list(findings)
    left = findings
    safe = sum(1 for f in left if f.fix is not None and f.fix.safe)
    unsafe = sum(1 for f in left if f.fix is not None and not f.fix.safe)
    safe = max(safe, summary.fixes_available_safe)
    unsafe = max(unsafe, summary.fixes_available_unsafe)
    enabled = summary.unsafe_fixes_enabled
    return Tally(
        remaining=len(left),
        fixed=summary.fixed,
        applicable=safe + (unsafe if enabled else 0),
        hidden_unsafe=0 if enabled else unsafe,
        with_fix=sum(1 for f in left if f.fix is not None),
        files=summary.files_checked,
    )


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def summary_line(t: Tally) -> str:
    """ruff-like closing line: 'All checks passed! (N files checked)' or 'Found N findings (...);
    N files checked'. A run that checked no file never says its checks passed."""
    checked = "" if t.files is None else plural(t.files, "file") + " checked"
    if t.remaining == 0 and t.fixed == 0:
        if t.files == 0:
            return "No Python files checked."
        return f"All checks passed! ({checked})" if checked else "All checks passed!"
    parts = []
    if t.fixed:
        parts.append(f"{t.fixed} fixed, {t.remaining} remaining")
    if t.applicable:
        parts.append(f"{t.applicable} fixable")
    if t.hidden_unsafe:
        parts.append(
            f"{plural(t.hidden_unsafe, 'hidden fix', 'hidden fixes')} can be enabled "
            "with --unsafe-fixes"
        )
    total = t.remaining + t.fixed
    head = f"Found {plural(total, 'finding')}"
    line = f"{head} ({'; '.join(parts)})" if parts else head
    return f"{line}; {checked}" if checked else line


def fixable_line(t: Tally) -> str:
    """Ruff's next step under the summary (`[*] N fixable with the --fix option.`), "" when no
    finding left has a fix this run would apply."""
    if not t.applicable or not t.remaining:
        return ""
    return f"[*] {t.applicable} fixable with `--fix`."


# --- per-finding text ---------------------------------------------------------------------------


def level(f: Finding) -> str:
    """'error' | 'warning': warning-severity findings, low confidence and unused suppressions are
    warnings."""
    if f.code == UNUSED_SUPPRESSION or f.confidence == "low" or f.severity == "warning":
        return "warning"
    return "error"


def location(f: Finding) -> str:
    return f"{f.path}:{f.span.line}:{f.span.col}"


def evidence_location(path: str, line: int) -> str:
    """'path:line', 'path' or '' (evidence from configuration has no place in a file)."""
    if not path:
        return ""
    return f"{path}:{line}" if line > 0 else path


def markers(f: Finding, unsafe_fixes_enabled: bool) -> list[str]:
    """Tags after the code: '[*]' when --fix would fix it, '[low confidence]'."""
    tags = []
    if fix_applicable(f, unsafe_fixes_enabled):
        tags.append("[*]")
    if f.confidence == "low":
        tags.append("[low confidence]")
    return tags


def fix_note(f: Finding) -> tuple[str, str] | None:
    """('fix', 'description [safe]') / ('no fix', reason), or None when nothing to say."""
    if f.fix is not None:
        if f.fix.safe:
            return "fix", f"{f.fix.description} [safe]"
        reason = f.fix.unsafe_reason or "unspecified"
        return "fix", f"{f.fix.description} [unsafe: {reason}]"
    if f.no_fix_reason:
        return "no fix", f.no_fix_reason
    return None


# --- stable identity ----------------------------------------------------------------------------


def fingerprints(findings: list[Finding]) -> list[str]:
    """Stable, distinct fingerprints, parallel to `findings` (which must be sorted).

    Hash of path + scope + code + normalised expression (the baseline key: no line numbers, so
    unrelated edits keep it); a key seen again in the same file gets its occurrence number mixed
    in, so two identical casts in one function stay two issues.
    """
    from dtype_lint.run.baseline import finding_key

    seen: dict[tuple, int] = {}
    out = []
    for finding in findings:
        k = finding_key(finding)
        parts = (k.path, k.scope, k.code, k.expression)
        n = seen.get(parts, 0)
        seen[parts] = n + 1
        payload = "\0".join(parts) + (f"\0{n}" if n else "")
        out.append(digests.sha256(payload.encode("utf-8")).hexdigest())
    return out
