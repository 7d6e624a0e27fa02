"""Is a file that a census passed over by its text alone passed over still, after an edit?

A census about the whole project (the quantizer applications', the compiled-code one) tests
every file's text and reads only those that pass: vLLM 0.34.0's compiled-code census parses 4 of
3,540 files. Every other file counts as read all the same (an edit could make it pass), so an
answer that used the census was stale after any edit anywhere: a pre-commit run on a file whose
fix the census had cleared analysed it again, census included, because another file had been
saved. A passed-over file is recorded with its test (class_index.Reads.passed) and stays
unchanged for that answer while its stamp is the same or its text fails the same test: the census
would pass over it again and answer the same.

The tests are the censuses' own: word groups (ModuleTable.naming: does the text hold every word
of one group? told from the bytes, as the scan tells it) or a predicate of the text named in
PREDICATES (ModuleTable.holding). Standard library only, with dtype-lint's helpers of the same
kind: the pre-commit replay (run/replay_index.py) asks it too.
"""

from __future__ import annotations

# A test of a file is word groups, or the name of a predicate of its decoded text.
# The predicates a census may pass files over by: name -> (module, function).
PREDICATES = {"might_compile": ("dtype_lint.core.compile_text", "might_compile")}


def still_passed_over(path: str, tests) -> bool:
    """Does the file at `path` fail every one of `tests` now? False when that cannot be told: the
    file cannot be read or decoded, holds a NUL (UTF-16/32: its ASCII words are not in its bytes),
    or a test is none this version knows."""
    from dtype_lint.core.safe_read import MAX_SOURCE_BYTES, read_bytes

    try:
        data = read_bytes(path, MAX_SOURCE_BYTES)
    except (OSError, ValueError):
        return False
    if b"\0" in data:
        return False
    return all(_fails(data, test) for test in tests)


def _fails(data: bytes, test) -> bool:
    if isinstance(test, str):
        where = PREDICATES.get(test)
        text = _decoded(data) if where is not None else None
        if where is None or text is None:
            return False
        import importlib

        return not getattr(importlib.import_module(where[0]), where[1])(text)
    return not any(all(word.encode("ascii") in data for word in group) for group in test)


def _decoded(data: bytes) -> str | None:
    """The text Python reads from `data` (core/source.FileText.decode's), or None when it cannot
    be decoded. Without a coding cookie in its first two lines that is UTF-8, a BOM dropped; a
    file with one is decoded by FileText (whose import costs the replay tokenize's)."""
    first_two = data.split(b"\n", 2)[:2]
    try:
        if any(b"coding" in line for line in first_two):
            from dtype_lint.core.source import FileText

            return FileText.decode(data).text
        text = data.decode("utf-8")
    except (UnicodeDecodeError, LookupError, SyntaxError, ValueError):
        return None
    return text[1:] if text.startswith("\ufeff") else text


def is_test(test) -> bool:
    """Is `test` (as a cache entry stores it: lists for tuples) the shape of a test?"""
    if isinstance(test, str):
        return test in PREDICATES
    return isinstance(test, (list, tuple)) and all(
        isinstance(group, (list, tuple)) and all(isinstance(word, str) and word.isascii() for word in group)
        for group in test)


def as_test(stored):
    """A test as a cache entry stores it (JSON lists) as the census made it (tuples)."""
    return stored if isinstance(stored, str) else tuple(tuple(group) for group in stored)
