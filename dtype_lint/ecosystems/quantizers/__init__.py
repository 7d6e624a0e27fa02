"""The generic PyTorch quantizer family: a project that applies a quantizer to its own modules.

A plain PyTorch project (no Hugging Face model base, no vLLM-style engine) may quantize its own
model after building it: `replace_with_bnb_linear(model, ...)`, its own loop that swaps
`nn.Linear` children for `bnb.nn.Linear4bit` / `Linear8bitLt`, torchao's `quantize_(model, ...)`,
optimum-quanto's `quantize(model, ...)`, nvidia-modelopt's `mtq.quantize` / `mtq.compress`,
Lightning Fabric's `BitsandbytesPrecision` plugin (`fabric.init_module()`, `fabric.setup(model)`).
`catalogue.py` says what each leaves in `.weight` (read from the installed releases);
`applications.py` finds where the project applies one and which of its model classes the call
reaches; `family.py`, `planner.py` and `words.py` plug those into the stages
(dtype_lint/ecosystems/registry.py). The fix is the Hugging Face helper's
(`get_module_input_dtype`, ecosystems/hf/helper.py), proven on every storage these quantizers
leave (tests/test_journey_quant_replace.py).
"""

# The modules of this ecosystem that are not a registry role (a role's file name says its stage),
# each with the stage layer it sits in: tests/test_layers.py reads this, so an ecosystem's own
# modules need no line outside its folder.
MODULE_LAYERS = {
    "applications": "analysis",    # where a project applies a quantizer, to which model
    "applications_fabric": "analysis",  # ... by Lightning Fabric's bitsandbytes precision plugin
    "catalogue": "analysis",       # what each quantizer leaves in `.weight`
}
