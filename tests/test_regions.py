"""Parsing only what can hold a site (core/regions.py, core/trees.parse_reduced)."""

from __future__ import annotations

import ast

import pytest

from dtype_lint.api import check_source
from dtype_lint.core import regions, trees

# A body long enough to be blanked (regions.MIN_BLANKED_LINES) that no rule reads.
_FILLER = "".join(f"        total = total + {i}\n" for i in range(6))

_SOURCE = f"""\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


def helper(total):
{_FILLER.replace("        ", "    ")}    return total


class Attn(torch.nn.Module):
    def __init__(self, quant_config, prefix: str):
        super().__init__()
        self.kv_b_proj = ColumnParallelLinear(8, 8, quant_config=quant_config, prefix=prefix)

    def unrelated(self, total):
{_FILLER}        return total

    @staticmethod
    def also_unrelated(total):
{_FILLER}        return total

    def forward(self, x):
        # the site: the class's __init__ is far above, beyond blanked methods
        return x.to(self.kv_b_proj.weight.dtype)
"""


def _site_lines(text: str) -> list[tuple[int, int]]:
    import re

    from dtype_lint.analysis.flow.recognisers import WEIGHT_SITE_PATTERNS

    return regions.site_spans(text, [("", re.compile(p, re.M)) for p in WEIGHT_SITE_PATTERNS])


def test_reduced_text_keeps_every_line_and_column():
    spans = _site_lines(_SOURCE)
    reduced = regions.reduce(_SOURCE, spans)
    assert reduced is not None
    blanked_names = {ln.split("def ")[1].split("(")[0] for ln in (_SOURCE.splitlines()[d - 1] for d, _, _ in reduced.blanked)}
    assert blanked_names == {"helper", "unrelated", "also_unrelated"}
    assert reduced.text.count("\n") == _SOURCE.count("\n")
    assert reduced.kept_chars < len(_SOURCE)
    whole, part = ast.parse(_SOURCE), ast.parse(reduced.text)
    assert regions.check(part, reduced)
    # Every kept statement is the whole file's, positions included.
    def kept(tree):
        cls = tree.body[-1]
        return [ast.dump(s, include_attributes=True) for s in tree.body[:2] + [cls.body[0], cls.body[-1]]]
    assert kept(part) == kept(whole)
    # A blanked function is one `pass` on its first body line, decorators and signature kept.
    also = part.body[-1].body[2]
    assert [type(s) for s in also.body] == [ast.Pass] and also.body[0].lineno == also.lineno + 1
    assert [ast.dump(d) for d in also.decorator_list] == [ast.dump(d) for d in whole.body[-1].body[2].decorator_list]
    assert regions.is_blanked(also)


def test_blanked_function_read_through_defs_is_the_whole_files():
    """What reads a blanked function gets the whole file's node, at its own lines and columns."""
    trees.clear()
    tree = trees.parse_reduced("m.py", _SOURCE, _site_lines(_SOURCE))
    method = tree.body[-1].body[1]
    assert regions.is_blanked(method)
    defs = regions.Defs(("m.py", _SOURCE), trees.whole_function)
    dict.__setitem__(defs, "unrelated", method)
    real = defs["unrelated"]
    expected = ast.parse(_SOURCE).body[-1].body[1]
    assert ast.dump(real, include_attributes=True) == ast.dump(expected, include_attributes=True)
    trees.clear()


def test_finding_in_a_method_whose_init_is_elsewhere_is_still_found():
    trees.clear()
    before = trees.reduced_parses
    findings = check_source(_SOURCE, filename="m.py")
    assert trees.reduced_parses == before + 1  # the file was parsed reduced
    site = _SOURCE.splitlines().index("        return x.to(self.kv_b_proj.weight.dtype)") + 1
    assert [(f.code, f.span.line) for f in findings] == [("DTL001", site)]
    # ... and as a whole-file run finds it (every rule enabled: nothing is blanked).
    whole = check_source(_SOURCE, filename="m.py", settings={"select": ["ALL"]})
    assert ("DTL001", site) in [(f.code, f.span.line) for f in whole]
    trees.clear()


def test_an_analysed_files_tree_is_not_kept_after_its_analysis(monkeypatch):
    """The store lets a file's own tree go when its analysis ends (trees.release); another
    file's tree, parsed for what the analysis read of it, stays for the next file while the store
    has room for two (it keeps one: core/trees.py MAX_KEPT_FILES)."""
    monkeypatch.setattr(trees, "MAX_KEPT_FILES", 2)
    trees.clear()
    trees.parse_reduced("other.py", "class Base:\n    pass\n")
    assert check_source(_SOURCE, filename="m.py")
    assert "m.py" not in trees._kept and "other.py" in trees._kept
    trees.release("other.py")
    assert not trees._kept and trees._chars == 0
    trees.clear()


