"""The rule contract (Fixit-style): one class per rule with its message, the facts it needs, and
VALID/INVALID examples that the test suite runs (`tests/test_rule_examples.py`)."""

from __future__ import annotations

import ast
import fnmatch
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import ClassVar, Iterable

from .config import Config
from .facts import FunctionScope, LayerResolver, ProjectFacts
from .findings import Finding, Span
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


def candidate_functions(ctx: FileContext):
    """`iter_functions`, less the functions that cannot hold a weight-dtype site or are exempt.

    Aliases are function-local, so a function with no `weight` on any of its lines cannot hold a
    site: it is skipped without walking its tree. Exempt functions (weight loaders,
    `process_weights_after_loading`...) and methods of exempt classes (quant methods) own the
    storage format by design."""
    cfg = ctx.config
    weight_lines = sorted(i for i, line in enumerate(ctx.source.lines, 1) if "weight" in line)
    for fn, class_q, scope_name in iter_functions(ctx.tree, ctx.source.module):
        i = bisect_left(weight_lines, fn.lineno)
        if i == len(weight_lines) or weight_lines[i] > fn.end_lineno:
            continue
        if any(fnmatch.fnmatch(fn.name, p) for p in cfg.exempt_functions):
            continue
        if class_q and ctx.project.index.exempt_verdict(class_q).yes:
            continue
        yield fn, class_q, scope_name


def span_of(ctx: FileContext, node: ast.AST) -> Span:
    src = ctx.source
    return Span(node.lineno, src.char_col(node.lineno, node.col_offset) + 1,
                node.end_lineno, src.char_col(node.end_lineno, node.end_col_offset) + 1)


__all__ = ["Rule", "Valid", "Invalid", "FileContext", "FunctionScope", "iter_functions", "candidate_functions", "span_of"]
