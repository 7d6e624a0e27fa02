"""`record` (dtype_lint/core/records.py) behaves as `dataclasses.dataclass` (issue #37).

`record` builds `__eq__`, `__hash__`, `__repr__` and the ordering methods as closures instead of
generated source. Each synthetic class below is defined twice from the same body, once with
`record` and once with `dataclasses.dataclass` and the same options, and their instances are
compared method by method: the result (or the exception) of `==`, `!=`, the orderings, `hash`
and `repr`, and which methods the class holds. Then every record class the package defines is
compared with a dataclass of the same fields and field options, and pickling, `replace`, `asdict`
and `__match_args__` are checked on records.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import operator
import pickle
import pkgutil
import reprlib
import sys
from dataclasses import InitVar, field
from typing import ClassVar

import pytest

import dtype_lint
import dtype_lint.rules
from dtype_lint.core import records
from dtype_lint.core.records import record

METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "__lt__", "__le__", "__gt__", "__ge__",
           "__setattr__", "__delattr__", "__match_args__", "__getstate__", "__setstate__", "__slots__")
COMPARISONS = (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge)


def outcome(fn, *args):
    """What calling `fn` gives: its value, or the exception's type and text."""
    try:
        return ("value", fn(*args))
    except Exception as error:  # the exception is the outcome compared
        return ("raised", type(error), str(error))


def class_shape(cls) -> dict:
    """What the class itself holds where `dataclasses` decides: which methods it sets (None for
    `__hash__ = None`), its parameters, fields, docstring and match arguments."""
    shape = {name: (cls.__dict__[name] is None) for name in METHODS if name in cls.__dict__}
    shape["params"] = repr(cls.__dataclass_params__)
    shape["fields"] = [(f.name, f.compare, f.repr, f.hash) for f in dataclasses.fields(cls)]
    shape["doc"] = cls.__doc__
    shape["match_args"] = getattr(cls, "__match_args__", None)
    return shape


def assert_same(pairs, argument_sets) -> None:
    """`pairs`: (record class, dataclass) built from one body; `argument_sets`: (index into
    pairs, keyword arguments) for the instances. Every instance against every other."""
    for ours, theirs in pairs:
        assert class_shape(ours) == class_shape(theirs), ours.__qualname__
    made = [(pairs[i][0](**kw), pairs[i][1](**kw)) for i, kw in argument_sets]
    for ours, theirs in made:
        assert outcome(repr, ours) == outcome(repr, theirs)
        assert outcome(hash, ours) == outcome(hash, theirs)
        assert outcome(type(ours).__eq__, ours, object()) == outcome(type(theirs).__eq__, theirs, object())
    for (a, a_ref), (b, b_ref) in itertools.product(made, repeat=2):
        assert outcome(type(a).__eq__, a, b) == outcome(type(a_ref).__eq__, a_ref, b_ref)
        for op in COMPARISONS:
            assert outcome(op, a, b) == outcome(op, a_ref, b_ref), (op, a_ref, b_ref)


def both(factory):
    """The classes `factory(decorator)` defines, once with `record` and once with dataclasses."""
    ours, theirs = factory(record), factory(dataclasses.dataclass)
    if not isinstance(ours, tuple):
        ours, theirs = (ours,), (theirs,)
    return list(zip(ours, theirs))


def field_options(deco):
    @deco(frozen=True)
    class Options:
        name: str
        size: int = 0
        note: str = field(default="", compare=False)
        secret: str = field(default="", repr=False)
        loose: int = field(default=0, hash=False)
        extra: int = field(default=0, compare=False, hash=True)
        items: tuple = field(default_factory=tuple)
        other: int = 0  # the name the generated `__eq__` gives its argument
        kind: ClassVar[str] = "k"
    return Options


def test_field_options_compare_repr_hash():
    pairs = both(field_options)
    base = {"name": "n", "size": 1, "note": "a", "secret": "s", "loose": 2, "extra": 3, "items": (1,), "other": 4}
    changes = [{}, {"name": "m"}, {"size": 2}, {"note": "b"}, {"secret": "t"}, {"loose": 5}, {"extra": 6},
               {"items": (2,)}, {"other": 7}, {"items": ([],)}]  # a list in a hashed field: unhashable
    assert_same(pairs, [(0, {**base, **change}) for change in changes])


