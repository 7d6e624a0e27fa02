"""One storage format: what a quantization backend leaves in a layer's `.weight`, as a row of data.

The rows themselves are an ecosystem's knowledge: each ecosystem contributes the formats its
backends leave (`ecosystems/<name>/formats.py`, the `formats` role) and `dtypes/storage_formats.py`
assembles them into the one table every stage derives from. This module holds only what a row is:
its fields, the storage kinds and the helper's answers, so that an ecosystem's rows can be written
without importing the table they join.
"""

from __future__ import annotations

from dtype_lint.core.records import record

# Storage kinds, as the storage model and the rules name them.
ABSENT = "absent"  # no `.weight` at all: the weight lives under another name
PACKED = "packed"  # an integer storage: several (or one) quantized values per element
FP8 = "fp8"  # a float8 storage: floating point, but not a compute dtype for activations
COMPUTE = "compute"  # the model's compute dtype: harmless
UNKNOWN = "unknown"  # `weight` is registered, its dtype is not stated where we can read it

# The helper's answers.
MODEL_DTYPE = "model_dtype"  # the layer's model dtype (each ecosystem names the attribute that holds it)
KEEP = "keep"  # None: keep the activation as it is (the layer takes it and quantizes it itself)
WEIGHT_DTYPE = "weight"  # the weight's own dtype (an unquantized layer: the cast it replaces)

# Bits of the torch dtypes a format can leave in `.weight`, in the evaluator's order of cases:
# floating, fp8, then packed (and no `.weight` after them all).
DTYPE_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float8_e4m3fn": 8, "float8_e5m2": 8,
              "int32": 32, "uint8": 8, "int8": 8}
# Floating dtypes (and their torch aliases) a backend's code states for the compute dtype.
COMPUTE_DTYPE_NAMES = frozenset({"float16", "bfloat16", "float32", "half", "float", "bfloat", "float64"})


@record(frozen=True)
class StorageFormat:
    """One storage format (see dtypes/storage_formats.py for what each field is for)."""

    name: str  # the format's key in the table, unique across ecosystems
    label: str  # how a message names the backends that use it
    container: str | None  # the torch dtype name left in `.weight`; None: no `.weight`
    bits: int  # bits of one stored value (a wider container packs several)
    quantizes_input: bool
    answer: str  # MODEL_DTYPE, KEEP or WEIGHT_DTYPE, with a 16-bit input
    answer_fp8_input: str  # the same with an fp8 input
    # Compiled ops (outside any tree, so their code cannot be read) whose result is this storage:
    # a replacement `weight` made by one of them has this container.
    kernels: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        if self.container is None:
            return ABSENT
        if self.container.startswith("float8"):
            return FP8
        if floating(self.container):
            return COMPUTE if self.container in COMPUTE_DTYPE_NAMES else UNKNOWN
        return PACKED  # a container that is not floating is an integer storage

    @property
    def packs_several(self) -> bool:
        """Several values per container element: the dtype names no single format."""
        return self.container is not None and self.bits < DTYPE_BITS[self.container]

    def storage_word(self) -> str:
        """What a message calls this storage: its container, or "absent"."""
        return self.container if self.container is not None else "absent"


def floating(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))