def test_syntax_error_outside_regions_is_left_to_other_linters_inside_is_dtl900():
    outside = _SOURCE.replace("        total = total + 3\n", "        total = = 3\n", 1)  # in `unrelated`
    assert outside != _SOURCE
    codes = [f.code for f in check_source(outside, filename="m.py")]
    assert codes == ["DTL001"]
    inside = _SOURCE.replace("return x.to(self.kv_b_proj.weight.dtype)", "return x.to(self.kv_b_proj.weight.dtype))")
    found = check_source(inside, filename="m.py")
    assert [f.code for f in found] == ["DTL900"]
    assert found[0].span.line == _SOURCE.splitlines().index("        return x.to(self.kv_b_proj.weight.dtype)") + 1


def test_a_def_inside_a_string_sends_the_parse_back_to_the_whole_file():
    text = 'DOC = """\ndef fake(x):\n    a = 1\n    b = 2\n    c = 3\n    return a\n"""\n'
    reduced = regions.reduce(text, [])
    assert reduced is not None  # the text scan cannot tell a string from code ...
    trees.clear()
    tree = trees.parse_reduced("s.py", text, [])
    assert ast.dump(tree) == ast.dump(ast.parse(text))  # ... the check of the parse can
    trees.clear()


def test_methods_the_class_facts_read_are_kept():
    body = "".join(f"        y{i} = {i}\n" for i in range(6))
    text = ("class A:\n"
            f"    def sets(self):\n{body}        self.proj = Linear()\n"
            f"    def getter(self):\n        '''Doc.'''\n        return self.proj\n"
            f"    def dispatch(self, layer):\n{body}        if isinstance(layer, Linear):\n            return 1\n"
            f"    def quant(self):\n{body}        self.qm = get_quant_method(self)\n"
            f"    def other(self, layer):\n{body}        return isinstance(self, Linear)\n")
    reduced = regions.reduce(text, [])
    assert reduced is not None
    names = [text.splitlines()[d - 1].split("def ")[1].split("(")[0] for d, _, _ in reduced.blanked]
    assert names == ["other"]


_CLASSES = f"""\
import torch


@register(
    name="first",
)
class First(torch.nn.Module):
    def __init__(self):
        self.proj = torch.nn.Linear(2, 2)

    def unread(self, total):
{_FILLER}        return total


class Second(
    First,
):
    x: int = 1
"""


def test_each_class_parses_alone_where_it_stands_in_the_file():
    found = regions.class_regions(_CLASSES)
    assert [(r.name, r.first_line, r.class_line) for r in found] == [("First", 4, 7), ("Second", 21, 21)]
    whole = {c.name: c for c in ast.parse(_CLASSES).body if isinstance(c, ast.ClassDef)}
    for region in found:
        cls = trees.parse_class("c.py", _CLASSES, region, lambda: None)
        if region.name == "First":  # its unread method blanked, its __init__ kept
            assert regions.is_blanked(cls.body[1]) and not regions.is_blanked(cls.body[0])
            assert ast.dump(cls.body[0], include_attributes=True) == \
                ast.dump(whole["First"].body[0], include_attributes=True)
            assert ast.dump(cls.decorator_list[0], include_attributes=True) == \
                ast.dump(whole["First"].decorator_list[0], include_attributes=True)
        else:
            assert ast.dump(cls, include_attributes=True) == ast.dump(whole["Second"], include_attributes=True)


def test_classes_not_plainly_top_level_send_the_file_to_a_whole_parse():
    assert regions.class_regions("class A:\n    class Inner:\n        pass\n") is None
    assert regions.class_regions("if X:\n    class A:\n        pass\n") is None
    assert regions.class_regions('DOC = """\nclass Fake:\n    pass\n"""\n') is None
    assert regions.class_regions("x = [\n    1,\n]\nclass A:\n    pass\n") is not None  # a statement above
    assert regions.class_regions("x = f(\n@dec\n)\nclass A:\n    pass\n") is None  # not plainly a decorator


def test_fix_names_the_helper_as_a_whole_parse_would(monkeypatch):
    """A blanked body that binds the helper's name: the planner reads the whole tree for it."""
    from dtype_lint.api import fix_source
    from dtype_lint.run import file_analysis

    shadowing = _SOURCE.replace("        total = total + 0\n", "        get_layer_input_dtype = total\n", 1)
    assert shadowing != _SOURCE
    trees.clear()
    reduced = fix_source(shadowing, filename="m.py")
    monkeypatch.setattr(file_analysis, "reducible", lambda config: False)
    trees.clear()
    whole = fix_source(shadowing, filename="m.py")
    assert reduced == whole and "_get_layer_input_dtype" in whole
    trees.clear()


def test_line_start_patterns_find_what_the_multiline_caret_finds():
    # text_facts.LineStart searches newline first; it must find exactly the `^` pattern's matches
    # (offsets, groups), at the text's start, after CRLF and blank lines, indented or not.
    import re

    from dtype_lint.analysis.index.class_index import _STMT
    from dtype_lint.core.text_facts import _TOP_DEF, LineStart

    texts = [
        "class A:\n    pass\n",
        "import os\nfrom a import (\n  b,\n)\n\tclass  B(A):\n  x = 'class C'\n  classy = 1\n",
        "\n\ndef f(x):\n    def g():\n        pass\nasync  def h (y):\n  return y\r\ndef k():\n",
        "x = 1  # import\n   \t from . import y\nimport\nimportlib\n",
        "",
        "def",
    ]
    bodies = [(_STMT, r"[ \t]*(?:class|from|import)\b"), (_TOP_DEF, r"(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\("),
              (LineStart(r"class[ \t]+(\w+)"), r"class[ \t]+(\w+)")]
    for fast, body in bodies:
        caret = re.compile("^" + body, re.M)
        for text in texts:
            got = [(start, m.end(), m.groups()) for start, m in fast.finditer(text)]
            assert got == [(m.start(), m.end(), m.groups()) for m in caret.finditer(text)], (body, text)


