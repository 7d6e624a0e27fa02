"""The quantizer family's words for a message whose verdict names no storage of its own:
bitsandbytes' storages, the quantizers a plain PyTorch project swaps in."""

from __future__ import annotations

from dtype_lint.ecosystems.quantizers.catalogue import REPLACE_WITH_BNB
from dtype_lint.ecosystems.quantizers.family import FAMILY_EVIDENCE, storage_phrase

DEFAULT_WORDS = storage_phrase(REPLACE_WITH_BNB.storages)


def speaks_for(evidence) -> bool:
    """A layer of a module the project quantizes (this family's verdicts say so in their evidence)."""
    return any(FAMILY_EVIDENCE in item.message for item in evidence or ())
