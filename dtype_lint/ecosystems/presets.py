"""Built-in knowledge of real codebases: which classes hold repackable weights, which code owns storage.

Names are fully qualified. Subclasses found in the scanned tree are added by the class index, so a
preset lists only roots plus the well-known public subclasses, which lets a downstream project that
imports vLLM (but does not vendor it) resolve `ColumnParallelLinear` without scanning vLLM itself.
"""

_VLLM_LINEAR = "vllm.model_executor.layers.linear"

PRESETS: dict[str, dict] = {
    "vllm": {
        "quantizable": [
            f"{_VLLM_LINEAR}.LinearBase",
            f"{_VLLM_LINEAR}.ReplicatedLinear",
            f"{_VLLM_LINEAR}.ColumnParallelLinear",
            f"{_VLLM_LINEAR}.DCPGroupColumnParallelLinear",
            f"{_VLLM_LINEAR}.MergedColumnParallelLinear",
            f"{_VLLM_LINEAR}.QKVParallelLinear",
            f"{_VLLM_LINEAR}.RowParallelLinear",
            "vllm.model_executor.layers.fused_moe.layer.FusedMoE",
            "vllm.model_executor.layers.fused_moe.FusedMoE",
            "vllm.model_executor.layers.fused_moe.routed_experts.RoutedExperts",
            "vllm.model_executor.layers.vocab_parallel_embedding.VocabParallelEmbedding",
            "vllm.model_executor.layers.vocab_parallel_embedding.ParallelLMHead",
        ],
        # Which constructor parameters carry the quantization config.
        "config-params": ["quant_config"],
        # Embeddings and heads are quantizable too (CT WNA16 and GGUF embeddings have no `.weight`,
        # ModelOpt Q8_0 keeps a uint8 one): for a project that imports vLLM without scanning it.
        "not-quantizable": [],
        # Code whose job is the storage format: quant configs, quant methods and weight-kernel
        # classes. A check against one of these (`isinstance(m, LinearMethodBase)`) names no
        # backend (DTL003).
        "exempt-classes": [
            "vllm.model_executor.layers.quantization.base_config.QuantizationConfig",
            "vllm.model_executor.layers.quantization.base_config.QuantizeMethodBase",
            f"{_VLLM_LINEAR}.LinearMethodBase",
            "vllm.model_executor.layers.fused_moe.fused_moe_method_base.FusedMoEMethodBase",
            "vllm.model_executor.kernels.linear.base.MMLinearKernel",
            "vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel.MPLinearKernel",
            "vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel.ScaledMMLinearKernel",
            "vllm.model_executor.kernels.linear.nvfp4.base.NvFp4LinearKernel",
            "vllm.model_executor.kernels.linear.mxfp4.base.MxFp4LinearKernel",
            "vllm.model_executor.kernels.linear.mxfp6.base.MxFp6LinearKernel",
            "vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel.Mxfp8LinearKernel",
        ],
        "helper": "vllm.model_executor.layers.quantization.utils.layer_input_dtype:get_layer_input_dtype",
        "helper-template": "vllm",
    },
    "generic": {
        "config-params": ["quant_config"],
        "quantizable": [],
        "not-quantizable": [],
        "exempt-classes": [],
        "helper": "layer_input_dtype:get_layer_input_dtype",
        "helper-template": "torch",
    },
}

# Functions that handle the storage format by design, in any class (fnmatch patterns).
EXEMPT_FUNCTIONS = [
    "process_weights_after_loading",
    "create_weights",
    "*weight_loader*",
    "load_weights",
    "_load_weights*",
]

NAME_HEURISTICS = ["*_proj", "*proj", "lm_head", "experts"]


def layer_packages(names) -> frozenset[str]:
    """The packages holding the modules of the layer classes `names` (`vllm.model_executor.layers`
    for the vllm preset). A project importing from one writes code on those layers; one that only
    drives the engine (`from vllm import LLM`, a sampler, a worker) does not, and lacking the
    preset's classes is no sign of a missing setting there."""
    found = set()
    for name in names:
        module = name.rpartition(".")[0]
        found.add(module.rpartition(".")[0] or module)
    return frozenset(p for p in found if not any(p.startswith(q + ".") for q in found))


def imports_from(target: str, packages: frozenset[str]) -> bool:
    """Is the dotted import `target` one of `packages` or inside one?"""
    return any(target == p or target.startswith(p + ".") for p in packages)


def _engines_and_layers(preset: str) -> tuple[set[str], frozenset[str]] | None:
    """(the top-level packages of the `preset`'s layer classes, their layers' packages), None for a
    preset without layer classes."""
    names = PRESETS[preset]["quantizable"]
    if not names:
        return None
    return {name.split(".", 1)[0] for name in names}, layer_packages(names)


def writes_on_preset_layers(preset: str, imports: dict[str, str], module: str, holds) -> bool:
    """Is a file of module `module`, importing `imports` (local name -> target), code of the
    `preset`'s engine or written on its layers: the engine's own package, or an import from its
    layers' package (layer_packages)? `holds(top)`: does the project hold that top-level package
    (a checkout of the engine)?"""
    known = _engines_and_layers(preset)
    if known is None:
        return False
    engines, packages = known
    return module.split(".", 1)[0] in engines or any(holds(engine) for engine in engines) or \
        any(imports_from(target, packages) for target in imports.values())


def tree_on_preset(preset: str, modules) -> bool:
    """Is some module of the tree (`modules`: the class index's table, name -> header) the
    `preset`'s engine or written on its layers (writes_on_preset_layers)? The one test behind
    doctor's "not used here" and the inferred helper's wording."""
    known = _engines_and_layers(preset)
    if known is None:
        return False
    engines, packages = known
    if engines & modules.top_names() or any(modules.get(engine) is not None for engine in engines):
        return True  # the engine's own modules (a checkout of it)
    # Only a file that names the engine can import from its layers' package (a relative import is
    # made inside the engine, held above): the others' headers are not read. Reading every header
    # of sglang 0.5.23 for this was an eighth of a cold check that had a fix to place.
    return any(imports_from(target, packages) for _name, header in modules.naming(tuple((e,) for e in sorted(engines)))
               for target in header.imports.values())
