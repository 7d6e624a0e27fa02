"""Facts read off a module's text without parsing it, for the class index and for the pre-commit
fast path (which must not import the analysis to use them)."""

from __future__ import annotations

import functools
import re
import sys

# Appended to a quantifier of indentation followed by something that cannot be indentation: the
# regex engine then never gives spaces back to retry (each indented line was tried once per
# space). Possessive quantifiers came in Python 3.11; before, the same matches, slower.
POSSESSIVE = "+" if sys.version_info >= (3, 11) else ""


class LineStart:
    """A pattern anchored at line starts (what `re.compile("^" + body, re.M)` finds), searched
    newline first: a `^` under MULTILINE makes the regex engine try the body at every character,
    three times slower on vLLM's files than skipping from newline to newline. The body must not
    match a line feed (so that no match can overlap the next line start)."""

    __slots__ = ("_first", "_rest")

    def __init__(self, body: str):
        self._first = re.compile(body)
        self._rest = re.compile("\n" + body)

    def finditer(self, text: str):
        """(line start offset, match) of each match, in order; `match.start()` of a match after
        the first line is its line feed's offset: use the offset given with it."""
        match = self._first.match(text)
        if match is not None:
            yield 0, match
        for match in self._rest.finditer(text):
            yield match.start() + 1, match


_DEF_HEAD = r"(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\("
_TOP_DEF = LineStart(_DEF_HEAD)
# The next line that starts a top-level statement: not indented, not a comment, not the closing
# bracket of a signature black put at column 0.
_TOP_NEXT = re.compile(r"\n(?=[^\s#)\]}])")


def helper_shaped_bodies(text: str):
    """(name, text) of each top-level function whose text could make it an input-dtype helper:
    it reads a weight's dtype or a layer's model dtype attribute (an ecosystem's name for it), and
    returns."""
    if "dtype" not in text:
        return
    for start, m in top_defs(text):
        end = _TOP_NEXT.search(text, m.end())
        body = text[start: end.start() if end else len(text)]
        if "dtype" in body and "return" in body and ("weight" in body or _names_model_dtype(body)):
            yield m.group(1), body


