"""The megatron family's words for a message whose verdict names no storage of its own (a layer
built from a spec the family could not read): modelopt's real-quantization storages, not another
ecosystem's backends."""

from __future__ import annotations

from dtype_lint.ecosystems.megatron.family import FAMILY_EVIDENCE, storage_phrase
from dtype_lint.ecosystems.megatron.modelopt_catalogue import compressed_storages

DEFAULT_WORDS = storage_phrase(compressed_storages())


def speaks_for(evidence) -> bool:
    """A layer built through `build_module` (this family's verdicts say so in their evidence)."""
    return any(FAMILY_EVIDENCE in item.message for item in evidence or ())
