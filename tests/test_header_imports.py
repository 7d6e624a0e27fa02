"""Module headers read imports without ast where they can (class_index: the kept reads of
one-line absolute imports, the text reader of black's bracketed imports); what they record must be
what ast reads, in the same order."""

from __future__ import annotations

import ast
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.analysis.index import class_index
from dtype_lint.analysis.index.class_index import _bracketed_import, extract_header

# Names the parser reads, and words it refuses or reads differently: keywords, `__debug__`, a
# digit first, non-ASCII (NFKC-normalised by the parser), soft keywords (plain names to it).
NAMES = ["a", "b", "torch", "nn", "Linear", "_x", "match", "type", "case", "_"]
ODD = ["None", "if", "import", "__debug__", "1x", "é", "", "*", "a.b"]
WORDS = st.sampled_from(NAMES + ODD)
SPACE = st.sampled_from([" ", "  ", "\t", "\n", "\n    ", " \n", "\f", "\v", "\r\n"])
NEAR = st.sampled_from(["", " ", "\n", "\t"])


@st.composite
def bracketed(draw) -> str:
    """`from module import (...)`, mostly well formed, sometimes not."""
    level = "." * draw(st.integers(0, 3))
    module = ".".join(draw(st.lists(WORDS, max_size=3)))
    names = []
    for _ in range(draw(st.integers(0, 4))):
        name = draw(WORDS)
        if draw(st.booleans()):
            name += draw(SPACE) + "as" + draw(SPACE) + draw(WORDS)
        names.append(draw(NEAR) + name + draw(NEAR))
    inner = ",".join(names) + draw(st.sampled_from(["", ",", ",,", ", ", ",\n"]))
    head = draw(st.sampled_from(["", "    ", "\t"]))
    gap = draw(st.sampled_from([" ", "  ", "\t", "\v", ""]))
    tail = draw(st.sampled_from(["\n", "\n", "  \n", ";\n", "\v\n", "\n" + head + "pass\n"]))
    close = draw(st.sampled_from([head, "", "    ", "\t"]))
    return f"{head}from{gap}{level}{module} import{draw(st.sampled_from(['', ' ']))}({inner}\n{close}){tail}"


def _ast_read(snippet: str):
    """What record_import reads of the statement (None: ast does not read it as one import)."""
    try:
        tree = ast.parse(textwrap.dedent(snippet))
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.ImportFrom):
        return None
    node = tree.body[0]
    return node.module, node.level, [(alias.name, alias.asname) for alias in node.names]


@settings(max_examples=1500, deadline=None)
@given(bracketed())
def test_bracketed_reader_agrees_with_ast(snippet):
    read = _bracketed_import(snippet)
    if read is not None:  # what it reads, ast reads the same; what it refuses, ast reads
        assert read == _ast_read(snippet)


@pytest.mark.parametrize("snippet", [
    "from a.b import (\n    c,\n    d as e,\n)\n",
    "from ... import (x)\n",
    "    from .m import (\n        y,\n    )\n",
])
def test_bracketed_reader_reads_black_style(snippet):
    assert _bracketed_import(snippet) == _ast_read(snippet) is not None


@pytest.mark.parametrize("snippet", [
    "    from a import (\nx,\n    )\n",  # dedent cannot take the first line's indentation
    "from a import (None)\n",
    "from a import (é)\n",
    "from a import (x,,)\n",
    "from a import (x)\v\n",
    "from a import (x); import b\n",
    "from  import (x)\n",
])
def test_bracketed_reader_leaves_the_rest_to_ast(snippet):
    assert _bracketed_import(snippet) is None


def _header_imports(text: str, module: str, is_package: bool) -> list[tuple[str, str]]:
    return list(extract_header(text, module, f"{module}.py", is_package, functions=False).imports.items())


def _by_ast(text: str, module: str, is_package: bool) -> list[tuple[str, str]]:
    """The header's imports with no kept reads and no text reader: the fast path and ast only."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(class_index, "_IMPORT_READS", {})
        patched.setattr(class_index, "_IMPORT_READS_MAX", 0)
        patched.setattr(class_index, "_bracketed_import", lambda snippet: None)
        return _header_imports(text, module, is_package)


ONE_LINE = st.sampled_from([
    "import os", "import os.path", "import torch.nn as nn", "import a, b.c as d",
    "from torch import nn", "from torch.nn import Linear as L, Module", "from a import b.c",
    "from . import x", "from ..m import y as x", "from .... import deep", "from os import path, sep",
    "from a import (b)", "class A(nn.Module): pass", "import a.b.c, os", "import os as path",
])


@st.composite
def module_text(draw) -> str:
    statements = draw(st.lists(st.one_of(ONE_LINE.map(lambda s: s + "\n"), bracketed()), max_size=8))
    return "".join(statements)


@settings(max_examples=400, deadline=None)
@given(module_text(), st.sampled_from(["pkg.sub.mod", "mod", "pkg"]), st.booleans())
def test_header_imports_as_without_shortcuts(text, module, is_package):
    expected = _by_ast(text, module, is_package)
    assert _header_imports(text, module, is_package) == expected
    assert _header_imports(text, module, is_package) == expected  # again, from the kept reads


def test_kept_reads_are_absolute_and_bounded(monkeypatch):
    monkeypatch.setattr(class_index, "_IMPORT_READS", {})
    monkeypatch.setattr(class_index, "_IMPORT_READS_MAX", 2)
    text = "from .x import y\nimport os\nfrom torch import nn\nimport numpy as np\n"
    assert dict(_header_imports(text, "pkg.m", False)) == {"y": "pkg.x.y", "os": "os", "nn": "torch.nn",
                                                          "np": "numpy"}
    assert list(class_index._IMPORT_READS) == ["import os", "from torch import nn"]
    # The same relative import in another module binds another target.
    assert dict(_header_imports("from .x import y\n", "other.m", False)) == {"y": "other.x.y"}
    # A kept `import a.b` binds `a` only where nothing bound it yet, as its first read did.
    imports = dict(_header_imports("import os as path\nimport os\nimport path.x\n", "m", False))
    assert imports == {"path": "os", "os": "os"}