def dtype_functions(text: str) -> dict[str, str]:
    """Top-level functions whose text could make them input-dtype helpers, without a parse:
    name -> short hash of the function's text."""
    from dtype_lint.core import digests

    return {name: digests.sha1(body.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            for name, body in helper_shaped_bodies(text)}


def top_level_defs(text: str, name: str) -> list[str]:
    """The text of each top-level `def name(...)` (decorators left out), without a parse. A body
    is cut at the next line that starts a top-level statement; a cut inside a string at column 0
    leaves text that does not parse, and the caller then parses the whole module."""
    return [body for _start, body in top_level_def_spans(text, name)]


def top_level_def_spans(text: str, name: str) -> list[tuple[int, str]]:
    """(offset of its `def` line, its text) of each top-level `def name(...)`: top_level_defs."""
    out = []
    for start, m in top_defs(text):
        if m.group(1) == name:
            end = _TOP_NEXT.search(text, m.end())
            out.append((start, text[start: end.start() if end else len(text)]))
    return out


_DEF_AT = re.compile(_DEF_HEAD)


def top_defs(text: str) -> list[tuple[int, re.Match[str]]]:
    """`_TOP_DEF.finditer(text)`'s (line start, match) pairs, each match made where a line starts
    with `def` or `async`, found by `str.find`: the regex was tried at every line of the text (the
    header of every module a run reads; vLLM 0.34.0: 785 texts, 503,000 lines, 4,178 of them
    starting with `def`)."""
    starts = [0] if text.startswith(("def", "async")) else []
    for word in ("\ndef", "\nasync"):
        at = text.find(word)
        while at >= 0:
            starts.append(at + 1)
            at = text.find(word, at + 1)
    out = []
    for start in sorted(starts):
        m = _DEF_AT.match(text, start)
        if m is not None:
            out.append((start, m))
    return out
# A line that starts a `def` (its keywords are ASCII) and holds a character beyond ASCII.
_DEF_BEYOND_ASCII = LineStart(r"(?:async[ \t]+)?def\b[^\n]*?[^\x00-\x7f]")


def respelled_defs(text: str) -> set[str]:
    """The names of the top-level `def`s spelled in other characters than the parser reads them
    (NFKC-normalised identifiers: `def ｈelper(` defines `helper`), which the text cuts
    (top_level_def_spans) do not find under the name the tree gives them. Only a line that starts a
    `def` and holds a character beyond ASCII is normalised."""
    import unicodedata

    found = set()
    for start, _m in _DEF_BEYOND_ASCII.finditer(text):
        end = text.find("\n", start)
        line = text[start: end if end >= 0 else len(text)]
        normal = _DEF_AT.match(unicodedata.normalize("NFKC", line))
        raw = _DEF_AT.match(line)
        if normal is not None and (raw is None or raw.group(1) != normal.group(1)):
            found.add(normal.group(1))
    return found


def with_decorators(text: str, start: int) -> int:
    """Where to parse the top-level `def` whose line starts at `start` from so that its decorators
    come with it: `start` when no line above it starts with `@`, else the start of the last line
    above it that starts a `def` or `class` (a decorator of it stands after that statement), or of
    the text. A parse from there must end with that `def` where it is: one from inside a string
    (a `def` line in a docstring) ends inside one, and does not parse."""
    if not text.startswith("@") and text.rfind("\n@", 0, start) < 0:
        return start
    end = start
    while True:  # searched backwards, newline first (a `^` under MULTILINE tries every character)
        at = max(text.rfind("\ndef", 0, end), text.rfind("\nclass", 0, end), text.rfind("\nasync", 0, end))
        if at < 0:
            return 0
        if _HEADER.match(text, at + 1):
            return at + 1
        end = at


_HEADER = re.compile(r"(?:async[ \t]+def|def|class)[ \t]")


def could_be_helper_shaped(text: str) -> bool:
    """Can a function whose text (decorators, signature and body) is `text` have the input-dtype
    helper's shape (`dtypes.evaluator.helper_shape`)? False only where its tree cannot: the shape
    needs a `return` with a value and a read of the layer's `weight` or model dtype (an
    attribute, or `getattr`/`hasattr` with the string "weight", which an escape or an implicit
    concatenation may spell otherwise: any `getattr`/`hasattr` passes). A text that is not ASCII
    passes (identifiers are NFKC-normalised, so `ｗｅｉｇｈｔ` is `weight`)."""
    if not text.isascii():
        return True
    if "return" not in text:
        return False
    return "weight" in text or _names_model_dtype(text) or "getattr" in text or "hasattr" in text


def _names_model_dtype(text: str) -> bool:
    """Does the text name a layer's model dtype attribute, as any ecosystem's layers call it
    (ecosystems/registry.py's `layer_attributes` role: imported only when a text gets this far)?"""
    from dtype_lint.ecosystems.registry import model_dtype_attributes

    return any(name in text for name in model_dtype_attributes())


def function_text(lines: list[str], fn) -> str:
    """The text of a function node from its first decorator to its last line (what `ast.walk(fn)`
    covers), given the source's lines."""
    start = min([d.lineno for d in fn.decorator_list] + [fn.lineno])
    return "".join(lines[start - 1: fn.end_lineno or fn.lineno])


_CALLEE_TAIL = r"\b(?:[\s)\\]|#[^\n]*)*[.(]"


@functools.lru_cache(maxsize=256)
def _callee_regex(names: tuple[str, ...]):
    return re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + ")" + _CALLEE_TAIL)


@functools.lru_cache(maxsize=256)
def _attribute_regex(names: tuple[str, ...]):
    return re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b(?:[\s)\\]|#[^\n]*)*\.(?:[\s\\]|#[^\n]*)*(\w+)")


def attribute_pattern(names):
    """A regex that finds each `name.attr` of a name of `names` (group 1) and the attribute read
    (group 2: the next word after the `.` token, whatever stands between), or None without names."""
    names = tuple(sorted(set(names)))
    return _attribute_regex(names) if names else None


def callee_pattern(names):
    """A regex that finds each place a name of `names` can be called (`name(`) or have an
    attribute called (`name.f(`): the word, then whatever can stand between it and the `(` or `.`
    token (spaces, line breaks, a backslash continuation, comments, closing brackets). None when
    there are no names."""
    names = tuple(sorted(set(names)))
    return _callee_regex(names) if names else None


_TOP_DEF_NAME = LineStart(r"(?:async[ \t]+)?def[ \t]+(\w+)")


