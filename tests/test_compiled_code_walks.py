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


def test_triton_kernels_alone_compile_nothing_and_a_blanked_parent_still_does():
    """`compiled_reason` reads the whole tree of a file that names a compiler, so a scripted
    parent whose methods a reduced parse blanked still carries compilation to the site; a file
    whose only compiler word is Triton's `@triton.jit` is not read at all (no TorchScript there)."""
    from dtype_lint.analysis.compiled_code import compiled_reason
    from dtype_lint.core import trees

    site = "class Attn(torch.nn.Module):\n    def forward(self, x):\n        return x.to(self.proj.weight.dtype)\n"
    parent = ("\n\nclass Block(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.a = 1\n        self.b = 2\n        self.attn = Attn()\n\n"
              "    def forward(self, x):\n        y = x + self.a\n        y = y * self.b\n        y = y - self.a\n"
              "        return self.attn(y)\n\n\ndef build():\n    return torch.jit.script(Block())\n")
    text = "import torch\n\n\n" + site + parent
    tree = trees.parse_reduced("m.py", text, [(6, 6)], lazy_classes=True)
    assert getattr(tree, trees.REMOVED, ())  # Block's bodies are blanked in the tree the rules read
    forward = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.lineno == 5)
    assert "TorchScript" in compiled_reason(text, tree, forward, "get_layer_input_dtype", {})

    kernel = "import torch\nimport triton\n\n\n@triton.jit\ndef kernel(x):\n    pass\n\n\n" + site
    ktree = ast.parse(kernel)
    fn = next(n for n in ast.walk(ktree) if isinstance(n, ast.FunctionDef) and n.name == "forward")
    assert compiled_reason(kernel, ktree, fn, "get_layer_input_dtype", {}) == ""
    scripted = kernel + "\n\ndef build():\n    return torch.jit.script(Attn())\n"
    stree = ast.parse(scripted)
    fn = next(n for n in ast.walk(stree) if isinstance(n, ast.FunctionDef) and n.name == "forward")
    assert "TorchScript" in compiled_reason(scripted, stree, fn, "get_layer_input_dtype", {})
