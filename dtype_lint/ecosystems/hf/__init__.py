"""The Hugging Face ecosystem (transformers, diffusers, peft): its backend family, helper
`get_module_input_dtype`, planner, patch series, regression tests and the bitsandbytes proof."""
