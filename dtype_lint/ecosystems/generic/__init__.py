"""Generic PyTorch projects: a project's own layers, configured as quantizable (`quantizable =
[...]`), built with a quantization config, or known by name (`--name-heuristics`), whose
quantizers dtype-lint does not know by name."""
