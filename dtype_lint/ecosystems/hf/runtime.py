"""How the run-time guard (dtype_lint/guard/) recognises the quantizers a Hugging Face model is
loaded with, in a live model: by a layer's class, its weight's class, its package, and the code
that is the quantizer's own business.

What each leaves (docs/hf.md, "What each quantizer replaces and leaves"): bitsandbytes 4-bit keeps
`Params4bit` in uint8, 8-bit `Int8Params` in int8, a Marlin repack leaves int32, FP8 keeps float8,
and GPTQ, AWQ and HQQ layers have no `.weight` at all (`qweight`, `W_q`). optimum-quanto and
torchao layers report the float dtype in `.weight.dtype`, so the guard calls none of them packed.

Plugged in by the registry's `runtime` role (consumers layer). Imports nothing: the pytest plugin
imports the guard at start-up.
"""

from __future__ import annotations

# The attributes a layer without `.weight` keeps its storage in, by backend: GPTQ/AWQ/Marlin
# (`qweight`, `qzeros`), HQQ (`W_q`), compressed-tensors (`weight_packed`).
NO_WEIGHT_STORAGE_ATTRIBUTES = ("qweight", "W_q", "weight_packed", "qzeros")

# Exact layer class names of the quantizers whose modules the guard names, and the name it reports.
# Matched on the class and its bases, so bitsandbytes' LinearNF4/LinearFP4 (subclasses of
# Linear4bit) are named too.
QUANTIZER_BY_CLASS_NAME = {
    "Linear4bit": "bitsandbytes 4-bit",
    "Embedding4bit": "bitsandbytes 4-bit",
    "Linear8bitLt": "bitsandbytes 8-bit",
    "Embedding8bit": "bitsandbytes 8-bit",
    "HQQLinear": "HQQ",
    "GgufLinear": "GGUF",
    "GgufEmbedding": "GGUF",
    "GGUFLinear": "GGUF",
    "FP8Linear": "FP8",
    "CompressedLinear": "compressed-tensors",
    "QLinear": "optimum-quanto",
}
# Layer class name prefixes, matched on the class and its bases after the exact names: AWQ's
# WQLinear_* vary by kernel.
QUANTIZER_BY_CLASS_PREFIX = {"WQLinear": "AWQ"}
# The weight's own class names, for layers of other classes that hold a bitsandbytes parameter.
QUANTIZER_BY_WEIGHT_CLASS_NAME = {"Params4bit": "bitsandbytes 4-bit", "Int8Params": "bitsandbytes 8-bit"}
# Top-level packages of quantizers whose layer classes vary by kernel (GPTQ's QuantLinear family,
# AWQ's WQLinear_*): the package names the quantizer.
QUANTIZER_BY_PACKAGE = {
    "gptqmodel": "GPTQ",
    "auto_gptq": "GPTQ",
    "awq": "AWQ",
    "hqq": "HQQ",
    "bitsandbytes": "bitsandbytes",
    "compressed_tensors": "compressed-tensors",
    "torchao": "torchao",
}
# A part of the layer's own class name, the last resort (GPTQ's QuantLinear family, any package).
QUANTIZER_BY_CLASS_NAME_PART = {"QuantLinear": "GPTQ"}

# Path fragments (with `/` separators) of storage and loader code: where a `.dtype` read of a
# quantized weight, or a cast to it, is the quantizer's own business (bitsandbytes packing its
# own int8 rows, transformers' quantizer integrations, accelerate moving tensors).
STORAGE_CODE_FRAGMENTS = (
    "/bitsandbytes/",
    "/transformers/integrations/",
    "/transformers/quantizers/",
    "/transformers/core_model_loading.py",
    "/optimum/quanto/",
    "/torchao/",
    "/diffusers/quantizers/",
    "/diffusers/hooks/",
    "/accelerate/",
    "/gptqmodel/",
    "/auto_gptq/",
    "/awq/",
    "/hqq/",
    "/compressed_tensors/",
)
