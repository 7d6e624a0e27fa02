"""`record`: the package's `dataclasses.dataclass`, with `__eq__`, `__hash__`, `__repr__` and the
ordering methods built as closures over the class's fields instead of generated source.

Why: Python 3.10-3.12 build each method `dataclasses` generates with its own `exec` of generated
source (a parse and a compile). A pre-commit run on one edited file defines about 80 record
classes, and compiling their methods was a fifth of its instructions (benchmarks/README.md, issue
#37). The closures behave as the generated methods do, to the same text of `repr`
(tests/test_records.py compares them with `dataclasses`' own, field options, inheritance and
recursion included):

- `__eq__`: `NotImplemented` for an instance of another class, else the tuples of the fields with
  `compare=True` compared;
- `__hash__`: where `dataclasses` sets one (frozen and compared), the hash of the tuple of the
  fields whose `hash`, or `compare` where `hash` is None, is true; None on a class that is not
  frozen; a `__hash__` of the class body kept;
- `__repr__`: `Qualname(a=1, b='x')` over the fields with `repr=True`, `...` for a recursive call;
- `__lt__`, `__le__`, `__gt__`, `__ge__` with `order=True`, as `__eq__`.

A method of the class body is kept, as `dataclasses` keeps it. `__init__` (the hot one at run time)
and a frozen class's `__setattr__`/`__delattr__` stay `dataclasses`' own: a frozen class's
`__init__` assigns through `object.__setattr__` only when `dataclasses` makes the class frozen
itself, and then it generates those two as well. What `dataclasses` offers besides (`fields`,
`replace`, `asdict`, `is_dataclass`, `__match_args__`, pickling) is unchanged: the class is a
dataclass. Python 3.13 generates a class's methods in one `exec` and compares fields one by one,
so there `record` is `dataclasses.dataclass` itself, its semantics included.

Stdlib only: it is imported on the fast paths.
"""

from __future__ import annotations

import abc
import dataclasses
import operator
import sys
from reprlib import recursive_repr

# Not `typing.TYPE_CHECKING`: this module is imported on the fast paths, which spare `typing`
# (stdout_guard.py). Type checkers read the name as theirs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    _Key = Callable[[Any], tuple]

_MISSING = object()


def _key(names: list[str]) -> _Key:
    """The tuple of `names`' values: the tuple `dataclasses` builds in its generated source (a
    tuple even for one field or none, so `==` and `hash` are the tuple's: identity first, a bool)."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _eq(key: _Key) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented
    return __eq__


def _ordering(op: Callable[[Any, Any], Any], key: _Key) -> Callable[[Any, Any], Any]:
    def compare(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return op(key(self), key(other))
        return NotImplemented
    return compare


def _hash(key: _Key) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(key(self))
    return __hash__


def _repr(names: list[str]) -> Callable[[Any], str]:
    # Each field read and formatted in turn, as the generated f-string does.
    @recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join([f"{name}={getattr(self, name)!r}" for name in names])
        return self.__class__.__qualname__ + "(" + shown + ")"
    return __repr__


def _named(cls: type, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` named as the method `dataclasses` generates for `cls`."""
    fn.__name__ = name
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    fn.__module__ = cls.__module__
    return fn


def _install(cls: type, name: str, fn: Callable[..., Any]) -> bool:
    """Sets `fn` as `cls.<name>` unless the class body defines it (then True, as `dataclasses`'
    test)."""
    if name in cls.__dict__:
        return True
    setattr(cls, name, _named(cls, name, fn))
    return False


_ORDER = (("__lt__", operator.lt), ("__le__", operator.le), ("__gt__", operator.gt), ("__ge__", operator.ge))


def _record_class(cls: type, frozen: bool, order: bool, slots: bool) -> type:
    cls = dataclasses.dataclass(cls, eq=False, repr=False, frozen=frozen, slots=slots)
    # A `__hash__` of the class body is kept; None beside an `__eq__` of the body is the one Python
    # sets itself (dataclasses' own test). Read before `__eq__` is set.
    body_hash = cls.__dict__.get("__hash__", _MISSING)
    explicit_hash = not (body_hash is _MISSING or (body_hash is None and "__eq__" in cls.__dict__))
    fields = dataclasses.fields(cls)
    compared = _key([f.name for f in fields if f.compare])
    _install(cls, "__repr__", _repr([f.name for f in fields if f.repr]))
    _install(cls, "__eq__", _eq(compared))
    if order:
        for name, op in _ORDER:
            if _install(cls, name, _ordering(op, compared)):
                raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}. "
                                "Consider using functools.total_ordering")
    if not explicit_hash:  # set over the None Python put beside an `__eq__` of the body, too
        if frozen:
            hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
            cls.__hash__ = _named(cls, "__hash__", _hash(_key(hashed)))  # type: ignore[method-assign]
        else:
            cls.__hash__ = None  # type: ignore[assignment]
    params = cls.__dict__["__dataclass_params__"]  # what the class has, as dataclasses would record it
    params.repr, params.eq, params.order = True, True, order
    abc.update_abstractmethods(cls)  # the methods came after dataclasses' own call
    return cls


def _record(cls: type | None = None, /, *, frozen: bool = False, order: bool = False,
            slots: bool = False) -> Any:
    """`@record`, `@record(frozen=True)`, `@record(frozen=True, order=True)`, `@record(slots=True)`:
    `dataclasses.dataclass` with those options."""
    def wrap(cls: type) -> type:
        if sys.version_info >= (3, 13):
            return dataclasses.dataclass(cls, frozen=frozen, order=order, slots=slots)
        return _record_class(cls, frozen, order, slots)
    return wrap if cls is None else wrap(cls)


# Type checkers see `dataclasses.dataclass`, whose classes they know (fields, `replace`).
if TYPE_CHECKING:
    from dataclasses import dataclass as record
else:
    record = _record
