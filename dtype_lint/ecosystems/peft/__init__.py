"""The adapter-library family (peft and projects in its shape).

An adapter library attaches small trainable layers (LoRA, IA3, HRA, BOFT, ...) to a model that was
loaded, and possibly quantized, before: the adapters themselves are never quantized, but the
*base layer* each one wraps is the loaded model's layer, which bitsandbytes 4/8-bit, GPTQ, AWQ,
HQQ, GGUF or an FP8 quantizer replaced at load time. So `self.get_base_layer().weight.dtype`,
`self.base_layer.weight.dtype` or `base_layer.weight.dtype` (the layer handed to an adapter's
constructor) is a storage dtype there, exactly as in Hugging Face model code, even in `__init__`:
the adapter is built after loading. The stages reach it through the registry's `adapter` role
(adapter.py).
"""

# The modules of this ecosystem that are not a registry role (a role's file name says its stage),
# each with the stage layer it sits in: tests/test_layers.py reads this, so an ecosystem's own
# modules need no line outside its folder.
MODULE_LAYERS = {
    "base_layers": "analysis",    # an adapter's base layer, the loaded (quantized) model's layer
}
