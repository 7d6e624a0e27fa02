"""What a storage verdict says, apart from the model that computes it (storage_model.py): what a
rule asks for, how a verdict's evidence names the backends behind it, and how it says that they
could not be read.

The rules and the layer resolver read these in every run; the storage model itself (its
dataclasses, the storage formats' table) is imported only where a storage is computed, which a
pre-commit run whose storages all come from the kept answers never does (13.5 M instructions of
the edited run's 748 M, benchmarks/results/precommit/README.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from dtype_lint.core.findings import Evidence

# Storage kinds (ABSENT, PACKED, FP8, COMPUTE, UNKNOWN): the storage formats' table names them.
# What a rule asks for: a storage that is not the compute dtype (casts, allocations), or none at all.
NON_COMPUTE = "non-compute"
# The evidence of a storage starts with this, so a message can name the backends (`why_storage`).
BACKEND_MARK = "backend: "
# A verdict that reports a layer whose backends could not be read (CodeBackends.undispatched).
UNKNOWN_BACKENDS = "which backends reach it cannot be told"


def backends_unknown(evidence) -> bool:
    """Does this verdict's evidence say the layer's backends could not be read? No helper is then
    proven to run on its layers (the shared template reads the layer's model dtype attribute): no fix
    is offered."""
    return any(e.message.startswith(BACKEND_MARK + UNKNOWN_BACKENDS) for e in evidence or ())


def why_storage(evidence: Iterable[Evidence], default: str) -> str:
    """The backends behind a finding, for its message ("Fp8 (fp8.py:345) registers `weight` as
    fp8; AutoAWQ (auto_awq.py:517) registers `qweight`, not `weight`"); `default` when the
    evidence names none (the model did not know the layer's backends)."""
    parts = [_release_reason().sub(r"\1)", e.message[len(BACKEND_MARK):])
             for e in evidence if e.message.startswith(BACKEND_MARK)]
    if not parts:
        return default
    return "; ".join(parts[:2]) + (f"; +{len(parts) - 2} more" if len(parts) > 2 else "")


@cache
def _release_reason() -> re.Pattern[str]:
    """A catalogue's backend names its release and why it was chosen (`... in vllm 0.34.0, the
    release pyproject.toml pins)`, analysis/storage/catalogue.py). The message keeps the release;
    the reason stays in the evidence lines: said once per backend, it would fill the message's
    first line. Compiled on first use (only a finding's message reads it)."""
    return re.compile(r"( in [\w.-]+ \d[\w.+-]*), [^()]*\)")
