"""The attributes a vLLM-style engine's layer carries beside its weight, by what they mean.

vLLM builds a quantizable layer with the model dtype it was asked for (`create_weights(...,
params_dtype)`) and keeps it on the layer as `layer.params_dtype`: the dtype its activations are
computed in, whatever its quant method leaves in `.weight`. The input-dtype helper answers it where
the weight is packed or missing (the helper template), so a function that reads it and
returns may be such a helper (core/text_facts.py, dtypes/evaluator.py), and a dtype stated as it
is the compute dtype (the storage model).

Plugged in by the registry's `layer_attributes` role (core layer: text facts read it).
"""

from __future__ import annotations

# The attribute(s) a layer states its model (compute) dtype under.
MODEL_DTYPE_ATTRIBUTES: tuple[str, ...] = ("params_dtype",)
