"""The dtype evaluator: helpers read open (unknowns explored both ways), guards read strictly.

Each case is (storage of `layer.weight`, fp8-input flag); a helper's entry is what every path of
that case returns. These tests pin the interpreter's rules on small helpers written here; the
tables of the real template are pinned in test_truth_table.py and test_helper_template.py.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from dtype_lint.dtypes.evaluator import (
    MAX_PATHS,
    Case,
    Unsupported,
    alternatives,
    evaluate_guarded_cast,
    evaluate_helper,
    helper_shape,
    possibly_unsound_cases,
    summarize_cases,
    unsound_cases,
)


def fn_of(src: str, name: str | None = None):
    tree = ast.parse(textwrap.dedent(src))
    fns = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    fn = fns[0] if name is None else next(f for f in fns if f.name == name)
    return fn, tree


def table_of(src: str, name: str | None = None):
    fn, tree = fn_of(src, name)
    return evaluate_helper(fn, tree)


# A helper of upstream's shape with an extra branch on the layer's quant method, which the
# evaluator cannot know: written here, not copied.
QUANT_METHOD_BRANCH = """
import torch
from vllm.platforms import current_platform
from somewhere import BlockFp8Method

def input_dtype(layer, fp8_input):
    w = getattr(layer, "weight", None)
    wd = w.dtype if w is not None else layer.params_dtype
    if wd == torch.int32:
        return layer.params_dtype
    if wd == torch.uint8:
        return None
    if wd == current_platform.fp8_dtype():
        from somewhere_else import describe  # an import inside the function: its names are unknown
        qm = getattr(layer, "quant_method", None)
        if isinstance(qm, BlockFp8Method):
            return qm.input_dtype
        if not fp8_input:
            return None
    return wd
