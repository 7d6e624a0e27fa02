"""What a fix's name check costs, and that the cheaper check still refuses what the whole one did (#37).

libcst's scope analysis of whole rewritten modules was 53% of a `--fix` run on vLLM 0.27.1. It
now reads only the top-level imports and the functions a new variable is assigned in (with the
headers of their classes), every other line left empty; the helper's name is counted on the
whole `ast` tree instead. These tests hold both halves: the text libcst reads is the touched
functions only, and a fix whose helper or variable would shadow, or be shadowed by, a name in
code libcst no longer reads is still refused.
"""

from __future__ import annotations

import pytest

libcst = pytest.importorskip("libcst")

from dtype_lint.api import fix_source  # noqa: E402
from dtype_lint.core.findings import Edit, Finding, Fix, Span  # noqa: E402
from dtype_lint.fix import scope_check  # noqa: E402
from dtype_lint.fix.fixer import fix_text  # noqa: E402
from dtype_lint.fix.scope_check import FixCheckError, verify_names  # noqa: E402

HELPER_MODULE = "vllm.model_executor.layers.quantization.utils.layer_input_dtype"

# A guarded idiom the planner proves equal to the helper: the fix assigns a new variable.
GUARDED = '''\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear
from vllm.platforms import current_platform

MODULE_LEVEL_MARKER = 1


{prefix}class Attn(torch.nn.Module):
{indent}    """UNTOUCHED_DOCSTRING_MARKER"""

{indent}    def __init__(self, quant_config, prefix: str):
{indent}        super().__init__()
{indent}        self.kv_b_proj = ColumnParallelLinear(8, 8, quant_config=quant_config, prefix=prefix)

{indent}    def unrelated(self, total):
{indent}        untouched_body_marker = total + 1
{indent}        return untouched_body_marker

{indent}    def forward(self, x, use_fp8_prefill: bool):
{indent}        w_dtype = (
{indent}            self.kv_b_proj.weight.dtype
{indent}            if hasattr(self.kv_b_proj, "weight")
{indent}            else self.kv_b_proj.params_dtype
{indent}        )
{indent}        if (use_fp8_prefill or w_dtype != current_platform.fp8_dtype()) and w_dtype != torch.uint8:
{indent}            x = x.to(w_dtype)
{indent}        return x


def module_function(total):
    another_untouched_marker = total * 2
    return another_untouched_marker
'''


def _texts_libcst_reads(monkeypatch) -> list[str]:
    seen: list[str] = []
    original = libcst.parse_module

    def spy(source, *args, **kwargs):
        seen.append(source)
        return original(source, *args, **kwargs)

    monkeypatch.setattr(libcst, "parse_module", spy)
    return seen


def _in_order(part: list[str], whole: list[str]) -> bool:
    """Is `part` a subsequence of `whole`?"""
    rest = iter(whole)
    return all(any(line == candidate for candidate in rest) for line in part)


def test_libcst_reads_only_the_imports_and_the_touched_function(monkeypatch):
    seen = _texts_libcst_reads(monkeypatch)
    fixed = fix_source(GUARDED.format(prefix="", indent=""), filename="m.py")
    assert "kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)" in fixed
    assert len(seen) == 1  # the rewritten file, parsed by libcst once
    read = seen[0]
    # Every line libcst reads is a line of the fixed module, in its order; the others are left
    # out, not left empty (empty lines were most of libcst's work on vLLM's modules, #37).
    assert _in_order(read.splitlines(), fixed.splitlines())
    assert "" not in read.splitlines()
    assert f"from {HELPER_MODULE} import get_layer_input_dtype" in read
    assert "class Attn(torch.nn.Module):" in read and "def forward(self, x, use_fp8_prefill: bool):" in read
    assert "x = x.to(kv_b_proj_input_dtype)" in read
    for untouched in ("UNTOUCHED_DOCSTRING_MARKER", "untouched_body_marker", "another_untouched_marker",
                      "MODULE_LEVEL_MARKER", "def __init__", "def unrelated"):
        assert untouched not in read, untouched


def test_a_touched_class_under_an_if_keeps_the_module_and_blanks_the_other_bodies(monkeypatch):
    """A class defined under `if`: its header needs the branch around it, so the other function
    bodies are blanked instead and the rest of the module kept; the fix is the same."""
    seen = _texts_libcst_reads(monkeypatch)
    plain = fix_source(GUARDED.format(prefix="", indent=""), filename="m.py")
    seen.clear()
    nested = GUARDED.format(prefix="if torch.cuda.is_available() or True:\n    ", indent="    ")
    fixed = fix_source(nested, filename="m.py")
    assert "kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)" in fixed
    assert fixed.count("kv_b_proj_input_dtype") == plain.count("kv_b_proj_input_dtype") == 3
    read = seen[0]
    assert "MODULE_LEVEL_MARKER" in read and "UNTOUCHED_DOCSTRING_MARKER" in read
    assert "untouched_body_marker" not in read and "another_untouched_marker" not in read
    assert "x = x.to(kv_b_proj_input_dtype)" in read


# --- the shadowing a blanked body could hide is still refused ---------------------------------------


