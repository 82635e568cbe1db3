"""A group of a trace's fields that go together (NumPy only): the base of the trace's
sub-records (:data:`updater.trace.format.GROUPS`). A group holds its fields' check, their
arrays in the trace's archive, their reading, the concatenation of traces, the selection of
steps, and its part of a recorded step's row (what the probes measured, to the row and back to
the trace's fields), so that a new group is one module and its place in ``GROUPS``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Tuple, Type, TypeVar

import numpy as np


def listed(names) -> str:
    """``names`` in words: ``a``, ``a and b``, ``a, b and c``."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


G = TypeVar("G", bound="Group")
"""A group's own class, in the signatures its subclasses narrow (:meth:`Group.checked`,
:meth:`Group.stranger`)."""


@dataclass(frozen=True)
class Group:
    """The base of a trace's sub-record: a frozen dataclass whose fields are the trace's public
    fields of the group (``trace.flush_scales`` reads ``trace.flush.flush_scales``)."""

    KEY: ClassVar[str] = ""
    """The :class:`updater.trace.Trace` attribute that holds the group."""
    KINDS: ClassVar[Dict[str, str]] = {}
    """Each array's kind in the archive (:meth:`updater.common.npz.NpzFile.array`)."""
    PROBED: ClassVar[bool] = True
    """Its part of a recorded row is what a probe measured under :attr:`KEY`, checked by
    :meth:`row_checked` when the step is recorded: a step that holds none has no part, and the
    group is not asked; False: the group makes a part of every step's row from the step and its
    gradients' histograms when the row is written (:meth:`row_part`)."""
    SHAPES: ClassVar[Dict[str, tuple]] = {}
    """Each array's shape: ``"steps"`` or ``"bins"`` (of ``counts``), another field's name (its
    length) or None (any length); an array of another shape is refused before it is read."""

    @classmethod
    def names(cls) -> Tuple[str, ...]:
        """The group's fields."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def values(self) -> dict:
        """The group's fields by name."""
        return {name: getattr(self, name) for name in self.names()}

    @classmethod
    def of(cls, trace, given: dict) -> Group | None:
        """The group of the fields in ``given`` (None values: not given) checked against
        ``trace``'s steps; None when none is given. ``ValueError`` unless all are given."""
        given = {k: v for k, v in given.items() if v is not None}
        if not given:
            return None
        if len(given) != len(cls.names()):
            raise ValueError(
                f"{listed(cls.names())} must be given together or not at all; got only "
                f"{listed(n for n in cls.names() if n in given)}"
            )
        return cls.checked(trace, **given)

    @classmethod
    def checked(cls: Type[G], trace, *args: Any, **fields: Any) -> G:
        """The group of its ``fields`` (each group's own signature) converted and checked
        against ``trace`` (its steps and histograms); ``TypeError``/``ValueError`` naming the
        field."""
        raise NotImplementedError

    def arrays(self) -> dict:
        """The group's arrays in the trace's archive."""
        return {
            k: np.array(v, dtype=str) if isinstance(v, tuple) else v
            for k, v in self.values().items()
        }

    @classmethod
    def read(cls, z) -> dict:
        """The group's fields found in the archive ``z`` (:class:`updater.common.npz.NpzFile`);
        text arrays as tuples of str."""
        found = {}
        for name, kind in cls.KINDS.items():
            if name in z:
                a = z.array(name, kind)
                found[name] = tuple(str(x) for x in a.ravel()) if kind == "text" else a
        return found

    def take(self, index: np.ndarray) -> Group:
        """The group at the steps ``index`` (int array; repeats allowed)."""
        return dataclasses.replace(
            self,
            **{n: _take(v, index) for n, v in self.values().items() if self._per_step(n)},
        )

    def unmeasured(self, steps: int) -> Group:
        """A group of ``steps`` steps, like this one, measuring nothing (what the concatenation
        of traces gives a trace without the group)."""
        raise ValueError(f"{self.KEY} cannot be left out of some traces only")

    @classmethod
    def concat(cls, traces: list) -> Group | None:
        """The group of ``traces`` one after the other (None when none has it); the traces
        without it are :meth:`unmeasured` there."""
        groups = [getattr(t, cls.KEY) for t in traces]
        given = [g for g in groups if g is not None]
        if not given:
            return None
        groups = [given[0].unmeasured(t.steps) if g is None else g for g, t in zip(groups, traces)]
        joined = {}
        for name in cls.names():
            parts = [getattr(g, name) for g in groups]
            if not cls._per_step(name):
                joined[name] = parts[0]
            elif isinstance(parts[0], tuple):
                joined[name] = tuple(x for p in parts for x in p)
            else:
                joined[name] = np.concatenate(parts)
        return cls(**joined)

    @classmethod
    def stranger(cls: Type[G], groups: List[G | None]) -> Tuple[int, str] | None:
        """The first of the parts' ``groups`` of one recording that no other part's
        concatenates with, and what it holds; None: they all do."""
        return None

    def describe(self) -> str | None:
        """What :func:`repr` of the trace says of the group (None: nothing)."""
        return None

    @classmethod
    def row_part(cls, step, arrays, layer_names) -> dict | None:
        """The part of the row of a recorded ``step`` of a group that makes one for every step
        (:attr:`PROBED` False; ``step``: :class:`updater.trace.measured.MeasuredStep` as
        :meth:`~updater.trace.measured.MeasuredStep.reduced` keeps it; ``arrays``: its
        histograms, :class:`updater.trace.measured.ArrayHistograms`; ``layer_names``: the
        recorder's list of them, None without ``per_parameter``): its fields at this step by
        name, None when it has none."""
        raise NotImplementedError

    @classmethod
    def row_checked(cls, value) -> dict:
        """The part of the row of a group whose probe measured ``value`` under its ``KEY``
        (:attr:`PROBED`): its fields at this step by name (``ValueError`` naming what is
        wrong)."""
        raise NotImplementedError

    @classmethod
    def unmeasured_row(cls, part: dict) -> dict:
        """The fields at a step that did not measure what ``part`` (another step's) holds."""
        raise ValueError(f"{cls.KEY} cannot be left out of some steps only")

    @classmethod
    def from_rows(cls, parts: list, layer_names) -> dict:
        """The trace's fields of the group from the rows' ``parts`` (:meth:`row_part` or
        :meth:`row_checked`; None:
        not measured at that step, :meth:`unmeasured_row` there); empty when no row has
        it."""
        given = [p for p in parts if p is not None]
        if not given:
            return {}
        empty = cls.unmeasured_row(given[0])
        rows = [empty if p is None else p for p in parts]
        return {
            name: tuple(r[name] for r in rows)
            if cls.KINDS[name] == "text"
            else np.stack([r[name] for r in rows])
            for name in cls.names()
        }

    @classmethod
    def _per_step(cls, name: str) -> bool:
        return cls.SHAPES.get(name, (None,))[0] == "steps"


def _take(value, index: np.ndarray):
    if isinstance(value, tuple):
        return tuple(value[i] for i in index)
    return value[index]
