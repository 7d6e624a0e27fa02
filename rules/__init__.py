"""One rule per module, discovered: each `dtlNNN_<name>.py` here defines one `Rule` subclass.

Adding a rule is adding its module (and its tests); nothing else lists rules (`python
scripts/add_rule.py` writes both, CONTRIBUTING.md). The test suite runs every rule's VALID/INVALID
examples, `dtype-lint rule CODE` prints its docstring, the prefilter takes its `patterns`, and
docs/rules/CODE.md is generated from it.

A rule's code is its module's name (`dtl001_...` defines DTL001), and what it declares (default,
facts, fix availability, regions) is read from its text by dtype_lint/core/rule_registry.py, so both
are known without importing a rule, and a run imports only the rules it enables (`enabled`): the
default run's, which spares a pre-commit run the import of the opt-in ones and of what only they
use. `ALL_RULES` and `RULES_BY_CODE` import every rule, on first use.
"""

from __future__ import annotations

import importlib
from functools import lru_cache

from dtype_lint.core.rule_registry import registry
from dtype_lint.rule import Rule


def _modules() -> tuple[tuple[str, str], ...]:
    """(code, module name) of every rule module, by code; nothing imported."""
    return tuple((info.code, info.module) for info in registry())


def codes() -> tuple[str, ...]:
    """Every rule's code, in order, without importing a rule."""
    return tuple(code for code, _ in _modules())


@lru_cache(maxsize=None)
def _rule(code: str, name: str) -> type[Rule]:
    module = importlib.import_module(f"{__name__}.{name}")
    classes = [v for v in vars(module).values()
               if isinstance(v, type) and issubclass(v, Rule) and v.__module__ == module.__name__]
    if len(classes) != 1:
        raise ImportError(f"{module.__name__} must define exactly one Rule subclass, found {len(classes)}")
    rule = classes[0]
    if rule.code != code:
        raise ImportError(f"{module.__name__} defines {rule.code}: the module name must start with "
                          f"{rule.code.lower()}_")
    return rule


def enabled(wanted) -> list[type[Rule]]:
    """The rules whose code `wanted(code)` accepts, in code order; only their modules are imported."""
    return [_rule(code, name) for code, name in _modules() if wanted(code)]


def __getattr__(name: str):
    # Every rule, imported on first use (the documentation, `dtype-lint rule`, the fast path's record).
    value: object
    if name == "ALL_RULES":
        value = tuple(enabled(lambda _code: True))
    elif name == "RULES_BY_CODE":
        value = {r.code: r for r in __getattr__("ALL_RULES")}
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value