def may_define_top_level(text: str, name: str) -> bool:
    """Can a module with this text have a top-level `def name` (its `def` keyword starts a line)?
    False only where its tree cannot: a text that is not ASCII (NFKC-normalised identifiers) or
    holds a backslash continuation (`def \\` + newline + name) passes."""
    if not text.isascii() or "\\\n" in text or "\\\r" in text:
        return True
    return has_top_level_def(text, name)


def has_top_level_def(text: str, name: str) -> bool:
    """Does a line of the text start with `def name` (or `async def name`), read as written (no
    normalisation, no continuation line)?"""
    return any(m.group(1) == name for _, m in _TOP_DEF_NAME.finditer(text))


# `<x>.name =` or `<x>.name: T =` (not `==`, `+=`, `<=`): an attribute assignment. Not an
# f-string's self-documenting field (`f"{w.dtype=}"`, `{w.dtype = !r}`, `{w.dtype=:>8}`): no
# assigned value starts with `}`, `!` or `:` (two files of vLLM 0.34.0 "assigned" `dtype` so in
# assertion messages, making each of their classes one that may store a weight's dtype).
_ATTRIBUTE_ASSIGNED = re.compile(r"\.[ \t]*(\w+)[ \t]*(?::[^=\n]*)?=(?!=|[ \t]*[}!:])")
_QUOTED = re.compile(r"'[^'\\\n]*'|\"[^\"\\\n]*\"|#[^\n]*")
_WEIGHT_WORDS = ("weight", "parameters")
_MAX_STATEMENT_LINES = 200


def weight_assigned_attributes(text: str) -> frozenset[str]:
    """The attribute names the text may assign a value naming a weight or a module's parameters
    to (`self.dtype = self.proj.weight.dtype`, `self.w = getattr(layer, "weight")`, the
    statement's continuation lines included): a superset, by text. An attribute an object stores
    from a weight (layers.LayerResolver.stored_dtype) is assigned so in its class's file; a class
    whose file assigns no such name cannot hold one, and is not parsed to find out."""
    if not any(word in text for word in _WEIGHT_WORDS):
        return frozenset()
    names: set[str] = set()
    for match in _ATTRIBUTE_ASSIGNED.finditer(text):
        if match.group(1) not in names and _statement_names_weight(text, match.end()):
            names.add(match.group(1))
    return frozenset(names)


def may_weight_assign(text: str, name: str) -> bool:
    """Is `name` in `weight_assigned_attributes(text)`, or may it be? True for every such name:
    each `.name` assignment the regex would match is tried, where `name` stands as a whole word
    after a `.` and blanks, including those the full scan passes over inside another match (a
    `.name =` inside an annotation). A search for the one name asked about: the full scan tries
    the pattern at every `.` of the text (a census asks one or two names of a file)."""
    if not any(word in text for word in _WEIGHT_WORDS):
        return False
    match_at = _ATTRIBUTE_ASSIGNED.match
    at = text.find(name)
    while at >= 0:
        end = at + len(name)
        dot = at - 1
        while dot >= 0 and text[dot] in " \t":
            dot -= 1
        if dot >= 0 and text[dot] == "." and (end == len(text) or not word_char(text[end])):
            found = match_at(text, dot)
            if found is not None and found.group(1) == name and _statement_names_weight(text, found.end()):
                return True
        at = text.find(name, end)
    return False


def word_char(char: str) -> bool:
    """Is `char` one `\\w` matches in a str pattern (sre's test: alphanumeric, or `_`)?"""
    return char.isalnum() or char == "_"


def _statement_names_weight(text: str, start: int) -> bool:
    """Does the statement whose value starts at `start` name a weight word, up to the line where
    its brackets close? A line this cannot follow (a string with a quote or backslash in it, a
    triple quote) counts as naming one: the answer may be too broad, never too narrow."""
    depth, at = 0, start
    for _ in range(_MAX_STATEMENT_LINES):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        line = text[at:end]
        if any(word in line for word in _WEIGHT_WORDS):
            return True
        code = _QUOTED.sub("", line) if ("'" in line or '"' in line or "#" in line) else line
        if "'" in code or '"' in code:
            return True
        depth += code.count("(") + code.count("[") + code.count("{") - \
            code.count(")") - code.count("]") - code.count("}")
        if depth <= 0 and not code.rstrip().endswith("\\") or end >= len(text):
            return False
        at = end + 1
    return True