def test_lines_split_where_the_tokenizer_splits_them():
    # source.split_lines takes str.splitlines when no other break character is in the text.
    import re

    from dtype_lint.core.source import split_lines

    regex = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
    for text in ["", "a", "a\n", "\n\n", "a\nb", "a\r\nb\rc\n", "x\fy\n", "x\vy", "a\x1cb\x1d\x1e\n",
                 "é\x85z\n", "\u2028\u2029\n", "é\nü", "tail  "]:
        assert split_lines(text) == regex.findall(text), repr(text)


_DEEP = "A[" * 5 + "int" + "]" * 5


@pytest.mark.parametrize("walk_first", [0, 10**9], ids=["regex", "walk"])
def test_a_header_the_one_regex_match_passes_over_gets_the_line_walks_answer(monkeypatch, walk_first: int):
    """`_header_end` answers a plain header with one regex match; each header below is one that
    match must not take (it would answer otherwise than the line walk) or must take as the walk
    does: (text, lines of the header, or None where the body cannot be found by text). The first
    headers of a run are walked (the pattern is compiled only after `_WALK_FIRST`): both ways
    give the same answers."""
    monkeypatch.setattr(regions, "_WALK_FIRST", walk_first)
    monkeypatch.setattr(regions, "_plain_header_match", None)
    long_args = "".join(f"    a{i},\n" for i in range(197))
    cases = [
        ("def f(x='a', y=\"b'\"):\n", 1),
        ("def f(x='a''b'):\n", None),  # strings side by side: the walk sees `'''`
        ("def f(  # it's\n    x):\n", None),  # a quote in a comment: the walk reads it as a string's
        ("def f(  # (plain)\n    x,\n):\n", 3),
        ("def f(x):  # done\n", 1),
        ("def f(x): return x\n", None),
        (f"def f(x: {_DEEP}):\n", 1),  # nested deeper than the regex follows
        ("def f(x: A[int)]:\n", 1),  # the walk counts brackets, not pairs
        ("def f(x = '\\n'):\n", None),
        ("def f(\n" + long_args + "):\n", 199),
        ("def f(\n" + long_args + "    b,\n):\n", None),  # past the walk's 199 lines
    ]
    for header, lines in cases:
        text = header + "    pass\n"
        assert regions._header_end(text, 0) == (None if lines is None else (len(header), lines)), header


def _check_as_it_was(tree, reduced) -> bool:
    """regions.check before it kept each statement class's kind (three kinds and five getattrs a statement)."""
    import ast

    expected = {first: (pass_line, last) for first, pass_line, last in reduced.blanked}
    found = 0
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = expected.get(node.lineno)
            if where is not None:
                pass_line, _last = where
                body = node.body
                if len(body) != 1 or not isinstance(body[0], ast.Pass) or body[0].lineno != pass_line:
                    return False
                found += 1
                continue
            todo.extend(node.body)
        elif isinstance(node, ast.ClassDef):
            todo.extend(node.body)
        elif isinstance(node, ast.stmt):
            for name in ("body", "orelse", "finalbody"):
                todo.extend(getattr(node, name, None) or ())
            for handler in getattr(node, "handlers", None) or ():
                todo.extend(handler.body)
            for case in getattr(node, "cases", None) or ():
                todo.extend(case.body)
    return found == len(expected)


def test_check_answers_as_it_did_asking_each_statement_class_once():
    import ast
    import dataclasses
    from pathlib import Path

    from dtype_lint.core import regions

    root = Path(__file__).resolve().parents[1]
    checked = 0
    for path in sorted([*root.joinpath("dtype_lint").rglob("*.py"), *root.joinpath("fixtures").rglob("*.py")]):
        text = path.read_text(encoding="utf-8")
        reduced = regions.reduce(text, [])
        if reduced is None:
            continue
        try:
            tree = ast.parse(reduced.text)
        except SyntaxError:
            continue
        assert regions.check(tree, reduced) == _check_as_it_was(tree, reduced), path
        # a reduction whose blanked bodies are not where it says: both refuse it
        wrong = dataclasses.replace(reduced, blanked=[(a, b + 1, c) for a, b, c in reduced.blanked])
        assert regions.check(tree, wrong) is _check_as_it_was(tree, wrong) is False, path
        checked += 1
    assert checked > 50
    kinds = regions._CHECK_KINDS
    assert kinds[ast.Assign] == () and kinds[ast.If] == ("body", "orelse") and kinds[ast.ClassDef] == ("class",)
    assert kinds[ast.Try] == ("body", "orelse", "finalbody", "handlers")
