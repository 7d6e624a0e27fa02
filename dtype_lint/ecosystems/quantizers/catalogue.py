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

- Lightning Fabric's bitsandbytes precision plugin (`BitsandbytesPrecision(mode, dtype)` handed to
  `Fabric(plugins=...)`, read in lightning 2.5.5: lightning/fabric/plugins/precision/bitsandbytes.py):
  `fabric.init_module()` patches `torch.nn.Linear` to the mode's bitsandbytes class while the model
  is built (`module_init_context`, `_ClassReplacementContextManager`), and `fabric.setup(model)` /
  `setup_module(model)` swap every `torch.nn.Linear` left (`convert_module`, `_convert_layers`) but
  `ignore_modules`: `nf4`, `nf4-dq`, `fp4`, `fp4-dq` -> `_Linear4bit` (`Params4bit`, uint8);
  `int8` -> `_Int8LinearInference` (`has_fp16_weights=False`: `Int8Params`, int8); `int8-training`
  -> `_Linear8bitLt` with bitsandbytes' default `has_fp16_weights=True`: the weight stays float16
  (the plugin's `quantize` keeps `B`, the fp16 copy), a float `.dtype`.

A cast to a float-looking dtype is harmless: torchao, quanto and modelopt's fake quantization
reach a layer without making a finding. `replace_with_bnb_linear`'s bit width is its config's:
both storages are named.
"""

from __future__ import annotations

from dataclasses import field

from dtype_lint.core.records import record
from dtype_lint.ecosystems.hf.family import INT8, UINT8
from dtype_lint.ecosystems.megatron.modelopt_catalogue import RELEASE as MODELOPT_RELEASE
from dtype_lint.ecosystems.megatron.modelopt_catalogue import compressed_storages

BNB_RELEASE, TORCHAO_RELEASE, QUANTO_RELEASE = "bitsandbytes 0.50.2", "torchao 0.18.0", "optimum-quanto 0.2.7"
LIGHTNING_RELEASE = "lightning 2.5.5"


@record(frozen=True)
class Quantizer:
    """A way a project quantizes its modules: its name, the storages it leaves in `.weight`
    ((format, storage word); empty where `.weight.dtype` stays the float dtype), and the evidence."""

    name: str
    storages: tuple[tuple[str, str], ...]
    leaves: str  # what `.weight` becomes, with the release read


@record
class Application:
    """One quantizer applied to a model (applications.py): the model's classes in the tree, or why
    they are unknown."""

    quantizer: Quantizer
    path: str
    line: int
    call_text: str
    package: str  # the top-level package of the applying file
    classes: list[str] = field(default_factory=list)
    unknown: str = ""


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

# Lightning Fabric's bitsandbytes precision plugin, by its mode (applications_fabric.py).
_FABRIC_PLUGIN = "Lightning Fabric's `BitsandbytesPrecision`"
_FABRIC_SOURCE = f"lightning/fabric/plugins/precision/bitsandbytes.py, {LIGHTNING_RELEASE}"
FABRIC_4BIT = Quantizer(f"{_FABRIC_PLUGIN} (4-bit)", (BNB_4BIT,),
                        f"`Params4bit`, uint8 (`_Linear4bit`, {_FABRIC_SOURCE})")
FABRIC_8BIT = Quantizer(f"{_FABRIC_PLUGIN} (`int8`)", (BNB_8BIT,),
                        f"`Int8Params`, int8 (`_Int8LinearInference`, {_FABRIC_SOURCE})")
FABRIC_8BIT_TRAINING = Quantizer(f"{_FABRIC_PLUGIN} (`int8-training`)", (),
                                 f"a float16 `Int8Params` (`has_fp16_weights=True`, {_FABRIC_SOURCE})")
FABRIC_ANY_MODE = Quantizer(f"{_FABRIC_PLUGIN} (a mode not told here)", (BNB_4BIT, BNB_8BIT),
                            f"`Params4bit` (uint8) under a 4-bit mode, `Int8Params` (int8) under `int8` "
                            f"({_FABRIC_SOURCE})")
FABRIC_MODES = {"nf4": FABRIC_4BIT, "nf4-dq": FABRIC_4BIT, "fp4": FABRIC_4BIT, "fp4-dq": FABRIC_4BIT,
                "int8": FABRIC_8BIT, "int8-training": FABRIC_8BIT_TRAINING}
# The plugin class and where Lightning exports it (`lightning.pytorch.plugins`' subclass too);
# the `Fabric` class that takes it as `plugins=`; the methods that apply it to a model: the
# context the model is built under, and the calls given the model as their first argument.
FABRIC_PLUGIN_CLASS = "BitsandbytesPrecision"
FABRIC_PLUGIN_PACKAGES = ("lightning.fabric.plugins", "lightning.pytorch.plugins", "lightning_fabric.plugins",
                          "pytorch_lightning.plugins")
FABRIC_CLASS = "Fabric"
FABRIC_PACKAGES = ("lightning", "lightning_fabric")
LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning")  # prefixes: a file importing one is read for the plugin
FABRIC_INIT = "init_module"
FABRIC_SETUP = frozenset({"setup", "setup_module"})
FABRIC_CONVERT = "convert_module"  # `fabric._precision.convert_module(model)`: the plugin's own swap
FABRIC_LAUNCH = "launch"  # `fabric.launch(main, ...)` calls `main(fabric, ...)`

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
# (`from transformers.integrations import ...`, `from transformers import integrations`). One word
# stands for bitsandbytes and Lightning's plugin both: `itsandbytes` is in `bitsandbytes` and in
# `BitsandbytesPrecision`, which a file applying the plugin names (no pass more over each file).
_SHARED_WORDS = {"bitsandbytes": "itsandbytes"}
QUANTIZER_WORDS = tuple(dict.fromkeys(tuple(dict.fromkeys(_SHARED_WORDS.get(word, word) for word in
                                                          (p.split(".")[0], p.rsplit(".", 1)[-1])))
                                      for p in QUANTIZER_PACKAGES))
# Libraries whose own files apply these quantizers to a model they are handed (the user's): their
# applications say nothing about the layers of their own tree, and other families speak for them.
LIBRARY_PACKAGES = frozenset({"transformers", "diffusers", "accelerate", "peft", "torchao", "bitsandbytes",
                              "optimum", "modelopt", "lightning", "lightning_fabric", "pytorch_lightning"})


def applied_by(qualname: str) -> Quantizer | None:
    """The quantizer a call of this resolved name applies, or None."""
    for prefixes, last, quantizer in APPLY_CALLS:
        if qualname.rsplit(".", 1)[-1] == last and qualname.startswith(prefixes):
            return quantizer
    return None


def fabric_plugin(qualname: str) -> bool:
    """Does this resolved name construct Lightning's bitsandbytes precision plugin?"""
    return qualname.rsplit(".", 1)[-1] == FABRIC_PLUGIN_CLASS and qualname.startswith(FABRIC_PLUGIN_PACKAGES)


def fabric_class(qualname: str) -> bool:
    """Does this resolved name construct a Lightning `Fabric`?"""
    return qualname.rsplit(".", 1)[-1] == FABRIC_CLASS and qualname.split(".", 1)[0] in FABRIC_PACKAGES


def swapped_in(qualname: str) -> Quantizer | None:
    """The quantizer a construction of this resolved class swaps in, or None."""
    if not qualname.startswith(SWAP_PACKAGE):
        return None
    return SWAP_CLASSES.get(qualname.rsplit(".", 1)[-1])
