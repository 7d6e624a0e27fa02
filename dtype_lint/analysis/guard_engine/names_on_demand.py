"""A set of predicate names that judges a function only when a guard asks about its name.

The guard engine asks of its predicates one question, `name in predicates` (guards.implies_weight,
guards.implies_no_weight, `_Assignment.is_deferred_flag_value`), for the names a test or an
assignment calls. Judging every function that may be one up front (each top-level function of
the file, every name it imports, each method of a class, every object a method builds) cost more
than everything else DTL003 does on vLLM: a class whose read is judged asked about a few of them.

`NamesOnDemand` holds the names known up front and "parts": functions from a base name (`f` for
`f`, `not f`, `f[0]`, `not f[0]`) to the names of that base that one source of predicates gives.
Each part is asked once per base. The answer is exactly membership in the union of the sets the
parts would have given for every name, provided every name a part gives for a base has that base.
"""

from __future__ import annotations

from typing import Callable, Iterable

Part = Callable[[str], frozenset]


def base_name(name: str) -> str:
    """`not f[0]` -> `f`: the function a predicate name is about (`self.m`, `X.m` stay whole)."""
    if name.startswith("not "):
        name = name[4:]
    if name.endswith("]") and "[" in name:
        name = name[:name.rindex("[")]
    return name


def memoised(part: Part) -> Part:
    """`part`, asked at most once per base name."""
    answers: dict[str, frozenset] = {}

    def ask(base: str) -> frozenset:
        found = answers.get(base)
        if found is None:
            found = answers[base] = part(base)
        return found

    return ask


class NamesOnDemand:
    """Predicate names answered by membership only: `eager` ones, or one a part gives for the
    name's base. `|` with a set or another NamesOnDemand unions both, still on demand."""

    __slots__ = ("_eager", "_parts")

    def __init__(self, eager: Iterable[str] = frozenset(), parts: tuple[Part, ...] = ()):
        self._eager = frozenset(eager)
        self._parts = parts

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name in self._eager:
            return True
        if not self._parts:
            return False
        base = base_name(name)
        return any(name in part(base) for part in self._parts)

    def __or__(self, other):
        if isinstance(other, NamesOnDemand):
            parts = self._parts + tuple(part for part in other._parts if part not in self._parts)
            return NamesOnDemand(self._eager | other._eager, parts)
        if isinstance(other, (set, frozenset)):
            return NamesOnDemand(self._eager | other, self._parts) if other else self
        return NotImplemented

    __ror__ = __or__

    def __repr__(self) -> str:
        return f"NamesOnDemand({sorted(self._eager)!r}, {len(self._parts)} parts)"
