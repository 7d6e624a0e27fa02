"""A big text parsed in pieces (core/trees.py `_parse_in_pieces`) gives ast.parse's very tree."""

import ast

import pytest

from dtype_lint.core import trees


def _member(i: int) -> str:
    return (f"    @staticmethod\n    def m{i}(x, y=({i},\n            {i + 1})):\n"
            f"        '''A docstring whose example is at the members' indentation:\n"
            f"    def not_a_member(): ...\n        '''\n"
            f"        return [x,\n y]  # a line inside brackets at column 1\n\n")


def _text(newline: str = "\n") -> str:
    parts = ["import os\n\n"]
    for i in range(400):
        parts.append(f"def f{i}(a):\n    if a:\n        return {i}\n    else:\n        return -{i}\n\n")
        if i % 50 == 0:
            parts.append(f"@register(\n    'x{i}',\n)\nclass Registered{i}:\n    pass\n\n")
    parts.append("s = '''\ndef in_a_string():\n    pass\n'''\n\n")
    parts.append("class Big(Base,\n          Mixin):\n    '''Doc.'''\n    x: int = 1\n\n")
    parts += [_member(i) for i in range(600)]
    parts.append("# after the class\n\nif __name__ == '__main__':\n    f1(1)\nelse:\n    pass\n")
    return "".join(parts).replace("\n", newline)


def _dump(tree: ast.AST) -> str:
    return ast.dump(tree, include_attributes=True)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_pieces_are_the_whole_tree(newline, monkeypatch):
    text = _text(newline)
    assert len(text) > 4 * trees.PIECE_CHARS
    calls = []
    parse = ast.parse
    def counted(source, *args, **kwargs):
        calls.append(len(source))
        return parse(source, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(ast, "parse", counted)
        tree = trees._parse_in_pieces(text, "big.py")
    assert tree is not None and len(calls) > 4  # in pieces, the big class's members too
    assert max(calls) < 3 * trees.PIECE_CHARS + text.count("\n")
    assert _dump(tree) == _dump(parse(text, filename="big.py"))


def test_what_is_not_parsed_in_pieces():
    text = _text()
    assert trees._parse_in_pieces(text.replace("\n\n", "\n\r", 1), "p.py") is None  # a lone \r ends a line too
    assert trees._parse_in_pieces(text + "x = '\\d'\n", "p.py") is None  # the parser warns: parsed whole
    broken = text.replace("def f399(a):", "def f399(a:", 1)
    assert trees._parse_in_pieces(broken, "p.py") is None
    with pytest.raises(SyntaxError) as got:
        trees._parse(broken, "p.py", len(broken))
    with pytest.raises(SyntaxError) as expected:
        ast.parse(broken, filename="p.py")
    assert (got.value.msg, got.value.lineno, got.value.offset) == \
        (expected.value.msg, expected.value.lineno, expected.value.offset)
