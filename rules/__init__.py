"""One rule per module, discovered: each `dtlNNN_<name>.py` here defines one `Rule` subclass.

Adding a rule is adding its module (and its tests); nothing else lists rules. The test suite runs
every rule's VALID/INVALID examples, `dtype-lint rule CODE` prints its docstring, the prefilter
takes its `patterns`, and docs/rules/CODE.md is generated from it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

from dtype_lint.rule import Rule


def _discover() -> tuple[type[Rule], ...]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if not re.fullmatch(r"dtl\d{3}_\w+", info.name):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        classes = [v for v in vars(module).values()
                   if isinstance(v, type) and issubclass(v, Rule) and v.__module__ == module.__name__]
        if len(classes) != 1:
            raise ImportError(f"{module.__name__} must define exactly one Rule subclass, found {len(classes)}")
        rule = classes[0]
        if not info.name.startswith(rule.code.lower() + "_"):
            raise ImportError(f"{module.__name__} defines {rule.code}: the module name must start with "
                              f"{rule.code.lower()}_")
        found.append(rule)
    return tuple(sorted(found, key=lambda r: r.code))


ALL_RULES = _discover()
RULES_BY_CODE = {r.code: r for r in ALL_RULES}
