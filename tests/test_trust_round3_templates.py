"""Trusted like a compiler, round three (#36): the templates' dtype semantics.

A weight that is not packed (every floating and complex dtype wider than a byte) is the dtype its
layer computes in, so the helper's answer there is the weight's own dtype, as the cast it replaces
said: on 0.2.x complex64/complex128 weights went the packed way (`not is_floating_point`) and the
activation was cast to `params_dtype`. The truth tables below run the created helpers with torch
on every dtype torch defines (every attribute of `torch` that is a `torch.dtype`), not a list.

A configured helper is applied as a safe fix only where the evaluator proves it agrees with the
plain cast on every unpacked storage: on 0.2.x one that DTL005 accepts but that returns
`params_dtype` for float storages was applied by `--fix` and changed fp16/fp32 layers' casts.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cli_runner import dtl  # noqa: E402
from tiny_project import STUB_MODEL, fresh_import, stub_project  # noqa: E402

from dtype_lint.dtypes import evaluator  # noqa: E402
from dtype_lint.ecosystems.hf.helper import HF_HELPER_NAME, HF_HELPER_SOURCE  # noqa: E402
from dtype_lint.fix.helper_template import TEMPLATES, function_table, helper_source  # noqa: E402

PARAMS_DTYPE = torch.bfloat16
# Every dtype torch defines, found by asking torch (aliases such as `torch.half` fold into one).
ALL_DTYPES = sorted({value for name in dir(torch) if isinstance(value := getattr(torch, name), torch.dtype)},
                    key=str)


def unpacked(dtype: torch.dtype) -> bool:
    """Not packed: a floating or complex dtype wider than a byte (a value the layer computes in)."""
    return (dtype.is_floating_point or dtype.is_complex) and dtype.itemsize > 1


def test_the_enumeration_is_torch_s_own():
    names = {str(d) for d in ALL_DTYPES}
    assert {"torch.complex64", "torch.complex128", "torch.float64", "torch.int32", "torch.uint8",
            "torch.float8_e4m3fn"} <= names
    assert len(ALL_DTYPES) >= 30  # torch 2.x defines dozens (sub-byte ints, quantized, bits...)


@pytest.fixture
def vllm_platform(monkeypatch):
    """`vllm.platforms.current_platform` for the vllm template: fp8 is float8_e4m3fn (CUDA)."""
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(fp8_dtype=lambda: torch.float8_e4m3fn)
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)


def created(source: str, func: str):
    namespace: dict = {}
    exec(compile(source, "<created helper>", "exec"), namespace)
    return namespace[func]


def layer_with(dtype: torch.dtype | None, **attrs):
    """A layer whose weight holds `dtype` (meta: every dtype can be allocated there), or none."""
    layer = types.SimpleNamespace(params_dtype=PARAMS_DTYPE, **attrs)
    if dtype is not None:
        layer.weight = torch.empty(0, dtype=dtype, device="meta")
    return layer


@pytest.mark.parametrize("template", TEMPLATES)
def test_vllm_style_templates_answer_the_weight_dtype_for_every_unpacked_storage(template, vllm_platform):
    helper = created(helper_source("get_layer_input_dtype", template), "get_layer_input_dtype")
    fp8 = {torch.float8_e4m3fn} if template == "vllm" else \
        {d for d in ALL_DTYPES if str(d).startswith(("torch.float8_e4m3", "torch.float8_e5m2"))}
    for dtype in ALL_DTYPES:
        for fp8_input in (False, True):
            got = helper(layer_with(dtype), fp8_input)
            if unpacked(dtype):
                want = dtype
            elif dtype.is_floating_point:  # one-byte floats: fp8 is the flag's, fp4x2/e8m0 are kept
                want = None if dtype in fp8 and not fp8_input else dtype
            elif dtype == torch.uint8:
                want = PARAMS_DTYPE if fp8_input else None
            else:  # packed integer storage (int32 Marlin, int8, sub-byte, quantized, bits)
                want = PARAMS_DTYPE
            assert got == want, (template, dtype, fp8_input, got)
        assert helper(layer_with(None), True) == PARAMS_DTYPE


def test_the_torch_template_keeps_the_model_dtype_for_a_layer_without_params_dtype():
    """A layer a quantizer swapped in has no `params_dtype` (bitsandbytes' Linear4bit): where the
    vllm template answers `layer.params_dtype` the torch template answers None (keep the model
    dtype), and everywhere else what it answers for a layer of vLLM's shape. vLLM's own body raised
    AttributeError there, on exactly the storages a fix is for."""
    helper = created(helper_source("get_layer_input_dtype", "torch"), "get_layer_input_dtype")
    for dtype in ALL_DTYPES:
        for fp8_input in (False, True):
            shaped = helper(layer_with(dtype), fp8_input)
            bare = types.SimpleNamespace(weight=torch.empty(0, dtype=dtype, device="meta"))
            assert helper(bare, fp8_input) == (None if shaped == PARAMS_DTYPE and dtype != PARAMS_DTYPE
                                               else shaped), (dtype, fp8_input)
    assert helper(types.SimpleNamespace(), True) is None  # no `.weight`, no model dtype
    assert helper(layer_with(None), True) == PARAMS_DTYPE


def test_the_torch_template_repairs_real_bitsandbytes_layers():
    """On CPU, bitsandbytes' 4-bit and 8-bit layers (uint8 and int8 storage, no `params_dtype`):
    the created helper answers without raising, and the activation cast as it says enters the
    layer; the cast it replaces handed the layer uint8/int8 input."""
    bnb = pytest.importorskip("bitsandbytes")
    helper = created(helper_source("get_layer_input_dtype", "torch"), "get_layer_input_dtype")
    torch.manual_seed(0)
    dense = torch.nn.Linear(64, 64)
    four = bnb.nn.Linear4bit(64, 64, compute_dtype=torch.bfloat16)
    four.load_state_dict(dense.state_dict())
    eight = bnb.nn.Linear8bitLt(64, 64, has_fp16_weights=False)
    eight.load_state_dict(dense.state_dict())
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    for layer in (four.to("cpu"), eight.to("cpu")):
        assert layer.weight.dtype in (torch.uint8, torch.int8)
        for fp8_input in (False, True):
            dtype = helper(layer, fp8_input)
            assert dtype is None, (type(layer).__name__, dtype)
            out = layer(x.to(dtype or x.dtype))
            assert out.is_floating_point() and out.shape == (2, 64)


def test_hf_template_answers_the_weight_dtype_for_every_unpacked_storage():
    helper = created("import torch\n\n\n" + HF_HELPER_SOURCE, HF_HELPER_NAME)
    for dtype in ALL_DTYPES:
        got = helper(layer_with(dtype))
        assert got == (dtype if unpacked(dtype) else None), (dtype, got)
        # bitsandbytes 4-bit states its compute dtype: that wins over a packed storage, and a
        # float weight is its own compute dtype whatever else the module states.
        assert helper(layer_with(dtype, compute_dtype=torch.float16)) == (dtype if unpacked(dtype) else torch.float16)
    assert helper(layer_with(None)) is None
    assert helper(layer_with(None, compute_dtype=torch.float16)) == torch.float16


def test_the_hf_helper_keeps_a_float_layer_s_cast_beside_its_compute_dtype():
    """A router that computes in fp32 beside its bf16 weight (`compute_dtype = torch.float32`, its
    forward casting its input itself): the cast `h.to(gate.weight.dtype)` kept `h` in bf16 for the
    next layer. The helper answered fp32 there, and the bf16 layer after it raised."""
    helper = created("import torch\n\n\n" + HF_HELPER_SOURCE, HF_HELPER_NAME)

    class Router(torch.nn.Linear):
        def __init__(self):
            super().__init__(8, 4, bias=False)
            self.compute_dtype = torch.float32

        def forward(self, x):
            return torch.nn.functional.linear(x.to(self.compute_dtype), self.weight.to(self.compute_dtype))

    gate, down = Router().to(torch.bfloat16), torch.nn.Linear(8, 8).to(torch.bfloat16)
    h = torch.randn(2, 8, dtype=torch.bfloat16)
    dtype = helper(gate)
    assert dtype == gate.weight.dtype == torch.bfloat16
    h = h.to(dtype)
    assert down(h).dtype == torch.bfloat16 and gate(h).dtype == torch.float32


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_evaluator_reads_the_templates_as_torch_runs_them_on_unpacked_storages(template, vllm_platform):
    """The fix-safety proof evaluates helpers over UNPACKED symbolically; on the templates it
    must give what running them gives."""
    source = helper_source("get_layer_input_dtype", template)
    helper = created(source, "get_layer_input_dtype")
    table = function_table(source, "get_layer_input_dtype", evaluator.UNPACKED)
    assert {case.storage for case, _ in table.rows} == set(evaluator.UNPACKED)
    # Every unpacked dtype torch defines is among the storages the proof evaluates.
    assert {str(d).removeprefix("torch.") for d in ALL_DTYPES if unpacked(d)} <= set(evaluator.UNPACKED)
    for case, want in table.rows:
        got = helper(layer_with(getattr(torch, case.storage)), case.flag)
        assert str(got) == want == f"torch.{case.storage}", case


# --- `--fix` on real modules ---------------------------------------------------------------------

MODEL = STUB_MODEL


def project(root: Path, extra: dict[str, str] | None = None) -> Path:
    return stub_project(root, MODEL, extra)





def casts(root: Path) -> dict[torch.dtype, str]:
    """What `Attn.forward` casts an fp32 activation to, for a layer of every dtype torch defines."""
    mod = fresh_import(root)
    layers = sys.modules["proj.layers"]
    seen = {}
    for dtype in ALL_DTYPES:
        layer = layers.QLinear(torch.float32)
        layer.weight = torch.nn.Parameter(torch.empty(0, dtype=dtype, device="meta"), requires_grad=False)
        try:
            seen[dtype] = str(mod.Attn(layer)(torch.zeros(2, device="meta")).dtype)
        except Exception as e:  # noqa: BLE001 - the error is the outcome compared
            seen[dtype] = type(e).__name__
    return seen


def fix(root: Path, *extra: str):
    return dtl(root, "check", "--fix", "--no-cache", "--output-format", "text", *extra)


def test_a_fix_keeps_every_unpacked_layer_s_cast(tmp_path: Path):
    """The created helper, run in the fixed module, casts as the original did on every floating and
    complex storage (0.2.x cast complex layers' input to bfloat16)."""
    root = project(tmp_path)
    before = casts(root)
    proc = fix(root)
    assert "1 fixed" in proc.stdout, proc.stdout + proc.stderr
    after = casts(root)
    for dtype in ALL_DTYPES:
        if unpacked(dtype):
            assert after[dtype] == before[dtype] == str(dtype), (dtype, after[dtype])
    assert after[torch.int32] == str(PARAMS_DTYPE) != before[torch.int32]  # the fix itself


# A helper DTL005 accepts (no integer dtype, no AttributeError, no kept fp8 activation) that
# answers `params_dtype` for float storages.
PARAMS_FOR_FLOATS = """\
import torch


def get_layer_input_dtype(layer, fp8_input):
    weight = getattr(layer, "weight", None)
    if weight is not None and weight.dtype in (torch.uint8, torch.float8_e4m3fn) and not fp8_input:
        return None
    if weight is not None and weight.dtype == torch.float8_e4m3fn:
        return weight.dtype
    return layer.params_dtype
"""

# What 0.2.x's template created: complex storages answered `params_dtype`.
OLD_TEMPLATE_BODY = """\
import torch


def get_layer_input_dtype(layer, fp8_input):
    weight = getattr(layer, "weight", None)
    weight_dtype = weight.dtype if weight is not None else layer.params_dtype
    if weight_dtype == torch.int32:
        return layer.params_dtype
    if weight_dtype == torch.uint8:
        return layer.params_dtype if fp8_input else None
    if not weight_dtype.is_floating_point:
        return layer.params_dtype
    if weight_dtype == torch.float8_e4m3fn and not fp8_input:
        return None
    return weight_dtype
"""


@pytest.mark.parametrize("helper,disagrees", [(PARAMS_FOR_FLOATS, "float16 → torch.bfloat16"),
                                              (OLD_TEMPLATE_BODY, "complex64 → torch.bfloat16")])
def test_a_configured_helper_that_changes_unpacked_casts_is_not_a_safe_fix(tmp_path: Path, helper, disagrees):
    root = project(tmp_path, {"proj/dtypes.py": helper})
    checked = dtl(root, "check", "--no-cache", "--output-format", "text")
    assert "DTL005" not in checked.stdout, checked.stdout  # the helper is sound by DTL005's rules
    before = casts(root)
    proc = fix(root)
    assert (root / "proj/model.py").read_text() == MODEL, "applied as a safe fix"
    assert casts(root) == before
    assert "1 hidden fix can be enabled with --unsafe-fixes" in proc.stdout, proc.stdout
    assert "is not proven to cast as" in checked.stdout and disagrees in checked.stdout, checked.stdout


def test_a_configured_helper_that_agrees_is_applied(tmp_path: Path):
    """The proof is no blanket refusal: a project's own helper that answers the weight dtype on
    every unpacked storage is used by a safe fix."""
    agrees = OLD_TEMPLATE_BODY.replace("if not weight_dtype.is_floating_point:",
                                       "if not (weight_dtype.is_floating_point or weight_dtype.is_complex):")
    root = project(tmp_path, {"proj/dtypes.py": agrees})
    before = casts(root)
    proc = fix(root)
    assert "1 fixed" in proc.stdout, proc.stdout + proc.stderr
    after = casts(root)
    assert all(after[d] == before[d] for d in ALL_DTYPES if unpacked(d))
