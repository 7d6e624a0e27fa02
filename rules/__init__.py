"""One rule per module, discovered: each `dtlNNN_<name>.py` here defines one `Rule` subclass.

Adding a rule is adding its module (and its tests); nothing else lists rules. The test suite runs
every rule's VALID/INVALID examples, `dtype-lint rule CODE` prints its docstring, the prefilter
takes its `patterns`, and docs/rules/CODE.md is generated from it.

A rule's code is its module's name (`dtl001_...` defines DTL001), so the codes are known without
importing a rule, and a run imports only the rules it enables (`enabled`): the default run's two
of five, which spares a pre-commit run the import of the others and of what only they use.
`ALL_RULES` and `RULES_BY_CODE` import every rule, on first use.
"""

from __future__ import annotations

import importlib
import re
from functools import lru_cache

from dtype_lint.rule import Rule

_MODULE_NAME = re.compile(r"dtl\d{3}_\w+")


@lru_cache(maxsize=1)
def _modules() -> tuple[tuple[str, str], ...]:
    """(code, module name) of every rule module, by code; nothing imported."""
    import pkgutil

    return tuple(sorted((info.name[:6].upper(), info.name) for info in pkgutil.iter_modules(__path__)
                        if _MODULE_NAME.fullmatch(info.name)))


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
