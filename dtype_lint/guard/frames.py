"""Whose code a run-time event belongs to: the user's (reported), or torch's, the quantizer's or
the guard's own (not reported).

An event (a cast, an allocation, a `.dtype` read) is attributed to the innermost Python frame
that is not torch and not the guard. If that frame belongs to a quantizer or a loader (a
quantizer packing its own int8 rows, its library's loading integrations, tensors being moved), the
event is the storage code doing its job and is not the bug: static dtype-lint exempts the same
code (docs/hf.md, "Storage code is exempt").
"""

from __future__ import annotations

import dis
import os
import sys
from types import CodeType, FrameType

from dtype_lint.ecosystems.registry import plugins

# Path fragments (with `/` separators) of storage and loader code: where a `.dtype` read of a
# quantized weight, or a cast to it, is the quantizer's own business (each ecosystem's, the
# registry's `runtime` role).
STORAGE_CODE_FRAGMENTS = tuple(dict.fromkeys(fragment for runtime in plugins("runtime")
                                             for fragment in runtime.STORAGE_CODE_FRAGMENTS))

_GUARD_DIR = os.path.dirname(os.path.abspath(__file__)).replace(os.sep, "/") + "/"

# How many callers of a frame are kept to relate a dtype read in a helper to the cast in its
# caller (and the other way round).
CHAIN_DEPTH = 6

LIBRARY, STORAGE, USER = "library", "storage", "user"


class FrameClassifier:
    """Classifies code objects once each (the same few are seen again and again in a forward)."""

    def __init__(self, extra_storage_fragments: tuple[str, ...] = ()) -> None:
        import torch

        self._torch_dir = os.path.dirname(os.path.abspath(torch.__file__)).replace(os.sep, "/") + "/"
        self._storage = STORAGE_CODE_FRAGMENTS + tuple(extra_storage_fragments)
        self._by_code: dict[CodeType, str] = {}

    def kind(self, code: CodeType) -> str:
        found = self._by_code.get(code)
        if found is None:
            found = self._classify(code.co_filename.replace(os.sep, "/"))
            self._by_code[code] = found
        return found

    def _classify(self, filename: str) -> str:
        if filename.startswith((self._torch_dir, _GUARD_DIR)) or filename.startswith("<frozen "):
            return LIBRARY
        if any(fragment in filename for fragment in self._storage):
            return STORAGE
        return USER

    def event_frame(self, start: FrameType | None) -> FrameType | None:
        """The frame an event belongs to when it is the user's; None when it is storage code's."""
        frame = start
        while frame is not None:
            found = self.kind(frame.f_code)
            if found == USER:
                return frame
            if found == STORAGE:
                return None
            frame = frame.f_back
        return None


def caller_chain(frame: FrameType, depth: int = CHAIN_DEPTH) -> tuple[FrameType, ...]:
    """The frame's callers, innermost first, at most `depth` of them."""
    chain: list[FrameType] = []
    caller = frame.f_back
    while caller is not None and len(chain) < depth:
        chain.append(caller)
        caller = caller.f_back
    return tuple(chain)


def current_frame(skip: int = 1) -> FrameType:
    return sys._getframe(skip + 1)


# Opcodes of a plain attribute read (`layer.weight`): `getattr(layer, "weight", None)` and
# `hasattr` are calls instead, and a fallback is their point.
_ATTRIBUTE_READS = frozenset({"LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR"})
# Exception names whose handler catches an AttributeError.
_CATCHES_ATTRIBUTE_ERROR = frozenset({"AttributeError", "Exception", "BaseException"})
_instruction_cache: dict[CodeType, dict[int, dis.Instruction]] = {}


def _instructions(code: CodeType) -> dict[int, dis.Instruction]:
    found = _instruction_cache.get(code)
    if found is None:
        found = {ins.offset: ins for ins in dis.get_instructions(code)}
        _instruction_cache[code] = found
    return found


def _handler_catches_attribute_error(code: CodeType, target: int) -> bool:
    """Whether the handler at `target` catches AttributeError: an `except` naming it (or a base
    class, alone or in a tuple), or a bare `except`. A `with` block's handler (WITH_EXCEPT_START),
    a `finally` and the clean-up of an `except` body catch nothing."""
    following = [ins for ins in dis.get_instructions(code) if ins.offset >= target]
    if not following or following[0].opname != "PUSH_EXC_INFO":
        return False
    names: list[str] = []
    for position, ins in enumerate(following[1:]):
        if position == 0 and ins.opname == "POP_TOP":
            return True  # a bare `except:` drops the exception straight away
        if ins.opname == "CHECK_EXC_MATCH":
            return any(name in _CATCHES_ATTRIBUTE_ERROR for name in names)
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_ATTR", "LOAD_DEREF", "LOAD_FAST"):
            names.append(str(ins.argval))
        elif ins.opname != "BUILD_TUPLE":
            return False  # a `with` clean-up or a `finally` body
    return False


def is_unguarded_attribute_read(frame: FrameType) -> bool:
    """Whether the frame is executing a plain attribute read (not `getattr`/`hasattr`) that no
    enclosing `try` in the same function catches as an AttributeError: the read crashes here."""
    code = frame.f_code
    instruction = _instructions(code).get(frame.f_lasti)
    if instruction is None or instruction.opname not in _ATTRIBUTE_READS:
        return False
    entries = getattr(dis.Bytecode(code), "exception_entries", ())
    for entry in entries:
        if entry.start <= frame.f_lasti < entry.end and _handler_catches_attribute_error(code, entry.target):
            return False
    return True


def returns_value_read_at(frame: FrameType) -> bool:
    """Whether the value the frame is reading now (a `.dtype`) is what its function returns:
    `return self.proj.weight.dtype`, or `dtype = ...` and later `return dtype`. Only then may a
    cast in the caller be said to use it (a helper that returns the storage dtype)."""
    code = frame.f_code
    instructions = [ins for ins in _instructions(code).values() if ins.opname != "CACHE"]
    position = next((index for index, ins in enumerate(instructions) if ins.offset == frame.f_lasti), None)
    if position is None or position + 1 >= len(instructions):
        return False
    following = instructions[position + 1]
    if following.opname == "JUMP_FORWARD":
        # A conditional expression (`w.dtype if w is not None else default`) jumps to its store:
        # the value read is what the jump's target stores (vLLM 0.28.0's MLA input-dtype helper).
        following = next((ins for ins in instructions if ins.offset == following.argval), following)
    if following.opname == "RETURN_VALUE":
        return True
    if following.opname == "STORE_FAST":
        name = following.argval
        return any(ins.opname == "LOAD_FAST" and ins.argval == name and later.opname == "RETURN_VALUE"
                   for ins, later in zip(instructions, instructions[1:]))
    return False