def mutable(deco):
    @deco
    class Mutable:
        label: str
        values: list = field(default_factory=list)
        scale: InitVar[int] = 1
        self: int = 0  # dataclasses names `__init__`'s first parameter otherwise

        def __post_init__(self_, scale):
            self_.values = [v * scale for v in self_.values]
    return Mutable


def test_mutable_class_is_unhashable_and_compares_fields():
    pairs = both(mutable)
    assert pairs[0][0].__hash__ is None
    assert_same(pairs, [(0, {"label": "a"}), (0, {"label": "a", "values": [1, 2], "scale": 3}),
                        (0, {"label": "a", "values": [3, 6]}), (0, {"label": "b", "self": 1})])


def empty(deco):
    @deco(frozen=True)
    class FrozenEmpty:
        pass

    @deco
    class Empty:
        pass
    return FrozenEmpty, Empty


def test_classes_without_fields():
    assert_same(both(empty), [(0, {}), (0, {}), (1, {}), (1, {})])


def one_field(deco):
    @deco(frozen=True)
    class One:
        x: object
    return One


class Odd:
    """A value whose `==` answers neither True nor False, and one that cannot be compared."""

    def __init__(self, raises: bool = False):
        self.raises = raises

    def __eq__(self, other):
        if self.raises:
            raise ValueError("no comparison")
        return "yes"

    __hash__ = object.__hash__

    def __repr__(self):
        return f"Odd({self.raises})"


def test_one_field_compares_as_a_tuple():
    """A one-field record compares `(x,) == (y,)` as dataclasses does: the same NaN object is
    equal to itself, another NaN is not, and `==` of an odd value gives a bool."""
    nan = float("nan")
    odd, raising = Odd(), Odd(raises=True)
    assert_same(both(one_field), [(0, {"x": nan}), (0, {"x": nan}), (0, {"x": float("nan")}), (0, {"x": 1}),
                                  (0, {"x": odd}), (0, {"x": Odd()}), (0, {"x": raising}), (0, {"x": [1]})])


def two_fields(deco):
    @deco(frozen=True)
    class Two:
        first: object
        second: object
    return Two


def test_fields_compare_in_order_and_stop_at_the_first_difference():
    raising = Odd(raises=True)
    assert_same(both(two_fields), [(0, {"first": 1, "second": raising}), (0, {"first": 2, "second": raising}),
                                   (0, {"first": 1, "second": Odd()}), (0, {"first": Odd(), "second": 3})])


def family(deco):
    @deco(frozen=True)
    class Base:
        a: int
        b: str = "b"

    @deco(frozen=True)
    class Child(Base):
        c: int = 0
        b: str = field(default="b", compare=False, repr=False)  # a base's field with other options

    class Plain(Child):  # not decorated: inherits Child's methods
        pass

    @deco
    class Open:
        a: int

    @deco
    class OpenChild(Open):
        d: list = field(default_factory=list)
    return Base, Child, Plain, Open, OpenChild


def test_subclasses_get_methods_from_their_own_fields():
    pairs = both(family)
    assert_same(pairs, [(0, {"a": 1}), (0, {"a": 1, "b": "x"}), (1, {"a": 1}), (1, {"a": 1, "b": "x"}),
                        (1, {"a": 1, "c": 2}), (2, {"a": 1}), (2, {"a": 1, "b": "y"}), (3, {"a": 1}),
                        (4, {"a": 1}), (4, {"a": 1, "d": [1]})])


def own_methods(deco):
    @deco(frozen=True)
    class OwnEq:  # frozen with its own `__eq__`: dataclasses still adds `__hash__`
        a: int

        def __eq__(self, other):
            return isinstance(other, OwnEq) and self.a % 2 == other.a % 2

    @deco
    class OwnHash:
        a: int

        def __hash__(self):
            return 7

    @deco(frozen=True)
    class OwnFrozenHash:
        a: int

        def __hash__(self):
            return 8

    @deco(frozen=True)
    class OwnRepr:
        a: int

        def __repr__(self):
            return "own"

    @deco(frozen=True)
    class NoHash:
        a: int
        __hash__ = None  # type: ignore[assignment]

    @deco
    class OwnEqOpen:
        a: int

        def __eq__(self, other):
            return True
    return OwnEq, OwnHash, OwnFrozenHash, OwnRepr, NoHash, OwnEqOpen


