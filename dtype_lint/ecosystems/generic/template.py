"""The `torch` helper template: vLLM's helper without vLLM's platform module, for a project that
does not import vLLM. It needs only torch: fp8 is any torch float8 dtype.

It decides as vLLM's (ecosystems/vllm/template.py) for a layer of vLLM's shape, a model dtype
attribute `params_dtype` beside a possibly packed `.weight`. A layer without that attribute is
not an error: where vLLM's answers `params_dtype` (no `.weight`, packed integer storage) this one
answers None, which keeps the activation in the model dtype. Such a layer is one a quantizer
swapped in (bitsandbytes' `Linear4bit` stores uint8 and casts its input itself), and vLLM's body,
`layer.params_dtype`, raised AttributeError on exactly the storages the fix is for
(tests/test_trust_round3_templates.py runs both on every dtype torch defines).
"""

from __future__ import annotations

DOC = '''\
    """The dtype an activation must have before entering `layer`, or None to
    keep the model dtype.

    A quantization backend may repack a layer's weight after loading, so the
    storage dtype of `layer.weight` is not the compute dtype of its input
    (vLLM issue #38658). With `params_dtype` the layer's model dtype (None
    when it has none: such a layer casts its input itself):
      no `.weight` (AWQ/GPTQ)        -> params_dtype
      int32 (Marlin repack)          -> params_dtype
      uint8 (NVFP4), fp8_input False -> None: the layer quantizes its input
      uint8 (NVFP4), fp8_input True  -> params_dtype: fp16/bf16 only
      other integer storage (int8)   -> params_dtype
      fp8 weight, fp8_input False    -> None: the layer quantizes its input
      otherwise (float, complex)     -> the weight dtype
    """
'''

BODY = '''\
    weight = getattr(layer, "weight", None)
    params_dtype = getattr(layer, "params_dtype", None)
    weight_dtype = weight.dtype if weight is not None else params_dtype
    if weight_dtype is None:
        return None
    if weight_dtype == torch.int32:
        return params_dtype
    if weight_dtype == torch.uint8:
        return params_dtype if fp8_input else None
    if not (weight_dtype.is_floating_point or weight_dtype.is_complex):
        return params_dtype
    if {is_fp8} and not fp8_input:
        return None
    return weight_dtype
'''

# Template name -> (its imports, its test of an fp8 weight, docstring, body with `{is_fp8}`).
TEMPLATES: dict[str, tuple[str, str, str, str]] = {
    "torch": (('import torch\n\n_FP8_DTYPES = frozenset(\n    getattr(torch, name)\n'
               '    for name in (\n        "float8_e4m3fn",\n        "float8_e4m3fnuz",\n        "float8_e5m2",\n'
               '        "float8_e5m2fnuz",\n    )\n    if hasattr(torch, name)\n)\n'),
              "weight_dtype in _FP8_DTYPES", DOC, BODY),
}
