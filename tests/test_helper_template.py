"""The helper template against the function vLLM shipped (README, "Fixes and the shared helper").

vLLM 0.28.0 (PR #38771) decides kv_b_proj's input dtype in `_get_kv_b_proj_input_dtype`. The
`vllm` template that `--fix`/`migrate` create must return exactly what upstream returns on every
storage case upstream handles (fp8 meaning `current_platform.fp8_dtype()`). Two deliberate
differences, and no others:
- other integer storage (int8, W8A8): upstream returns the storage dtype `torch.int8` (casting an
  activation to int8 would truncate it), ours returns `params_dtype`;
- uint8 storage (NVFP4) with fp8 input (MLA's fp8 prefill, reachable upstream: docs/mla-fp8-prefill.md):
  upstream returns None, keeping the fp8 activation, which NVFP4's input quantization rejects
  (fp16/bf16 only); ours returns `params_dtype`.

Upstream's function is taken from the fetched release's source with libcst and executed with a
stub `current_platform`; vLLM itself is never imported. Those tests carry the `network` marker
(they use the `vllm_0280` fixture). The `torch` template (no vLLM at all, fp8 = any torch float8
dtype) is checked against the same table offline.
"""

from __future__ import annotations
import __future__

import sys
import types
from contextlib import contextmanager
from pathlib import Path

import libcst as cst
import pytest
import torch

from dtype_lint.fix.helper_template import helper_source

MLA = "vllm/model_executor/layers/attention/mla_attention.py"
UPSTREAM = "_get_kv_b_proj_input_dtype"
FP8 = torch.float8_e4m3fn


