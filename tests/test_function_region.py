"""A module-level function read from its own lines (regions.function_region, trees.parse_function)
is the function the module's tree gives, or the text says it cannot tell.

ProjectFacts.function follows a call into another module through it instead of parsing that
module (#37): the answers must be the tree's, node for node, on every module we can find."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dtype_lint.analysis.index.class_facts import ProjectFacts
from dtype_lint.analysis.index.class_index import QuantizableLayerIndex, extract_header
from dtype_lint.core import regions, trees

REPO = Path(__file__).resolve().parents[1]


def _tree_functions(tree: ast.Module) -> dict[str, ast.AST]:
    """name -> first module-level function, as class_facts.build_file_facts lists them (under
    module-level `if`/`try` too, in text order, first wins)."""
    found: dict[str, ast.AST] = {}
    blocks = [iter(tree.body)]
    while blocks:
        for stmt in blocks[-1]:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(stmt.name, stmt)
            elif isinstance(stmt, (ast.If, ast.Try)):
                blocks.append(iter(stmt.body + stmt.orelse))
                break
        else:
            blocks.pop()
    return found


def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=True)


def _sources() -> list[Path]:
    return sorted(p for folder in ("dtype_lint", "rules", "kernels_ref", "fixtures", "tests")
                  for p in (REPO / folder).rglob("*.py"))


def _compare(paths) -> tuple[int, int]:
    """(told, untold) over the module-level functions of `paths`; asserts each told one is the tree's."""
    told = untold = 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        functions = _tree_functions(tree)
        names = set(functions) | {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for name in sorted(names | {"no_such_function_anywhere"}):
            got = trees.parse_function(str(path), text, name)
            if got is regions.UNTOLD:
                untold += name in functions
                continue
            want = functions.get(name)
            assert (got is None) == (want is None), (path, name)
            if want is not None:
                assert _dump(got) == _dump(want), (path, name)
                told += 1
    return told, untold


def test_every_function_of_every_module_here_is_the_trees_or_untold():
    told, untold = _compare(_sources())
    # Most module-level functions are told (a method or nested function of the same name is not),
    # or the text path is for nothing.
    assert told > 1000 and untold < told / 10, (told, untold)


@pytest.mark.parametrize("text", [
    "class A:\n    def f(self):\n        return 1\n\ndef f():\n    return 2\n",  # a method first
    "if X:\n    def f():\n        return 1\n\ndef f():\n    return 2\n",  # under `if`, first
    'DOC = """\ndef f():\n    pass\n'
    '"""\n',  # in a docstring, the only one
    'DOC = """\n"""\nX = """\ndef f():\n    return 1\n"""\n',
    "def f(): return 1\n",  # the body on the header's line
    "x = g(\n@dec\n)\ndef f():\n    return 1\n",  # not plainly a decorator
    "def \uFB01x():\n    return 1\n\ndef fix():\n    return 2\n",  # `ﬁx` is `fix` to the parser
    "def f():\r\n    return 1\r\n",
])
def test_what_text_alone_cannot_tell_is_untold(text: str):
    assert trees.parse_function("m.py", text, text and ("fix" if "fix" in text else "f")) is regions.UNTOLD


@pytest.mark.parametrize("text", [
    "x = 1\n",
    "# def f():\nundef f\ns = 'def f()'\n",
    "def fx():\n    return 1\n",
    "class C:\n    pass\n",
])
def test_a_text_without_a_def_of_the_name_defines_none(text: str):
    assert trees.parse_function("m.py", text, "f") is None


def test_decorated_async_and_later_definitions_are_the_trees():
    text = ("import functools\n\n@functools.lru_cache(\n    maxsize=None,\n)\nasync def f(a: int = {'k': 1}\n"
            "                  ) -> int:\n    '''doc: def f(): nothing'''\n    return a\n\n\n"
            "def f():  # a later definition: the first wins\n    return 2\n\n# trailing comment\n")
    got = trees.parse_function("m.py", text, "f")
    assert isinstance(got, ast.AsyncFunctionDef)
    assert _dump(got) == _dump(_tree_functions(ast.parse(text))["f"])
    assert (got.lineno, got.end_lineno, got.decorator_list[0].lineno) == (6, 9, 3)


def test_a_call_into_another_module_parses_that_function_not_its_module(tmp_path: Path):
    """The flow into `helpers.cast_like` is followed (DTL001 reports the site), and the module
    holding it is not parsed: one function is."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    big = "".join(f"def filler_{i}(x):\n    y = x + {i}\n    return y * 2\n\n" for i in range(300))
    (pkg / "helpers.py").write_text(big + "def cast_like(x, ref):\n    return x.to(ref)\n")
    headers = [extract_header(path.read_text(), module, str(path), path.name == "__init__.py")
               for path, module in ((pkg / "__init__.py", "pkg"), (pkg / "helpers.py", "pkg.helpers"))]
    index = QuantizableLayerIndex(headers, [], [])
    facts = ProjectFacts(index, load_file=lambda p: Path(p).read_text(), reduce=True)
    parsed = trees.parsed_chars
    found = facts.function("pkg.helpers", "cast_like")
    assert found is not None and found[1].name == "cast_like" and found[1].lineno == 1201
    assert found[0].path.endswith("helpers.py") and found[0].module == "pkg.helpers"
    assert trees.parsed_chars - parsed < 100  # the function's own lines, not the module's 13,000
    assert facts.function("pkg.helpers", "no_such") is None
    assert facts.function("pkg.helpers", "filler_7")[1].lineno == 29


def test_a_decorator_with_a_blank_line_in_it_is_not_lost():
    """The walk up from a `def` or `class` stopped at a blank line, also inside a decorator's
    brackets (transformers' `@auto_docstring(custom_intro="...")`): the class or
    function parsed from its own text then lost its decorators."""
    decorator = '@pytest.mark.parametrize("src", [\n    """\n    a = 1\n\n    b = 2\n    """,\n])\n@other\n'
    text = "import pytest\n\n\n" + decorator + "def f(src):\n    return src\n"
    got = trees.parse_function("m.py", text, "f")
    assert _dump(got) == _dump(_tree_functions(ast.parse(text))["f"]) and len(got.decorator_list) == 2
    found = regions.class_regions(text.replace("def f(src):\n    return", "class A:\n    x ="))
    assert found is not None and (found[0].first_line, found[0].class_line) == (4, 12)
    # The lines a blank line stops at close a statement's brackets: no decorator.
    assert regions.class_regions("x = [\n    1,\n\n]\nclass A:\n    pass\n")[0].first_line == 5
    assert regions.class_regions("x = [\n    1,\n]\nclass A:\n    pass\n") is not None  # a statement above


def test_a_decorator_the_walk_up_cannot_reach_is_untold_not_lost():
    """Python allows blank and comment lines between a decorator and its `def` (transformers:
    `@use_kernel_forward_from_hub("rotary_pos_emb")`, then a `# Copied from` line). The walk up
    from the `def` stops at such a line; the function was read without its decorator. Now the
    code line above says: a decorator there, or a line inside brackets a decorator opens, and
    the text cannot tell (the module is parsed); the end of a statement or body, and it can."""
    comment = "import x\n\n\n@x.hub('rotary')\n# Copied from elsewhere\ndef f(q):\n    return q\n"
    blank = "import x\n\n\n@x.hub(\n    1,\n)\n\ndef f(q):\n    return q\n"
    after_call = "def g():\n    return h(\n        1,\n    )\n\n\n# see (this\ndef f(q):\n    return q\n"
    after_string = 'X = """\n@x.hub\n"""\n\n\ndef f(q):\n    return q\n'
    assert trees.parse_function("m.py", comment, "f") is regions.UNTOLD
    assert trees.parse_function("m.py", blank, "f") is regions.UNTOLD
    for text in (after_call, after_string):
        assert _dump(trees.parse_function("m.py", text, "f")) == _dump(_tree_functions(ast.parse(text))["f"])


@pytest.mark.network
@pytest.mark.parametrize("release, files", [("transformers_5250", "transformers/models/*/modeling_*.py"),
                                            ("vllm_0330", "vllm/model_executor/**/*.py")])
def test_every_function_of_a_release_is_the_trees_or_untold(release: str, files: str, request):
    """The same on real code: transformers' model files (`@auto_docstring(...)` with blank lines in
    it, `# Copied from` lines under decorators), vLLM's layers and models."""
    tree: Path = request.getfixturevalue(release)
    told, untold = _compare(sorted(tree.glob(files)))
    assert told > 1000 and untold < told / 10, (told, untold)