def _finding(*, scope="f", binds=(), local="h", edits=()) -> Finding:
    return Finding("DTL001", "m", "t.py", Span(1, 1, 1, 2), scope=scope,
                   fix=Fix("d", True, tuple(edits), (("m", "h"),), aliases=(local,), binds=binds))


FIXED_WITH_VARIABLE = ("from m import h\n\n\ndef f(self, x):\n    v = h(self.p, True)\n    if v is not None:\n"
                       "        x = x.to(v)\n    return x\n")
ORIGINAL = "from m import h\n\n\ndef f(self, x):\n    return x\n"


@pytest.mark.parametrize("elsewhere", [
    "def g(h):\n    return h\n",  # a parameter
    "def g():\n    h = 1\n    return h\n",  # a local
    "def g():\n    global h\n    h = None\n",  # a global rebinding
    "def g():\n    def h():\n        pass\n    return h\n",  # a nested definition
    "def g():\n    try:\n        pass\n    except ValueError as h:\n        pass\n",  # an exception capture
    "def g():\n    from n import h\n    return h\n",  # an import in a function
    "class C:\n    def g(self):\n        for h in range(3):\n            pass\n",  # a loop target in a method
])
def test_a_helper_name_bound_in_a_body_libcst_no_longer_reads_is_refused(elsewhere):
    fixed = FIXED_WITH_VARIABLE + "\n\n" + elsewhere
    with pytest.raises(FixCheckError, match="binds `h` [23] times"):  # `global h` and its store: 3
        verify_names(ORIGINAL + "\n\n" + elsewhere, fixed, [_finding(binds=("v",))])


def test_an_expression_fix_whose_helper_import_a_local_would_shadow_is_refused_and_the_file_kept():
    """The fix reads no variable, so libcst reads the imports alone: the local `h` in another
    function is found on the whole tree, and the file stays as it was."""
    text = ("from m import h\n\n\ndef f(self, x):\n    return x.to(self.p.weight.dtype)\n\n\n"
            "def g(total):\n    h = total\n    return h\n")
    start = text.index("self.p.weight.dtype")
    bad = Finding("DTL001", "m", "t.py", Span(5, 17, 5, 36), scope="f",
                  fix=Fix("d", True, (Edit(start, start + len("self.p.weight.dtype"), "h(self.p, True) or x.dtype"),),
                          (("m", "h"),), aliases=("h",)))
    out = fix_text("t.py", text, lambda t: [bad] if t == text else [], unsafe=False)
    assert out.error and "binds `h` 2 times" in out.error and out.text == text
    assert [f.code for f in out.remaining] == ["DTL001", "DTL901"]


def test_a_variable_assigned_twice_in_a_touched_nested_function_is_refused():
    fixed = ("from m import h\n\n\ndef f(self, x):\n    def inner(x):\n        v = h(self.p, True)\n"
             "        if v is not None:\n            x = x.to(v)\n        v = 2\n        return x\n    return inner(x)\n")
    with pytest.raises(FixCheckError, match="not assigned exactly once"):
        verify_names("from m import h\n\n\ndef f(self, x):\n    def inner(x):\n        return x\n    return inner(x)\n",
                     fixed, [_finding(scope="f.inner", binds=("v",))])


def test_a_variable_in_a_method_of_a_nested_class_is_checked_by_libcst(monkeypatch):
    """The touched method's class headers are kept, so libcst names the scope as the planner does."""
    seen = _texts_libcst_reads(monkeypatch)
    fixed = ("from m import h\n\n\nclass A:\n    X = 1\n\n    class B:\n        def other(self):\n            return 3\n\n"
             "        def f(self, x):\n            v = h(self.p, True)\n            if v is not None:\n"
             "                x = x.to((lambda: v)())\n            return x\n")
    original = fixed.replace("            v = h(self.p, True)\n            if v is not None:\n"
                             "                x = x.to((lambda: v)())\n", "")
    verify_names(original, fixed, [_finding(scope="A.B.f", binds=("v",))])
    read = seen[0]
    assert "class A:" in read and "class B:" in read and "x = x.to((lambda: v)())" in read
    assert "X = 1" not in read and "return 3" not in read
    twice = fixed.replace("            return x\n", "            v = 3\n            return x\n")
    with pytest.raises(FixCheckError, match="not assigned exactly once"):
        verify_names(original, twice, [_finding(scope="A.B.f", binds=("v",))])


def test_the_text_libcst_reads_parses_where_bodies_share_their_header_line():
    """A one-line `def g(): return 1` or `class A: X = 1` outside the touched scopes is dropped
    whole; what is kept parses, every line where it was."""
    import ast

    fixed = ("from m import h\n\n\ndef g(): return 1\n\n\nclass A: X = 1\n\n\nclass B:\n    def f(self, x):\n"
             "        v = h(self.p, True)\n        if v is not None:\n            x = x.to(v)\n        return x\n")
    tree = ast.parse(fixed)
    read = scope_check._touched_text(fixed, tree, {"B.f"})
    ast.parse(read)
    assert "class B:" in read and "v = h(self.p, True)" in read and "X = 1" not in read
    one_line_class = fixed.replace("class B:\n    def f", "class B: Y = 2\n\n\nclass C:\n    def f")
    read = scope_check._touched_text(one_line_class, ast.parse(one_line_class), {"C.f"})
    ast.parse(read)
    assert "v = h(self.p, True)" in read
