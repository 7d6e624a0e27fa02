"""The generic family's words for a message: where no family's backends are known, the storage
is described by what a quantizer does to the weight, naming none (a project that is neither
vLLM-style nor Hugging Face model code may use any quantizer, or its own)."""

from __future__ import annotations

DEFAULT_WORDS = "packed, fp8 or absent under a quantizer that repacks or drops the weight"


def speaks_for(evidence) -> bool:
    """The last word: any verdict no other ecosystem's words speak for."""
    return True
