"""vLLM's input-dtype helper template: the text `--fix` and `migrate` create where a project has
no helper yet (fix/helper_template.py assembles it: a header, the signature, this docstring and body).

The `vllm` template behaves exactly as vLLM 0.28.0's `_get_kv_b_proj_input_dtype` on every case
upstream handles (fp8 means `current_platform.fp8_dtype()`), with two deliberate differences:
- other integer storage (int8, W8A8): upstream returns the storage dtype `torch.int8`, ours
  `params_dtype`;
- uint8 storage (NVFP4) with an fp8 input (MLA's fp8 prefill): upstream returns None, which keeps
  the fp8 activation, and NVFP4's kernels quantize only fp16/bf16 input (`scaled_fp4_quant`
  asserts it); ours returns `params_dtype`. The combination is reachable upstream (fp8 prefill is
  chosen from the KV-cache dtype and the prefill backend, never from kv_b_proj's quantization):
  docs/mla-fp8-prefill.md gives the file and line references.
tests/test_helper_template.py proves all three statements against the fetched upstream function.
"""

from __future__ import annotations

DOC = '''\
    """The dtype an activation must have before entering `layer`, or None to
    keep the model dtype.

    A quantization backend may repack a layer's weight after loading, so the
    storage dtype of `layer.weight` is not the compute dtype of its input
    (vLLM issue #38658):
      no `.weight` (AWQ/GPTQ)        -> layer.params_dtype
      int32 (Marlin repack)          -> layer.params_dtype
      uint8 (NVFP4), fp8_input False -> None: the layer quantizes its input
      uint8 (NVFP4), fp8_input True  -> layer.params_dtype: fp16/bf16 only
      other integer storage (int8)   -> layer.params_dtype
      fp8 weight, fp8_input False    -> None: the layer quantizes its input
      otherwise (float, complex)     -> the weight dtype
    """
'''

BODY = '''\
    weight = getattr(layer, "weight", None)
    weight_dtype = weight.dtype if weight is not None else layer.params_dtype
    if weight_dtype == torch.int32:
        return layer.params_dtype
    if weight_dtype == torch.uint8:
        return layer.params_dtype if fp8_input else None
    if not (weight_dtype.is_floating_point or weight_dtype.is_complex):
        return layer.params_dtype
    if {is_fp8} and not fp8_input:
        return None
    return weight_dtype
'''

# Template name -> (its imports, its test of an fp8 weight, docstring, body with `{is_fp8}`).
TEMPLATES: dict[str, tuple[str, str, str, str]] = {
    "vllm": ("import torch\n\nfrom vllm.platforms import current_platform\n",
             "weight_dtype == current_platform.fp8_dtype()", DOC, BODY),
}
