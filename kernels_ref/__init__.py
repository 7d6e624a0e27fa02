"""PyTorch reference kernels for the MLA ``kv_b_proj`` dtype fix (vLLM PR #38771).

One module per kernel family (``docs/kernels.md`` describes them): ``formats``, ``marlin_fp8``,
``fp8_linear``, ``nvfp4``, ``linear_basic``, ``int8_linear``, ``attention``; ``ops`` dispatches each
op to the CUDA version in ``cuda/`` or to the reference. Public names are re-exported lazily, so
importing this package (e.g. from the linter) does not import torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "formats": ("FP8", "FP8_MAX"),
    "marlin_fp8": ("MarlinFp8Linear", "marlin_gemm", "marlin_repack_fp8", "pack_fp8_to_int32"),
    "fp8_linear": ("Fp8Linear", "Fp8BlockLinear", "fp8_quant_per_token", "fp8_scaled_mm"),
    "nvfp4": ("NvFp4Linear", "scaled_fp4_quant"),
    "linear_basic": ("UnquantizedLinear", "AwqLikeLinear"),
    "int8_linear": ("Int8Linear",),
    "attention": ("mla_prefill_attention", "mask_empty_context", "merge_attn_states"),
}
_OWNER = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_OWNER)


def __getattr__(name: str):
    module = _OWNER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
