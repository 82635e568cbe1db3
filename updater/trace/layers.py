"""A trace's per-layer statistics (NumPy only): the histograms of each parameter array
(:class:`Layers`, ``GradientRecorder(per_parameter=True)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, List, Tuple

import numpy as np

from .group import Group
from .measured import NBINS
from .values import check_counts, check_label, check_magnitudes, layer_columns


@dataclass(frozen=True)
class Layers(Group):
    """The statistics of each of ``P`` parameter arrays (the fields of
    :class:`updater.trace.Trace` of these names).

    Attributes:
        layer_names: tuple of ``P`` distinct str.
        layer_counts: int64 array ``(steps, P, NBINS)``: ``counts`` per parameter array;
            summed over the arrays it equals ``counts`` at every step.
        layer_zeros: int64 array ``(steps, P)``: ``zeros`` per parameter array (sums to
            ``zeros``). An array absent from a step has zero counts and zeros there.
        layer_absmax: float64 array ``(steps, P)``: ``absmax`` per parameter array (0.0 where
            it has no nonzero finite value).
    """

    layer_names: tuple
    layer_counts: np.ndarray
    layer_zeros: np.ndarray
    layer_absmax: np.ndarray

    PROBED: ClassVar[bool] = False
    KEY: ClassVar[str] = "layers"
    KINDS: ClassVar[dict] = {
        "layer_names": "text",
        "layer_counts": "int",
        "layer_zeros": "int",
        "layer_absmax": "number",
    }
    SHAPES: ClassVar[dict] = {
        "layer_names": (None,),
        "layer_counts": ("steps", "layer_names", "bins"),
        "layer_zeros": ("steps", "layer_names"),
        "layer_absmax": ("steps", "layer_names"),
    }

    @classmethod
    def checked(cls, trace, layer_names, layer_counts, layer_zeros, layer_absmax) -> Layers:
        names = layer_names
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise TypeError(f"layer_names must be a sequence of str, got {names!r}")
        names = tuple(names)
        for name in names:
            check_label("layer_names", name)
        if len(set(names)) != len(names):
            raise ValueError(f"layer_names must be distinct, got {names!r}")
        layers = cls(
            names,
            np.asarray(layer_counts, dtype=np.int64),
            np.asarray(layer_zeros, dtype=np.int64),
            np.asarray(layer_absmax, dtype=np.float64),
        )
        shape = (trace.steps, len(names))
        for name, want in (
            ("layer_counts", shape + (NBINS,)),
            ("layer_zeros", shape),
            ("layer_absmax", shape),
        ):
            if getattr(layers, name).shape != want:
                raise ValueError(
                    f"{name} must have shape {want}, got {getattr(layers, name).shape}"
                )
        check_counts("layer_counts", layers.layer_counts, layers.layer_zeros)
        check_counts("layer_zeros", layers.layer_zeros)
        check_magnitudes("layer_absmax", layers.layer_absmax)
        same = (layers.layer_counts.sum(axis=1) == trace.counts).all(axis=1)
        same &= layers.layer_zeros.sum(axis=1) == trace.zeros
        if not same.all():
            raise ValueError(
                "layer_counts and layer_zeros summed over the layers must equal counts and "
                f"zeros at every step; step {np.flatnonzero(~same)[0]} differs"
            )
        return layers

    @classmethod
    def concat(cls, traces: List) -> Layers | None:
        """Columns aligned by name (a layer absent from a trace has zero counts there); None
        when the first trace has no layers."""
        if traces[0].layers is None:
            return None
        names = list(dict.fromkeys(n for t in traces for n in t.layer_names))
        parts = []
        for t in traces:
            columns = [names.index(n) for n in t.layer_names]
            c = np.zeros((t.steps, len(names), NBINS), np.int64)
            z, a = np.zeros((t.steps, len(names)), np.int64), np.zeros((t.steps, len(names)))
            c[:, columns], z[:, columns] = t.layer_counts, t.layer_zeros
            a[:, columns] = t.layer_absmax
            parts.append((c, z, a))
        return cls(tuple(names), *(np.concatenate(p) for p in zip(*parts)))

    @classmethod
    def stranger(cls, groups: List[Layers | None]) -> Tuple[int, str] | None:
        """Per-layer statistics in all parts or in none."""
        for i, g in enumerate(groups):
            if (g is None) != (groups[0] is None):
                return i, "per-layer statistics"
        return None

    def describe(self) -> str | None:
        return f"layers={len(self.layer_names)}"

    @classmethod
    def row_part(cls, step, arrays, layer_names) -> dict | None:
        """With ``per_parameter`` (``layer_names`` a list): each gradient array's histogram
        and its column among the recorder's names (a name first seen is added to them,
        :func:`updater.trace.values.layer_columns`; the recorder adds them as it records the
        step); else None."""
        if layer_names is None:
            return None
        return {
            "columns": layer_columns(layer_names, step.names, len(arrays.zeros)),
            "layer_counts": arrays.counts,
            "layer_zeros": arrays.zeros,
            "layer_absmax": arrays.absmax,
        }

    @classmethod
    def from_rows(cls, parts: list, layer_names) -> dict:
        """Columns by ``layer_names``; a column absent from a step stays 0 there."""
        if layer_names is None:
            return {}
        shape = (len(parts), len(layer_names))
        c, z, a = np.zeros(shape + (NBINS,), np.int64), np.zeros(shape, np.int64), np.zeros(shape)
        for t, part in enumerate(parts):
            columns = part["columns"]
            c[t, columns], z[t, columns] = part["layer_counts"], part["layer_zeros"]
            a[t, columns] = part["layer_absmax"]
        return {"layer_names": layer_names, "layer_counts": c, "layer_zeros": z, "layer_absmax": a}
