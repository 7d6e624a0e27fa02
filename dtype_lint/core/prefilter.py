"""The cheap text test run on every file before any parsing.

Each rule declares the spellings a file must contain for it to find anything (`Rule.patterns`,
plus its `marker` word as a plain substring test); a file passes when it passes some enabled
rule's own test (marker and pattern of the same rule). A file that passes none is never parsed.
tests/test_rule_examples.py checks that every INVALID example of every rule passes, so a new rule
form cannot be silently filtered out.
"""

from __future__ import annotations

import re
from functools import lru_cache

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (this module is on the fast path)
if TYPE_CHECKING:
    from typing import Callable


class Prefilter:
    """A file passes when some rule's marker AND one of that same rule's patterns are in it (one
    rule's marker with another rule's pattern proves nothing: on vLLM 0.27.1 the union of markers
    and the union of patterns passed 273 files more, none of which any rule could report in).
    Rules with the same marker share one test of their patterns' union.

    Each distinct pattern is searched on its own, after a plain substring test for the literal
    text it cannot match without (`.weight` in `=\\s*[\\w.]+\\.weight\\s*$`): one alternation of
    all of them made the regex engine try every `.` and `=` of every file, twice as slow; a
    pattern two markers share is searched once per text."""

    def __init__(self, rules):
        self.markers = tuple(sorted({m for r in rules for m in marker_words(r)}))
        groups: dict[str, dict[str, None]] = {}
        for rule in rules:
            for marker in marker_words(rule):  # any of a rule's marker words, with that rule's patterns
                groups.setdefault(marker, {}).update(dict.fromkeys(rule.patterns))
        self._groups = [(marker, list(pats)) for marker, pats in sorted(groups.items()) if pats]
        # pattern -> (its required literal, its compiled search, its searcher where it can be
        # walked with others' from a literal, else None), on first use: a one-file run tests one
        # text, whose markers reach a few of the 27 patterns (compiling and parsing all of them
        # was a tenth of its work).
        self._compiled: dict[str, tuple[str, Callable[[str], re.Match[str] | None], _FoundFromLiteral | None]] = {}

    def might_match(self, text: str, searched_in: "tuple[dict[str, bool], dict[str, bool]] | None" = None) -> bool:
        """`searched_in`: (pattern -> found, literal -> in the text) of the tests of this same text
        made so far, shared by the prefilters of several rules: file_analysis tests each rule on
        its own, and the three rules reading weight sites share six patterns (each was searched
        once per rule: 1.1 G of vLLM 0.34.0's 132 G instructions with every rule on)."""
        # Most patterns share a literal (`.weight`): a text without it was searched for it once
        # per pattern, a whole pass over the text each time.
        seen, holds = searched_in if searched_in is not None else ({}, {})
        compiled = self._compiled
        for marker, patterns in self._groups:
            if marker not in text:
                continue
            for index, pattern in enumerate(patterns):
                hit = seen.get(pattern)
                if hit is None:
                    literal, search, walker = compiled.get(pattern) or self._compile(pattern)
                    held = holds.get(literal)
                    if held is None:
                        held = holds[literal] = literal in text
                    if not held:
                        hit = seen[pattern] = False
                    elif walker is None:
                        hit = seen[pattern] = search(text) is not None
                    else:
                        hit = self._any_from(text, walker.first, patterns[index:], seen, holds)
                if hit:
                    return True
        return False

    def _compile(self, pattern: str) -> "tuple[str, Callable[[str], re.Match[str] | None], _FoundFromLiteral | None]":
        literal, searcher = searched(pattern)
        walker = searcher if isinstance(searcher, _FoundFromLiteral) else None
        kept = self._compiled[pattern] = (literal, searcher.search, walker)
        return kept

    def _any_from(self, text: str, first: str, patterns: list[str], seen: dict[str, bool],
                  holds: dict[str, bool]) -> bool:
        """Does the first of `patterns`, or another not yet searched whose matches start with the
        same literal, match? All of them walked in one pass over that literal's places (four of
        the default rules' patterns start with `.weight`, each searched in a pass of its own),
        each one's answer recorded in `seen` once known, as its own search would give it."""
        members = []
        for pattern in patterns:
            if pattern in seen:
                continue
            literal, _, walker = self._compiled.get(pattern) or self._compile(pattern)
            if walker is None or walker.first != first:
                continue
            held = holds.get(literal)
            if held is None:
                held = holds[literal] = literal in text
            if not held:
                seen[pattern] = False
                continue
            members.append((pattern, walker.opens, walker.found_at))
        find = text.find
        at = find(first)
        while at >= 0 and members:
            settled = False
            for pattern, opens, found_at in members:
                if opens(text, at) is None:  # (most places: re's own test, no call of ours)
                    continue
                verdict = found_at(text, at)
                if verdict:
                    seen[pattern] = True
                    return True
                if verdict is False:
                    seen[pattern] = False
                    settled = True
            if settled:
                members = [member for member in members if member[0] not in seen]
            at = find(first, at + 1)
        for pattern, _, _ in members:
            seen[pattern] = False
        return False


