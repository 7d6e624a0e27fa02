"""What a reference layer does with an input dtype it does not take.

The verify matrix derives the expected outcome of a fixed variant from two facts: the dtype the
fixer's helper (or 0.28.0's) chooses, and what the layer does with that dtype. Each layer answers
the second with ``input_rejection(dtype)``, and its ``forward`` raises exactly that, so the
expectation and the behaviour come from one place.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InputRejection:
    """The exception a layer raises for an input dtype, and the function whose frame raises it."""

    error: BaseException
    raised_in: str

    def describe(self) -> str:
        return f"{type(self.error).__name__}: {self.error}"
