"""The proof behind the idiom fix: old guard vs. the helper over every storage × flag.

A row is (storage, flag) → (what the old code does, what the helper makes it do): `torch.<dtype>`
(a cast to it), `None` (no cast), or `AttributeError`. The two must agree on every unpacked
storage (fp16, bf16, fp32, fp8); on the packed ones (int32 Marlin, uint8 NVFP4, int8, no
`.weight`) they may differ, and the tables below pin exactly where they do: those differences are
the bug being fixed. The helper side is the real helper: the template's generated code, evaluated
by dtype_eval, and the same code executed with torch agrees with that evaluation.
"""

from __future__ import annotations

import ast

import pytest

from dtype_lint.dtypes.evaluator import FP8, PACKED, PARAMS, STORAGES, Case
from dtype_lint.dtypes.truth_table import INTENDED, prove_guarded_cast
from dtype_lint.fix.helper_template import function_table, helper_source, helper_table

LAYER = "self.kv_b_proj"
ALIAS = f'{LAYER}.weight.dtype if hasattr({LAYER}, "weight") else {LAYER}.params_dtype'
# vLLM 0.27.1's MLA prefill guard (issue #38658), with the platform's fp8 dtype.
GUARD = "(use_fp8 or w != current_platform.fp8_dtype()) and w != torch.uint8"

UNPACKED = ("float16", "bfloat16", "float32", FP8, "float8_e5m2")
FLOATS = ("float16", "bfloat16", "float32")
HELPER = helper_table("pkg.layer_input_dtype", "get_layer_input_dtype", "vllm", None)


def t(dtype: str) -> str:
    return f"torch.{dtype}"


def expr(src: str) -> ast.expr:
    return ast.parse(src, mode="eval").body


def prove(guard: str, cast_to: str, alias: str | None = ALIAS, flag: str | None = "use_fp8", flag_default=True):
    aliases = {"w": expr(alias)} if alias else {}
    return prove_guarded_cast(expr(guard), expr(cast_to), expr(LAYER), aliases, flag, flag_default, HELPER)


def table(rows) -> dict:
    return {(r.storage, r.flag): (r.old, r.new) for r in rows}


# ---- the helper itself ------------------------------------------------------------------------
@pytest.mark.parametrize("template", ["vllm", "torch"])
def test_helper_answers_as_designed(template):
    """The template's own code, evaluated: None means keep the model dtype."""
    table = function_table(helper_source("get_layer_input_dtype", template), "get_layer_input_dtype")
    for flag in (False, True):
        for dt in FLOATS:
            assert table.get(Case(dt, flag)) == t(dt)
        assert table.get(Case(None, flag)) == t(PARAMS)
        assert table.get(Case("int32", flag)) == t(PARAMS)
        assert table.get(Case("int8", flag)) == t(PARAMS)
    # NVFP4 quantizes its own input, from fp16/bf16 only: an fp8 input must be brought back first.
    assert table.get(Case("uint8", False)) == "None"
    assert table.get(Case("uint8", True)) == t(PARAMS)
    assert table.get(Case(FP8, True)) == t(FP8)
    assert table.get(Case(FP8, False)) == "None"


def test_storage_cases_cover_every_packing():
    assert set(STORAGES) == set(UNPACKED) | set(PACKED)
    assert set(PACKED) == {"int32", "uint8", "int8", None}
    assert set(INTENDED) == set(PACKED) | {"float8_e5m2"}


# ---- the two MLA prefill shapes --------------------------------------------------------------
def test_main_path_table():
    """Main path: the alias feeds the guard only; the cast reads `.weight.dtype` again."""
    proven, rows, why = prove(GUARD, f"{LAYER}.weight.dtype")
    assert proven, why
    got = table(rows)
    for flag in (False, True):
        for dt in FLOATS:
            assert got[dt, flag] == (t(dt), t(dt))
        # The differences are the fix: Marlin's int32 and int8 storage, and a layer with no weight.
        assert got["int32", flag] == (t("int32"), t(PARAMS))
        assert got["int8", flag] == (t("int8"), t(PARAMS))
        assert got[None, flag] == ("AttributeError", t(PARAMS))
    assert got[FP8, True] == (t(FP8), t(FP8))
    assert got[FP8, False] == ("None", "None")
    # ... and an fp8 prefill into an NVFP4 layer, which the old guard left fp8.
    assert got["uint8", False] == ("None", "None")
    assert got["uint8", True] == ("None", t(PARAMS))
    assert {(s, f) for (s, f), (old, new) in got.items() if old != new} == {
        (s, f) for s in ("int32", "int8", None) for f in (False, True)} | {("uint8", True)}


