"""The TorchFunctionMode of the guard: a dictionary look-up per torch call, and the handler of the
few calls it watches (`.dtype` reads, casts, allocations). Kept apart so that importing
`dtype_lint.guard` (the pytest plugin does, at start-up) does not import torch."""

from __future__ import annotations

from typing import Any, Callable

from torch.overrides import TorchFunctionMode


class GuardMode(TorchFunctionMode):
    def __init__(self, handlers: dict[Any, Callable[[tuple, dict], None]]) -> None:
        super().__init__()
        self._handlers = handlers
        # A handler that failed: the guard must never change what the watched code does, so the
        # error is kept here (tests read it) instead of raised into the user's forward.
        self.errors: list[BaseException] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        try:
            handler = self._handlers.get(func)
        except TypeError:  # an unhashable callable: not one of ours
            handler = None
        if handler is not None:
            try:
                handler(args, kwargs)
            except Exception as error:  # noqa: BLE001 - see `errors`
                self.errors.append(error)
        return func(*args, **kwargs)