@lru_cache(maxsize=None)
def searched(pattern: str) -> "tuple[str, Searcher]":
    """(`required_literal`, the pattern compiled with re.M) of a rule pattern, once a process: the
    prefilter and the site spans (run/file_analysis.py) read the same patterns."""
    if pattern.startswith(r"\b") and (pattern[2:3].isalpha() or _WORDS_FIRST.match(pattern, 2)):
        return required_literal(pattern), WordStart(pattern[2:])
    if len(leading_literal(pattern)) >= _FOUND_FROM:
        return required_literal(pattern), LiteralFirst(pattern)
    if pattern.startswith(ASSIGNED) and len(leading_literal(pattern[len(ASSIGNED):])) >= _FOUND_FROM:
        return required_literal(pattern), AssignedFirst(pattern)
    if pattern.startswith(HANDED) and len(leading_literal(pattern[len(HANDED):])) >= _FOUND_FROM:
        return required_literal(pattern), HandedFirst(pattern)
    return required_literal(pattern), re.compile(pattern, re.M)


# `(?:int8|uint8|float8_e\w+)`: a group of words, each starting with a letter, as DTL004's
# storage dtypes (no literal to find first: the `\b` before it was three fifths of the
# prefilter's searches with every rule on, 0.54 s of vLLM 0.34.0's texts; 0.15 s so).
_WORDS_FIRST = re.compile(r"\(\?:[A-Za-z]\w*(?:\\w[+*])?(?:\|[A-Za-z]\w*(?:\\w[+*])?)*\)(?![?*{])")


class WordStart:
    r"""A pattern that starts with `\b` and a letter (`\bdtype\s*=\s*self...`, or a group of words
    that each start with one, `\b(?:int8|uint8)`), searched as the rest of the pattern, each match
    then checked for the word boundary before it. re skips ahead
    to a pattern's literal prefix only when the pattern starts with it: with the `\b` first it
    tried every position of the text, and the one such pattern of the default rules took 0.44 s
    of a 4 s check of vLLM 0.34.0 (0.02 s so). The matches are the pattern's own: the leftmost
    start where both hold, found by searching again one character further on."""

    __slots__ = ("_rest",)

    def __init__(self, rest: str):
        self._rest = re.compile(rest, re.M)

    def search(self, text: str, pos: int = 0) -> "re.Match[str] | None":
        search = self._rest.search
        while (match := search(text, pos)) is not None:
            start = match.start()
            if start == 0 or _WORD.match(text, start - 1) is None:
                return match
            pos = start + 1
        return None

    def finditer(self, text: str):
        pos = 0
        while (match := self.search(text, pos)) is not None:
            yield match
            pos = max(match.end(), match.start() + 1)


_WORD = re.compile(r"\w")


