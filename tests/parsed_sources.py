"""The checkout's own Python files, each parsed once per test process.

The house tests (layers, the pipeline's wiring, local names) each walk every module of the package;
parsing is most of their cost, and one module asked the same file's tree once per module it judged.
The trees are shared: a test reads them and never changes them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def parsed(path: Path) -> ast.Module:
    """`path`'s module tree (read-only: every caller in the process gets the same object)."""
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of `path`'s tree in `ast.walk` order: walking is what these tests pay for, once."""
    return tuple(ast.walk(parsed(path)))
