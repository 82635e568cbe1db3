"""The values each input of a graph may hold, as the functions that read it see them, from the
function-role table (:mod:`updater.driver.function_roles`): one :class:`Range` per input, which
the host check (:func:`updater.driver.arrays.bad_indices`), the device path's graph
(:class:`updater.driver.flat.DeviceStats`) and the bad-input names of the updater's error all
read."""

from __future__ import annotations

import math
from typing import Dict, List, NamedTuple

import nnabla as nn

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
    infinite bound: no bound on that side); ``why`` says where the bounds come from."""

    low: float
    high: float
    why: str

    @property
    def bounded(self) -> bool:
        """Whether either bound is finite."""
        return self.low != -math.inf or self.high != math.inf

    @property
    def symmetric(self) -> bool:
        """Whether ``low == -high`` (a bound on ``|x|``)."""
        return self.low == -self.high

    def holds(self, value: float) -> bool:
        """Whether ``value`` is in the range."""
        return math.isfinite(value) and self.low < value < self.high


ANY = Range(low=-math.inf, high=math.inf, why="")


def _intersect(a: Range, b: Range) -> Range:
    """Both ranges at once; ``why`` names the bounds that bind."""
    if b.low <= a.low and b.high >= a.high:
        return a
    if a.low <= b.low and a.high >= b.high:
        return b
    why = "; ".join(filter(None, [a.why, b.why]))
    return Range(low=max(a.low, b.low), high=min(a.high, b.high), why=why)


def _index_range(func, i: int, names: List[str]) -> Range:
    """The range of index input ``i`` (named ``names[i]``) of ``func`` (:data:`INDEXES`)."""
    indexes = INDEXES.get(func.info.type_name)
    if indexes is None or indexes.index != names[i]:
        return ANY
    found = _size(func, names, indexes)
    if found is None:
        return ANY
    size, of = found
    where = f"{func.info.type_name} '{func.name}'"
    why = f"an index in [0, {size}), {of} of {where}"
    if indexes.ignores:
        why += f", which ignores a label in [{IGNORED_FROM}, 0)"
        return Range(low=IGNORED_FROM - 1.0, high=float(size), why=why)
    return Range(low=-1.0, high=float(size), why=why)


def _size(func, names: List[str], indexes: Indexes):
    """``(size, what it is)`` of the table ``indexes`` points into, or None without it."""
    if indexes.axis is None:  # an argument of sizes (OneHot's shape)
        sizes = tuple(func.info.args[indexes.table])
        largest = "the largest size" if len(sizes) > 1 else "the size"
        return max(sizes), f"{largest} in the {indexes.table} {sizes}"
    if indexes.table not in names:
        return None
    position = names.index(indexes.table)
    shape = func.inputs[position].shape
    axis = indexes.axis
    axis = axis if isinstance(axis, int) else func.info.args.get(axis, len(shape) - 1)
    return int(shape[axis]), f"the size of input {position} along axis {axis}"


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
