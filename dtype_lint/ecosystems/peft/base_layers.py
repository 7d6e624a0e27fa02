"""Which code is adapter-library code, and which expressions in it hold the base layer.

peft's shape (0.21.2): every tuner layer derives from `BaseTunerLayer`, whose `get_base_layer()`
walks `self.base_layer` down to the model's own module; a tuner layer's `__init__` and
`update_layer` are handed that module as `base_layer`; a tuner model's `_create_and_replace`
is handed it as `target`; adaption prompts wrap a model's attention module passed as `model`.
A project in that shape without importing peft (its own `get_base_layer()`) is recognised by
the method alone.
"""

from __future__ import annotations

import ast

from dtype_lint.ecosystems.hf.family import ENGINE_PACKAGES, hf_module

ADAPTER_LIBRARIES = frozenset({"peft"})
BASE_GETTER = "get_base_layer"
BASE_ATTRIBUTE = "base_layer"
# Parameters that hold the loaded model's module in adapter code: a tuner layer's `base_layer`, a
# tuner model's `target` (`_create_and_replace(config, adapter_name, target, ...)`), an adaption
# prompt's wrapped attention `model`.
BASE_PARAMETERS = frozenset({"base_layer", "target", "model"})
# peft's tuner-layer base, for a project subclassing it without peft's source in the tree.
TUNER_LAYER_BASES = frozenset({"peft.tuners.tuners_utils.BaseTunerLayer", "peft.tuners.BaseTunerLayer"})


# Libraries that import peft for their own integration code (transformers' `integrations/peft.py`,
# diffusers' loaders): their model families decide their layers.
OTHER_FAMILIES = frozenset({"transformers", "diffusers"}) | ENGINE_PACKAGES
# Code that writes the adapter into the base weight: casting to the weight's storage dtype is what
# writing into it needs (quantized bases are merged by their own classes, which dequantize first).
MERGE_WORDS = ("merge", "delta", "truncat")


def is_adapter_file(resolver) -> bool:
    """A file of an adapter library, or of a project that imports from one."""
    top = hf_module(resolver).split(".", 1)[0]
    if top in ADAPTER_LIBRARIES:
        return True
    if top in OTHER_FAMILIES:
        return False
    return any(target.split(".", 1)[0] in ADAPTER_LIBRARIES for target in resolver.imports.values())


def writes_base_weight(function_name: str) -> bool:
    """`merge`, `unmerge`, `get_delta_weight`, `_truncate_base_weight`: code whose result goes into
    the base layer's weight storage, where its storage dtype is the right one."""
    name = function_name.lower()
    return any(word in name for word in MERGE_WORDS)


def is_adapter_class(resolver, class_qualname: str | None) -> bool:
    """A class whose MRO defines `get_base_layer()` (or is peft's `BaseTunerLayer`): it wraps a
    base layer, in whatever project."""
    if not class_qualname:
        return False
    for qualname in resolver.index.mro(class_qualname):
        if qualname in TUNER_LAYER_BASES:
            return True
        facts = resolver.project.class_facts(qualname)
        if facts is not None and BASE_GETTER in facts.methods:
            return True
    return False


def base_layer_step(layer: ast.expr, scope, depth: int = 0) -> ast.expr | None:
    """The sub-expression of `layer` that names the base layer (`self.get_base_layer()`,
    `self.base_layer`, the `base_layer` parameter, a local bound once to one of them), `layer`
    itself or a module below it (`model.q_proj`); None when `layer` is not the base layer."""
    if depth > 6:
        return None
    if isinstance(layer, ast.Call):
        func = layer.func
        if isinstance(func, ast.Attribute) and func.attr == BASE_GETTER and not layer.args and not layer.keywords:
            return layer
        return None
    if isinstance(layer, ast.Attribute):
        if layer.attr == BASE_ATTRIBUTE:
            return layer
        # A submodule of the base layer (`model.q_proj`, `base_layer.out_proj`) is the model's too.
        return base_layer_step(layer.value, scope, depth + 1)
    if isinstance(layer, ast.Name):
        # `target` and `model` are the base only in an adapter's or tuner's method (a script's
        # `def train(model)` holds the whole model, head included).
        if layer.id in scope.params and layer.id in BASE_PARAMETERS and \
                (layer.id == BASE_ATTRIBUTE or scope.class_qualname is not None):
            return layer
        values = scope.assigns.get(layer.id, [])
        if len(values) == 1 and values[0] is not None:
            return base_layer_step(values[0], scope, depth + 1)
    return None


def as_stored_base_layer(source):
    """A WeightDtypeSource read from the `base_layer` parameter (`self.dtype =
    base_layer.weight.dtype` in an adapter's `__init__`), as read from `self.base_layer`, where
    every peft tuner layer stores it; any other source unchanged."""
    if source is None or not (isinstance(source.layer, ast.Name) and source.layer.id == BASE_ATTRIBUTE):
        return source
    from dataclasses import replace

    stored = ast.Attribute(ast.Name("self", ast.Load()), BASE_ATTRIBUTE, ast.Load())
    return replace(source, layer=ast.copy_location(stored, source.layer))


# Attributes a base layer's weight tensor is read for without computing with its values.
_METADATA = frozenset({"dtype", "device", "shape", "size", "ndim", "dim", "is_floating_point"})
# ... or converts to a compute dtype before computing with it.
_CONVERSIONS = frozenset({"to", "float", "half", "bfloat16", "double"})


def computes_with_base_weight(fn: ast.AST, scope) -> bool:
    """Does the function compute with the base layer's weight tensor itself (a local bound to
    `<base layer>.weight` used for more than its dtype, device or shape: `weight.reshape(-1)`,
    passed to a norm, copied row by row)? Such code works in the weight's own space (SuperTuning's
    on-the-fly composition, DoRA's weight norm, trainable tokens' rows): its dtype reads follow the
    storage it computes with, and a quantized base breaks it at the weight, not at the cast."""
    weight_locals = {name for name, values in scope.assigns.items()
                     if len(values) == 1 and isinstance(values[0], ast.Attribute) and values[0].attr == "weight"
                     and base_layer_step(values[0].value, scope) is not None}
    if not weight_locals:
        return False
    parents = {id(child): node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Name) and node.id in weight_locals and isinstance(node.ctx, ast.Load)):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.attr == "data":  # `weight.data.to(...)`
            parent = parents.get(id(parent))
        if isinstance(parent, ast.Attribute) and (parent.attr in _METADATA or parent.attr in _CONVERSIONS):
            continue  # its metadata, or converted to a compute dtype first (LoRA-GA's `weight.data.to(float32)`)
        return True
    return False


# Attributes only an embedding has; `embed_scale` only a subclass of torch's (Gemma's scaled
# embeddings), which no HF quantizer replaces (ecosystems/hf/family.py: GGUF takes exact
# `nn.Embedding` only).
EMBEDDING_ATTRIBUTES = frozenset({"embedding_dim", "num_embeddings", "padding_idx", "embed_scale"})
SCALED_EMBEDDING_ATTRIBUTE = "embed_scale"


def base_attributes_read(fn: ast.AST, scope) -> set[str]:
    """The attributes the function reads of a base-layer expression (`base_layer.embed_scale`)."""
    return {node.attr for node in ast.walk(fn)
            if isinstance(node, ast.Attribute) and base_layer_step(node.value, scope) is not None}
