"""Prove a guarded-cast idiom equivalent to the shared helper before rewriting it.

The old code is `alias = <weight dtype, maybe with a hasattr fallback>; if <guard>: x = x.to(<dtype>)`.
Both it and the helper (the configured one, evaluated from its own source; see dtype_eval.py) are
evaluated over every storage × flag. They must agree on every storage the old code handles
correctly; where they differ is the fix itself: the packed storages (int32 repacks, uint8 4-bit
codes, int8, no `.weight`: dtypes/storage_formats.py), and fp8 storages other than the platform's
(e5m2: the torch template treats every fp8 dtype alike; no shipped vLLM backend stores linear
weights as e5m2).
"""

from __future__ import annotations

import ast

from dtype_lint.core.records import record
from dtype_lint.dtypes.evaluator import FP8, PACKED, UNPACKED, Case, Table, Unsupported, evaluate_guarded_cast

# Storages where the helper may decide differently from the old code: that difference is the fix.
INTENDED = PACKED + ("float8_e5m2",)


@record(frozen=True)
class Row:
    """One storage and flag: what the old code and the helper give, and whether they agree."""
    storage: str | None
    flag: bool
    old: str  # "torch.<dtype>" (cast) | "None" (no cast) | "AttributeError"
    new: str
    agrees: bool


def prove_guarded_cast(guard: ast.expr, cast_dtype: ast.expr, layer: ast.expr, aliases: dict[str, ast.expr],
                       flag_name: str | None, flag_default: bool, helper: Table,
                       unpacked: Table | None = None) -> tuple[bool, list[Row], str]:
    """(proven, truth table, reason when not proven). `unpacked`: the helper's table over the
    storages that are not packed (UNPACKED: float64 and complex too), which the guard must then
    agree with as well."""
    flags = (False, True) if flag_name else (flag_default,)
    try:
        old = evaluate_guarded_cast(guard, cast_dtype, layer, aliases, flag_name, flags)
        extra = evaluate_guarded_cast(guard, cast_dtype, layer, aliases, flag_name, flags, storages=UNPACKED) \
            if unpacked is not None else Table(())
    except Unsupported as error:
        return False, [], f"cannot evaluate `{error}` symbolically"
    rows = []
    for table, old_table in ((helper, old), (unpacked, extra)):
        for case, was in old_table.rows:
            now = _decision(table, Case(case.storage, case.flag if flag_name else flag_default))
            rows.append(Row(case.storage, case.flag, was, now, was == now))
    bad = [r for r in rows if not r.agrees and r.storage not in INTENDED]
    if bad:
        r = bad[0]
        return False, rows, (f"the guard disagrees with the helper for a {r.storage} weight with flag={r.flag} "
                             f"(old: {r.old}, helper: {r.new})")
    return True, rows, ""


def _decision(table: Table | None, case: Case) -> str:
    """The table's decision for `case` ('unknown' when it has no such row: a helper without the
    fp8 flag is asked with flag False)."""
    if table is None:
        return "unknown"
    for probe in (case, Case(case.storage, False)):
        try:
            return table.get(probe)
        except KeyError:
            continue
    return "unknown"


def unpacked_storages(fp8_input: bool) -> tuple[str, ...]:
    """The storages on which a fix must cast exactly as `x.to(L.weight.dtype)` did: every one
    that is not packed, and fp8 where the fix passes fp8_input=True (with False, the fix's own
    unsafe reason says fp8 casts change)."""
    return UNPACKED + ((FP8, "float8_e5m2") if fp8_input else ())


def cast_disagreements(unpacked: Table | None, fp8_input: bool) -> list[str]:
    """Where `v = helper(L, fp8_input); if v is not None: x = x.to(v)` does not cast as
    `x = x.to(L.weight.dtype)` did, storage by storage; ["beyond the dtype evaluator"] when the
    helper cannot be evaluated (unproven is not proven)."""
    if unpacked is None:
        return ["its code is beyond the dtype evaluator"]
    out = []
    for storage in unpacked_storages(fp8_input):
        now = _decision(unpacked, Case(storage, fp8_input))
        if now != f"torch.{storage}":
            out.append(f"{storage} → {now} (the cast gave torch.{storage})")
    return out
