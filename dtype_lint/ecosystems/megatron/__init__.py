"""The megatron family: models built through module specs, quantized by nvidia-modelopt.

megatron-core builds its layers through `build_module(spec_or_submodule, ...)`: a layer's class is
not in its code but in a `ModuleSpec(module=..., submodules=SubmodulesDataclass(in_proj=...))`
written in a layer-specs file. `specs.py` follows such a construction to the specs of the tree
that name its class; `modelopt_catalogue.py` says which of megatron-core's linears modelopt's
quantization reaches and what its real quantization (`mtq.compress`) leaves in `.weight`, with
modelopt 0.47.0's file:line; `family.py`, `words.py`, `planner.py` and `helper.py` plug those into
the stages (dtype_lint/ecosystems/registry.py).
"""

# The modules of this ecosystem that are not a registry role (a role's file name says its stage),
# each with the stage layer it sits in: tests/test_layers.py reads this, so an ecosystem's own
# modules need no line outside its folder.
MODULE_LAYERS = {
    "specs": "analysis",                 # the module specs that say which class `build_module` builds
    "modelopt_catalogue": "analysis",    # what nvidia-modelopt reaches and leaves in `.weight`
}
