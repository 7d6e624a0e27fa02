"""What a quantized layer stores, seen at run time: which quantizer a module belongs to, and
whether a dtype is a packed storage dtype that no floating activation should be cast to.

This mirrors, for live objects, what the static storage model reads from the backends' code
(docs/hf.md, "What each quantizer replaces and leaves"): bitsandbytes 4-bit keeps `Params4bit`
in uint8, 8-bit `Int8Params` in int8, Marlin repacks to int32, FP8 keeps float8, and GPTQ, AWQ
and HQQ layers have no `.weight` at all (`qweight`, `W_q`). optimum-quanto and torchao layers
report the float dtype in `.weight.dtype`, so nothing here calls them packed.

torch is imported only inside functions: the pytest plugin imports this package at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dtype_lint.dtypes.storage_formats import packed_storages

# The dtype names of packed integer storage (bitsandbytes, Marlin, GGUF blocks): the storage
# formats' integer containers.
PACKED_INTEGER_NAMES = frozenset(f"torch.{dtype}" for dtype in packed_storages() if dtype is not None)

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


@dataclass(frozen=True)
class LayerStorage:
    """What one quantized layer stores: its class, the quantizer's name, and the storage dtype of
    its `.weight` (None when the layer has none: `storage` then names what it keeps instead)."""

    layer_class: str
    quantizer: str
    storage: str
    dtype: Any = None  # the torch.dtype of `.weight`, or None without one


def is_fp8(dtype: Any) -> bool:
    """float8_* dtypes (e4m3fn, e5m2, e4m3fnuz, ...): floating, one byte."""
    return bool(getattr(dtype, "is_floating_point", False)) and getattr(dtype, "itemsize", 0) == 1


def is_packed_storage(dtype: Any) -> bool:
    """A dtype a quantizer stores weights in and no activation is computed in."""
    return str(dtype) in PACKED_INTEGER_NAMES or is_fp8(dtype)


def breaks_activation(target: Any, activation: Any) -> bool:
    """Whether casting a floating activation of dtype `activation` to `target` is the bug: a packed
    integer target, or fp8 for an activation that is not fp8 already."""
    if str(target) in PACKED_INTEGER_NAMES:
        return True
    return is_fp8(target) and not is_fp8(activation)


def _class_chain_names(cls: type) -> list[str]:
    return [klass.__name__ for klass in cls.__mro__]


def quantizer_name(module: Any, weight: Any = None) -> str:
    """The quantizer a layer belongs to, in docs/hf.md's words ("bitsandbytes 4-bit", "GPTQ"),
    else the top-level package of its class and the class name."""
    cls = type(module)
    for name in _class_chain_names(cls):
        if name in QUANTIZER_BY_CLASS_NAME:
            return QUANTIZER_BY_CLASS_NAME[name]
        if name.startswith("WQLinear"):
            return "AWQ"
    if weight is not None:
        for name in _class_chain_names(type(weight)):
            if name in QUANTIZER_BY_WEIGHT_CLASS_NAME:
                return QUANTIZER_BY_WEIGHT_CLASS_NAME[name]
    package = (cls.__module__ or "").partition(".")[0]
    if package in QUANTIZER_BY_PACKAGE:
        return QUANTIZER_BY_PACKAGE[package]
    if "QuantLinear" in cls.__name__:
        return "GPTQ"
    return f"{package or '?'} ({cls.__name__})"


def _own_value(module: Any, name: str) -> Any:
    """The module's parameter, buffer or plain attribute `name` without going through
    `__getattr__` (which the guard wraps), or None."""
    for table in ("_parameters", "_buffers"):
        found = getattr(module, "__dict__", {}).get(table) or {}
        if name in found:
            return found[name]
    return getattr(module, "__dict__", {}).get(name)


def weight_storage(module: Any, weight: Any) -> LayerStorage | None:
    """The layer's storage when its `.weight` is packed (uint8/int8/int32/fp8), else None: a float
    `.weight` (unquantized, quanto, torchao) is what the activation may be cast to."""
    dtype = getattr(weight, "dtype", None)
    if dtype is None or not is_packed_storage(dtype):
        return None
    return LayerStorage(type(module).__name__, quantizer_name(module, weight), str(dtype), dtype)


def missing_weight_storage(module: Any) -> LayerStorage | None:
    """The layer's storage when it is a quantized layer with no `.weight` (GPTQ/AWQ `qweight`,
    HQQ `W_q`, compressed-tensors `weight_packed`), else None."""
    if _own_value(module, "weight") is not None:
        return None
    for attribute in NO_WEIGHT_STORAGE_ATTRIBUTES:
        value = _own_value(module, attribute)
        if value is not None:
            dtype = getattr(value, "dtype", None)
            kept = f"`{attribute}`" + (f" ({dtype})" if dtype is not None else "")
            return LayerStorage(type(module).__name__, quantizer_name(module), f"no `.weight`: {kept}")
    return None
