"""The storages any model may hold whatever its ecosystem: the compute dtypes and fp8.

An unquantized layer keeps its weight in the dtype it computes in (the cast the helper replaces is
right for it); an fp8 layer keeps float8 and quantizes its own 16-bit input (an fp8 input, as in
MLA's fp8 prefill, is what its kernels take). Rows of dtypes/storage_formats.py's table.
"""

from __future__ import annotations

from dtype_lint.dtypes.storage_format import KEEP, WEIGHT_DTYPE, StorageFormat

FORMATS: tuple[StorageFormat, ...] = (
    StorageFormat("fp16", "fp16", "float16", 16, False, WEIGHT_DTYPE, WEIGHT_DTYPE),
    StorageFormat("bf16", "bf16", "bfloat16", 16, False, WEIGHT_DTYPE, WEIGHT_DTYPE),
    StorageFormat("fp32", "fp32", "float32", 32, False, WEIGHT_DTYPE, WEIGHT_DTYPE),
    StorageFormat("fp8", "FP8", "float8_e4m3fn", 8, True, KEEP, WEIGHT_DTYPE),
    StorageFormat("fp8_e5m2", "FP8 e5m2", "float8_e5m2", 8, True, KEEP, WEIGHT_DTYPE),
)
