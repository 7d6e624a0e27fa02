"""Facts read off a module's text without parsing it, for the class index and for the pre-commit
fast path (which must not import the analysis to use them)."""

from __future__ import annotations

import functools
import re

_TOP_DEF = re.compile(r"^(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\(", re.M)
# The next line that starts a top-level statement: not indented, not a comment, not the closing
# bracket of a signature black put at column 0.
_TOP_NEXT = re.compile(r"\n(?=[^\s#)\]}])")


def helper_shaped_bodies(text: str):
    """(name, text) of each top-level function whose text could make it an input-dtype helper:
    it reads a weight's dtype or `params_dtype`, and returns."""
    if "dtype" not in text:
        return
    for m in _TOP_DEF.finditer(text):
        end = _TOP_NEXT.search(text, m.end())
        body = text[m.start(): end.start() if end else len(text)]
        if "dtype" in body and "return" in body and ("weight" in body or "params_dtype" in body):
            yield m.group(1), body


def dtype_functions(text: str) -> dict[str, str]:
    """Top-level functions whose text could make them input-dtype helpers, without a parse:
    name -> short hash of the function's text."""
    import hashlib

    return {name: hashlib.sha1(body.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            for name, body in helper_shaped_bodies(text)}


def top_level_defs(text: str, name: str) -> list[str]:
    """The text of each top-level `def name(...)` (decorators left out), without a parse. A body
    is cut at the next line that starts a top-level statement; a cut inside a string at column 0
    leaves text that does not parse, and the caller then parses the whole module."""
    out = []
    for m in _TOP_DEF.finditer(text):
        if m.group(1) == name:
            end = _TOP_NEXT.search(text, m.end())
            out.append(text[m.start(): end.start() if end else len(text)])
    return out


def could_be_helper_shaped(text: str) -> bool:
    """Can a function whose text (decorators, signature and body) is `text` have the input-dtype
    helper's shape (`dtypes.evaluator.helper_shape`)? False only where its tree cannot: the shape
    needs a `return` with a value and a read of the layer's `weight` or `params_dtype` (an
    attribute, or `getattr`/`hasattr` with the string "weight", which an escape or an implicit
    concatenation may spell otherwise: any `getattr`/`hasattr` passes). A text that is not ASCII
    passes (identifiers are NFKC-normalised, so `ｗｅｉｇｈｔ` is `weight`)."""
    if not text.isascii():
        return True
    if "return" not in text:
        return False
    return "weight" in text or "params_dtype" in text or "getattr" in text or "hasattr" in text


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


_TOP_DEF_NAME = re.compile(r"^(?:async[ \t]+)?def[ \t]+(\w+)", re.M)


def may_define_top_level(text: str, name: str) -> bool:
    """Can a module with this text have a top-level `def name` (its `def` keyword starts a line)?
    False only where its tree cannot: a text that is not ASCII (NFKC-normalised identifiers) or
    holds a backslash continuation (`def \\` + newline + name) passes."""
    if not text.isascii() or "\\\n" in text or "\\\r" in text:
        return True
    return any(m.group(1) == name for m in _TOP_DEF_NAME.finditer(text))
