"""Gates of rule patterns (`Rule.pattern_gates`): for one file's text, which matches of a
pattern can be sites, answered from the class index and other files' texts, before the file is
parsed. A gate must be exact: it drops a match only where the rule, run on the parsed file,
could report nothing at it; anything it cannot tell it keeps.

A gate is built once per file (`gate(name, text, module, index)`) and asked of each match
(`keeps(match)`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import re

    from dtype_lint.analysis.index.class_index import QuantizableLayerIndex


class Gate(Protocol):
    def keeps(self, match: re.Match[str]) -> bool: ...


def gate(name: str, text: str, module: str, index: QuantizableLayerIndex) -> Gate:
    """The gate `name` of a rule's `pattern_gates`, for this file."""
    if name == "self-attribute-read":
        from dtype_lint.analysis.storage.stored_reads import self_read_gate

        return self_read_gate(text, module, index)
    raise ValueError(f"no pattern gate named {name!r}")
