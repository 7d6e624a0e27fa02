"""The rule contract (Fixit-style): one class per rule with its message, the facts it needs, and
VALID/INVALID examples that the test suite runs (`tests/test_rule_examples.py`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import ClassVar, Iterable

from .config import Config
from .facts import FunctionScope, LayerResolver, ProjectFacts
from .findings import Finding
from .source import SourceFile


@dataclass(frozen=True)
class Valid:
    code: str


@dataclass(frozen=True)
class Invalid:
    code: str
    # Expected source after `--fix` (safe fixes only unless unsafe=True); None: no fix expected.
    expected_replacement: str | None = None
    # Substrings every finding's message must contain.
    message_contains: tuple[str, ...] = ()
    count: int = 1
    unsafe: bool = False
    settings: dict = field(default_factory=dict)


@dataclass
class FileContext:
    """What a rule may read about one file. No file system, no output formats."""

    source: SourceFile
    tree: ast.Module
    config: Config
    project: ProjectFacts
    imports: dict[str, str]

    def resolver(self) -> LayerResolver:
        return LayerResolver(self.project, self.source.module, self.imports, self.source.path)


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    # The facts the engine must build before this rule runs (documented, checked by the engine).
    requires: ClassVar[frozenset[str]] = frozenset({"class_index", "attribute_facts", "local_aliases"})
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        raise NotImplementedError


def iter_functions(tree: ast.Module, module: str):
    """(function node, enclosing class qualname or None, scope qualname) for every function."""

    def visit(body, class_q, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                q = f"{prefix}.{node.name}" if prefix else node.name
                yield from visit(node.body, f"{module}.{q}" if module else q, q)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{prefix}.{node.name}" if prefix else node.name
                yield node, class_q, q
                yield from visit(node.body, None, q)
            elif isinstance(node, ast.stmt):  # compound statements: if/for/while/with/try/match
                blocks = [getattr(node, f, None) or [] for f in ("body", "orelse", "finalbody")]
                blocks += [h.body for h in getattr(node, "handlers", None) or []]
                blocks += [c.body for c in getattr(node, "cases", None) or []]
                for block in blocks:
                    yield from visit(block, class_q, prefix)

    yield from visit(tree.body, None, "")


__all__ = ["Rule", "Valid", "Invalid", "FileContext", "FunctionScope", "iter_functions"]
