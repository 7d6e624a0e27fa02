"""Module headers read imports without ast where they can (class_index: the kept reads of
one-line absolute imports); what they record must be what ast reads, in the same order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.analysis.index import class_index
from dtype_lint.analysis.index.class_index import extract_header


def _header_imports(text: str, module: str, is_package: bool) -> list[tuple[str, str]]:
    return list(extract_header(text, module, f"{module}.py", is_package, functions=False).imports.items())


def _by_ast(text: str, module: str, is_package: bool) -> list[tuple[str, str]]:
    """The header's imports with no kept reads: the fast path and ast only."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(class_index, "_IMPORT_READS", {})
        patched.setattr(class_index, "_IMPORT_READS_MAX", 0)
        return _header_imports(text, module, is_package)


ONE_LINE = st.sampled_from([
    "import os", "import os.path", "import torch.nn as nn", "import a, b.c as d",
    "from torch import nn", "from torch.nn import Linear as L, Module", "from a import b.c",
    "from . import x", "from ..m import y as x", "from .... import deep", "from os import path, sep",
    "from a import (b)", "class A(nn.Module): pass", "import a.b.c, os", "import os as path",
])


@st.composite
def module_text(draw) -> str:
    return "".join(s + "\n" for s in draw(st.lists(ONE_LINE, max_size=8)))


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
