"""Output formats: one module per format, chosen by name through :func:`render`.

A reporter knows nothing about libcst or rules' internals: it reads :class:`Finding` objects, a
:class:`RunSummary`, rule metadata (:class:`RuleInfo`) and, where it needs text (code frames,
SARIF's line/column fix regions), the source through the `read_source` callback.

Only :func:`render` is eager here; format modules are imported on use, and only ``text`` (for
colour or a terminal: into a pipe it writes the same characters itself) and the ``--statistics``
table import rich (0.1-0.2 s), so a JSON or GitHub run, or pre-commit's, never pays for it.

Shared conventions (every format):
- findings are reported in (path, line, col, code) order;
- every finding passed in is listed (the caller passes what remains); ``RunSummary.fixed``
  counts what this run fixed;
- "fixable" counts derive from the findings (safe fixes, plus unsafe ones when
  ``unsafe_fixes_enabled``); ``RunSummary.fixes_available_*`` act as lower bounds, so a caller
  that knows more (or leaves them at 0) gets the right numbers either way;
- severity: "warning" for findings of a warning-severity rule (or reported as one), low-confidence
  findings and unused suppressions (DTL902), "error" otherwise.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Callable, Mapping, TextIO

from dtype_lint.reporters._common import RuleInfo, RunSummary

if TYPE_CHECKING:
    from dtype_lint.core.findings import Finding


def _engine_rules() -> dict[str, RuleInfo]:
    from dtype_lint.core.findings import ENGINE_CODES

    return {c.code: RuleInfo(c.code, c.name, c.summary,
                             f"# {c.code} {c.name}\n\n{c.summary[0].upper()}{c.summary[1:]}.\n")
            for c in ENGINE_CODES.values()}


# Engine codes are not rules, but appear in output like rules; callers' `rules` override these.
ENGINE_RULES: dict[str, RuleInfo] = _engine_rules()

# format name -> module under dtype_lint.reporters
_MODULES: dict[str, str] = {
    "text": "text",
    "concise": "concise",
    "json": "json_report",
    "github": "github",
    "sarif": "sarif",
    "junit": "junit",
    "gitlab": "gitlab",
}
FORMATS: tuple[str, ...] = tuple(_MODULES)
# Formats for people; `statistics` replaces their per-finding listing with counts per code.
# Machine formats ignore `statistics`: they carry every finding already.
HUMAN_FORMATS: tuple[str, ...] = ("text", "concise")


def render(
    fmt: str,
    findings: "list[Finding]",
    summary: RunSummary,
    out: TextIO,
    *,
    read_source: Callable[[str], "str | None"],
    rules: Mapping[str, RuleInfo],
    color: bool | None = None,
    statistics: bool | str = False,
) -> None:
    """Write `findings` to `out` in format `fmt` (one of :data:`FORMATS`).

    `read_source(path)` returns a file's text (or None when unavailable; frames and SARIF
    line/column regions are then left out). `color`: None = only when `out` is a TTY (and
    NO_COLOR is unset), True/False force it; only ``text``, ``concise`` and the statistics table
    use colour. `statistics`: False, "lines" (Ruff's `count code [*] name`, also for True) or
    "table" (a rich table), replacing the per-finding listing of the human formats.
    """
    from dtype_lint.reporters._common import RenderContext

    try:
        module_name = _MODULES[fmt]
    except KeyError:
        raise ValueError(
            f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}"
        ) from None
    ctx = RenderContext(
        read_source=read_source,
        rules={**ENGINE_RULES, **rules},
        color=color,
        given_codes=tuple(rules),
    )
    if statistics and fmt in HUMAN_FORMATS:
        module_name = "stats_table" if statistics == "table" else "stats_lines"
    findings, ctx.read_source = _printable_paths(findings, read_source)
    module = importlib.import_module(f"dtype_lint.reporters.{module_name}")
    module.render(findings, summary, out, ctx)


def _printable_paths(findings: "list[Finding]", read_source: Callable[[str], "str | None"]) \
        -> "tuple[list[Finding], Callable[[str], str | None]]":
    """Findings whose file names hold control characters (an escape sequence in a name would
    drive the terminal, and XML forbids them), shown with those characters escaped; the source
    is still read from the real name."""
    import dataclasses

    real: dict[str, str] = {}

    def shown(path: str) -> str:
        if path.isprintable():
            return path
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in path)
        real[text] = path
        return text

    out = [dataclasses.replace(f, path=shown(f.path),
                               evidence=tuple(dataclasses.replace(e, path=shown(e.path)) for e in f.evidence))
           if not (f.path.isprintable() and all(e.path.isprintable() for e in f.evidence)) else f
           for f in findings]
    if not real:
        return findings, read_source
    return out, lambda path: read_source(real.get(path, path))


__all__ = ["ENGINE_RULES", "FORMATS", "HUMAN_FORMATS", "RuleInfo", "RunSummary", "render"]
