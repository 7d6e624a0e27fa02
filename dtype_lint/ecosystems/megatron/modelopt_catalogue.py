"""What nvidia-modelopt 0.47.0 does to megatron-core's layers: data, read from its code.

`mtq.quantize` swaps each registered layer for a quantized twin (`QuantModuleRegistry.register`)
whose weight is still the float tensor (fake quantization: `.weight.dtype` is the compute dtype).
`mtq.compress` (real quantization) then registers every quantized linear for a `RealQuantLinear`
twin (compress.py:72-85) whose `_parameters["weight"]` setter replaces the weight with a
`QTensorWrapper` of the quantizer's output (quant_linear.py:281-283): a Parameter made of the
quantized data itself (base_qtensor.py:105-108), so `.weight.dtype` is the packed storage. The
original dtype survives only in the wrapper's `metadata["dtype"]`.

modelopt's registry matches a class and its subclasses that keep its `forward`
(opt/dynamic.py:936-938): a subclass with its own `forward` is not reached.
"""

from __future__ import annotations

from dtype_lint.ecosystems.hf.family import FP8, INT8, UINT8

RELEASE = "nvidia-modelopt 0.47.0"
PLUGIN = "modelopt/torch/quantization/plugins/megatron.py"

# megatron-core's layer classes modelopt registers for quantization: qualname -> line of the
# `QuantModuleRegistry.register` in PLUGIN. Every one is a linear `mtq.compress` can pack.
REGISTERED_LAYERS: dict[str, int] = {
    "megatron.core.tensor_parallel.layers.ColumnParallelLinear": 551,
    "megatron.core.tensor_parallel.layers.RowParallelLinear": 583,
    "megatron.core.extensions.transformer_engine.TERowParallelLinear": 799,
    "megatron.core.extensions.transformer_engine.TEColumnParallelLinear": 803,
    "megatron.core.extensions.transformer_engine.TELinear": 807,
    "megatron.core.extensions.transformer_engine.TELayerNormColumnParallelLinear": 811,
    "megatron.core.extensions.transformer_engine.TEColumnParallelGroupedLinear": 950,
    "megatron.core.extensions.transformer_engine.TERowParallelGroupedLinear": 958,
    # torch's own linear (modelopt/torch/quantization/nn/modules/quant_linear.py:38).
    "torch.nn.Linear": 0,
    "torch.nn.modules.linear.Linear": 0,
}
TORCH_LINEAR_EVIDENCE = "modelopt/torch/quantization/nn/modules/quant_linear.py:38"
# The package whose layers the catalogue knows completely: a class of it that is not above is not
# reached (a norm, an attention core, an embedding).
KNOWN_PACKAGE = "megatron.core."


# (format, storage word, the code that makes it). The storage words are the Hugging Face family's
# (ecosystems/hf/family.py), so its partial-guard reader narrows these storages too.
COMPRESSED_STORAGES: tuple[tuple[str, str, str], ...] = (
    ("NVFP4", UINT8, "qtensor/nvfp4_tensor.py:338 packs two fp4 values per uint8"),
    ("INT4", UINT8, "qtensor/int4_tensor.py:76-88 packs two int4 values per uint8"),
    ("NF4", UINT8, "qtensor/nf4_tensor.py:114-123 packs two nf4 values per uint8"),
    ("MXFP4", UINT8, "qtensor/mxfp4_tensor.py:52-81 packs fp4 values into uint8"),
    ("INT8", INT8, "qtensor/int8_tensor.py:88 stores int8"),
    ("FP8", FP8, "qtensor/fp8_tensor.py:107 stores float8_e4m3fn"),
    ("MXFP8", FP8, "qtensor/mxfp8_tensor.py:188 stores float8_e4m3fn"),
)
# Where the weight becomes that storage.
COMPRESS_EVIDENCE = ("modelopt/torch/quantization/compress.py:72-85 registers every quantized linear for "
                     "`RealQuantLinear`; nn/modules/quant_linear.py:281-283 replaces its `weight` with a "
                     "`QTensorWrapper` of the packed data")


def registered_line(qualname: str) -> int | None:
    """The line of PLUGIN that registers this class for quantization (0: modelopt's `nn.Linear`
    registration, elsewhere), or None when modelopt does not register it."""
    line = REGISTERED_LAYERS.get(qualname)
    if line is None and qualname.startswith("core."):
        # megatron-core's own tree: `megatron/` is a namespace package, so its modules are named
        # from `core.` there.
        line = REGISTERED_LAYERS.get("megatron." + qualname)
    return line


def compressed_storages() -> tuple[tuple[str, str], ...]:
    """(format, storage word) for every format `mtq.compress` can leave in a reached layer's `.weight`."""
    return tuple((name, storage) for name, storage, _where in COMPRESSED_STORAGES)
