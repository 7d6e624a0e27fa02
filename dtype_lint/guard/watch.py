"""The run-time guard: `DtypeGuard` watches torch inside a `with` block and records each place
where the bug of this project happens for real.

The signature (issue #38): a floating activation converted to (or a buffer allocated in, or
`finfo`/`iinfo` asked of) a dtype that was read from a quantized layer's weight whose storage is
packed (int8, uint8, int32; fp8 for an activation that is not fp8), or a `.weight` read on a
quantized layer that has none.

How the pieces are seen, since `torch.uint8` is one object whoever reads it:

- `.weight` reads: `torch.nn.Module.__getattr__` is wrapped for the block (parameters live in
  `_parameters`, so every `layer.weight` goes through it). A packed weight is registered by
  identity, with its layer; an AttributeError for `weight` on a layer that keeps `qweight`/`W_q`
  instead is the missing-weight kind, when the read is a plain attribute read that no `try` of its
  function catches (`getattr(layer, "weight", None)` and `hasattr` are fallbacks, not the bug).
  The layers of `model=` are registered up front, so `next(iter(m.parameters())).dtype` is seen
  too.
- `.dtype` reads of a registered weight, casts (`Tensor.to`, `Tensor.type`) and allocations
  (`torch.zeros/empty/full/...(dtype=)`, `*_like`, `Tensor.new_*`): wrappers set on the Python
  class `torch.Tensor` (which every tensor is an instance of; the C base keeps the originals) and
  on `torch` for the block. A `torch.overrides.TorchFunctionMode` sees the same calls but runs
  Python for every torch call of the forward (measured on 6,000 small ops: 1.9x, these wrappers
  1.02x; benchmarks/guard_overhead.py measures whole forward passes).
- `torch.finfo`/`torch.iinfo` are not torch functions: they are replaced for the block.

A cast, allocation or `finfo` is reported when its dtype is the storage dtype of a weight whose
`.dtype` was read in the same function, or in one of its callers or callees (a helper that
returns the dtype), so that an int32 index buffer next to an int32-packed layer is not called the bug.
Events in torch, the guard, and storage or loader code (the quantizers' own code, their
loading integrations: each ecosystem's `runtime` data) are not the user's and are not reported (frames.py).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections import deque
from types import FrameType
from typing import Any, Iterable, Literal

from dtype_lint.core.records import record
from dtype_lint.guard.frames import (
    FrameClassifier,
    caller_chain,
    is_unguarded_attribute_read,
    returns_value_read_at,
)
from dtype_lint.guard.site import (
    ACTIVATION_CAST,
    BUFFER_ALLOCATION,
    FINFO,
    MISSING_WEIGHT,
    RULE_BY_KIND,
    GuardSite,
)
from dtype_lint.guard.storage import (
    QUANTIZER_BY_WEIGHT_CLASS_NAME,
    LayerStorage,
    breaks_activation,
    is_packed_storage,
    missing_weight_storage,
    quantizer_name,
    weight_storage,
)

# How many `.dtype` reads of quantized weights are remembered (a forward reads a few per layer).
READS_KEPT = 256
# Factories whose `dtype=` is the buffer's dtype.
_FACTORY_NAMES = ("zeros", "ones", "empty", "full", "tensor", "as_tensor", "arange", "empty_strided",
                  "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like")
_NEW_NAMES = ("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor")


class DtypeGuardError(AssertionError):
    """Raised on leaving a strict guard that recorded sites."""


@record
class _Read:
    """A `.dtype` read of a quantized weight in user code."""

    dtype: Any
    storage: LayerStorage
    layer: Any
    frame: FrameType
    chain: tuple[FrameType, ...]
    returned: bool  # the reading function returns the dtype it read (a helper)


def display_path(filename: str) -> str:
    """Relative to the current folder when inside it (as `check` names files), else absolute."""
    absolute = os.path.abspath(filename)
    relative = os.path.relpath(absolute, os.getcwd()) if os.path.isabs(absolute) else absolute
    return relative if not relative.startswith("..") else absolute


def _roots(model: Any) -> list[Any]:
    if model is None:
        return []
    if isinstance(model, (list, tuple)):
        return list(model)
    return [model]


class DtypeGuard:
    """`with DtypeGuard(model) as guard: model(**inputs)`, then `guard.sites`.

    `model`: optional root module (or a list of them) naming layer paths and registering their
    packed weights up front; without it, layers are found when code reads their `.weight`.
    `strict`: leaving the block raises DtypeGuardError when a site was recorded (or, when the
    block raised, adds the sites to that exception's notes). `static`: ask dtype-lint's static
    check, on leaving, whether it reports each site's line. `storage_code`: more path fragments
    (like "/my_quantizer/") whose events are storage code, not the user's.
    """

    def __init__(self, model: Any = None, strict: bool = False, *, static: bool = True,
                 storage_code: Iterable[str] = ()) -> None:
        self.roots = _roots(model)
        self.strict = strict
        self.static = static
        self.storage_code = tuple(storage_code)
        self._sites: dict[tuple[str, int, str], GuardSite] = {}
        self.occurrences: dict[tuple[str, int, str], int] = {}
        self._active = False
        self._busy = False
        self._restore: list[tuple[Any, str, Any]] = []
        # A handler that failed: the guard must never change what the watched code does, so the
        # error is kept here (tests read it) instead of raised into the user's code.
        self.errors: list[BaseException] = []

    # -- the results ---------------------------------------------------------------------------

    @property
    def sites(self) -> list[GuardSite]:
        return list(self._sites.values())

    def to_json(self) -> dict:
        from dtype_lint.guard.report import guard_json

        return guard_json(self.sites, self.occurrences)

    def to_sarif(self) -> dict:
        from dtype_lint.guard.report import guard_sarif

        return guard_sarif(self.sites)

    def report_text(self) -> str:
        count = len(self._sites)
        plural = "s" if count != 1 else ""
        head = f"dtype-lint guard: {count} run-time site{plural} of a dtype read from quantized storage"
        return "\n".join([head] + [f"  {site.describe()}" for site in self.sites])

    # -- entering and leaving ------------------------------------------------------------------

    def __enter__(self) -> "DtypeGuard":
        if self._active:
            raise RuntimeError("this DtypeGuard is already active; make a new one to nest")
        import torch

        self._torch = torch
        self._thread = threading.get_ident()
        self._classifier = FrameClassifier(self.storage_code)
        # id -> (weight, layer or None, storage): the weight itself is held so that its id is not
        # reused by another tensor while the guard runs.
        self._weights: dict[int, tuple[Any, Any, LayerStorage]] = {}
        self._plain: dict[int, Any] = {}
        self._reads: deque[_Read] = deque(maxlen=READS_KEPT)
        self._layer_names: dict[int, str] = {}
        self._plain_types = (torch.Tensor, torch.nn.Parameter)
        for root in self.roots:
            for module in root.modules():
                weight = module.__dict__.get("_parameters", {}).get("weight")
                storage = weight_storage(module, weight) if weight is not None else None
                if storage is not None:
                    self._weights[id(weight)] = (weight, module, storage)
        self._busy = False
        self._patch(torch.nn.Module, "__getattr__", self._guarded_getattr(torch.nn.Module.__getattr__))
        self._patch(torch, "finfo", self._guarded_info(torch.finfo))
        self._patch(torch, "iinfo", self._guarded_info(torch.iinfo))
        self._patch(torch.Tensor, "dtype", self._guarded_dtype(torch.Tensor.dtype))
        for owner, name, handler in self._watched_calls(torch):
            self._patch(owner, name, self._guarded_call(getattr(owner, name), handler))
        self._active = True
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:  # never swallows the block's exception
        self._active = False
        while self._restore:
            owner, name, original = self._restore.pop()
            if original is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        # Frames and weights are held only while the block runs.
        self._reads.clear()
        self._weights.clear()
        self._plain.clear()
        self._layer_names.clear()
        if self.static and self._sites:
            from dtype_lint.guard.report import static_reported

            for key, site in list(self._sites.items()):
                self._sites[key] = dataclasses.replace(site, static_reported=static_reported(site))
        if self.strict and self._sites:
            if exc is None:
                raise DtypeGuardError(self.report_text())
            if hasattr(exc, "add_note"):
                exc.add_note(self.report_text())
        return False

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._restore.append((owner, name, owner.__dict__.get(name, _ABSENT)))
        setattr(owner, name, replacement)

    # -- what is watched -----------------------------------------------------------------------

    def _watched_calls(self, torch: Any) -> list[tuple[Any, str, Any]]:
        """(owner, name, handler) of each call watched: casts on `torch.Tensor` (the Python class
        every tensor is an instance of: a wrapper there costs only these calls, where a
        TorchFunctionMode costs every torch call), allocations on `torch` and `torch.Tensor`."""
        tensor = torch.Tensor
        calls = [(tensor, "to", self._on_to), (tensor, "type", self._on_type)]
        calls += [(torch, name, self._on_allocation) for name in _FACTORY_NAMES if hasattr(torch, name)]
        calls += [(tensor, name, self._on_allocation) for name in _NEW_NAMES]
        return calls

    def _watching(self) -> bool:
        """Whether an event now is this guard's: inside the block, on its thread, not while the
        guard itself is handling one (its handlers read `.dtype` too)."""
        return self._active and not self._busy and threading.get_ident() == self._thread

    def _handle(self, handler: Any, args: tuple, kwargs: dict) -> None:
        self._busy = True
        try:
            handler(args, kwargs)
        except Exception as error:  # noqa: BLE001 - the guard must never change what the code does
            self.errors.append(error)
        finally:
            self._busy = False

    def _guarded_call(self, original: Any, handler: Any) -> Any:
        guard = self

        def watched(*args, **kwargs):
            if guard._watching():
                guard._handle(handler, args, kwargs)
            return original(*args, **kwargs)

        watched.__name__ = getattr(original, "__name__", "watched")
        watched.__qualname__ = getattr(original, "__qualname__", watched.__name__)
        watched.__doc__ = getattr(original, "__doc__", None)
        return watched

    def _guarded_dtype(self, descriptor: Any) -> property:
        """`Tensor.dtype` as a property of `torch.Tensor` that sees reads of quantized weights."""
        guard = self
        read = descriptor.__get__

        def dtype(tensor):
            if guard._watching():
                guard._handle(guard._on_dtype_read, (tensor,), {})
            return read(tensor)

        return property(dtype, doc=getattr(descriptor, "__doc__", None))

    def _guarded_getattr(self, original: Any) -> Any:
        guard = self

        def __getattr__(module, name):  # noqa: N807 - it replaces Module.__getattr__
            if name != "weight":
                return original(module, name)
            try:
                value = original(module, name)
            except AttributeError:
                if guard._watching():
                    guard._handle(guard._on_missing_weight, (module, sys._getframe(1)), {})
                raise
            if guard._watching():
                guard._handle(guard._on_weight_read, (module, value), {})
            return value

        return __getattr__

    def _guarded_info(self, original: Any) -> Any:
        guard = self

        def info(type=None):  # noqa: A002 - torch's own parameter name
            if type is None:
                return original()
            if guard._watching() and is_packed_storage(type):
                guard._handle(guard._on_info, (type,), {})
            return original(type)

        info.__name__ = info.__qualname__ = original.__name__
        info.__doc__ = original.__doc__
        return info

    # -- events --------------------------------------------------------------------------------

    def _on_info(self, args: tuple, kwargs: dict) -> None:
        self._on_storage_dtype_use(FINFO, args[0])

    def _on_weight_read(self, args: tuple, kwargs: dict) -> None:
        module, value = args
        key = id(value)
        entry = self._weights.get(key)
        if entry is not None and entry[0] is value:
            return
        if self._plain.get(key) is value:
            return
        storage = weight_storage(module, value)
        if storage is None:
            self._plain[key] = value
        else:
            self._weights[key] = (value, module, storage)

    def _on_missing_weight(self, args: tuple, kwargs: dict) -> None:
        module, caller = args
        storage = missing_weight_storage(module)
        if storage is None:
            return
        frame = self._classifier.event_frame(caller)
        if frame is None or frame is not caller or not is_unguarded_attribute_read(frame):
            return
        self._record(MISSING_WEIGHT, frame, storage, module)

    def _weight_entry(self, tensor: Any) -> tuple[Any, Any, LayerStorage] | None:
        entry = self._weights.get(id(tensor))
        if entry is not None and entry[0] is tensor:
            return entry
        cls = type(tensor)
        if cls in self._plain_types:
            return None
        # A quantizer's own parameter class read without its layer (`next(iter(m.parameters()))` with no
        # `model=`): the quantizer is known from the parameter's class, the layer is not.
        for klass in cls.__mro__:
            if klass.__name__ in QUANTIZER_BY_WEIGHT_CLASS_NAME:
                dtype = tensor.dtype
                if not is_packed_storage(dtype):
                    return None
                storage = LayerStorage("?", quantizer_name(tensor, tensor), str(dtype), dtype)
                self._weights[id(tensor)] = (tensor, None, storage)
                return self._weights[id(tensor)]
        return None

    def _on_dtype_read(self, args: tuple, kwargs: dict) -> None:
        entry = self._weight_entry(args[0]) if args else None
        if entry is None:
            return
        frame = self._classifier.event_frame(sys._getframe(1))
        if frame is None:
            return
        _weight, layer, storage = entry
        self._reads.append(_Read(storage.dtype, storage, layer, frame, caller_chain(frame, 1),
                                 returns_value_read_at(frame)))

    def _on_to(self, args: tuple, kwargs: dict) -> None:
        torch = self._torch
        target = kwargs.get("dtype")
        source = None
        if target is None:
            for argument in args[1:]:
                if isinstance(argument, torch.dtype):
                    target = argument
                    break
                if isinstance(argument, torch.Tensor):
                    source, target = argument, argument.dtype
                    break
        self._on_cast(args[0] if args else None, target, source)

    def _on_type(self, args: tuple, kwargs: dict) -> None:
        target = kwargs.get("dtype", args[1] if len(args) > 1 else None)
        if isinstance(target, self._torch.dtype):
            self._on_cast(args[0] if args else None, target, None)

    def _on_cast(self, tensor: Any, target: Any, source: Any) -> None:
        if target is None or not isinstance(tensor, self._torch.Tensor):
            return
        activation = tensor.dtype
        if not (activation.is_floating_point or activation.is_complex) or not breaks_activation(target, activation):
            return
        frame = self._classifier.event_frame(sys._getframe(1))
        if frame is None:
            return
        if source is not None:  # `.to(layer.weight)`: the storage is the weight's own
            entry = self._weight_entry(source)
            if entry is not None:
                self._record(ACTIVATION_CAST, frame, entry[2], entry[1])
            return
        read = self._matching_read(target, frame)
        if read is not None:
            self._record(ACTIVATION_CAST, frame, read.storage, read.layer)

    def _on_allocation(self, args: tuple, kwargs: dict) -> None:
        target = kwargs.get("dtype")
        if target is not None and is_packed_storage(target):
            self._on_storage_dtype_use(BUFFER_ALLOCATION, target)

    def _on_storage_dtype_use(self, kind: str, dtype: Any) -> None:
        # The frames of the guard itself are skipped on the way up (frames.py).
        frame = self._classifier.event_frame(sys._getframe(1))
        if frame is None:
            return
        read = self._matching_read(dtype, frame)
        if read is not None:
            self._record(kind, frame, read.storage, read.layer)

    def _matching_read(self, dtype: Any, frame: FrameType) -> _Read | None:
        """The latest read of a weight stored in `dtype` in this frame, or in its direct caller (the
        dtype passed to a helper that casts) or a direct callee (a helper that returned it). Not
        further: every frame of a run has the test's own frames as callers."""
        for read in reversed(self._reads):
            if read.dtype is not dtype:
                continue
            if read.frame is frame or read.frame is frame.f_back or (read.returned and read.chain[:1] == (frame,)):
                return read
        return None

    # -- sites ---------------------------------------------------------------------------------

    def _record(self, kind: str, frame: FrameType, storage: LayerStorage, layer: Any) -> None:
        path = display_path(frame.f_code.co_filename)
        key = (path, frame.f_lineno, kind)
        self.occurrences[key] = self.occurrences.get(key, 0) + 1
        if key in self._sites:
            return
        layer_class = storage.layer_class if layer is not None else None
        self._sites[key] = GuardSite(
            path=path, line=frame.f_lineno, function=getattr(frame.f_code, "co_qualname", frame.f_code.co_name),
            kind=kind, layer_path=self._layer_path(layer, frame), layer_class=layer_class,
            quantizer=storage.quantizer, storage=storage.storage, rule=RULE_BY_KIND[kind])

    def _layer_path(self, layer: Any, frame: FrameType) -> str | None:
        """The layer's path under `model=` ("encoder.block.0.layer.1.DenseReluDense.wo"); without
        one, under the `self` of the reporting function or its callers ("T5DenseActDense.wo")."""
        if layer is None:
            return None
        if self.roots:
            name = self._layer_names.get(id(layer))
            if name is None:  # built on the first site, and again if the model changed since
                self._layer_names.clear()
                for index, root in enumerate(self.roots):
                    prefix = f"[{index}]." if len(self.roots) > 1 else ""
                    for module_name, module in root.named_modules(remove_duplicate=False):
                        self._layer_names.setdefault(id(module), prefix + (module_name or type(root).__name__))
                name = self._layer_names.get(id(layer))
            if name is not None:
                return name
        module_type = self._torch.nn.Module
        for candidate in (frame,) + caller_chain(frame):
            owner = candidate.f_locals.get("self")
            if isinstance(owner, module_type):
                if owner is layer:
                    return type(owner).__name__
                for module_name, module in owner.named_modules():
                    if module is layer:
                        return f"{type(owner).__name__}.{module_name}"
        return None


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()
