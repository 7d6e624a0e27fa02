"""The rules' metadata as the reports print it: code, name, summary and the page (`dtype-lint rule
CODE`, docs/rules/CODE.md), read from each rule module's docstring.

Here, below the command line, because the run-time guard's SARIF report needs it as the CLI's
reports do; `cli_output` hands it on without importing it until asked (the fast path's budget).
"""

from __future__ import annotations

import inspect
import sys

from dtype_lint.ecosystems.registry import filled as fill_passages  # the core's slot filling
from dtype_lint.reporters._common import RuleInfo


def rule_infos() -> dict[str, RuleInfo]:
    """Every rule's metadata, by code (imports every rule)."""
    from dtype_lint.rules import ALL_RULES

    return {rule.code: RuleInfo(rule.code, rule.name, rule_summary(rule), rule_doc(rule)) for rule in ALL_RULES}


def rule_doc(rule) -> str:
    """A rule's page: its module docstring, the first line as the title, each `{{name}}` slot filled
    with the ecosystems' passage of that name (the registry's `rule_words` role)."""
    doc = fill_passages(inspect.getdoc(sys.modules[rule.__module__]) or "")
    title, _, body = doc.partition("\n")
    return f"# {title}\n{body}\n"


def rule_summary(rule) -> str:
    """A rule's one-line summary as listings and reports show it: its `{{name}}` slots filled."""
    return fill_passages(rule.summary)

