"""What a rule reports: plain data, serialisable, with no libcst or terminal types.

Everything downstream (suppressions, baseline, cache, reporters, fixer) reads these objects only.
"""

from __future__ import annotations

from dataclasses import asdict

from dtype_lint.core.records import record


@record(frozen=True)
class Span:
    """1-based line, 1-based column in characters (not UTF-8 bytes); end is exclusive."""

    line: int
    col: int
    end_line: int
    end_col: int


@record(frozen=True)
class Evidence:
    """Why the layer is quantizable: one step of the chain, with where it was established."""

    message: str
    path: str
    line: int


@record(frozen=True)
class Edit:
    """Replace source[start:end] (character offsets) with text."""

    start: int
    end: int
    text: str


@record(frozen=True)
class Fix:
    """A finding's fix: its edits, the imports it needs, and whether it is safe."""
    description: str
    safe: bool
    edits: tuple[Edit, ...]
    # (module, name): `from module import name` the fixed file needs.
    imports: tuple[tuple[str, str], ...] = ()
    # Why a fix is unsafe (empty when safe).
    unsafe_reason: str = ""
    # The local name each of `imports` is bound to in the fixed file (the imported name itself
    # unless the file already uses it for something else), in the same order.
    aliases: tuple[str, ...] = ()
    # Variables the fix assigns in the site's function, fresh there: the fixer verifies that
    # these and the aliases resolve to what the fix meant before anything is written.
    binds: tuple[str, ...] = ()
    # How each of `imports`' modules is spelled in the fixed file where that is not its dotted
    # name: a relative `.module_input_dtype` in a package whose files import their siblings so.
    spelled: tuple[str, ...] = ()

    def spelling(self, i: int) -> str:
        """The module of import `i` as the fixed file's `from ... import` writes it."""
        return self.spelled[i] if i < len(self.spelled) and self.spelled[i] else self.imports[i][0]

    def local_names(self) -> tuple[tuple[str, str, str], ...]:
        """(module, name, local name) of each import."""
        return tuple((m, n, self.aliases[i] if i < len(self.aliases) else n) for i, (m, n) in enumerate(self.imports))


@record
class Finding:
    """One reported site: the rule's code, where it is, the evidence, and its fix if any."""
    code: str
    message: str
    path: str
    span: Span
    confidence: str = "high"  # "high": the layer's class resolved; "low": name-only evidence
    evidence: tuple[Evidence, ...] = ()
    fix: Fix | None = None
    no_fix_reason: str = ""
    # Stable key parts for the baseline: enclosing scope and normalised expression, no line numbers.
    scope: str = ""
    expression: str = ""
    # "error" | "warning": the rule's severity (a warning: a likely problem or a lower-severity
    # consequence of one reported elsewhere); low confidence also reads as a warning.
    severity: str = "error"
    # What the finding points at: "site" (an expression wrong where it is), "call" (a call of a
    # function defined wrong), "definition" (that function): consumers ask this, not the text.
    kind: str = "site"

    @property
    def fixable(self) -> bool:
        return self.fix is not None

    def sort_key(self):
        return (self.path, self.span.line, self.span.col, self.code)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Finding":
        fix = d.get("fix")
        if fix is not None:
            fix = Fix(
                description=fix["description"],
                safe=fix["safe"],
                edits=tuple(Edit(**e) for e in fix["edits"]),
                imports=tuple(tuple(i) for i in fix.get("imports", ())),
                unsafe_reason=fix.get("unsafe_reason", ""),
                aliases=tuple(fix.get("aliases", ())),
                binds=tuple(fix.get("binds", ())),
                spelled=tuple(fix.get("spelled", ())),
            )
        return cls(
            code=d["code"],
            message=d["message"],
            path=d["path"],
            span=Span(**d["span"]),
            confidence=d.get("confidence", "high"),
            evidence=tuple(Evidence(**e) for e in d.get("evidence", ())),
            fix=fix,
            no_fix_reason=d.get("no_fix_reason", ""),
            scope=d.get("scope", ""),
            expression=d.get("expression", ""),
            severity=d.get("severity", "error"),
            kind=d.get("kind", "site"),
        )


FINDING_KINDS = frozenset({"site", "call", "definition"})

# Engine-level codes: not rules, but users select/ignore them like rules.
PARSE_ERROR = "DTL900"
FIX_FAILED = "DTL901"
UNUSED_SUPPRESSION = "DTL902"


@record(frozen=True)
class CodeInfo:
    """A code's name and summary, for the codes no rule module defines (the engine's)."""
    code: str
    name: str
    summary: str


# The one description of each engine code (the CLI's rule list, reporters, docs).
ENGINE_CODES: dict[str, CodeInfo] = {
    PARSE_ERROR: CodeInfo(PARSE_ERROR, "parse-error",
                          "a file that can hold a site could not be read or parsed; it was skipped and the run "
                          "went on (a syntax error in code no rule reads is left to other linters)"),
    FIX_FAILED: CodeInfo(FIX_FAILED, "fix-failed",
                         "a fix could not be applied or written; the file was left untouched"),
    UNUSED_SUPPRESSION: CodeInfo(UNUSED_SUPPRESSION, "unused-suppression",
                                 "a suppression comment that suppresses nothing, or lacks its reason"),
}
