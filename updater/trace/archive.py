"""The trace's ``.npz`` archive: the arrays :meth:`updater.trace.format.Trace.save` writes and
the checked reading :meth:`~updater.trace.format.Trace.load` does (NumPy only)."""

from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np

from ..common.npz import read_npz
from .values import EXP_MAX, EXP_MIN

FORMAT_VERSION = 6
"""Trace file format: 2 added ``overflow_scale`` (version-1 files load with it all inf); 3 added
the optional per-layer arrays (version-1 and -2 files load without layers); 4 added
``overflow_probed`` and the optional measured flush curve (older files load without them); 5
added ``finite_scale`` (older files load with it all 0: not known) and the optional forward
headroom (``forward_peak``, ``forward_where``); 6 added ``every`` (older files load with 1: their
recorder's ``every`` was not stored)."""
LAYER_FIELDS = ("layer_names", "layer_counts", "layer_zeros", "layer_absmax")


def trace_arrays(trace) -> dict:
    """The arrays of ``trace``'s archive, by name (format :data:`FORMAT_VERSION`)."""
    arrays = {
        "format_version": FORMAT_VERSION,
        "exp_min": EXP_MIN,
        "exp_max": EXP_MAX,
        "counts": trace.counts,
        "zeros": trace.zeros,
        "absmax": trace.absmax,
        "nonfinite": trace.nonfinite,
        "overflow_scale": trace.overflow_scale,
        "overflow_probed": trace.overflow_probed,
        "finite_scale": trace.finite_scale,
        "name": trace.name,
        "every": trace.every,
    }
    if trace.has_flush:
        arrays.update(flush_scales=trace.flush_scales, flush_shares=trace.flush_shares)
    if trace.has_forward:
        arrays["forward_peak"] = trace.forward_peak
        arrays["forward_where"] = np.array(trace.forward_where, dtype=str)
    if trace.has_layers:
        arrays["layer_names"] = np.array(trace.layer_names, dtype=str)
        arrays.update({name: getattr(trace, name) for name in LAYER_FIELDS[1:]})
    return arrays


def read_trace(make, path: Union[str, Path], max_bytes: int | None):
    """``make(...)`` of the fields read from the trace archive at ``path``, checked as
    :meth:`updater.trace.format.Trace.load` documents; an error of ``make`` names the file."""
    try:
        z = read_npz(path, "gradient trace", max_bytes, _check_shapes)
    except FileNotFoundError as e:
        if Path(path).suffix:
            raise
        raise FileNotFoundError(
            e.errno,
            f"{e.strerror}; a name dls --trace takes (a shipped recording such as "
            f"digits_conv_bn, a family such as spikes) is read by "
            f"sim.traces.named.named_trace({str(path)!r})",
            e.filename,
        ) from None
    z.require("counts", "zeros", "absmax", "nonfinite", hint=": not a gradient trace")
    version = z.scalar("format_version", "int") if "format_version" in z else 1
    if version < 1:
        raise z.error(f"format_version {version} is not a trace format (1 to {FORMAT_VERSION})")
    if version > FORMAT_VERSION:
        raise z.error(
            f"format_version {version} is newer than this version reads ({FORMAT_VERSION}); "
            "upgrade the package"
        )
    low, high = z.scalar("exp_min", "int"), z.scalar("exp_max", "int")
    if (low, high) != (EXP_MIN, EXP_MAX):
        raise z.error(f"uses binades [{low}, {high}], this version reads [{EXP_MIN}, {EXP_MAX}]")
    name = z.scalar("name", "text") if "name" in z else Path(path).stem
    kinds = dict(counts="int", zeros="int", absmax="number", nonfinite="bool")
    kinds.update(
        overflow_scale="number", finite_scale="number", layer_names="text", layer_counts="int"
    )
    kinds.update(layer_zeros="int", layer_absmax="number")
    kinds.update(flush_scales="number", flush_shares="number")
    kinds.update(forward_peak="number", forward_where="text")
    a = {k: z.array(k, kind) for k, kind in kinds.items() if k in z}
    layers = {n: a[n] for n in LAYER_FIELDS if n in a}
    if "layer_names" in layers:
        layers["layer_names"] = tuple(str(n) for n in layers["layer_names"].ravel())
    extra = {n: a[n] for n in ("flush_scales", "flush_shares", "forward_peak") if n in a}
    if "forward_where" in a:
        extra["forward_where"] = tuple(str(w) for w in a["forward_where"].ravel())
    probed = z.scalar("overflow_probed", "bool") if "overflow_probed" in z else False
    extra["every"] = z.scalar("every", "int") if "every" in z else 1
    try:
        fields = (a["counts"], a["zeros"], a["absmax"], a["nonfinite"], name)
        over, fin = a.get("overflow_scale"), a.get("finite_scale")
        return make(*fields, over, **layers, overflow_probed=probed, **extra, finite_scale=fin)
    except (TypeError, ValueError) as e:
        raise z.error(str(e)) from None


_PER_STEP = ("zeros", "absmax", "nonfinite", "overflow_scale", "finite_scale", "forward_peak")
_PER_STEP += ("forward_where", "flush_scales", "flush_shares", *LAYER_FIELDS[1:])


def _check_shapes(declared: dict) -> set:
    """For :func:`updater.common.npz.read_npz`: ``ValueError`` unless every declared array has
    the steps of ``counts`` (and the layers of ``layer_names``, the binades of ``counts``), so
    nothing larger than the trace says it is gets inflated; the names to read."""
    shapes = {k: tuple(shape) for k, (shape, _) in declared.items()}
    if len(shapes.get("counts", (0, 0))) != 2:
        raise ValueError(f"array 'counts' has shape {shapes['counts']}, expected (steps, binades)")
    steps, bins = shapes.get("counts", (None, None))
    if steps == 0:
        raise ValueError("a trace needs at least one step, got 0")
    layers = shapes.get("layer_names", (None,))
    for key in _PER_STEP:
        shape = shapes.get(key)
        if shape is not None and steps is not None and shape[:1] != (steps,):
            raise ValueError(f"{key} must have shape {(steps, *shape[1:])}, got {shape}")
    layered = {"layer_counts": (steps, *layers, bins), "layer_zeros": (steps, *layers)}
    layered["layer_absmax"] = (steps, *layers)
    for key, want in layered.items():
        if key in shapes and shapes[key] != want:
            raise ValueError(f"{key} must have shape {want}, got {shapes[key]}")
    return set(declared)