def required_literal(pattern: str) -> str:
    """The longest run of plain characters every match of `pattern` contains ("" if unsure)."""
    runs = _literal_runs(pattern)
    return max(runs, key=len) if runs else ""


def leading_literal(pattern: str) -> str:
    """The plain characters every match of `pattern` starts with ("" if unsure)."""
    runs = _literal_runs(pattern)
    return runs[0] if runs else ""


def _literal_runs(pattern: str) -> list[str]:
    """The runs of plain characters of the pattern's top-level sequence, in order, each ended by
    an item that is not one (every item of the sequence is in every match, in order); none if
    unsure."""
    try:
        try:
            # typeshed's `re` is one module without 3.11's private `re._parser`/`re._constants`;
            # they exist at run time (sre_parse/sre_constants below are their deprecated aliases).
            from re import _parser as sre_parse  # type: ignore[attr-defined]
            from re._constants import LITERAL  # type: ignore[import-not-found]
        except ImportError:  # Python 3.10
            import sre_parse
            from sre_constants import LITERAL
        parsed = sre_parse.parse(pattern, re.M)
    except Exception:  # noqa: BLE001 - a private module: never let it break a run
        return []
    if parsed.state.flags & re.IGNORECASE:
        return []
    runs = [""]
    for op, arg in parsed:
        if op is LITERAL:
            runs[-1] += chr(arg)
        else:
            runs.append("")
    return runs


# re finds a pattern's literal start by a scan of its own, several times the cost of `str.find`'s
# (the default rules' prefilter on vLLM 0.34.0's texts: 1.36 G instructions, 0.96 G matched where
# `str.find` finds the literal). A shorter literal stands too often for a match at each place to
# cost less than re's search: `.t` (`\.(?:to|type)\(` as re parses it), 0.98 G.
_FOUND_FROM = 4


class _FoundFromLiteral:
    """What a searcher that finds its matches from a literal shares: re's `finditer` from its
    own `search` (each match is non-empty, so the next search starts at its end)."""

    __slots__ = ()

    _literal: str

    @property
    def first(self) -> str:
        """The literal `search` finds with `str.find`, at each place asking `opens`, then
        `found_at`."""
        return self._literal

    @property
    def opens(self) -> "Callable[[str, int], re.Match[str] | None]":
        """What must match at a place of `first` for `search` to stop there (None: it goes on)."""
        raise NotImplementedError

    def search(self, text: str, pos: int = 0) -> "re.Match[str] | None":
        raise NotImplementedError

    def found_at(self, text: str, at: int) -> bool | None:
        """`search(text)` walked to `at`, a place of `first` where `opens` matched: True, it
        returns a match here; False, it returns None here; None, it goes on to the next place (so
        several patterns that start with one literal are walked in one pass, Prefilter._any_from)."""
        raise NotImplementedError

    def finditer(self, text: str):
        pos = 0
        while (found := self.search(text, pos)) is not None:
            yield found
            pos = found.end()


class LiteralFirst(_FoundFromLiteral):
    r"""A pattern whose matches start with a literal (`\.weight\s*\)`, `getattr\(...`), matched only
    where `str.find` finds the literal: the pattern's own matches, each non-empty."""

    __slots__ = ("_literal", "_match")

    def __init__(self, pattern: str):
        self._literal = leading_literal(pattern)
        self._match = re.compile(pattern, re.M).match

    def search(self, text: str, pos: int = 0) -> "re.Match[str] | None":
        literal, match, find = self._literal, self._match, text.find
        at = find(literal, pos)
        while at >= 0:
            found = match(text, at)
            if found is not None:
                return found
            at = find(literal, at + 1)
        return None

    @property
    def opens(self) -> "Callable[[str, int], re.Match[str] | None]":
        return self._match

    def found_at(self, text: str, at: int) -> bool | None:
        return True  # the pattern matched here


# An assigned name (`= self.proj` before `.weight` at a line's end): re tries it at every `=` of a
# text, the name's characters taken and given back one by one (the two such weight-site patterns
# were two fifths of the prefilter's searches of vLLM 0.34.0).
ASSIGNED = r"=\s*[\w.]+"
_ASSIGNED_HEAD = re.compile(ASSIGNED)


