"""The proof behind the idiom fix (DESIGN.md §4): old guard vs. the helper over every storage × flag.

A row is (storage, flag) → (what the old code does, what the helper makes it do): `cast:<dtype>`,
`keep` (no cast), or `AttributeError`. The two must agree on every unpacked storage (fp16, bf16,
fp32, fp8); on the packed ones (int32 Marlin, uint8 NVFP4, int8, no `.weight`) they may differ,
and the tables below pin exactly where they do: those differences are the bug being fixed.
"""

from __future__ import annotations

import ast

import pytest

from dtype_lint.truth_table import FP8, PACKED, PARAMS, STORAGES, helper_answer, prove_guarded_cast

LAYER = "self.kv_b_proj"
ALIAS = f'{LAYER}.weight.dtype if hasattr({LAYER}, "weight") else {LAYER}.params_dtype'
# vLLM 0.27.1's MLA prefill guard (issue #38658), with the platform's fp8 dtype.
GUARD = "(use_fp8 or w != current_platform.fp8_dtype()) and w != torch.uint8"

UNPACKED = ("float16", "bfloat16", "float32", FP8)
FLOATS = ("float16", "bfloat16", "float32")


def expr(src: str) -> ast.expr:
    return ast.parse(src, mode="eval").body


def prove(guard: str, cast_to: str, alias: str | None = ALIAS, flag: str | None = "use_fp8", flag_default=True):
    aliases = {"w": expr(alias)} if alias else {}
    return prove_guarded_cast(expr(guard), expr(cast_to), expr(LAYER), aliases, flag, flag_default)


def table(rows) -> dict:
    return {(r.storage, r.flag): (r.old, r.new) for r in rows}


# ---- the helper itself ------------------------------------------------------------------------
def test_helper_answers_as_designed():
    """DESIGN.md §3, row by row. None means: keep the model dtype."""
    for flag in (False, True):
        for dt in FLOATS:
            assert helper_answer(dt, flag) == dt
        assert helper_answer(None, flag) == PARAMS
        assert helper_answer("int32", flag) == PARAMS
        assert helper_answer("uint8", flag) is None
        assert helper_answer("int8", flag) == PARAMS
    assert helper_answer(FP8, True) == FP8
    assert helper_answer(FP8, False) is None


def test_storage_cases_cover_every_packing():
    assert set(STORAGES) == set(UNPACKED) | set(PACKED)
    assert set(PACKED) == {"int32", "uint8", "int8", None}


# ---- the two MLA prefill shapes --------------------------------------------------------------
def test_main_path_table():
    """Main path: the alias feeds the guard only; the cast reads `.weight.dtype` again."""
    proven, rows, why = prove(GUARD, f"{LAYER}.weight.dtype")
    assert proven, why
    got = table(rows)
    for flag in (False, True):
        for dt in FLOATS:
            assert got[dt, flag] == (f"cast:{dt}", f"cast:{dt}")
        assert got["uint8", flag] == ("keep", "keep")
        # The differences are the fix: Marlin's int32 and int8 storage, and a layer with no weight.
        assert got["int32", flag] == ("cast:int32", f"cast:{PARAMS}")
        assert got["int8", flag] == ("cast:int8", f"cast:{PARAMS}")
        assert got[None, flag] == ("AttributeError", f"cast:{PARAMS}")
    assert got[FP8, True] == (f"cast:{FP8}", f"cast:{FP8}")
    assert got[FP8, False] == ("keep", "keep")
    assert {(s, f) for (s, f), (old, new) in got.items() if old != new} == {
        (s, f) for s in ("int32", "int8", None) for f in (False, True)}


def test_context_parallel_path_table():
    """Context-parallel path: the cast reads the alias, so no-weight layers already worked."""
    proven, rows, why = prove(GUARD, "w")
    assert proven, why
    got = table(rows)
    for flag in (False, True):
        assert got[None, flag] == (f"cast:{PARAMS}", f"cast:{PARAMS}")
        assert got["int32", flag] == ("cast:int32", f"cast:{PARAMS}")
    assert {s for (s, _f), (old, new) in got.items() if old != new} == {"int32", "int8"}


