"""What a quantized layer stores, seen at run time: which quantizer a module belongs to, and
whether a dtype is a packed storage dtype that no floating activation should be cast to.

This mirrors, for live objects, what the static storage model reads from the backends' code: a
packed integer or fp8 `.weight`, or no `.weight` with the storage kept under another name. Which
quantizer a layer belongs to, and where a layer without `.weight` keeps its storage, is each
ecosystem's data (the registry's `runtime` role: ecosystems/hf/runtime.py says what each of its
quantizers leaves).

torch is imported only inside functions: the pytest plugin imports this package at start-up.
"""

from __future__ import annotations

from typing import Any

from dtype_lint.core.records import record
from dtype_lint.dtypes.storage_formats import packed_storages
from dtype_lint.ecosystems.registry import plugins

# The dtype names of packed integer storage: the storage formats' integer containers.
PACKED_INTEGER_NAMES = frozenset(f"torch.{dtype}" for dtype in packed_storages() if dtype is not None)

# What each ecosystem's quantizers look like in a live model (the registry's `runtime` role:
# ecosystems/hf/runtime.py), merged in the registry's order.
_RUNTIMES = plugins("runtime")


def _merged(table: str) -> dict[str, str]:
    """One of the runtime tables, every ecosystem's merged (the first one's entry wins a key)."""
    merged: dict[str, str] = {}
    for runtime in _RUNTIMES:
        for key, quantizer in getattr(runtime, table).items():
            merged.setdefault(key, quantizer)
    return merged


# The attributes a layer without `.weight` keeps its storage in.
NO_WEIGHT_STORAGE_ATTRIBUTES = tuple(dict.fromkeys(attribute for runtime in _RUNTIMES
                                                   for attribute in runtime.NO_WEIGHT_STORAGE_ATTRIBUTES))
# The quantizer's name by a layer's exact class name (on the class and its bases), by a prefix of it,
# by its weight's class name, by its top-level package, and by a part of the layer's own class name.
QUANTIZER_BY_CLASS_NAME = _merged("QUANTIZER_BY_CLASS_NAME")
QUANTIZER_BY_CLASS_PREFIX = _merged("QUANTIZER_BY_CLASS_PREFIX")
QUANTIZER_BY_WEIGHT_CLASS_NAME = _merged("QUANTIZER_BY_WEIGHT_CLASS_NAME")
QUANTIZER_BY_PACKAGE = _merged("QUANTIZER_BY_PACKAGE")
QUANTIZER_BY_CLASS_NAME_PART = _merged("QUANTIZER_BY_CLASS_NAME_PART")


@record(frozen=True)
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
    """The quantizer a layer belongs to, in its ecosystem's words (docs/hf.md's for Hugging Face's),
    else the top-level package of its class and the class name."""
    cls = type(module)
    for name in _class_chain_names(cls):
        if name in QUANTIZER_BY_CLASS_NAME:
            return QUANTIZER_BY_CLASS_NAME[name]
        prefix = next((prefix for prefix in QUANTIZER_BY_CLASS_PREFIX if name.startswith(prefix)), None)
        if prefix is not None:
            return QUANTIZER_BY_CLASS_PREFIX[prefix]
    if weight is not None:
        for name in _class_chain_names(type(weight)):
            if name in QUANTIZER_BY_WEIGHT_CLASS_NAME:
                return QUANTIZER_BY_WEIGHT_CLASS_NAME[name]
    package = (cls.__module__ or "").partition(".")[0]
    if package in QUANTIZER_BY_PACKAGE:
        return QUANTIZER_BY_PACKAGE[package]
    part = next((part for part in QUANTIZER_BY_CLASS_NAME_PART if part in cls.__name__), None)
    if part is not None:
        return QUANTIZER_BY_CLASS_NAME_PART[part]
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
    `.weight` (unquantized, or a quantizer that keeps a float weight) is what the activation may be cast to."""
    dtype = getattr(weight, "dtype", None)
    if dtype is None or not is_packed_storage(dtype):
        return None
    return LayerStorage(type(module).__name__, quantizer_name(module, weight), str(dtype), dtype)


def missing_weight_storage(module: Any) -> LayerStorage | None:
    """The layer's storage when it is a quantized layer with no `.weight` (its storage under one of
    NO_WEIGHT_STORAGE_ATTRIBUTES), else None."""
    if _own_value(module, "weight") is not None:
        return None
    for attribute in NO_WEIGHT_STORAGE_ATTRIBUTES:
        value = _own_value(module, attribute)
        if value is not None:
            dtype = getattr(value, "dtype", None)
            kept = f"`{attribute}`" + (f" ({dtype})" if dtype is not None else "")
            return LayerStorage(type(module).__name__, quantizer_name(module), f"no `.weight`: {kept}")
    return None
