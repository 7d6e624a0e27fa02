"""What Hugging Face's quantizers leave in a layer's `.weight`: rows of
dtypes/storage_formats.py's table (docs/hf.md, "What each quantizer replaces and leaves").

bitsandbytes 4-bit (`Params4bit`) and GGUF blocks sit in uint8 and dequantize the weight to
compute in the model dtype; bitsandbytes 8-bit (`Int8Params`) stores int8 and quantizes its input
(LLM.int8()); HQQ keeps its weight under another name: no `.weight` at all.
"""

from __future__ import annotations

from dtype_lint.dtypes.storage_format import KEEP, MODEL_DTYPE, StorageFormat

FORMATS: tuple[StorageFormat, ...] = (
    StorageFormat("bnb_4bit", "bitsandbytes 4-bit", "uint8", 4, False, KEEP, MODEL_DTYPE),
    StorageFormat("gguf", "GGUF", "uint8", 4, False, KEEP, MODEL_DTYPE),
    StorageFormat("bnb_8bit", "bitsandbytes 8-bit", "int8", 8, True, MODEL_DTYPE, MODEL_DTYPE),
    StorageFormat("hqq", "HQQ", None, 4, False, MODEL_DTYPE, MODEL_DTYPE),
)
