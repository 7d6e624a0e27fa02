"""What vLLM-style engines' quantization backends leave in a layer's `.weight`: rows of
dtypes/storage_formats.py's table.

Marlin (and its relatives Machete, AllSpark) repacks GPTQ, AWQ and FP8 weights after loading into
int32 tiles: W8A16 / W4A16, the input stays 16-bit, so the helper answers the layer's
`params_dtype`. NVFP4 and MXFP4 (W4A4) pack two e2m1 codes per byte and quantize their (fp16/bf16
only) input themselves: the helper keeps a 16-bit input (None) and brings an fp8 one back to
`params_dtype`. W8A8-INT8 stores int8 and quantizes its input. AWQ and GPTQ layers keep the weight
under another name (`qweight`; compressed-tensors' `weight_packed`): no `.weight` at all.
"""

from __future__ import annotations

from dtype_lint.dtypes.storage_format import KEEP, MODEL_DTYPE, StorageFormat

# The compiled ops whose result is Marlin's int32 storage (outside any tree, their code cannot be read).
_MARLIN_KERNELS = ("gptq_marlin_repack", "awq_marlin_repack", "gptq_marlin_moe_repack", "awq_marlin_moe_repack",
                   "marlin_repack", "machete_prepack_B", "allspark_repack_weight")

FORMATS: tuple[StorageFormat, ...] = (
    StorageFormat("marlin", "Marlin", "int32", 4, False, MODEL_DTYPE, MODEL_DTYPE, _MARLIN_KERNELS),
    StorageFormat("marlin_fp8", "Marlin FP8", "int32", 8, False, MODEL_DTYPE, MODEL_DTYPE),
    StorageFormat("nvfp4", "NVFP4", "uint8", 4, True, KEEP, MODEL_DTYPE),
    StorageFormat("mxfp4", "MXFP4", "uint8", 4, True, KEEP, MODEL_DTYPE),
    StorageFormat("int8", "W8A8-INT8", "int8", 8, True, MODEL_DTYPE, MODEL_DTYPE),
    StorageFormat("awq", "AWQ", None, 4, False, MODEL_DTYPE, MODEL_DTYPE),
    StorageFormat("gptq", "GPTQ", None, 4, False, MODEL_DTYPE, MODEL_DTYPE),
)
