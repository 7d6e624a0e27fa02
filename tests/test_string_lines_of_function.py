"""`rows_starting_in_strings_of` lexes one function's rows alone, and answers for them exactly what
lexing the whole file answers (the fix planner asks it of the comment lines above a statement it
rewrites): checked on every function of this repository's modules and fixtures, nested and
decorated ones included, and on the cached release trees' modules where they are."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dtype_lint.core.source import split_lines
from dtype_lint.fix.string_lines import rows_starting_in_strings, rows_starting_in_strings_of

ROOT = Path(__file__).resolve().parent.parent
RELEASES = Path.home() / ".cache" / "dtype-lint"


def _agree(text: str) -> int:
    """Compare every function of `text`; the number compared (0 when the file does not lex)."""
    whole = rows_starting_in_strings(text)
    if whole is None:
        return 0
    lines = split_lines(text)
    compared = 0
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            last = node.end_lineno or node.lineno
            assert rows_starting_in_strings_of(lines, first, last) == {r for r in whole if first <= r <= last}, \
                (node.name, first)
            compared += 1
    return compared


def test_functions_lex_alone_as_in_their_file() -> None:
    files = sorted([*ROOT.glob("dtype_lint/**/*.py"), *ROOT.glob("rules/*.py"), *ROOT.glob("fixtures/**/*.py"),
                    *ROOT.glob("tests/*.py")])
    compared = sum(_agree(path.read_text(encoding="utf-8")) for path in files)
    assert compared > 3000


def test_strings_that_span_a_function_s_rows() -> None:
    text = '''\
import re


class Model:
    @staticmethod
    @decorated(
        """a decorator's
        # string"""
    )
    def forward(self, x):
        doc = """
        # not a comment
        """
        key = "hidden_\\
        # states"
        # a comment
        return f"{x!r}" + doc + key

    def other(self):
        def inner():
            s = \'\'\'
    # dedented inside a string
\'\'\'
            return s
        return inner
'''
    assert _agree(text) == 3
    lines = split_lines(text)
    rows = rows_starting_in_strings_of(lines, 6, 17)
    assert {8, 12, 13, 15} <= rows and 16 not in rows


@pytest.mark.skipif(not (RELEASES / "vllm-0.27.1").is_dir(), reason="the vLLM 0.27.1 release is not cached here")
def test_on_vllm_0_27_1_attention_modules() -> None:
    files = sorted((RELEASES / "vllm-0.27.1" / "vllm" / "model_executor" / "layers").rglob("*.py"))
    assert sum(_agree(path.read_text(encoding="utf-8")) for path in files) > 1000
