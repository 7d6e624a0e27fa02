"""vLLM's words in a migration's patch series: what a reviewer calls the backend that leaves each
storage, why a cast to `layer.weight.dtype` is wrong there, and what the helper's fix is about.

Plugged in by the registry's `series_words` role (consumers layer): dtype_lint/migrate/messages.py
writes a convention's commit messages with the words of the first ecosystem that speaks for it.
vLLM's speak for every convention no other ecosystem claims (vLLM, its forks and plugins).
"""

from __future__ import annotations

from dtype_lint.ecosystems.registry import model_dtype_attributes

# None: every convention no ecosystem before this one in the registry claims.
CONVENTIONS: tuple[str, ...] | None = None

# What a reviewer calls the backend that leaves each storage on a layer.
BACKEND_OF = {
    "int32": "Marlin FP8 (W8A16), which repacks the weight to int32",
    "uint8": "NVFP4, which packs the weight into uint8",
    "int8": "W8A8-INT8 from compressed-tensors or Quark, which stores int8",
    None: "AWQ/GPTQ/compressed-tensors WNA16, which leave no `.weight`",
    "float8_e4m3fn": "FP8",
}
SHORT_BACKEND = {"int32": "Marlin FP8", "uint8": "NVFP4", "int8": "INT8", None: "AWQ/GPTQ", "float8_e4m3fn": "FP8"}

WHY = (
    "A quantization backend may repack a layer's weight after loading, so its storage dtype is not "
    "the compute dtype of the layer's input: Marlin FP8 stores `torch.int32`, NVFP4 `torch.uint8`, "
    "FP8 `float8_e4m3fn`, W8A8-INT8 `torch.int8`, and AWQ/GPTQ/compressed-tensors WNA16 layers have "
    "no `.weight` at all. Casting an activation to `layer.weight.dtype` (or allocating in it) then "
    "crashes (`unsupported `a` scalar_type` in Marlin; `AttributeError` on AWQ) or silently "
    "truncates the activation to integers."
)

# What a wrong answer of an input-dtype helper does to the layer (the helper fix's purpose).
HELPER_FIX_HARM = (
    "An integer dtype truncates the activation (or crashes the kernel, as the W8A8-INT8 "
    "input quantization does on an int8 tensor); an fp8 activation reaches NVFP4's input "
    "quantization, which takes fp16/bf16 only.")
# Per convention: what the helper fix's purpose adds (upstream history a reviewer should know).
HELPER_FIX_HISTORY = {
    "vllm": ("The fix for the Marlin FP8 case (#38771) lost its unit test in review; this patch "
             "adds one covering every storage times the fp8 flag."),
}
# How a case's answer names the layer's model dtype: as the code does.
MODEL_DTYPE_WORDS = f"the layer's {model_dtype_attributes()[0]}"

# The regression test a helper's patch adds (migrate/regression.py): the layers it builds without a
# `.weight`, what each storage stands for, and the platform's fp8 dtype per convention that has one.
TEST_NO_WEIGHT_LAYERS = "AWQ/GPTQ-style"
TEST_STORAGES_NOTE = "Marlin FP8 repacks to int32, NVFP4 packs to uint8, W8A8-INT8 stores int8."
TEST_FP8_DTYPE: dict[str, tuple[str, str]] = {
    "vllm": ("from vllm.platforms import current_platform\n", "current_platform.fp8_dtype()"),
}

# The migration report's (the pull request's) first words: why the casts are routed through a helper.
REPORT_WHY = (
    "A quantization backend may repack a layer's weight after loading (Marlin FP8 stores it as "
    "`torch.int32`, NVFP4 as `torch.uint8`; AWQ/GPTQ layers have no `.weight`), so casting an "
    "activation to `layer.weight.dtype` crashes or silently mis-casts (vLLM issue #38658). ")
