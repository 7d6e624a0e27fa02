"""The quantizers a PyTorch project applies to its own modules, and what each leaves in `.weight`.

Read from the installed releases (bitsandbytes 0.50.2, torchao 0.18.0, optimum-quanto 0.2.7) and,
for nvidia-modelopt, from the megatron family's catalogue of 0.47.0 (ecosystems/megatron/
modelopt_catalogue.py), and checked on CPU with a bfloat16 `nn.Linear`:

- bitsandbytes 4-bit (`bnb.nn.Linear4bit`/`LinearNF4`/`LinearFP4` swapped in, or
  `replace_with_bnb_linear`): `Params4bit`, uint8 (`quant_storage`, bitsandbytes/nn/modules.py:222).
- bitsandbytes 8-bit (`bnb.nn.Linear8bitLt` swapped in, or `replace_with_bnb_linear`): `Int8Params`, int8.
- modelopt real quantization (`mtq.compress(model)`): a `QTensorWrapper`, uint8 / int8 / float8_e4m3fn.
- modelopt fake quantization (`mtq.quantize(model, config)`): the float `nn.Parameter` (simulated).
- torchao (`quantize_(model, config)`): `Int8Tensor`, `Float8Tensor`, `IntxUnpackedToInt8Tensor`, ...
  whose `.dtype` is the ORIGINAL float dtype (`_make_wrapper_subclass(..., dtype=...)`).
- optimum-quanto (`quantize(model, weights=...)`, then `freeze`): `WeightQBytesTensor` /
  `WeightQBitsTensor`, whose `.dtype` is the ORIGINAL float dtype.

A cast to a float-looking dtype is harmless: torchao, quanto and modelopt's fake quantization
reach a layer without making a finding. `replace_with_bnb_linear`'s bit width is its config's:
both storages are named.
"""

from __future__ import annotations

from dataclasses import dataclass

from dtype_lint.ecosystems.hf.family import INT8, UINT8
from dtype_lint.ecosystems.megatron.modelopt_catalogue import RELEASE as MODELOPT_RELEASE
from dtype_lint.ecosystems.megatron.modelopt_catalogue import compressed_storages

BNB_RELEASE, TORCHAO_RELEASE, QUANTO_RELEASE = "bitsandbytes 0.50.2", "torchao 0.18.0", "optimum-quanto 0.2.7"


@dataclass(frozen=True)
class Quantizer:
    """A way a project quantizes its modules: its name, the storages it leaves in `.weight`
    ((format, storage word); empty where `.weight.dtype` stays the float dtype), and the evidence."""

    name: str
    storages: tuple[tuple[str, str], ...]
    leaves: str  # what `.weight` becomes, with the release read


BNB_4BIT = ("bitsandbytes 4-bit", UINT8)
BNB_8BIT = ("bitsandbytes 8-bit", INT8)
REPLACE_WITH_BNB = Quantizer("`replace_with_bnb_linear`", (BNB_4BIT, BNB_8BIT),
                             f"`Params4bit` (uint8) under 4-bit, `Int8Params` (int8) under 8-bit ({BNB_RELEASE})")
SWAP_4BIT = Quantizer("a swap to `bnb.nn.Linear4bit`", (BNB_4BIT,),
                      f"`Params4bit`, uint8 (`quant_storage`, bitsandbytes/nn/modules.py:222, {BNB_RELEASE})")
SWAP_8BIT = Quantizer("a swap to `bnb.nn.Linear8bitLt`", (BNB_8BIT,), f"`Int8Params`, int8 ({BNB_RELEASE})")
MTQ_COMPRESS = Quantizer("modelopt `mtq.compress`",
                         tuple((f"modelopt {name}", storage) for name, storage in compressed_storages()),
                         f"a `QTensorWrapper` of the packed data ({MODELOPT_RELEASE})")
MTQ_QUANTIZE = Quantizer("modelopt `mtq.quantize`", (),
                         f"the float weight: fake quantization simulates it ({MODELOPT_RELEASE})")
TORCHAO = Quantizer("torchao `quantize_`", (),
                    f"a tensor subclass whose `.dtype` is the original float dtype ({TORCHAO_RELEASE})")
QUANTO = Quantizer("optimum-quanto `quantize`", (),
                   f"a `WeightQBytesTensor`/`WeightQBitsTensor` whose `.dtype` is the original float dtype "
                   f"({QUANTO_RELEASE})")

# A call that quantizes the model given as its first argument, by the last parts of its
# resolved name: (package prefixes it must come from, last name) -> quantizer.
APPLY_CALLS: tuple[tuple[tuple[str, ...], str, Quantizer], ...] = (
    (("transformers.", "accelerate.", "peft.", "optimum."), "replace_with_bnb_linear", REPLACE_WITH_BNB),
    (("accelerate.",), "replace_with_bnb_layers", REPLACE_WITH_BNB),
    (("modelopt.torch.quantization.",), "compress", MTQ_COMPRESS),
    (("modelopt.torch.quantization.",), "quantize", MTQ_QUANTIZE),
    (("torchao.",), "quantize_", TORCHAO),
    (("optimum.quanto.",), "quantize", QUANTO),
)
# A bitsandbytes layer built in a function that swaps it into a module (`setattr(module, name, ...)`).
SWAP_CLASSES = {"Linear4bit": SWAP_4BIT, "LinearNF4": SWAP_4BIT, "LinearFP4": SWAP_4BIT, "Linear8bitLt": SWAP_8BIT}
SWAP_PACKAGE = "bitsandbytes."
# The packages a file must import from for its calls to be read (the scan's cheap filter).
QUANTIZER_PACKAGES = ("bitsandbytes", "torchao", "optimum.quanto", "modelopt", "transformers.integrations",
                      "accelerate.utils")
# What the text of a file importing from one of them holds: the package's first and last names
# (`from transformers.integrations import ...`, `from transformers import integrations`).
QUANTIZER_WORDS = tuple(dict.fromkeys((p.split(".")[0], p.rsplit(".", 1)[-1]) for p in QUANTIZER_PACKAGES))
# Libraries whose own files apply these quantizers to a model they are handed (the user's): their
# applications say nothing about the layers of their own tree, and other families speak for them.
LIBRARY_PACKAGES = frozenset({"transformers", "diffusers", "accelerate", "peft", "torchao", "bitsandbytes",
                              "optimum", "modelopt"})


def applied_by(qualname: str) -> Quantizer | None:
    """The quantizer a call of this resolved name applies, or None."""
    for prefixes, last, quantizer in APPLY_CALLS:
        if qualname.rsplit(".", 1)[-1] == last and qualname.startswith(prefixes):
            return quantizer
    return None


def swapped_in(qualname: str) -> Quantizer | None:
    """The quantizer a construction of this resolved class swaps in, or None."""
    if not qualname.startswith(SWAP_PACKAGE):
        return None
    return SWAP_CLASSES.get(qualname.rsplit(".", 1)[-1])
