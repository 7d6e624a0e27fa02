"""The run-time guard (issue #38): watch torch while a model runs and report each place where an
activation is cast to, a buffer allocated in, or `finfo` asked of a quantized layer's packed
storage dtype, or a `.weight` is read on a quantized layer that has none.

    from dtype_lint.guard import DtypeGuard
    with DtypeGuard(model) as guard:
        model(**inputs)
    guard.sites  # [GuardSite(path, line, function, kind, layer_path, layer_class, quantizer, ...)]

Also a pytest plugin: `pytest -p dtype_lint.guard` (strict by default: a test that triggers the
signature fails), `--dtype-guard=report --dtype-guard-report=guard.json` (JSON and SARIF).
docs/guard.md says what is watched and how.
"""

from __future__ import annotations

from dtype_lint.guard.site import KINDS, RULE_BY_KIND, GuardSite
from dtype_lint.guard.watch import DtypeGuard, DtypeGuardError

__all__ = ["KINDS", "RULE_BY_KIND", "DtypeGuard", "DtypeGuardError", "GuardSite"]

try:  # `pytest -p dtype_lint.guard` registers this module: its hooks must be attributes here.
    import pytest as _pytest  # noqa: F401 - only to know that the plugin can load
except ImportError:  # the guard itself needs no pytest
    pass
else:
    from dtype_lint.guard.plugin import (  # noqa: F401 - pytest hooks
        pytest_addoption,
        pytest_configure,
        pytest_runtest_call,
        pytest_sessionfinish,
        pytest_terminal_summary,
    )