def test_methods_of_the_class_body_are_kept():
    pairs = both(own_methods)
    assert pairs[0][0].__dict__["__eq__"].__code__.co_filename == __file__
    assert_same(pairs, [(i, {"a": a}) for i in range(len(pairs)) for a in (1, 2, 3)])


def ordered(deco):
    @deco(frozen=True, order=True)
    class Version:
        major: int
        minor: int = 0
        label: str = field(default="", compare=False)

    @deco(frozen=True, order=True)
    class Empty:
        pass
    return Version, Empty


def test_order():
    assert_same(both(ordered), [(0, {"major": 1}), (0, {"major": 1, "minor": 2}), (0, {"major": 1, "label": "x"}),
                                (0, {"major": 0, "minor": 9}), (1, {}), (1, {})])


def test_an_ordering_method_of_the_body_is_refused_as_dataclasses_refuses_it():
    def body(deco):
        @deco(frozen=True, order=True)
        class Clash:
            a: int

            def __lt__(self, other):
                return False
        return Clash
    assert outcome(body, record) == outcome(body, dataclasses.dataclass)
    assert outcome(body, record)[0] == "raised"


def slotted(deco):
    @deco(slots=True)
    class Slotted:
        a: int
        b: list = field(default_factory=list)

    @deco(frozen=True, slots=True)
    class FrozenSlotted:
        a: int
        b: str = "b"
    return Slotted, FrozenSlotted


def test_slots():
    pairs = both(slotted)
    for ours, theirs in pairs:
        assert ours.__slots__ == theirs.__slots__
    assert_same(pairs, [(0, {"a": 1}), (0, {"a": 1, "b": [2]}), (1, {"a": 1}), (1, {"a": 2, "b": "c"})])


def nodes(deco):
    @deco
    class Node:
        name: str
        children: list = field(default_factory=list)
    return Node


def test_a_recursive_repr_shows_dots():
    (ours, theirs), = both(nodes)
    shown = []
    for cls in (ours, theirs):
        a, b = cls("a"), cls("b")
        a.children.append(b)
        b.children.extend([a, b])
        shown.append((repr(a), repr(b), repr([a, a])))
    assert shown[0] == shown[1]
    node = "nodes.<locals>.Node"
    assert shown[0][0] == f"{node}(name='a', children=[{node}(name='b', children=[..., ...])])"


def test_frozen_records_refuse_assignment():
    (ours, theirs), = both(field_options)
    for cls in (ours, theirs):
        assert cls.__dict__["__setattr__"].__code__.co_filename == "<string>"  # dataclasses' own
    for action in (lambda r: setattr(r, "name", "x"), lambda r: setattr(r, "new", 1), lambda r: delattr(r, "size")):
        assert outcome(action, ours("n")) == outcome(action, theirs("n"))
        assert outcome(action, ours("n"))[1] is dataclasses.FrozenInstanceError


def test_methods_are_named_as_generated_ones():
    (ours, theirs), = both(ordered)[:1]
    for name in ("__eq__", "__hash__", "__repr__", "__lt__", "__ge__"):
        mine, generated = ours.__dict__[name], theirs.__dict__[name]
        assert (mine.__name__, mine.__qualname__, mine.__module__) == \
            (generated.__name__, generated.__qualname__, generated.__module__)


# Module-level records: pickle finds a class by its qualified name.
@record(frozen=True)
class Pickled:
    a: int
    b: tuple = ()
    c: str = field(default="", compare=False)


@record(frozen=True, slots=True)
class PickledSlots:
    a: int
    b: str = "b"


@record
class PickledOpen:
    a: list = field(default_factory=list)


