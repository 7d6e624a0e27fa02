"""The storage formats: what a quantization backend leaves in a layer's `.weight`, as data.

A format is more than a dtype. Marlin's int32 words and GPTQ's int32 `qweight` share a dtype; NVFP4
nibbles, MXFP4 nibbles, bitsandbytes' `Params4bit` and GGUF blocks all sit in uint8. What the
linter needs to know of each is:

- `container`: the torch dtype left in `.weight` (None: the layer has no `.weight`);
- `bits`: the bits of one stored value; a container wider than that packs several values per
  element (NVFP4: two 4-bit codes per uint8), so a branch on the container dtype cannot tell the
  formats that share it apart (analysis/storage/storage_dispatch.py);
- `quantizes_input`: whether the layer quantizes its own (16-bit) input (fp8 W8A8, NVFP4 W4A4,
  INT8 W8A8) or dequantizes its weight and computes in the model dtype (Marlin W8A16, AWQ,
  bitsandbytes 4-bit);
- `answer`, `answer_fp8_input`: what the input-dtype helper must return for a layer of this
  format, with a 16-bit input and with an fp8 input (MLA's fp8 prefill).

Everything else is derived from this one table: the storages the dtype evaluator runs every guard
and helper on (`evaluated_storages`), the storage model's kinds (`kind_of_dtype`), the containers
a kernel dispatch cannot tell apart (`shared_containers`), the words of the messages
(`storage_words`) and the rows the helper template and the kernels' verify matrix are checked
against (tests/test_storage_formats.py).

**Why the helper's answer depends only on the container.** The helper runs inside the model and
sees `layer.weight.dtype`, nothing else: two formats with one container get one answer at run
time whatever the table says. So the table states an answer per format and the test holds the
invariant that formats sharing a container agree on it (`answers_by_container` raises otherwise).
They do agree, and for a reason: the answer is only about which activation the layer accepts.
Where a packed or missing weight is concerned that is the model dtype (None keeps it; with an fp8
input, `params_dtype` brings it back to 16 bits), whether the layer then quantizes the input itself
(NVFP4) or dequantizes its weight (bitsandbytes 4-bit). What does differ between such formats,
`quantizes_input` and `bits`, is what the messages and the kernel-dispatch check read. A format
whose layer wants a different activation with the same container (a uint8 format that accepts
fp8 input) cannot be served by a dtype-keyed helper; adding it here makes the test fail and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

# Storage kinds, as the storage model and the rules name them.
ABSENT = "absent"  # no `.weight` at all (AWQ/GPTQ `qweight`, compressed-tensors `weight_packed`)
PACKED = "packed"  # an integer storage (Marlin int32, NVFP4 uint8, W8A8 int8)
FP8 = "fp8"  # a float8 storage: floating point, but not a compute dtype for activations
COMPUTE = "compute"  # the model's compute dtype (`params_dtype`): harmless
UNKNOWN = "unknown"  # `weight` is registered, its dtype is not stated where we can read it

# The helper's answers.
PARAMS_DTYPE = "params_dtype"  # `layer.params_dtype`: the model dtype
KEEP = "keep"  # None: keep the activation as it is (the layer takes it and quantizes it itself)
WEIGHT_DTYPE = "weight"  # the weight's own dtype (an unquantized layer: the cast it replaces)


@dataclass(frozen=True)
class StorageFormat:
    """One storage format (see the module docstring)."""

    name: str  # "marlin", "nvfp4"
    label: str  # how a message names the backends that use it ("Marlin", "NVFP4")
    container: str | None  # the torch dtype name left in `.weight`; None: no `.weight`
    bits: int  # bits of one stored value (a wider container packs several)
    quantizes_input: bool
    answer: str  # PARAMS_DTYPE, KEEP or WEIGHT_DTYPE, with a 16-bit input
    answer_fp8_input: str  # the same with an fp8 input
    # Compiled ops (outside any tree, so their code cannot be read) whose result is this storage:
    # a replacement `weight` made by one of them has this container.
    kernels: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return kind_of_dtype(self.container) if self.container is not None else ABSENT

    @property
    def packs_several(self) -> bool:
        """Several values per container element: the dtype names no single format."""
        return self.container is not None and self.bits < DTYPE_BITS[self.container]

    def storage_word(self) -> str:
        """What a message calls this storage: its container, or "absent"."""
        return self.container if self.container is not None else "absent"


# Bits of the torch dtypes a format can leave in `.weight`.
DTYPE_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float8_e4m3fn": 8, "float8_e5m2": 8,
              "int32": 32, "uint8": 8, "int8": 8}

_MARLIN_KERNELS = ("gptq_marlin_repack", "awq_marlin_repack", "gptq_marlin_moe_repack", "awq_marlin_moe_repack",
                   "marlin_repack", "machete_prepack_B", "allspark_repack_weight")

# The order is the evaluator's order of cases: floating, fp8, packed, then no `.weight`.
FORMATS: tuple[StorageFormat, ...] = (
    StorageFormat("fp16", "fp16", "float16", 16, False, WEIGHT_DTYPE, WEIGHT_DTYPE),
    StorageFormat("bf16", "bf16", "bfloat16", 16, False, WEIGHT_DTYPE, WEIGHT_DTYPE),
    StorageFormat("fp32", "fp32", "float32", 32, False, WEIGHT_DTYPE, WEIGHT_DTYPE),
    StorageFormat("fp8", "FP8", "float8_e4m3fn", 8, True, KEEP, WEIGHT_DTYPE),
    StorageFormat("fp8_e5m2", "FP8 e5m2", "float8_e5m2", 8, True, KEEP, WEIGHT_DTYPE),
    # Marlin (and its relatives Machete, AllSpark) repack GPTQ, AWQ and FP8 weights after loading
    # into int32 tiles: W8A16 / W4A16, the input stays 16-bit.
    StorageFormat("marlin", "Marlin", "int32", 4, False, PARAMS_DTYPE, PARAMS_DTYPE, _MARLIN_KERNELS),
    StorageFormat("marlin_fp8", "Marlin FP8", "int32", 8, False, PARAMS_DTYPE, PARAMS_DTYPE),
    # NVFP4 W4A4: two e2m1 codes per byte; the layer quantizes its (fp16/bf16 only) input.
    StorageFormat("nvfp4", "NVFP4", "uint8", 4, True, KEEP, PARAMS_DTYPE),
    StorageFormat("mxfp4", "MXFP4", "uint8", 4, True, KEEP, PARAMS_DTYPE),
    # bitsandbytes 4-bit and GGUF dequantize the weight and compute in the model dtype.
    StorageFormat("bnb_4bit", "bitsandbytes 4-bit", "uint8", 4, False, KEEP, PARAMS_DTYPE),
    StorageFormat("gguf", "GGUF", "uint8", 4, False, KEEP, PARAMS_DTYPE),
    StorageFormat("int8", "W8A8-INT8", "int8", 8, True, PARAMS_DTYPE, PARAMS_DTYPE),
    StorageFormat("bnb_8bit", "bitsandbytes 8-bit", "int8", 8, True, PARAMS_DTYPE, PARAMS_DTYPE),
    # The weight lives under another name (`qweight`, `weight_packed`): no `.weight` at all.
    StorageFormat("awq", "AWQ", None, 4, False, PARAMS_DTYPE, PARAMS_DTYPE),
    StorageFormat("gptq", "GPTQ", None, 4, False, PARAMS_DTYPE, PARAMS_DTYPE),
    StorageFormat("hqq", "HQQ", None, 4, False, PARAMS_DTYPE, PARAMS_DTYPE),
)
BY_NAME = {fmt.name: fmt for fmt in FORMATS}

# Integer dtypes a backend's code may state for a parameter besides the formats' containers
# (sub-byte and quantized dtypes torch names): any of them is a packed storage.
OTHER_INTEGER_DTYPES = ("int16", "int4", "uint4", "qint8", "quint8")
# Floating dtypes (and their torch aliases) a backend's code states for the compute dtype.
COMPUTE_DTYPE_NAMES = frozenset({"float16", "bfloat16", "float32", "half", "float", "bfloat", "float64"})

# The formats a message names when it knows no backend of the layer (one per kind of damage: a
# repack into int32, a packed uint8 that quantizes its input, a missing `.weight`).
DEFAULT_WORDS = ("marlin", "nvfp4", "awq")


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
    containers = [f.container for f in FORMATS if f.container is not None and not _floating(f.container)]
    return tuple(dict.fromkeys([*containers, *OTHER_INTEGER_DTYPES]))


def evaluated_storages() -> tuple[str | None, ...]:
    """The storages the dtype evaluator decides every guard and helper on: each container once,
    in the table's order, and no `.weight` (None) last."""
    return tuple(dict.fromkeys(f.container for f in FORMATS))


def packed_storages() -> tuple[str | None, ...]:
    """The evaluated storages whose `.weight.dtype` is not a dtype the layer computes in."""
    return tuple(s for s in evaluated_storages() if s is None or not _floating(s))


def shared_containers() -> frozenset[str]:
    """The containers of formats that pack several values per element: a test of one of them
    (`weight.dtype == torch.uint8`) names no single format."""
    return frozenset(f.container for f in FORMATS if f.packs_several and f.container is not None
                     and not _floating(f.container))


def storage_words(names: tuple[str, ...] = DEFAULT_WORDS) -> str:
    """`int32 under Marlin, uint8 under NVFP4, absent under AWQ`."""
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


def _floating(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))