class _HeadFirst(_FoundFromLiteral):
    """A head re would try at every place of a text, then a rest whose matches start with a
    literal: found from that literal, the head read back from there."""

    __slots__ = ("_literal", "_rest", "_whole")

    head: str  # the pattern's head (ASSIGNED, HANDED)

    def __init__(self, pattern: str):
        rest = pattern[len(self.head):]
        self._literal = leading_literal(rest)
        self._rest = re.compile(rest, re.M).match
        self._whole = re.compile(pattern, re.M).match

    @property
    def opens(self) -> "Callable[[str, int], re.Match[str] | None]":
        return self._rest


class AssignedFirst(_HeadFirst):
    r"""`ASSIGNED` then a rest whose matches start with a literal (`=\s*[\w.]+\.weight\s*$`), matched
    from where `str.find` finds the literal: the rest there, and right before it the name and its
    `=`, the last `=` before the literal (spaces and a name's characters hold none). The match is
    the pattern's own, from that `=`; none holds another's `=`, so they follow one another."""

    __slots__ = ()
    head = ASSIGNED

    def search(self, text: str, pos: int = 0) -> "re.Match[str] | None":
        literal, rest, head, find = self._literal, self._rest, _ASSIGNED_HEAD.fullmatch, text.find
        at = find(literal, pos)
        while at >= 0:
            if rest(text, at) is not None:
                equals = text.rfind("=", pos, at)
                if equals >= 0 and head(text, equals, at) is not None:
                    return self._whole(text, equals)
            at = find(literal, at + 1)
        return None

    def found_at(self, text: str, at: int) -> bool | None:
        equals = text.rfind("=", 0, at)
        if equals >= 0 and _ASSIGNED_HEAD.fullmatch(text, equals, at) is not None:
            return self._whole(text, equals) is not None
        return None


# The first argument of a call of a name or of `self.<name>`, an attribute chain of two names or
# more (`cast_like(self.q_proj`, `self.rotary_emb(self.k_proj`), before a rest that starts with a
# literal (`.weight`): re would try it at every name of a text. Builtins that take an object first
# and vLLM's (and sglang's) `set_weight_attrs` hand the weight to no cast.
HANDED = r"(?<![\w.])(?!(?:isinstance|hasattr|getattr|setattr|delattr|set_weight_attrs)\()" \
    r"(?:self\.)?\w+\(\s*\w+(?:\.\w+)+"


class HandedFirst(_HeadFirst):
    r"""`HANDED` then a rest whose matches start with a literal (`\.weight\s*,`), matched from where
    `str.find` finds the literal: right before it an attribute chain, spaces, a `(` and the callee's
    name, read backwards to where the match must start, and the pattern matched from there. Only
    `.`, `_`, letters, digits, spaces and one `(` lie between that start and the literal, so each
    place of the literal has one start, and a match ends at a `,` no later match's start precedes:
    the matches are re's, in order."""

    __slots__ = ()
    head = HANDED

    def search(self, text: str, pos: int = 0) -> "re.Match[str] | None":
        literal, rest, find = self._literal, self._rest, text.find
        at = find(literal, pos)
        while at >= 0:
            if rest(text, at) is not None:
                found = self._from_start(text, at, pos)
                if found is not None:
                    return found
            at = find(literal, at + 1)
        return None

    def _from_start(self, text: str, at: int, pos: int) -> "re.Match[str] | None":
        """The pattern's match ending at the literal found at `at`, starting at `pos` or later."""
        i = at
        while i > pos and (text[i - 1].isalnum() or text[i - 1] in "_."):  # the chain (`\w` is isalnum and `_`)
            i -= 1
        while i > pos and text[i - 1].isspace():
            i -= 1
        if i <= pos or text[i - 1] != "(":
            return None
        i -= 1
        while i > pos and (text[i - 1].isalnum() or text[i - 1] == "_"):  # the callee's name
            i -= 1
        if i - 5 >= pos and text.startswith("self.", i - 5):
            found = self._whole(text, i - 5)
            if found is not None:
                return found
        return self._whole(text, i)

    def found_at(self, text: str, at: int) -> bool | None:
        return True if self._from_start(text, at, 0) is not None else None