def test_unguarded_cast_table_uses_the_flag_default():
    """A plain `x = x.to(L.weight.dtype)` is the idiom with guard `True`; with no flag in the code
    the helper gets `fp8_input=True` (preserve behaviour): fp8 keeps its cast."""
    proven, rows, why = prove("True", f"{LAYER}.weight.dtype", alias=None, flag=None)
    assert proven, why
    got = table(rows)
    assert set(f for (_s, f) in got) == {True}
    assert got[FP8, True] == (f"cast:{FP8}", f"cast:{FP8}")
    assert got["uint8", True] == ("cast:uint8", "keep")
    assert {s for (s, _f), (old, new) in got.items() if old != new} == {"int32", "uint8", "int8", None}


@pytest.mark.parametrize("guard", [
    "(use_fp8 or w != torch.float8_e4m3fn) and w != torch.uint8",
    "w != torch.uint8 and (use_fp8 or w != current_platform.fp8_dtype())",
    "w not in (torch.uint8,) and (use_fp8 or not w == torch.float8_e4m3fn)",
    "(use_fp8 or w != current_platform.fp8_dtype())",  # uint8 may differ: it is packed
])
def test_equivalent_spellings_are_proven(guard):
    proven, rows, why = prove(guard, "w")
    assert proven, why
    assert all(r.agrees for r in rows if r.storage in UNPACKED)


# ---- refusals ---------------------------------------------------------------------------------
@pytest.mark.parametrize("guard,cast_to,needle", [
    # Skips the fp16 cast the helper would make.
    ("w != torch.float16", "w", "float16 weight"),
    # Negated flag: casts fp8 exactly when fp8 input is off.
    ("(not use_fp8 or w != torch.float8_e4m3fn) and w != torch.uint8", "w", f"{FP8} weight"),
    # Ignores the flag: casts fp8 inputs the helper leaves alone when fp8 input is off.
    ("w != torch.uint8", "w", f"{FP8} weight with flag=False"),
    # Casts to something that is not the weight dtype.
    ("w != torch.uint8", "torch.float32", "float16 weight"),
])
def test_disagreeing_guard_is_refused_with_a_reason(guard, cast_to, needle):
    proven, rows, why = prove(guard, cast_to)
    assert not proven
    assert "the guard disagrees with the helper" in why and needle in why
    assert any(not r.agrees and r.storage in UNPACKED for r in rows)


@pytest.mark.parametrize("guard", [
    "w.itemsize == 2",
    "is_fp8(w)",
    "w != torch.uint8 and other_flag",
])
def test_guard_that_cannot_be_evaluated_is_refused(guard):
    proven, _rows, why = prove(guard, "w")
    assert not proven
    assert why.startswith("cannot evaluate")


# ---- the symbolic helper is the real one ------------------------------------------------------
def test_symbolic_helper_matches_the_torch_template():
    """helper_answer() is what the proof compares against; the code `--fix` creates (torch
    template) must decide the same on real dtypes."""
    torch = pytest.importorskip("torch")
    from dtype_lint.helper_template import helper_source

    ns: dict = {}
    exec(compile(helper_source("get_layer_input_dtype", "torch"), "<helper>", "exec"), ns)
    helper = ns["get_layer_input_dtype"]

    class Layer:
        params_dtype = getattr(torch, PARAMS)

    for storage in STORAGES:
        layer = Layer()
        if storage is not None:
            layer.weight = torch.empty(0, dtype=getattr(torch, storage))
        for flag in (False, True):
            got = helper(layer, flag)
            want = helper_answer(storage, flag)
            assert got == (None if want is None else getattr(torch, want)), (storage, flag)
