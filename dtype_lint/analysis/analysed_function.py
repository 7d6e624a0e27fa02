"""What the analysis reads of one function the rules walk (a rule.Candidate), as a Protocol.

The rule layer sits above analysis (tests/test_layers.py), so the class itself is not imported
here: the value-flow and guard modules that take candidates name this shape instead, and any
object with these attributes (a rule.Candidate is one) type-checks as one.
"""

from __future__ import annotations

import ast
from typing import Protocol

from dtype_lint.analysis.function_walk import FunctionWalk
from dtype_lint.analysis.index.class_facts import FunctionScope


class AnalysedFunction(Protocol):
    """A function of a file with its class, its scope and its one walk (rule.Candidate)."""

    @property
    def fn(self) -> ast.FunctionDef | ast.AsyncFunctionDef: ...

    @property
    def class_qualname(self) -> str | None: ...

    @property
    def scope_name(self) -> str: ...

    @property
    def walk(self) -> FunctionWalk: ...

    @property
    def scope(self) -> FunctionScope: ...

    @property
    def parents(self) -> dict[int, ast.AST]: ...
