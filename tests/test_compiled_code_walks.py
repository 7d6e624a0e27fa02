"""CompiledCode (analysis/compiled_code.py) and the storage model read whole trees and function
bodies node by node: through function_walk.walk (ast.walk's nodes, in its order, as a list read
through each class's child fields), not ast.walk's nested generators (vLLM 0.34.0 cold -j1:
22.52 -> 22.44 G instructions). What they conclude is the same (the same nodes in the same order):
the trust tests of compiled code and the storage model's tests read it."""

from __future__ import annotations

import ast

from dtype_lint.analysis.compiled_code import CompiledCode

SOURCE = """\
import torch
from torch.jit import script as sj

helper = sj


class Block(torch.nn.Module):
    def forward(self, x):
        return x.to(self.proj.weight.dtype)


def build():
    block = Block()
    return torch.jit.script(block)
"""


def test_compiled_code_reads_the_tree_without_ast_walk(monkeypatch):
    calls: list[str] = []
    real = ast.walk

    def counted(node):
        calls.append(type(node).__name__)
        return real(node)

    monkeypatch.setattr(ast, "walk", counted)
    tree = ast.parse(SOURCE)
    code = CompiledCode(tree)
    forward = next(n for n in ast.parse(SOURCE).body if isinstance(n, ast.ClassDef)).body[0]
    assert code.why(forward) is not None  # `torch.jit.script(block)`, `block = Block()`: Block is compiled
    # Only the search that stops at the first node found walks lazily (the class holding a scope).
    assert calls == ["ClassDef"], calls
