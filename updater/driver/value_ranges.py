"""The values each input of a graph may hold, as the functions that read it see them, from the
function-role table (:mod:`updater.driver.function_roles`): one :class:`Range` per input, which
the host check (:func:`updater.driver.arrays.bad_indices`), the device path's graph
(:class:`updater.driver.flat.DeviceStats`) and the bad-input names of the updater's error all
read."""

from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Tuple

import nnabla as nn
import numpy as np

from ..common.float16 import FP16_OVERFLOW
from .function_roles import (
    IGNORED_FROM,
    INDEX,
    INDEXES,
    VALUE,
    Indexes,
    hands_on,
    input_names,
    input_roles,
)


class Range(NamedTuple):
    """The values an input may hold: finite and ``low < x < high`` (an open interval; an
    infinite bound: no bound on that side); ``why`` says where the bounds come from. With
    ``entries``, entry ``j`` along axis ``along`` of the input holds values in
    ``entries[j] = (low_j, high_j)`` (OneHot's columns, GatherNd's rows), and ``low``, ``high``
    are the loosest of them."""

    low: float
    high: float
    why: str
    entries: Tuple[Tuple[float, float], ...] = ()
    along: int = 0

    @property
    def bounded(self) -> bool:
        """Whether either bound is finite."""
        return self.low != -math.inf or self.high != math.inf

    @property
    def symmetric(self) -> bool:
        """Whether the range is ``low == -high`` for every value (a bound on ``|x|``)."""
        return not self.entries and self.low == -self.high

    @property
    def bounds(self) -> tuple:
        """``(low, high)``, or with entries ``(low, high, entries, along)``: what the device
        path's graph checks (:class:`updater.driver.flat.DeviceStats`)."""
        return (self.low, self.high, self.entries, self.along) if self.entries else self[:2]

    def holds(self, value: float) -> bool:
        """Whether ``value`` is in ``(low, high)`` (the loosest entry's range with ``entries``:
        :meth:`outside` judges an array entry by entry)."""
        return math.isfinite(value) and self.low < value < self.high

    def outside(self, a: np.ndarray) -> bool:
        """Whether the array ``a`` (of the input's shape) holds a value outside the range (or
        NaN), each entry along ``along`` against its own bounds with ``entries``."""
        if not self.entries:
            lows, highs = np.minimum.reduce(a, axis=None), np.maximum.reduce(a, axis=None)
            bounds = np.array([(self.low, self.high)])
        else:
            a = np.moveaxis(a, self.along, 0).reshape(len(self.entries), -1)
            lows, highs = np.minimum.reduce(a, axis=1), np.maximum.reduce(a, axis=1)
            bounds = np.array(self.entries)
        lows, highs = np.asarray(lows, float).ravel(), np.asarray(highs, float).ravel()
        return not (np.all(bounds[:, 0] < lows) and np.all(highs < bounds[:, 1]))


ANY = Range(low=-math.inf, high=math.inf, why="")


def _intersect(a: Range, b: Range) -> Range:
    """Both ranges at once; ``why`` names the bounds that bind. Entries along different axes
    of two readers (never seen): ``a``'s entries within ``b``'s loosest bounds."""
    if a.entries or b.entries:
        return _intersect_entries(a, b) if a.entries else _intersect_entries(b, a)
    if b.low <= a.low and b.high >= a.high:
        return a
    if a.low <= b.low and a.high >= b.high:
        return b
    why = "; ".join(filter(None, [a.why, b.why]))
    return Range(low=max(a.low, b.low), high=min(a.high, b.high), why=why)


def _intersect_entries(a: Range, b: Range) -> Range:
    """:func:`_intersect` of ``a`` (with entries) and ``b``."""
    if b.entries and (b.along, len(b.entries)) == (a.along, len(a.entries)):
        others = b.entries
    else:
        others = ((b.low, b.high),) * len(a.entries)
    entries = tuple((max(x[0], y[0]), min(x[1], y[1])) for x, y in zip(a.entries, others))
    why = "; ".join(filter(None, dict.fromkeys([a.why, b.why])))
    low, high = min(e[0] for e in entries), max(e[1] for e in entries)
    return Range(low=low, high=high, why=why, entries=entries, along=a.along)


