"""A baseline of accepted findings that may only shrink.

A baseline lets a project adopt dtype-lint without fixing every existing site first: findings
already recorded are not reported, new ones are. It is keyed on what a finding *is*, never on
where it happens to sit:

    (path relative to the project root, posix) + enclosing scope + code + normalised expression

with a count per key (the same cast can legitimately occur twice in one function). Line numbers
are deliberately absent, so an unrelated edit above a recorded site, or a formatter that re-wraps
the expression (whitespace, comments, black's magic trailing comma), does not invalidate it.

The file is JSON, versioned, with entries sorted by key, so it diffs well in review::

    {
      "version": 1,
      "tool": "dtype-lint",
      "entries": [
        {"path": "vllm/attention/mla.py", "scope": "MLAAttention.forward", "code": "DTL001",
         "expression": "kv_c.to(self.kv_b_proj.weight.dtype)", "count": 1}
      ]
    }

**It may only shrink.** :func:`write_baseline` refuses (:class:`BaselineGrowthError`, listing
the new keys) to record a key, or a higher count, that the existing file does not hold; removing
stale entries (sites that were fixed) is always allowed. Growing the baseline on purpose is an
explicit act: delete the file first, or pass ``allow_growth=True``.

Engine findings are never baselined: a parse error (DTL900) or a failed fix (DTL901) says the
linter could not do its job on a file, which a baseline must not hide. They pass through
:meth:`Baseline.filter` unmatched.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path, PurePath
from typing import Callable, Iterable, Mapping

from dtype_lint.core.findings import FIX_FAILED, PARSE_ERROR, Finding
from dtype_lint.core.records import record

BASELINE_VERSION = 1
# Far above any real baseline; a larger file is not one (`/dev/zero`, a log).
MAX_BASELINE_BYTES = 64 << 20
_NEVER_BASELINED = frozenset({PARSE_ERROR, FIX_FAILED})


class BaselineError(ValueError):
    """The baseline file cannot be read or written as asked."""


class BaselineGrowthError(BaselineError):
    """Writing would add keys (or raise counts) that the existing baseline does not hold."""

    def __init__(self, path: str | os.PathLike, growth: list[tuple["BaselineKey", int, int]]):
        self.path = str(path)
        # (key, count in the existing file, count now)
        self.growth = growth
        lines = [
            f"baseline {self.path} may only shrink, but {len(growth)} "
            f"{'entry is' if len(growth) == 1 else 'entries are'} new or grew:"
        ]
        for key, old, new in growth:
            lines.append(f"  {key.describe()} ({old} -> {new})")
        lines.append(
            "Fix these findings or suppress them with a reason "
            "(`# dtype-lint: ignore[CODE] <reason>`); to re-baseline on purpose, delete the file "
            "first or pass allow_growth=True."
        )
        super().__init__("\n".join(lines))


@record(frozen=True, order=True)
class BaselineKey:
    path: str
    scope: str
    code: str
    expression: str

    def describe(self) -> str:
        where = f"{self.path}::{self.scope}" if self.scope else self.path
        expr = f" `{self.expression}`" if self.expression else ""
        return f"{where} {self.code}{expr}"


@record(frozen=True, order=True)
class BaselineEntry:
    """One key with its count: a line of the file, or a stale remainder from :meth:`filter`."""

    path: str
    scope: str
    code: str
    expression: str
    count: int

    @property
    def key(self) -> BaselineKey:
        return BaselineKey(self.path, self.scope, self.code, self.expression)


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


# --- key normalisation --------------------------------------------------------------------------

_TRAILING_COMMA = re.compile(r",\s*(?=[)\]}])")
_WORDLIKE = re.compile(r"\w$|^\w")


def normalise_expression(expression: str) -> str:
    """Whitespace- and comment-insensitive form of an expression's source text.

    Tokens are joined without whitespace, except one space after a comma (readability) and
    between two word-like tokens (``not x``, ``a if b else c``) so distinct code cannot collide;
    string literals keep their contents; comments and line breaks are dropped; a trailing comma
    before a closing bracket is dropped (black adds one when it splits a call over lines).
    Idempotent. Text that does not tokenize falls back to collapsing whitespace.
    """
    if not expression:
        return ""
    import tokenize

    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENDMARKER,
    }
    parts: list[str] = []
    try:
        # Parenthesise so a multi-line fragment tokenizes as one logical line; the wrapper
        # tokens are the first and last non-skipped ones and are dropped below.
        src = "(" + expression + "\n)"
        tokens = [
            t.string
            for t in tokenize.generate_tokens(io.StringIO(src).readline)
            if t.type not in skip
        ]
    except (tokenize.TokenError, SyntaxError, ValueError):
        return " ".join(expression.split())
    for text in tokens[1:-1]:
        if parts and (
            parts[-1] == ","
            or (_WORDLIKE.search(parts[-1][-1:]) and _WORDLIKE.search(text[:1]))
        ):
            parts.append(" ")
        parts.append(text)
    return _TRAILING_COMMA.sub("", "".join(parts))


def baseline_path(path: str, root: str | os.PathLike | None) -> str:
    """`path` as a posix path relative to `root` (as given, posix, when outside it or no root)."""
    p = PurePath(path)
    if root is not None:
        abs_path = os.path.abspath(path)
        abs_root = os.path.abspath(root)
        try:
            rel = os.path.relpath(abs_path, abs_root)
        except ValueError:  # different drives on Windows
            rel = None
        if rel is not None and rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            return PurePath(rel).as_posix()
    posix = p.as_posix()
    return posix[2:] if posix.startswith("./") else posix


def finding_key(finding: Finding, root: str | os.PathLike | None = None) -> BaselineKey:
    """The baseline key of a finding (also the basis of reporters' stable fingerprints)."""
    return BaselineKey(
        path=baseline_path(finding.path, root),
        scope=finding.scope,
        code=finding.code,
        expression=normalise_expression(finding.expression),
    )


# --- the baseline -------------------------------------------------------------------------------


class Baseline:
    """Counts of accepted findings per :class:`BaselineKey`.

    `root` is what finding paths are made relative to; :meth:`load` defaults it to the directory
    holding the baseline file (keep the file at the project root).
    """

    def __init__(
        self,
        counts: Mapping[BaselineKey, int] | None = None,
        root: str | os.PathLike | None = None,
    ):
        self.counts: dict[BaselineKey, int] = {k: n for k, n in (counts or {}).items() if n > 0}
        self.root = root

    # construction

    @classmethod
    def from_findings(cls, findings: Iterable[Finding], root: str | os.PathLike) -> "Baseline":
        """A baseline accepting exactly these findings (engine codes skipped)."""
        counts: dict[BaselineKey, int] = {}
        for finding in findings:
            if finding.code in _NEVER_BASELINED:
                continue
            key = finding_key(finding, root)
            counts[key] = counts.get(key, 0) + 1
        return cls(counts, root)

    @classmethod
    def load(cls, path: str | os.PathLike, root: str | os.PathLike | None = None) -> "Baseline":
        """Read a baseline file; raises :class:`BaselineError` on a missing, malformed or
        newer-versioned file."""
        from dtype_lint.core.source import read_bytes

        path = Path(path)

        def reject(constant: str):
            raise ValueError(f"{constant} is not a baseline value")

        try:
            data = json.loads(read_bytes(path, MAX_BASELINE_BYTES).decode("utf-8"), parse_constant=reject)
        except FileNotFoundError:
            raise BaselineError(f"baseline {path} does not exist") from None
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise BaselineError(f"baseline {path} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
        if not isinstance(data, dict) or "version" not in data:
            raise BaselineError(f"baseline {path} is not a dtype-lint baseline (no version)")
        if data["version"] != BASELINE_VERSION:
            raise BaselineError(
                f"baseline {path} has version {data['version']!r}; this dtype-lint reads "
                f"version {BASELINE_VERSION}"
            )
        counts: dict[BaselineKey, int] = {}
        entries = data.get("entries", [])
        if not isinstance(entries, list):
            raise BaselineError(f"baseline {path}: `entries` must be a list, got {type(entries).__name__}")
        for i, entry in enumerate(entries):
            try:
                key = BaselineKey(
                    _text(entry["path"]), _text(entry.get("scope", "")), _text(entry["code"]),
                    normalise_expression(_text(entry.get("expression", ""))),
                )
                n = entry.get("count", 1)
                if isinstance(n, bool) or not isinstance(n, int):
                    raise TypeError("count")
            except (KeyError, TypeError, ValueError, AttributeError):
                raise BaselineError(f"baseline {path}: entry {i} is malformed: {_short(entry)}") from None
            if n > 0:
                counts[key] = counts.get(key, 0) + n
        return cls(counts, path.parent if root is None else root)

    # queries

    def __len__(self) -> int:
        """Number of accepted findings (sum of counts)."""
        return sum(self.counts.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Baseline) and self.counts == other.counts

    def entries(self) -> list[BaselineEntry]:
        return [
            BaselineEntry(k.path, k.scope, k.code, k.expression, n)
            for k, n in sorted(self.counts.items())
        ]

    def filter(
        self, findings: Iterable[Finding], root: str | os.PathLike | None = None
    ) -> tuple[list[Finding], int, list[BaselineEntry]]:
        """Split findings into those the baseline does not accept and those it does.

        Finding paths are made relative to `root` (default: the baseline's own root; pass the
        project root that :func:`write_baseline` was given when the file lives elsewhere).

        Returns ``(new_findings, matched_count, stale_entries)``:
        - `new_findings`, in their input order: findings not covered. When a key occurs more
          often than its count, the first occurrences in (path, line, col, code) order are the
          matched ones and the rest are new.
        - `matched_count`: how many findings the baseline absorbed.
        - `stale_entries`: what the baseline holds that no finding used any more, with the
          unused count (fixed sites: the baseline can shrink by that much).
        """
        findings = list(findings)
        left = dict(self.counts)
        matched: set[int] = set()
        order = sorted(range(len(findings)), key=lambda i: findings[i].sort_key())
        for i in order:
            f = findings[i]
            if f.code in _NEVER_BASELINED:
                continue
            key = finding_key(f, self.root if root is None else root)
            if left.get(key, 0) > 0:
                left[key] -= 1
                matched.add(i)
        new = [f for i, f in enumerate(findings) if i not in matched]
        stale = [
            BaselineEntry(k.path, k.scope, k.code, k.expression, n)
            for k, n in sorted(left.items())
            if n > 0
        ]
        return new, len(matched), stale

    def growth_over(self, old: "Baseline") -> list[tuple[BaselineKey, int, int]]:
        """Keys where this baseline holds more than `old`: ``(key, old count, new count)``."""
        return [
            (k, old.counts.get(k, 0), n)
            for k, n in sorted(self.counts.items())
            if n > old.counts.get(k, 0)
        ]

    # output

    def to_json(self) -> str:
        data = {
            "version": BASELINE_VERSION,
            "tool": "dtype-lint",
            "entries": [
                {
                    "path": e.path,
                    "scope": e.scope,
                    "code": e.code,
                    "expression": e.expression,
                    "count": e.count,
                }
                for e in self.entries()
            ],
        }
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def write_baseline(
    path: str | os.PathLike,
    findings: Iterable[Finding],
    root: str | os.PathLike,
    write: Callable[[str, bytes], object],
    *,
    allow_growth: bool = False,
) -> Baseline:
    """Record `findings` as the baseline at `path`, enforcing "may only shrink".

    When `path` exists, every key/count of the new baseline must already be in the old one,
    else :class:`BaselineGrowthError` lists the new keys and nothing is written. Dropping
    stale entries is always allowed. `allow_growth=True` (or deleting the file) re-baselines
    on purpose. Returns the baseline written.
    """
    new = Baseline.from_findings(findings, root)
    if not allow_growth and os.path.exists(path):
        old = Baseline.load(path, root)
        growth = new.growth_over(old)
        if growth:
            raise BaselineGrowthError(path, growth)
    write(os.fspath(path), new.to_json().encode("utf-8"))
    return new