"""


def test_unknown_branch_is_explored_both_ways():
    t = table_of(QUANT_METHOD_BRANCH)
    assert t.get(Case("float8_e4m3fn", False)) == "None or unknown `qm.input_dtype`"
    assert t.get(Case("float8_e4m3fn", True)) == "torch.float8_e4m3fn or unknown `qm.input_dtype`"
    # Cases the unknown does not reach are definite.
    assert t.get(Case("bfloat16", True)) == "torch.bfloat16"
    assert t.get(Case("int8", False)) == "torch.int8"
    assert t.get(Case(None, True)) == "torch.bfloat16"


def test_definite_and_possible_unsound_cases():
    t = table_of(QUANT_METHOD_BRANCH)
    assert [(c.storage, c.flag, v) for c, v in unsound_cases(t)] == [
        ("uint8", True, "None"), ("int8", False, "torch.int8"), ("int8", True, "torch.int8")]
    assert possibly_unsound_cases(t) == []
    assert summarize_cases(unsound_cases(t), t.flags) == [
        "uint8 storage, fp8_input=True → returns None (keeps the fp8 activation)",
        "int8 storage → returns torch.int8"]
    maybe = table_of("""
        import torch
        def f(layer, fp8_input):
            if layer.quant_method.packs_int8:
                return layer.weight.dtype
            return layer.params_dtype
    """)
    assert unsound_cases(maybe) == []
    assert {c.storage for c, _ in possibly_unsound_cases(maybe)} == {"int32", "uint8", "int8", None}
    assert alternatives(maybe.get(Case("int8", True))) == ("torch.bfloat16", "torch.int8")


@pytest.mark.parametrize("storage", ["int32", "uint8", "int8", None])
def test_none_for_packed_storage_is_wrong_only_when_the_input_may_be_fp8(storage):
    """None means "keep the activation": right for a bf16 activation, wrong for an fp8 one, which
    reaches a kernel that quantizes its own fp16/bf16 input (NVFP4) or takes only fp16/bf16."""
    t = table_of("def f(layer, fp8_input):\n    return None if hasattr(layer, 'weight') else None\n")
    bad = {(c.storage, c.flag) for c, _ in unsound_cases(t)}
    assert (storage, True) in bad and (storage, False) not in bad
    assert ("bfloat16", True) not in bad
    no_flag = table_of("def f(layer):\n    return None if hasattr(layer, 'weight') else None\n")
    assert unsound_cases(no_flag) == []


def test_an_unknown_is_decided_once_per_path():
    """`c and not c` never holds: the same unknown takes one value along a path."""
    t = table_of("""
        import torch
        def f(layer, fp8_input):
            if layer.quant_method.flag and not layer.quant_method.flag:
                return torch.int8
            return layer.params_dtype
    """)
    assert unsound_cases(t) == [] and possibly_unsound_cases(t) == []
    assert {v for _, v in t.rows} == {"torch.bfloat16"}


def test_the_flag_names_only_cases_it_decides():
    t = table_of("""
        import torch
        def f(layer, fp8_input):
            if layer.weight.dtype == torch.uint8 and fp8_input:
                return torch.uint8
            return layer.params_dtype
    """)
    bad = unsound_cases(t)
    assert summarize_cases(bad, t.flags) == ["uint8 storage, fp8_input=True → returns torch.uint8",
                                             "no `.weight` → raises AttributeError"]


def test_raise_and_assert_are_outcomes():
    t = table_of("""
        import torch
        def f(layer, fp8_input):
            assert layer.weight.dtype != torch.int8, "no int8"
            if layer.weight.dtype == torch.int32:
                raise ValueError("marlin")
            return layer.weight.dtype
    """)
    assert t.get(Case("int8", True)) == "AssertionError"
    assert t.get(Case("int32", True)) == "raise ValueError"
    assert t.get(Case(None, True)) == "AttributeError"
    assert [c.storage for c, _ in unsound_cases(t)] == ["uint8", "uint8", None, None]


def test_too_many_paths_is_no_answer():
    branches = "".join(f"    if layer.quant_method.f{i}:\n        x = 1\n" for i in range(8))
    src = f"import torch\ndef f(layer, fp8_input):\n{branches}    return layer.params_dtype\n"
    with pytest.raises(Unsupported, match=f"more than {MAX_PATHS} paths"):
        table_of(src)


def test_code_beyond_the_interpreter_is_no_answer_even_open():
    with pytest.raises(Unsupported):
        table_of("""
            def f(layer, fp8_input):
                for x in range(3):
                    pass
                return layer.params_dtype
        """)


@pytest.mark.parametrize("src,shape", [
    ("def f(layer, fp8):\n    return layer.weight.dtype\n", ("layer", "fp8")),
    ("def f(self, layer):\n    return getattr(layer, 'weight', None)\n", ("layer", None)),
    ("def f(layer, flag, extra):\n    return layer.params_dtype if flag else None\n", ("layer", "flag")),
    # The weight read must be the layer parameter's, not some other object's.
    ("def f(x, flag):\n    return self.proj.weight.dtype\n", None),
    ("def f(layer, fp8):\n    layer.weight.dtype\n", None),  # returns nothing
    ("def f():\n    return w.weight.dtype\n", None),
    ("def f(a, b, c, d):\n    return a.weight.dtype\n", None),
])
def test_helper_shape(src, shape):
    got = helper_shape(fn_of(src)[0])
    assert (None if got is None else (got.layer_param, got.flag_param)) == shape


def test_extra_parameters_are_unknown():
    t = table_of("""
        import torch
        def f(layer, fp8_input, default):
            if layer.weight.dtype == torch.int8:
                return default
            return layer.params_dtype
    """)
    assert t.get(Case("int8", False)) == "unknown `default`"


def test_guards_stay_strict():
    """The idiom proof must not pass on a guard it could not read: unknowns raise there."""
    guard = ast.parse("w != torch.uint8 and self.kv_b_proj.quant_method.ok", mode="eval").body
    with pytest.raises(Unsupported):
        evaluate_guarded_cast(guard, ast.parse("w", mode="eval").body, ast.parse("self.kv_b_proj", mode="eval").body,
                              {"w": ast.parse("self.kv_b_proj.weight.dtype", mode="eval").body}, None, (True,))


def test_module_constants_and_imports():
    t = table_of("""
        import torch
        from vllm.platforms import current_platform
        from elsewhere import SPECIAL
        _PACKED = (torch.int32, torch.uint8)
        FP8 = current_platform.fp8_dtype()

        def f(layer, fp8_input):
            wd = layer.weight.dtype if hasattr(layer, "weight") else layer.params_dtype
            if wd in _PACKED:
                return layer.params_dtype
            if wd == FP8 and not fp8_input:
                return None
            if wd == SPECIAL:
                return None
            return wd
    """)
    assert t.get(Case("int32", True)) == "torch.bfloat16"
    assert t.get(Case("float8_e4m3fn", False)) == "None"
    # `SPECIAL` is unknown: int8 storage may equal it (None) or not (torch.int8).
    assert t.get(Case("int8", True)) == "None or torch.int8"


def test_interpreters_sharing_dumps_still_find_the_layer_by_its_node():
    from dtype_lint.dtypes.evaluator import Case, Interpreter, Layer

    layer = ast.parse("self.proj", mode="eval").body
    other = ast.parse("self.other", mode="eval").body
    # A stale entry under the layer node's id (another node once had it): the dump is taken again.
    dumps = {id(layer): (other, ast.dump(other))}
    for storage in ("fp16", "int32"):
        interp = Interpreter(Case(storage, False), {}, None, {ast.dump(layer)}, dumps=dumps)
        assert isinstance(interp.ev(layer), Layer)
    assert dumps[id(layer)] == (layer, ast.dump(layer))
