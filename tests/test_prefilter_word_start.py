"""A rule pattern that starts with `\\b` is searched without it, each match checked for the
boundary (core/prefilter.WordStart): re skips ahead to a literal only when the pattern starts with
it. The matches must be the pattern's own, at every position, whatever the text."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.core.prefilter import WordStart, searched
from dtype_lint.rules import ALL_RULES
from dtype_lint.rules.dtl002_weight_dtype_allocation import STORED_DTYPE_ALLOC

PATTERN = STORED_DTYPE_ALLOC  # `dtype=self.tower.dtype`, `dtype=self.get_k_dtype()`
# Texts made of the pattern's own pieces, so that matches, near misses and word characters
# before a match (`xdtype`, `édtype`) are common.
PIECES = st.sampled_from(["dtype", " = ", "=", "self", ".", "w", "dtype ", "x", "é", "_", "\n", " ", "(", "1", ")",
                          "get_", "()"])


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_word_start_finds_what_the_pattern_finds(text: str):
    plain = re.compile(PATTERN, re.M)
    fast = WordStart(PATTERN[2:])
    assert [m.span() for m in fast.finditer(text)] == [m.span() for m in plain.finditer(text)]
    assert (fast.search(text) is None) == (plain.search(text) is None)


def test_the_default_rules_word_start_patterns_go_through_it():
    starting = [p for rule in ALL_RULES for p in rule.patterns if p.startswith(r"\b") and p[2:3].isalpha()]
    assert PATTERN in starting
    for pattern in starting:
        literal, search = searched(pattern)
        assert isinstance(search, WordStart) and literal in pattern.replace("\\", "")


def test_a_word_character_before_the_match_is_no_match():
    _, search = searched(PATTERN)
    assert search.search("params_dtype = self.layer.dtype") is None
    assert search.search("params_dtype = self.get_dtype()") is None
    assert search.search("x(dtype = self.get_k_dtype())") is not None
    assert search.search("x(dtype=self.dtype)") is None  # a chain of at least one attribute, or a call
    assert search.search("xdtype = self.a.dtype; dtype = self.b.dtype").span() == (23, 43)


# DTL004's storage dtypes: a group of words after the `\b`, each starting with a letter.
GROUP = r"\b(?:int32|uint8|int8|float8_e\w+|fp8_dtype)\b"
GROUP_PIECES = st.sampled_from(["int8", "uint8", "int32", "float8_e", "4m3fn", "fp8_dtype", "x", "_", "é", " ",
                                ".", "\n", "1"])


@settings(max_examples=400, deadline=None)
@given(st.lists(GROUP_PIECES, max_size=30).map("".join))
def test_a_group_of_words_is_searched_as_the_pattern_is(text: str):
    _, fast = searched(GROUP)
    plain = re.compile(GROUP, re.M)
    assert isinstance(fast, WordStart)
    assert [m.span() for m in fast.finditer(text)] == [m.span() for m in plain.finditer(text)]
    assert (fast.search(text) is None) == (plain.search(text) is None)


def test_a_group_that_may_start_otherwise_is_left_to_re():
    for pattern in (r"\b(?:int8|\wx)", r"\b(?:int8|uint8)?\d", r"\b(?:[a-z]|b)x", r"\b(?:a(b)|c)"):
        assert not isinstance(searched(pattern)[1], WordStart), pattern



# A file that may import a looked-for class outside the project names its top-level package as a
# word (run/pipeline.py `_imports_maybe`): searched from the package's name, not from every position.
TOP_PIECES = st.sampled_from(["vllm", "vllm_x", "xvllm", "é", "_", ".", " ", "\n", "1", "import ", "Linear",
                              "sglang", "Row"])
NEEDLES = ["sglang:Linear", "vllm:", "vllm:Linear", "vllm:Row"]


@settings(max_examples=400, deadline=None)
@given(st.lists(TOP_PIECES, max_size=25).map("".join))
def test_a_package_word_is_found_as_the_lookbehind_pattern_finds_it(text: str):
    from dtype_lint.run.pipeline import _imports_maybe

    for module in ("proj.m", "vllm.layers"):
        expected = [needle for needle in NEEDLES if needle.partition(":")[2] in text and (
            module.startswith(needle.partition(":")[0] + ".") or
            re.search(r"(?<!\w)%s\b" % needle.partition(":")[0], text) is not None)]
        assert _imports_maybe(NEEDLES, text, module) == expected
