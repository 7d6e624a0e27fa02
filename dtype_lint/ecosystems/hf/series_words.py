"""Hugging Face's words in a migration's patch series (transformers, diffusers): why a cast to
`module.weight.dtype` is wrong in model code, where no config reaches a constructor and quantizers
replace the layers at load time. The registry's `series_words` role (consumers layer); the rest of
an HF series is ecosystems/hf/series.py's and regression.py's.
"""

from __future__ import annotations

CONVENTIONS: tuple[str, ...] | None = ("transformers", "diffusers")

WHY = (
    "A quantizer may replace a layer when the model is loaded, so its weight's storage dtype is not "
    "the compute dtype of the layer's input: bitsandbytes 4-bit and GGUF store `torch.uint8`, "
    "bitsandbytes 8-bit `torch.int8`, FP8 and compressed-tensors `float8_e4m3fn`, and GPTQ, AWQ and HQQ "
    "layers have no `.weight` at all. Casting an activation to `module.weight.dtype` then raises (a "
    "dtype mismatch in the matmul, `TypeError` from `torch.finfo`, `AttributeError`) or silently "
    "turns the activation into integers."
)