class Layer(torch.nn.Module):
    """A quantizable layer as the helpers see it: `params_dtype`, and a `.weight` unless the
    backend (AWQ/GPTQ) stores something else."""

    def __init__(self, weight_dtype: torch.dtype | None, params_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.params_dtype = params_dtype
        if weight_dtype is not None:
            self.weight = torch.nn.Parameter(torch.empty(2, 2, dtype=weight_dtype), requires_grad=False)

    def __repr__(self) -> str:
        w = getattr(self, "weight", None)
        return f"Layer(weight={None if w is None else w.dtype}, params_dtype={self.params_dtype})"


# (case id, weight dtype or None, fp8_input flag, expected input dtype). params_dtype is bf16.
CASES = [
    ("no-weight", None, False, torch.bfloat16),
    ("no-weight", None, True, torch.bfloat16),
    ("int32-marlin", torch.int32, False, torch.bfloat16),
    ("int32-marlin", torch.int32, True, torch.bfloat16),
    ("uint8-nvfp4", torch.uint8, False, None),
    ("fp8", FP8, False, None),
    ("fp8", FP8, True, FP8),
    ("fp16", torch.float16, False, torch.float16),
    ("fp16", torch.float16, True, torch.float16),
    ("bf16", torch.bfloat16, False, torch.bfloat16),
    ("bf16", torch.bfloat16, True, torch.bfloat16),
    ("fp32", torch.float32, False, torch.float32),
    ("fp32", torch.float32, True, torch.float32),
]
CASE_IDS = [f"{c[0]}-{'fp8in' if c[2] else 'nofp8in'}" for c in CASES]


def _platform(fp8: torch.dtype) -> types.SimpleNamespace:
    return types.SimpleNamespace(fp8_dtype=lambda: fp8)


def _exec(source: str, namespace: dict, name: str):
    # Upstream annotates with ColumnParallelLinear: compile as with `from __future__ import
    # annotations` so that annotations are never evaluated.
    code = compile(source, f"<{name}>", "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)
    return namespace[name]


def upstream_source(vllm_root: Path) -> str:
    module = cst.parse_module((vllm_root / MLA).read_text(encoding="utf-8"))
    defs = [s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == UPSTREAM]
    assert len(defs) == 1, f"{UPSTREAM} not found (once) at the top level of {MLA}"
    source = module.code_for_node(defs[0]).lstrip("\n")
    assert "import" not in source  # self-contained: torch and current_platform only
    return source


def upstream_function(source: str, fp8: torch.dtype = FP8):
    return _exec(source, {"torch": torch, "current_platform": _platform(fp8)}, UPSTREAM)


@contextmanager
def stub_vllm_platforms(fp8: torch.dtype = FP8):
    """`vllm` and `vllm.platforms` in sys.modules for the template's import; restored after."""
    saved = {k: sys.modules[k] for k in ("vllm", "vllm.platforms") if k in sys.modules}
    vllm = types.ModuleType("vllm")
    vllm.__path__ = []  # a package
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = _platform(fp8)
    vllm.platforms = platforms
    sys.modules["vllm"], sys.modules["vllm.platforms"] = vllm, platforms
    try:
        yield
    finally:
        for k in ("vllm", "vllm.platforms"):
            if k in saved:
                sys.modules[k] = saved[k]
            else:
                sys.modules.pop(k, None)


def template_function(template: str, fp8: torch.dtype = FP8):
    source = helper_source("get_layer_input_dtype", template)
    if template == "vllm":
        with stub_vllm_platforms(fp8):
            return _exec(source, {"__name__": "layer_input_dtype"}, "get_layer_input_dtype")
    return _exec(source, {"__name__": "layer_input_dtype"}, "get_layer_input_dtype")


@pytest.fixture(scope="module")
def upstream_src(vllm_0280: Path) -> str:
    return upstream_source(vllm_0280)  # one libcst parse of the 3,000-line module


@pytest.fixture(scope="module")
def upstream(upstream_src: str):
    return upstream_function(upstream_src)


@pytest.fixture(scope="module")
def ours():
    return template_function("vllm")


def test_sys_modules_is_restored():
    before = {k: sys.modules.get(k) for k in ("vllm", "vllm.platforms")}
    template_function("vllm")
    assert {k: sys.modules.get(k) for k in ("vllm", "vllm.platforms")} == before


@pytest.mark.network
@pytest.mark.parametrize("case, weight, flag, expected", CASES, ids=CASE_IDS)
def test_vllm_template_equals_upstream(upstream, ours, case, weight, flag, expected):
    layer = Layer(weight)
    theirs, mine = upstream(layer, flag), ours(layer, flag)
    assert theirs == expected, f"upstream changed? {layer} {flag}: {theirs}"
    assert mine == theirs, f"{layer} fp8_input={flag}: upstream {theirs}, template {mine}"
    assert type(mine) is type(theirs)


@pytest.mark.network
@pytest.mark.parametrize("flag", [False, True])
def test_int8_is_the_one_difference(upstream, ours, flag):
    """W8A8 int8 storage: upstream returns the storage dtype (an activation cast to int8 would be
    truncated); the template returns the layer's params_dtype, like the other packed storages."""
    layer = Layer(torch.int8, params_dtype=torch.float16)
    assert upstream(layer, flag) == torch.int8
    assert ours(layer, flag) == torch.float16


@pytest.mark.network
@pytest.mark.parametrize("params_dtype", [torch.float16, torch.bfloat16])
def test_fp8_input_into_nvfp4_is_the_second_difference(upstream, ours, params_dtype):
    """NVFP4 storage and an fp8 activation (fp8 prefill): upstream keeps the fp8 activation (None);
    the template brings it back to the layer's compute dtype, the only input NVFP4 quantizes.
    Without fp8 input both keep the activation."""
    layer = Layer(torch.uint8, params_dtype=params_dtype)
    assert upstream(layer, True) is None
    assert ours(layer, True) == params_dtype
    assert upstream(layer, False) is ours(layer, False) is None


@pytest.mark.network
def test_no_other_difference(upstream, ours):
    """Every (storage, flag) the evaluator knows, beyond CASES: the template differs from upstream
    exactly on int8 storage and on (uint8, fp8 input)."""
    storages = [None, torch.int32, torch.uint8, torch.int8, FP8, torch.float8_e5m2,
                torch.float16, torch.bfloat16, torch.float32]
    differ = {(None if w is None else w, flag) for w in storages for flag in (False, True)
              if upstream(Layer(w), flag) != ours(Layer(w), flag)}
    assert differ == {(torch.int8, False), (torch.int8, True), (torch.uint8, True)}


@pytest.mark.network
@pytest.mark.parametrize("params_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("weight", [None, torch.int32], ids=["no-weight", "int32"])
def test_params_dtype_is_followed(upstream, ours, weight, params_dtype):
    layer = Layer(weight, params_dtype=params_dtype)
    for flag in (False, True):
        assert upstream(layer, flag) == ours(layer, flag) == params_dtype


@pytest.mark.network
@pytest.mark.parametrize("platform_fp8", [torch.float8_e4m3fnuz, torch.float8_e5m2])
def test_vllm_template_follows_the_platform_fp8_dtype(upstream_src: str, platform_fp8):
    """On a platform whose fp8 is another float8 (ROCm: e4m3fnuz), both treat only that dtype as
    fp8; a float8_e4m3fn weight is then an ordinary floating weight to both."""
    upstream = upstream_function(upstream_src, platform_fp8)
    ours = template_function("vllm", platform_fp8)
    for weight in (platform_fp8, FP8, torch.float16, torch.int32, torch.uint8, None):
        layer = Layer(weight)
        for flag in (False, True):
            if weight == torch.uint8 and flag:
                continue  # the second difference, independent of the platform
            assert ours(layer, flag) == upstream(layer, flag), (layer, flag)
    assert ours(Layer(platform_fp8), False) is None and ours(Layer(FP8), False) == FP8


@pytest.mark.network
def test_upstream_source_is_the_shipped_shape(upstream_src: str):
    """Guard against comparing with the wrong function: the fetched code is the 0.28.0 helper."""
    source = upstream_src
    assert source.startswith(f"def {UPSTREAM}(")
    assert "current_platform.fp8_dtype()" in source and "torch.int32" in source and "torch.uint8" in source


# The torch template needs no vLLM and no stub: fp8 is any torch float8 dtype.
@pytest.mark.parametrize("case, weight, flag, expected", CASES + [("uint8-nvfp4", torch.uint8, True, torch.bfloat16)],
                         ids=CASE_IDS + ["uint8-nvfp4-fp8in"])
def test_torch_template_table(case, weight, flag, expected):
    fn = template_function("torch")
    assert fn(Layer(weight), flag) == expected


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz])
def test_torch_template_knows_every_float8(fp8):
    fn = template_function("torch")
    assert fn(Layer(fp8), False) is None
    assert fn(Layer(fp8), True) == fp8


def test_torch_template_int8_and_other_integers():
    fn = template_function("torch")
    for storage in (torch.int8, torch.int16, torch.int64):
        assert fn(Layer(storage, params_dtype=torch.float16), True) == torch.float16


def test_templates_are_self_contained_modules():
    for template, needs_vllm in (("vllm", True), ("torch", False)):
        source = helper_source("my_helper", template)
        compile(source, template, "exec")
        assert "def my_helper(layer: torch.nn.Module, fp8_input: bool) -> torch.dtype | None:" in source
        assert ("from vllm.platforms import current_platform" in source) is needs_vllm
    with pytest.raises(ValueError, match="unknown helper template"):
        helper_source("f", "jax")
