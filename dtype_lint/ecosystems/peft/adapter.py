"""The adapter role of the peft family (dtype_lint/ecosystems/registry.py): what an adapter's base
layer is, for the stages that ask. `adapter_verdict(resolver, layer, scope, class_qualname)` judges
a layer expression that reads an adapter's base layer (None: not one; False: one that is never
quantized here); `as_stored_base_layer(source)` follows `self.base_layer = base_layer` into the
methods that read it."""

from dtype_lint.ecosystems.peft.base_layers import as_stored_base_layer
from dtype_lint.ecosystems.peft.family import adapter_verdict

__all__ = ["adapter_verdict", "as_stored_base_layer"]
