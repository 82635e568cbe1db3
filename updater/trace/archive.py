"""The trace's ``.npz`` archive: the arrays :meth:`updater.trace.format.Trace.save` writes and
the checked reading :meth:`~updater.trace.format.Trace.load` does (NumPy only)."""

from __future__ import annotations

from pathlib import Path
from typing import Union

from ..common.npz import read_npz
from .measured import EXP_MAX, EXP_MIN

FORMAT_VERSION = 6
"""Trace file format: 2 added ``overflow_scale`` (version-1 files load with it all inf); 3 added
the optional per-layer arrays (version-1 and -2 files load without layers); 4 added
``overflow_probed`` and the optional measured flush curve (older files load without them); 5
added ``finite_scale`` (older files load with it all 0: not known) and the optional forward
headroom (``forward_peak``, ``forward_where``); 6 added ``every`` (older files load with 1: their
recorder's ``every`` was not stored)."""
SINGLE = ("format_version", "exp_min", "exp_max", "name", "every", "overflow_probed")
CORE_SHAPES = {
    "zeros": ("steps",),
    "absmax": ("steps",),
    "nonfinite": ("steps",),
    **{key: () for key in SINGLE},
}
"""The declared shapes of the arrays a trace has besides ``counts`` and its groups' (as
:attr:`updater.trace.group.Group.SHAPES`; ``()``: a single value)."""


def trace_arrays(trace, groups) -> dict:
    """The arrays of ``trace``'s archive, by name (format :data:`FORMAT_VERSION`), its
    ``groups`` (:data:`updater.trace.format.GROUPS`) included."""
    arrays = {
        "format_version": FORMAT_VERSION,
        "exp_min": EXP_MIN,
        "exp_max": EXP_MAX,
        "counts": trace.counts,
        "zeros": trace.zeros,
        "absmax": trace.absmax,
        "nonfinite": trace.nonfinite,
        "name": trace.name,
        "every": trace.every,
    }
    for group in groups:
        held = getattr(trace, group.KEY)
        if held is not None:
            arrays.update(held.arrays())
    return arrays


def read_trace(make, groups, path: Union[str, Path], max_bytes: int | None):
    """``make(...)`` of the fields read from the trace archive at ``path`` (those of
    ``groups`` by name), checked as :meth:`updater.trace.format.Trace.load` documents; an
    error of ``make`` names the file."""
    shapes = dict(CORE_SHAPES)
    for group in groups:
        shapes.update(group.SHAPES)
    try:
        z = read_npz(
            path, "gradient trace", max_bytes, lambda declared: _check_shapes(declared, shapes)
        )
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
    core = [z.array(k, kind) for k, kind in kinds.items()]
    fields = {}
    for group in groups:
        fields.update(group.read(z))
    every = z.scalar("every", "int") if "every" in z else 1
    try:
        return make(*core, name, every=every, **fields)
    except (TypeError, ValueError) as e:
        raise z.error(str(e)) from None


def _check_shapes(declared: dict, shapes: dict) -> set:
    """For :func:`updater.common.npz.read_npz`: ``ValueError`` unless every declared array has
    its shape in ``shapes`` (the steps and binades of ``counts``, the length of another array:
    :attr:`updater.trace.group.Group.SHAPES`), so nothing larger than the trace says it is gets
    inflated; the names to read (the trace's own)."""
    found = {k: tuple(shape) for k, (shape, _) in declared.items()}
    if len(found.get("counts", (0, 0))) != 2:
        raise ValueError(f"array 'counts' has shape {found['counts']}, expected (steps, binades)")
    steps, bins = found.get("counts", (None, None))
    if steps == 0:
        raise ValueError("a trace needs at least one step, got 0")
    sizes = {"steps": steps, "bins": bins}
    for key, template in shapes.items():
        shape = found.get(key)
        if shape is None:
            continue
        # each dimension: the size it must have (None: any)
        want = [
            sizes[d] if d in sizes else found.get(d, (None,))[0] if d else None for d in template
        ]
        fits = len(shape) == len(want) and all(w in (None, n) for w, n in zip(want, shape))
        if not fits and not template:
            raise ValueError(f"array {key!r} has shape {shape}, expected a single value")
        if not fits:
            shown = tuple(n if w is None else w for w, n in zip(want, shape + (None,) * len(want)))
            raise ValueError(f"{key} must have shape {shown}, got {shape}")
    return set(declared) & ({"counts"} | set(shapes))  # another array is never inflated
