"""The Hugging Face ecosystem (transformers, diffusers, peft): its backend family, helper
`get_module_input_dtype`, planner, patch series, regression tests and the bitsandbytes proof."""

# The modules of this ecosystem that are not a registry role (a role's file name says its stage),
# each with the stage layer it sits in: tests/test_layers.py reads this, so an ecosystem's own
# modules need no line outside its folder.
MODULE_LAYERS = {
    "model_classes": "analysis",     # the shipped model class names of transformers and diffusers
    "tiny_models": "consumers",       # tiny models built from configs, for the proofs
    "tiny_diffusers": "consumers",    # tiny diffusers models, for the proofs
}
