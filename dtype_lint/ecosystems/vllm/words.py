"""vLLM's words for a message whose layer's backends were not read: the repacks vLLM's backends
are best known for (int32 under Marlin, uint8 under NVFP4, absent under AWQ).

They are the right words only where the layer is a vLLM-style engine's: its class obtains a quant
method for itself in the code (`quant_config.get_quant_method(self, ...)`, what vLLM, SGLang and
their forks do), or it is one of the vllm preset's layer classes. A generic project's configured
class, a layer built with a config whose class did not resolve, or a layer known only by its name
speaks the generic family's words (ecosystems/generic/words.py).
"""

from __future__ import annotations

from dtype_lint.dtypes.storage_formats import storage_words
from dtype_lint.ecosystems.presets import PRESETS

# The formats named: one per kind of damage (a repack into int32, a packed uint8, no `.weight`).
DEFAULT_WORDS = storage_words(("marlin", "nvfp4", "awq"))

# How the class index words a root found in the code (analysis/index/class_facts.py).
_CODE_ROOT_PHRASES = ("gives it a quant method", "lets a quant method create its weights")
_PRESET_CLASSES = frozenset(name.rsplit(".", 1)[-1] for name in PRESETS["vllm"]["quantizable"])


def _names_a_preset_class(message: str) -> bool:
    # "`ColumnParallelLinear` is a configured quantizable class", or "... matches configured
    # quantizable class `vllm.model_executor...` by name".
    if "configured quantizable class" not in message:
        return False
    return "`vllm." in message or any(message.startswith(f"`{short}` is a configured") for short in _PRESET_CLASSES)


def speaks_for(evidence) -> bool:
    """Did a vLLM-style engine's layer decide this verdict (a root in the code, or a preset class)?"""
    return any(any(phrase in item.message for phrase in _CODE_ROOT_PHRASES) or _names_a_preset_class(item.message)
               for item in evidence or ())