def test_pickling_replace_asdict_and_match_args():
    for value in (Pickled(1, (2, 3), "x"), PickledSlots(4, "y"), PickledOpen([5])):
        copy = pickle.loads(pickle.dumps(value))
        assert copy == value and repr(copy) == repr(value) and copy is not value
    assert dataclasses.replace(Pickled(1), b=(9,)) == Pickled(1, (9,))
    assert dataclasses.asdict(Pickled(1, (2,), "z")) == {"a": 1, "b": (2,), "c": "z"}
    assert dataclasses.is_dataclass(Pickled) and Pickled.__match_args__ == ("a", "b", "c")
    match Pickled(1, (2,)):
        case Pickled(a, b):
            assert (a, b) == (1, (2,))
        case _:
            pytest.fail("no match")


def test_package_records_pickle():
    from dtype_lint.core.findings import Evidence, Finding, Span

    finding = Finding("DTL001", "message", "x.py", Span(1, 2, 1, 5), evidence=(Evidence("why", "y.py", 3),))
    copy = pickle.loads(pickle.dumps(finding))
    assert copy == finding and repr(copy) == repr(finding) and hash(copy.span) == hash(finding.span)


def package_records() -> list[type]:
    """Every class of dtype_lint and its rules that a `@record` (or `@dataclass`) decorates."""
    names = []
    for package in (dtype_lint, dtype_lint.rules):
        names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
                  if not m.name.endswith("__main__")]
    found = {}
    for name in names:
        module = importlib.import_module(name)
        for value in vars(module).values():
            for cls in (value, *(vars(value).values() if isinstance(value, type) else ())):
                if isinstance(cls, type) and cls.__module__ == name and "__dataclass_fields__" in cls.__dict__:
                    found[f"{name}.{cls.__qualname__}"] = cls
    return [found[key] for key in sorted(found)]


def built_by_records(fn) -> bool:
    """Is `fn` a method `record` built (not the class body's, not generated source)?"""
    if fn is None:
        return False
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_filename == reprlib.__file__:  # the recursion guard around `__repr__`
        fn = next(cell.cell_contents for cell in fn.__closure__ if callable(cell.cell_contents))
        code = fn.__code__
    return code is not None and code.co_filename == records.__file__


def reference(cls) -> type:
    """A plain dataclass with `cls`'s name, fields and field options."""
    params = cls.__dataclass_params__
    specs = [(f.name, object, field(compare=f.compare, repr=f.repr, hash=f.hash)) for f in dataclasses.fields(cls)]
    ref = dataclasses.make_dataclass(cls.__name__, specs, frozen=params.frozen, order=params.order,
                                     slots="__slots__" in cls.__dict__)
    ref.__qualname__ = cls.__qualname__
    return ref


def bare(cls, values: dict):
    """An instance of `cls` holding `values`, without its `__init__` (which may check them)."""
    obj = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="record is dataclasses.dataclass there")
def test_every_package_record_behaves_as_its_dataclass():
    classes = package_records()
    assert len(classes) > 90  # 106 at the time of writing
    for cls in classes:
        ref = reference(cls)
        assert built_by_records(cls.__dict__.get("__eq__")), \
            f"{cls.__qualname__}: decorate it with `record` (dtype_lint.core.records), not `dataclass`"
        names = [f.name for f in dataclasses.fields(cls)]
        variants = [dict.fromkeys(names, 0)] + [{**dict.fromkeys(names, 0), name: 1} for name in names]
        made = [(bare(cls, v), bare(ref, v)) for v in variants]
        for ours, theirs in made:
            if built_by_records(cls.__dict__.get("__repr__")):
                assert repr(ours) == repr(theirs)
            if built_by_records(cls.__dict__.get("__hash__")):
                assert hash(ours) == hash(theirs)
            elif "__hash__" in cls.__dict__ and cls.__dict__["__hash__"] is None:
                assert ref.__hash__ is None, cls.__qualname__
        for (a, a_ref), (b, b_ref) in itertools.product(made, repeat=2):
            assert (a == b) == (a_ref == b_ref), (cls.__qualname__, a_ref, b_ref)
            if cls.__dataclass_params__.order:
                assert (a < b, a >= b) == (a_ref < b_ref, a_ref >= b_ref)
