"""The storage formats: what a quantization backend leaves in a layer's `.weight`, as data.

A format is more than a dtype. Two backends' int32 words can share a dtype with nothing else in
common, and several 4-bit formats (nibble codes, block-quantized weights) all sit in uint8. What
the linter needs to know of each is (dtypes/storage_format.py holds the row):

- `container`: the torch dtype left in `.weight` (None: the layer has no `.weight`);
- `bits`: the bits of one stored value; a container wider than that packs several values per
  element (two 4-bit codes per uint8), so a branch on the container dtype cannot tell the
  formats that share it apart (analysis/storage/storage_dispatch.py);
- `quantizes_input`: whether the layer quantizes its own (16-bit) input (W8A8, W4A4) or
  dequantizes its weight and computes in the model dtype (W8A16, W4A16);
- `answer`, `answer_fp8_input`: what the input-dtype helper must return for a layer of this
  format, with a 16-bit input and with an fp8 input (MLA's fp8 prefill).

The rows are the ecosystems' (`ecosystems/<name>/formats.py`, the `formats` role of
ecosystems/registry.py): each names the formats its backends leave, and this module assembles
them into one table in the evaluator's order of containers. Everything else is derived from it:
the storages the dtype evaluator runs every guard and helper on (`evaluated_storages`), the
storage model's kinds (`kind_of_dtype`), the containers a kernel dispatch cannot tell apart
(`shared_containers`), the words of the messages (`storage_words`) and the rows the helper
template and the kernels' verify matrix are checked against (tests/test_storage_formats.py).

**Why the helper's answer depends only on the container.** The helper runs inside the model and
sees `layer.weight.dtype`, nothing else: two formats with one container get one answer at run
time whatever the table says. So the table states an answer per format and the test holds the
invariant that formats sharing a container agree on it (`answers_by_container` raises otherwise).
They do agree, and for a reason: the answer is only about which activation the layer accepts.
Where a packed or missing weight is concerned that is the model dtype (None keeps it; with an fp8
input, the layer's model dtype brings it back to 16 bits), whether the layer then quantizes the
input itself (W4A4) or dequantizes its weight (W4A16). What does differ between such formats,
`quantizes_input` and `bits`, is what the messages and the kernel-dispatch check read. A format
whose layer wants a different activation with the same container (a uint8 format that accepts
fp8 input) cannot be served by a dtype-keyed helper; adding it makes the test fail and says so.
"""

from __future__ import annotations

from dtype_lint.dtypes.storage_format import (
    ABSENT,
    COMPUTE,
    COMPUTE_DTYPE_NAMES,
    DTYPE_BITS,
    FP8,
    KEEP,
    MODEL_DTYPE,
    PACKED,
    UNKNOWN,
    WEIGHT_DTYPE,
    StorageFormat,
    floating,
)
from dtype_lint.ecosystems.registry import plugins


def _assembled() -> tuple[StorageFormat, ...]:
    """Every ecosystem's formats, in the evaluator's order of cases: by container as DTYPE_BITS
    lists them (floating, fp8, packed), then no `.weight`; within one container, in the registry's
    order of ecosystems. A name two ecosystems both give is an error (BY_NAME would hide one)."""
    rows = [fmt for module in plugins("formats") for fmt in module.FORMATS]
    order = list(DTYPE_BITS)
    names = [fmt.name for fmt in rows]
    if len(set(names)) != len(names):
        raise ValueError(f"two ecosystems give a storage format one name: {sorted(names)}")
    return tuple(sorted(rows, key=lambda fmt: order.index(fmt.container) if fmt.container is not None
                        else len(order)))


FORMATS: tuple[StorageFormat, ...] = _assembled()
BY_NAME = {fmt.name: fmt for fmt in FORMATS}

# Integer dtypes a backend's code may state for a parameter besides the formats' containers
# (sub-byte and quantized dtypes torch names): any of them is a packed storage.
OTHER_INTEGER_DTYPES = ("int16", "int4", "uint4", "qint8", "quint8")


def format_named(name: str) -> StorageFormat:
    """The format of that name (KeyError: the table has none)."""
    return BY_NAME[name]


def kind_of_dtype(dtype: str) -> str:
    """The storage kind of a torch dtype name a format's container or a backend's code states."""
    if dtype.startswith("float8"):
        return FP8
    if dtype in integer_dtypes():
        return PACKED
    if dtype in COMPUTE_DTYPE_NAMES:
        return COMPUTE
    return UNKNOWN


def integer_dtypes() -> tuple[str, ...]:
    """Every integer dtype that is a packed storage: the formats' containers, then the others."""
    containers = [f.container for f in FORMATS if f.container is not None and not floating(f.container)]
    return tuple(dict.fromkeys([*containers, *OTHER_INTEGER_DTYPES]))


def evaluated_storages() -> tuple[str | None, ...]:
    """The storages the dtype evaluator decides every guard and helper on: each container once,
    in the table's order, and no `.weight` (None) last."""
    return tuple(dict.fromkeys(f.container for f in FORMATS))


def packed_storages() -> tuple[str | None, ...]:
    """The evaluated storages whose `.weight.dtype` is not a dtype the layer computes in."""
    return tuple(s for s in evaluated_storages() if s is None or not floating(s))


def shared_containers() -> frozenset[str]:
    """The containers of formats that pack several values per element: a test of one of them
    (`weight.dtype == torch.uint8`) names no single format."""
    return frozenset(f.container for f in FORMATS if f.packs_several and f.container is not None
                     and not floating(f.container))


def storage_words(names: tuple[str, ...]) -> str:
    """`int32 under <label>, uint8 under <label>, absent under <label>`: each named format's
    storage and the backends that leave it."""
    return ", ".join(f"{BY_NAME[name].storage_word()} under {BY_NAME[name].label}" for name in names)


def format_of_kernel(op: str) -> StorageFormat | None:
    """The format a compiled op (its last dotted name) produces, when the table records one."""
    for candidate in FORMATS:
        if op in candidate.kernels:
            return candidate
    return None


def answers_by_container() -> dict[str | None, tuple[str, str]]:
    """Container -> (answer, answer with fp8 input): what a helper keyed by `weight.dtype` must
    return. Raises ValueError when two formats with one container want different answers (a
    helper that sees only the dtype cannot serve both)."""
    out: dict[str | None, tuple[str, str]] = {}
    for candidate in FORMATS:
        answers = (candidate.answer, candidate.answer_fp8_input)
        if out.setdefault(candidate.container, answers) != answers:
            raise ValueError(f"{candidate.name} wants {answers} from a `{candidate.storage_word()}` weight, another "
                             f"format with that container {out[candidate.container]}: a dtype-keyed helper "
                             "cannot give both")
    return out


__all__ = ["ABSENT", "BY_NAME", "COMPUTE", "COMPUTE_DTYPE_NAMES", "DTYPE_BITS", "FORMATS", "FP8", "KEEP", "MODEL_DTYPE",
           "OTHER_INTEGER_DTYPES", "PACKED", "UNKNOWN", "WEIGHT_DTYPE", "StorageFormat", "answers_by_container",
           "evaluated_storages", "format_named", "format_of_kernel", "integer_dtypes", "kind_of_dtype",
           "packed_storages", "shared_containers", "storage_words"]
