"""Prove a guarded-cast idiom equivalent to the shared helper before rewriting it.

The old code is `alias = <weight dtype, maybe with a hasattr fallback>; if <guard>: x = x.to(<dtype>)`.
Both it and the helper (the configured one, evaluated from its own source; see dtype_eval.py) are
evaluated over every storage × flag. They must agree on every storage the old code handles
correctly; where they differ is the fix itself: the packed storages (int32 Marlin, uint8 NVFP4,
int8, no `.weight`), and fp8 storages other than the platform's (e5m2: the torch template treats
every fp8 dtype alike; no shipped vLLM backend stores linear weights as e5m2).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from dtype_lint.dtypes.evaluator import PACKED, Case, Table, Unsupported, evaluate_guarded_cast

# Storages where the helper may decide differently from the old code: that difference is the fix.
INTENDED = PACKED + ("float8_e5m2",)


@dataclass(frozen=True)
class Row:
    """One storage and flag: what the old code and the helper give, and whether they agree."""
    storage: str | None
    flag: bool
    old: str  # "torch.<dtype>" (cast) | "None" (no cast) | "AttributeError"
    new: str
    agrees: bool


def prove_guarded_cast(guard: ast.expr, cast_dtype: ast.expr, layer: ast.expr, aliases: dict[str, ast.expr],
                       flag_name: str | None, flag_default: bool, helper: Table) -> tuple[bool, list[Row], str]:
    """(proven, truth table, reason when not proven)."""
    flags = (False, True) if flag_name else (flag_default,)
    try:
        old = evaluate_guarded_cast(guard, cast_dtype, layer, aliases, flag_name, flags)
    except Unsupported as e:
        return False, [], f"cannot evaluate `{e}` symbolically"
    rows = []
    for case, was in old.rows:
        now = helper.get(Case(case.storage, case.flag if flag_name else flag_default))
        rows.append(Row(case.storage, case.flag, was, now, was == now))
    bad = [r for r in rows if not r.agrees and r.storage not in INTENDED]
    if bad:
        r = bad[0]
        return False, rows, (f"the guard disagrees with the helper for a {r.storage} weight with flag={r.flag} "
                             f"(old: {r.old}, helper: {r.new})")
    return True, rows, ""
