"""Dicts the controller hands to every snapshot, frozen without a copy of every entry per decision.

A contended replay keeps tens of thousands of jobs live while each decision
changes a few: copying the live views (or the pending ids) into each snapshot
was a pass over all of them per decision. A `Book` keeps a base dict that no
longer changes once a snapshot shares it, plus the entries set and the base
keys removed since; `frozen` copies only those, and folds them into a new base
once they outgrow about the square root of the base (copies per decision of
O(sqrt(size * changes)), amortized).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from itertools import chain, count, filterfalse
from math import isqrt
from typing import Generic, TypeVar, overload

_V = TypeVar("_V")
_D = TypeVar("_D")
_MISSING: object = object()


class _Index:
    """Positions of a base dict's keys, built on first use and shared by the frozen copies of that base."""

    __slots__ = ("base", "of")

    def __init__(self, base: dict[str, object]) -> None:
        self.base = base
        self.of: dict[str, int] | None = None

    def get(self) -> dict[str, int]:
        if self.of is None:
            self.of = dict(zip(self.base, count()))
        return self.of


class Book(Generic[_V]):
    """A mutable str-keyed dict (insertion-ordered, as a dict) whose `frozen` copies cost what changed."""

    __slots__ = ("base", "delta", "gone", "index", "size")

    def __init__(self, items: dict[str, _V] | None = None) -> None:
        self.reset(items if items is not None else {})

    def reset(self, items: dict[str, _V]) -> None:
        """Hold exactly `items` (in their order); the dict becomes the base (not copied: do not change it)."""
        self.base: dict[str, _V] = items
        self.delta: dict[str, _V] = {}  # entries set since the base was made (updated or new keys)
        self.gone: set[str] = set()  # base keys removed since (re-added ones are in `delta` as new keys)
        self.size = len(items)
        self.index = _Index(items)  # type: ignore[arg-type]

    def __contains__(self, key: str) -> bool:
        return key in self.delta or (key in self.base and key not in self.gone)

    def __len__(self) -> int:
        return self.size

    def get(self, key: str) -> _V | None:
        value = self.delta.get(key, _MISSING)
        if value is not _MISSING:
            return value  # type: ignore[return-value]
        return None if key in self.gone else self.base.get(key)

    def __setitem__(self, key: str, value: _V) -> None:
        if key not in self:
            self.size += 1
        self.delta[key] = value

    def pop(self, key: str, default: _D | None = None) -> _V | _D | None:
        if key not in self:
            return default
        value = self.delta.pop(key, _MISSING)
        if key in self.base and key not in self.gone:
            self.gone.add(key)
            if value is _MISSING:
                value = self.base[key]
        self.size -= 1
        return value  # type: ignore[return-value]

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self.pop(key)

    def keys(self) -> list[str]:
        """The keys in dict order."""
        return list(_keys(self.base, self.gone, _new(self.base, self.delta, self.gone)))

    def as_dict(self) -> dict[str, _V]:
        """A plain dict copy, in the order a dict kept the same way would have."""
        return _merged(self.base, self.delta, self.gone)

    def folded(self) -> dict[str, _V]:
        """The entries as one plain dict, made the base (one copy if anything changed): read it, never change it."""
        if self.delta or self.gone:
            self.reset(self.as_dict())
        return self.base

    def frozen(self) -> Frozen[_V]:
        """A read-only copy of now: O(entries changed since the base), the base folded in when they grow."""
        if len(self.delta) + len(self.gone) > max(64, isqrt(16 * len(self.base))):
            self.reset(self.as_dict())
        return Frozen(self.base, dict(self.delta), frozenset(self.gone), self.size, self.index)


def _new(base: Mapping[str, object], delta: Mapping[str, object], gone: Iterable[str] | frozenset[str]) -> list[str]:
    """The keys of `delta` a dict would have appended: not in the base, or removed from it and set again."""
    gone = gone if isinstance(gone, (set, frozenset)) else set(gone)
    return [key for key in delta if key in gone or key not in base]


def _keys(base: dict[str, object] | dict[str, _V], gone: set[str] | frozenset[str], new: list[str]) -> Iterator[str]:
    return chain(filterfalse(gone.__contains__, base) if gone else base, new)


def _merged(base: dict[str, _V], delta: dict[str, _V], gone: set[str] | frozenset[str]) -> dict[str, _V]:
    out = base.copy()
    for key in gone:
        del out[key]
    out.update(delta)  # (updated keys keep their place, new and re-added ones follow in the order set)
    return out


class Frozen(Mapping[str, _V]):
    """A `Book` as it was at `Book.frozen`: lookups read the delta, then the base; iterating the keys is
    C-level; values and items build (once) a plain dict, as the copy it replaces did."""

    __slots__ = ("_all", "_base", "_delta", "_gone", "_index", "_new", "_size")

    def __init__(self, base: dict[str, _V], delta: dict[str, _V], gone: frozenset[str], size: int,
                 index: _Index) -> None:
        self._base, self._delta, self._gone, self._size, self._index = base, delta, gone, size, index
        self._new: list[str] | None = None if delta else []  # the keys that follow the base's (`_appended`)
        self._all: dict[str, _V] | None = None

    def __getitem__(self, key: str) -> _V:
        value = self._delta.get(key, _MISSING)
        if value is not _MISSING:
            return value  # type: ignore[return-value]
        if key in self._gone:
            raise KeyError(key)
        return self._base[key]

    @overload
    def get(self, key: str, /) -> _V | None: ...
    @overload
    def get(self, key: str, /, default: _V | _D) -> _V | _D: ...
    def get(self, key: str, /, default: object = None) -> object:
        value = self._delta.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._gone:
            return default
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._delta or (key in self._base and key not in self._gone)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[str]:
        return _keys(self._base, self._gone, self._appended())

    def _appended(self) -> list[str]:
        if self._new is None:
            self._new = _new(self._base, self._delta, self._gone)
        return self._new

    def as_dict(self) -> dict[str, _V]:
        """The plain dict (built on first use)."""
        if self._all is None:
            self._all = _merged(self._base, self._delta, self._gone) if self._delta or self._gone else self._base
        return self._all

    def keys(self) -> KeysView[str]:
        return self.as_dict().keys()

    def values(self) -> ValuesView[_V]:
        return self.as_dict().values()

    def items(self) -> ItemsView[str, _V]:
        return self.as_dict().items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Frozen):
            other = other.as_dict()
        return self.as_dict() == other if isinstance(other, Mapping) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Frozen({self.as_dict()!r})"

    def order(self, keys: Iterable[str]) -> list[str]:
        """`keys` (all present) in this mapping's order, without a pass over every key."""
        new = {key: i for i, key in enumerate(self._appended())}
        index = self._index.get()
        return sorted(keys, key=lambda key: (1, new[key]) if key in new else (0, index[key]))
