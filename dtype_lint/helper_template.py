"""The shared helper's source, created by `--fix`/`migrate` when the configured one does not exist.

The `vllm` template behaves exactly as vLLM 0.28.0's `_get_kv_b_proj_input_dtype` on every case
upstream handles (fp8 means `current_platform.fp8_dtype()`); for other integer storage (int8 W8A8)
upstream returns the storage dtype and ours returns `params_dtype` (tests/test_helper_template.py
proves both statements against the fetched upstream function). The `torch` template needs only
torch: fp8 is any torch float8 dtype.
"""

from __future__ import annotations

_DOC = '''\
    """The dtype an activation must have before entering `layer`, or None to keep the model dtype.

    A quantization backend may repack a layer's weight after loading, so the storage dtype of
    `layer.weight` is not the compute dtype of its input (vLLM issue #38658):
      no `.weight` (AWQ/GPTQ)      -> layer.params_dtype
      int32 (Marlin repack)        -> layer.params_dtype
      uint8 (NVFP4 packed e2m1)    -> None: the layer quantizes its input itself
      other integer storage (int8) -> layer.params_dtype
      fp8 weight, fp8_input False  -> None: the layer quantizes its input itself
      otherwise                    -> the weight dtype
    """
'''

_BODY = '''\
    weight = getattr(layer, "weight", None)
    weight_dtype = weight.dtype if weight is not None else layer.params_dtype
    if weight_dtype == torch.int32:
        return layer.params_dtype
    if weight_dtype == torch.uint8:
        return None
    if not weight_dtype.is_floating_point:
        return layer.params_dtype
    if {is_fp8} and not fp8_input:
        return None
    return weight_dtype
'''

_HEADERS = {
    "vllm": "import torch\n\nfrom vllm.platforms import current_platform\n",
    "torch": ('import torch\n\n_FP8_DTYPES = frozenset(\n    getattr(torch, name)\n'
              '    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")\n'
              '    if hasattr(torch, name)\n)\n'),
}
_IS_FP8 = {"vllm": "weight_dtype == current_platform.fp8_dtype()", "torch": "weight_dtype in _FP8_DTYPES"}


def helper_source(func: str, template: str) -> str:
    if template not in _HEADERS:
        raise ValueError(f"unknown helper template {template!r}")
    return (
        '"""Created by dtype-lint: the one place that decides a layer\'s input dtype."""\n\n'
        + _HEADERS[template]
        + f"\n\ndef {func}(layer: torch.nn.Module, fp8_input: bool) -> torch.dtype | None:\n"
        + _DOC
        + _BODY.format(is_fp8=_IS_FP8[template])
    )
