"""The adapter family's verdict on a layer expression: the base layer an adapter wraps is the
loaded model's layer, so the Hugging Face quantizers reach it (ecosystems/hf/family.py names them
and the storage each leaves). The verdict's evidence is the HF family's `BackendEvidence`: the
rules word the message, narrow it by partial guards and fix it through the HF helper
(`get_module_input_dtype`, ecosystems/hf/helper.py), which needs no vLLM.
"""

from __future__ import annotations

import ast

from dtype_lint.core.findings import Evidence
from dtype_lint.ecosystems.hf.family import (
    CONV,
    EMBEDDING,
    LINEAR,
    QUANTIZERS,
    BackendEvidence,
    storage_phrase,
)
from dtype_lint.ecosystems.peft.base_layers import (
    EMBEDDING_ATTRIBUTES,
    SCALED_EMBEDDING_ATTRIBUTE,
    base_attributes_read,
    base_layer_step,
    computes_with_base_weight,
    is_adapter_class,
    is_adapter_file,
    writes_base_weight,
)

# The words of this family's evidence: how `doctor` and the HF helper's paragraph tell its sites.
FAMILY_EVIDENCE = "is the base layer the adapter wraps"


class BaseLayerEvidence(BackendEvidence):
    """The HF quantizers that reach an adapter's base layer. The adapter is built after the model
    was loaded and quantized, so its `__init__` meets the quantized base too (unlike a model's
    own `__init__`, which runs before any quantizer)."""

    built_after_loading = True


def base_kind(class_qualname: str | None) -> str:
    """The torch layer the base is, read from the adapter class's name: peft names its adapters for
    the layer they wrap (`lora.Conv2d`, `HRAConv2d`, `ia3._ConvNd`, `lora.Embedding`); a Linear
    otherwise, the layer every quantizer replaces."""
    name = (class_qualname or "").rsplit(".", 1)[-1]
    if "Conv" in name:
        return CONV
    if "Embedding" in name:
        return EMBEDDING
    return LINEAR


def reaching_quantizers(kind: str) -> tuple[tuple[str, str], ...]:
    """(quantizer, storage) for every Hugging Face quantizer that replaces this kind of layer
    (transformers' and diffusers'; the names once each)."""
    seen: dict[tuple[str, str], None] = {}
    for quantizer in QUANTIZERS:
        if kind in quantizer.kinds:
            seen.setdefault((quantizer.name, quantizer.storage), None)
    return tuple(seen)


def adapter_verdict(resolver, layer: ast.expr, scope, class_qualname: str | None):
    """("high", evidence) when `layer` is the base layer of an adapter in adapter-library code;
    False where it is, in code that merges into the base weight (no finding); None: not this
    family's call."""
    step = base_layer_step(layer, scope)
    if step is None:
        return None
    if not (is_adapter_file(resolver) or is_adapter_class(resolver, class_qualname)):
        return None
    kind = base_kind(class_qualname)
    if scope.fn is not None:
        if writes_base_weight(scope.fn.name) or computes_with_base_weight(scope.fn, scope):
            return False  # a merge, or code computing in the base weight's own storage
        read = base_attributes_read(scope.fn, scope)
        if SCALED_EMBEDDING_ATTRIBUTE in read:
            return False  # a scaled embedding: a subclass no HF quantizer replaces
        if read & EMBEDDING_ATTRIBUTES:
            kind = EMBEDDING
    storages = reaching_quantizers(kind)
    if not storages:
        return None
    line = getattr(layer, "lineno", 0)
    where = Evidence(f"`{ast.unparse(step)}` {FAMILY_EVIDENCE}: the loaded model's own layer "
                     "(adapter layers are never quantized, their base layers are)", resolver.path, line)
    backend = BaseLayerEvidence(f"quantized before the adapter is attached: {storage_phrase(storages)}",
                                resolver.path, line, storages)
    return "high", (where, backend)