def test_context_parallel_path_table():
    """Context-parallel path: the cast reads the alias, so no-weight layers already worked."""
    proven, rows, why = prove(GUARD, "w")
    assert proven, why
    got = table(rows)
    for flag in (False, True):
        assert got[None, flag] == (t(PARAMS), t(PARAMS))
        assert got["int32", flag] == (t("int32"), t(PARAMS))
    assert {s for (s, _f), (old, new) in got.items() if old != new} == {"int32", "int8", "uint8"}


def test_unguarded_cast_table_uses_the_flag_default():
    """A plain `x = x.to(L.weight.dtype)` is the idiom with guard `True`; with no flag in the code
    the helper gets `fp8_input=True` (preserve behaviour): fp8 keeps its cast."""
    proven, rows, why = prove("True", f"{LAYER}.weight.dtype", alias=None, flag=None)
    assert proven, why
    got = table(rows)
    assert set(f for (_s, f) in got) == {True}
    assert got[FP8, True] == (t(FP8), t(FP8))
    assert got["uint8", True] == (t("uint8"), t(PARAMS))
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
    "w.element_size() == 2",
    "is_fp8(w)",
    "w != torch.uint8 and other_flag",
])
def test_guard_that_cannot_be_evaluated_is_refused(guard):
    proven, _rows, why = prove(guard, "w")
    assert not proven
    assert why.startswith("cannot evaluate")


# ---- the symbolic helper is the real one ------------------------------------------------------
@pytest.mark.parametrize("template", ["vllm", "torch"])
def test_evaluated_helper_is_what_the_created_code_does(template, monkeypatch):
    """The proof compares against the template's code as the evaluator reads it; the same code,
    executed with torch on real dtypes, must decide the same in every case."""
    torch = pytest.importorskip("torch")
    import sys
    import types

    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(fp8_dtype=lambda: torch.float8_e4m3fn)
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    source = helper_source("get_layer_input_dtype", template)
    ns: dict = {}
    exec(compile(source, "<helper>", "exec"), ns)
    helper = ns["get_layer_input_dtype"]
    table = function_table(source, "get_layer_input_dtype")

    class Layer:
        params_dtype = getattr(torch, PARAMS)

    for case, want in table.rows:
        layer = Layer()
        if case.storage is not None:
            layer.weight = torch.empty(0, dtype=getattr(torch, case.storage))
        got = helper(layer, case.flag)
        assert ("None" if got is None else str(got)) == want, case


def test_a_mutated_helper_changes_the_proof():
    """The proof reads the helper's code: a helper that forgets integer storages (returns the
    storage dtype, as upstream does for int8) agrees with the buggy idiom on int32, so the rows
    the fix exists for vanish; a helper that casts fp16 inputs to fp32 makes the proof refuse."""
    source = helper_source("get_layer_input_dtype", "vllm")
    forgets_ints = source.replace("    if weight_dtype == torch.int32:\n        return layer.params_dtype\n", "")
    forgets_ints = forgets_ints.replace(
        "    if not (weight_dtype.is_floating_point or weight_dtype.is_complex):\n        return layer.params_dtype\n", "")
    assert forgets_ints.count("params_dtype") < source.count("params_dtype")
    aliases = {"w": expr(ALIAS)}
    proven, rows, _ = prove(GUARD, "w")
    assert proven and not any(r.agrees for r in rows if r.storage == "int32")
    proven, rows, _ = prove_guarded_cast(expr(GUARD), expr("w"), expr(LAYER), aliases, "use_fp8", True,
                                         function_table(forgets_ints, "get_layer_input_dtype"))
    assert proven and all(r.agrees for r in rows if r.storage == "int32")
    assert [r.new for r in rows if r.storage == "int32"] == ["torch.int32", "torch.int32"]
    widened = source.replace("    return weight_dtype\n", "    if weight_dtype == torch.float16:\n"
                             "        return torch.float32\n    return weight_dtype\n")
    proven, _rows, why = prove_guarded_cast(expr(GUARD), expr("w"), expr(LAYER), aliases, "use_fp8", True,
                                            function_table(widened, "get_layer_input_dtype"))
    assert not proven and "float16 weight" in why
