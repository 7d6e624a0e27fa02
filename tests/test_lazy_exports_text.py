"""A module is parsed for its lazy exports (analysis/index/lazy_exports.py) only when its text can
define a top-level `def __getattr__`: the word in a method or a comment, or a non-ASCII character
anywhere (a `×` in a comment), no longer costs a whole parse of every module a guard's predicate
is imported from (vLLM 0.34.0, every rule: 25 whole parses, 1.43 M of 36.0 M characters parsed)."""

from __future__ import annotations

import pytest
from tiny_project import json_findings, write_tree

from dtype_lint.analysis.index.lazy_exports import may_define_getattr

HEAD = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear
from proj.{module} import ready


class Block(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config)
        self.fast = ready(self.proj)

    def forward(self, x):
"""
GUARDED = "        if self.fast:\n            x = x @ self.proj.weight.t()\n        return x\n"
UNGUARDED = "        return x @ self.proj.weight.t()\n"

READY = """\
import torch


def ready(layer):
    weight = getattr(layer, "weight", None)
    if weight is None or weight.dtype != torch.bfloat16:
        return False
    return True
"""
# The predicate's own module: `__getattr__` in a method and a non-ASCII comment (2 × 4).
UTIL = READY + """

class Namespace:  # 2 × 4 fields
    def __getattr__(self, name):
        return name
"""
LAZY_INIT = """\
_EXPORTS = {"ready": "proj.sites.ready"}


def __getattr__(name):
    import importlib
    return getattr(importlib.import_module(_EXPORTS[name]), name)
"""


@pytest.mark.parametrize("guarded", [True, False])
def test_a_predicate_beside_a_method_getattr_is_read_without_parsing_its_module(tmp_path, parsed_files, guarded):
    root = write_tree(tmp_path / "p", {"pyproject.toml": "[tool.dtype-lint]\n", "proj/__init__.py": "",
                                       "proj/util.py": UTIL,
                                       "proj/model.py": HEAD.format(module="util") + (GUARDED if guarded else UNGUARDED)})
    parsed = parsed_files
    findings = json_findings(root, "--select", "DTL003")  # DTL005 reads the helper-shaped `ready`
    assert [f["code"] for f in findings] == ([] if guarded else ["DTL003"])
    assert "util.py" not in parsed, parsed


@pytest.mark.parametrize("guarded", [True, False])
def test_a_lazily_exported_predicate_is_still_followed(tmp_path, monkeypatch, guarded):
    root = write_tree(tmp_path / "p", {"pyproject.toml": "[tool.dtype-lint]\n", "proj/__init__.py": "",
                                       "proj/sites/__init__.py": LAZY_INIT, "proj/sites/ready.py": READY,
                                       "proj/model.py": HEAD.format(module="sites") + (GUARDED if guarded else UNGUARDED)})
    findings = json_findings(root, "--select", "ALL")
    assert [f["code"] for f in findings] == ([] if guarded else ["DTL003"])


@pytest.mark.parametrize(("text", "may"), [
    ("x = 1\n", False),
    ("class A:\n    def __getattr__(self, name):\n        return name\n", False),
    ("s = '__getattr__'  # 2 × 4\n", False),
    ("def __getattr__(name):\n    return name\n", True),
    ("async def __getattr__(name):\n    return name\n", True),
    ("def \\\n__getattr__(name):\n    return name\n", True),
    ("x = 1\r\x0cdef __getattr__(name):\r    return name\r", True),
    ("x = 1\n\x0cdef __getattr__(name):\n    return name\n", True),
    ("def __\uff47etattr__(name):\n    return name\n", True),  # NFKC: `__getattr__`
    ("class A:  # 2 \u00d7 4\n    def __getattr__(self, name):\n        return name\n", False),
])
def test_may_define_getattr_is_false_only_where_no_tree_defines_it(text, may):
    import ast

    assert may_define_getattr(text) is may
    defined = any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__"
                  for node in ast.parse(text).body)
    assert may or not defined  # never False where the tree defines it
