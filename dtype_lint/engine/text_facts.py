"""Facts read off a module's text without parsing it, for the class index and for the pre-commit
fast path (which must not import the analysis to use them)."""

from __future__ import annotations

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