def _index_range(func, i: int, names: List[str]) -> Range:
    """The range of index input ``i`` (named ``names[i]``) of ``func`` (:data:`INDEXES`)."""
    indexes = INDEXES.get(func.info.type_name)
    if indexes is None or indexes.index != names[i]:
        return ANY
    where = f"{func.info.type_name} '{func.name}'"
    if indexes.along is not None:
        return _entries_range(func, func.inputs[i].shape, names, indexes, where)
    found = _size(func, names, indexes)
    if found is None:
        return ANY
    size, of = found
    if indexes.counts:
        why = f"a count in [0, {size}], {of} of {where}"
        return Range(low=-1.0, high=size + 1.0, why=why)
    why = f"an index in [0, {size}), {of} of {where}"
    if indexes.ignores:
        why += f", which ignores a label in [{IGNORED_FROM}, 0)"
        return Range(low=IGNORED_FROM - 1.0, high=float(size), why=why)
    return Range(low=-1.0, high=float(size), why=why)


def _entries_range(func, shape, names: List[str], indexes: Indexes, where: str) -> Range:
    """The range of an index of ``shape`` whose entries along ``indexes.along`` address the
    leading axes of the table of ``func`` one each (:data:`INDEXES`)."""
    if indexes.table in names:
        position = names.index(indexes.table)
        table = func.inputs[position].shape
        of = f"the shape {tuple(table)} of input {position} of {where}"
    else:
        table = tuple(func.info.args[indexes.table])
        of = f"the {indexes.table} {table} of {where}"
    assert indexes.along is not None  # the caller's branch: entries along an axis
    along = indexes.along % len(shape)
    sizes = tuple(int(n) for n in table[: shape[along]])
    entries = tuple((-n - 1.0 if indexes.wraps else -1.0, float(n)) for n in sizes)
    if len(sizes) == 1:
        lowest = f"-{sizes[0]}" if indexes.wraps else "0"
        why = f"an index in [{lowest}, {sizes[0]}), {of}"
        return Range(low=entries[0][0], high=entries[0][1], why=why)
    accepted = "[-n_j, n_j)" if indexes.wraps else "[0, n_j)"
    why = f"an index in {accepted} at position j along axis {along}, n_j the j-th of {of}"
    low, high = min(e[0] for e in entries), max(e[1] for e in entries)
    return Range(low=low, high=high, why=why, entries=entries, along=along)


def _size(func, names: List[str], indexes: Indexes):
    """``(size, what it is)`` of the table ``indexes`` points into, or None without it."""
    if indexes.table not in names:
        return None
    position = names.index(indexes.table)
    shape = func.inputs[position].shape
    axis = indexes.axis
    axis = axis if isinstance(axis, int) else func.info.args.get(axis, len(shape) - 1)
    return int(shape[axis]), f"the size of input {position} along axis {int(axis)}"


def _read_range(func, i: int) -> Range:
    """What input ``i`` of ``func`` may hold as ``func`` reads it: below 65520 in magnitude for
    a value a half-precision function (its context's first backend ``*:half``) reads, the
    bounds of :data:`INDEXES` for an index, else any finite value."""
    role = input_roles(func)[i]
    if role == VALUE:
        backend = func.context.backend
        if backend and backend[0].endswith(":half"):
            why = f"|x| < {FP16_OVERFLOW:g}, read in float16 by input {i} of "
            why += f"{func.info.type_name} '{func.name}'"
            return Range(low=-FP16_OVERFLOW, high=FP16_OVERFLOW, why=why)
    elif role == INDEX:
        return _index_range(
            func, i, input_names(func.info.type_name, func.info.args, len(func.inputs))
        )
    return ANY


def input_ranges(loss, variables: List[nn.Variable]) -> List[Range]:
    """For each of ``variables`` (inputs of the graph of ``loss``), the values it may hold: the
    intersection of what each function that reads its array reads (:func:`_read_range`),
    following the array through the functions that hand it on unconverted
    (:func:`updater.driver.function_roles.hands_on`: an in-place Reshape, ...) to the functions
    that read it."""
    readers: Dict[int, list] = {}

    def visit(func):
        for i, v in enumerate(func.inputs):
            readers.setdefault(hash(v), []).append((func, i))

    loss.visit(visit)
    found = []
    for v in variables:
        found.append(ANY)
        arrays, seen = [hash(v)], {hash(v)}
        while arrays:
            for func, i in readers.get(arrays.pop(), ()):
                if not hands_on(func):
                    found[-1] = _intersect(found[-1], _read_range(func, i))
                elif hash(func.outputs[0]) not in seen:
                    seen.add(hash(func.outputs[0]))
                    arrays.append(hash(func.outputs[0]))
    return found