if TYPE_CHECKING:
    # What `searched` compiles a pattern to: each has `search(text, pos)` and `finditer(text)`.
    Searcher = re.Pattern[str] | WordStart | LiteralFirst | AssignedFirst | HandedFirst


def has_suppression(text: str, utf8: bytes | None = None) -> bool:
    """Could the text hold a dtype-lint suppression comment that DTL902 may report (so the file
    is analysed even without a site)? Substring tests only: linear. A bare `# noqa` is never
    reported, so it does not count here (it does once the file has findings: see
    suppressions.might_hold_suppression). `utf8`: the bytes the text was decoded from, when they
    are its UTF-8 (a BOM before them changes no ASCII letter): lowered, they answer as the text's
    own bytes below do, without encoding it again, and `bytes.lower()` costs a third of an ASCII
    `str.lower()`."""
    if utf8 is not None:
        folded = utf8.lower()
        return (b"dtype-lint" in folded and _holds_directive(folded)) or \
            (b"dtl" in folded and b"noqa" in folded)
    if text.isascii():
        lowered = text.lower()
        return ("dtype-lint" in lowered and DIRECTIVE.search(lowered) is not None) or \
            ("dtl" in lowered and "noqa" in lowered)
    # Another text's `lower()` maps each character through Unicode's tables, ten times the cost
    # of an ASCII text's (on vLLM, a few files with an arrow or a dash in a comment cost as much
    # as all the others). Its UTF-8 bytes lowered hold the same ASCII letters lowered and no other
    # ASCII byte, so the words are found there alike: only U+0130 and U+212A lower to a text with
    # an ASCII letter (an `i` followed by a combining dot, a `k`), which no word needs.
    folded = text.encode("utf-8", "surrogatepass").lower()
    return (b"dtype-lint" in folded and _holds_directive(folded)) or \
        (b"dtl" in folded and b"noqa" in folded)


# Every `dtype-lint: ignore` / `ignore-file` directive holds this (core/suppressions.py's
# pattern allows the same spaces): a file that only mentions dtype-lint (a comment, a docstring)
# holds none, and is neither analysed for DTL902 nor tokenized for its comments.
DIRECTIVE = re.compile(r"dtype-lint\s*:\s*ignore")


def _holds_directive(folded: bytes) -> bool:
    """DIRECTIVE's answer on `text.lower()`, read from the text's UTF-8 bytes lowered (`folded`).
    They decode to the text with its ASCII letters lowered and every other character as it was
    (its spaces may be any Unicode space, so the directive is tested on a text, not on bytes). The
    directive's letters in `text.lower()` stand where ASCII letters stood (U+0130 lowers to an `i`
    followed by a combining dot, U+212A to a `k`: neither fits the directive) and no space changes
    case, so both texts hold a directive alike. Decoding costs a fifth of lowering a text that is
    not ASCII: 1.5 M instructions against 7.8 M for vLLM's 144 kB mla_attention.py, tested three
    times by the benchmark's pre-commit run of an edit (its edit comment names dtype-lint)."""
    return DIRECTIVE.search(folded.decode("utf-8", "surrogatepass")) is not None


@lru_cache(maxsize=16)
def for_rules(rules: tuple) -> Prefilter:
    """The prefilter of these rules (a tuple of Rule classes), built once."""
    return Prefilter(rules)


def marker_words(rule) -> tuple[str, ...]:
    """A rule's marker words: one string, or a tuple of them (DTL001 also reads `parameters()`)."""
    return rule.marker if isinstance(rule.marker, tuple) else (rule.marker,)
