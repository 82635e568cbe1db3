"""Per-layer underflow: the loss scale each parameter array alone would need (NumPy only).

One global loss scale serves every layer at once, but layers' gradients differ in size and
drift during training (Zhao et al., *Adaptive Loss Scaling for Mixed Precision Training*,
2019). For a trace recorded with per-parameter histograms (``GradientRecorder(...,
per_parameter=True)``; a "layer" is one parameter array, so a weight and its bias are two),
this module gives each layer's share of nonzero gradient values flushed to zero against the
scale (the binade model of :mod:`sim.casting.underflow`), the smallest power-of-two scale that keeps
that share within a tolerance, and the largest one at which the layer does not overflow, per
training stage and for the whole model.

Only clean steps count: steps that were not bad batches (``nonfinite``) and, in a trace recorded
without overflow probes, did not overflow (finite ``overflow_scale``): there an overflowed
step's histogram holds only the values that stayed finite, and its ``absmax`` is a bound. In a
probed trace (``overflow_probed``) every step's histogram is of finite gradients (an overflowed
step is recorded at its first finite probe), and a finite ``overflow_scale`` is a threshold, not
an overflow.

Limits. A recorded trace holds what float16 kept at the scale the run used: values flushed
there are exact zeros in it (``zeros``), not small values, so a need near that scale is a lower
bound. The largest safe scale counts the parameter gradients only: an overflow inside the
backward pass, and the float16 backward seed's own limit (2**15 in practice), are not in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np

from sim.casting.underflow import pooled_flushed_share
from sim.tables import Code, markdown_table
from updater.common.float16 import FP16_FLUSH_BINADE
from updater.common.validation import check_instance, check_number
from updater.policy import largest_safe_scale
from updater.trace import EXP_MAX, EXP_MIN, Trace

TOLERANCE = 1e-3
"""Default flushed share a layer tolerates: one nonzero gradient value in a thousand."""
STAGES: Tuple[Tuple[str, float, float], ...] = (
    ("early", 0.0, 0.1),
    ("mid", 0.45, 0.55),
    ("late", 0.9, 1.0),
)
"""Default training stages: (label, start, stop) as fractions of the recorded steps; each of
these three holds a tenth of them."""
EXPONENTS = np.arange(FP16_FLUSH_BINADE - EXP_MAX, FP16_FLUSH_BINADE - EXP_MIN)
"""Scales ``2**k`` searched for a layer's need: from the one that flushes every bin but the
top one (``k = -65``) to the one that flushes only the bottom bin (``k = 54``)."""
WHOLE_MODEL = "(whole model)"
"""The name of the whole model's row in :func:`layer_needs`."""


def check_layers(trace: Trace) -> Trace:
    """``trace`` if it holds per-layer statistics; ``ValueError`` saying how to record them."""
    check_instance("trace", trace, Trace)
    if not trace.has_layers:
        raise ValueError(
            f"trace {trace.name!r} has no per-layer histograms; record it with "
            "GradientRecorder(..., per_parameter=True)"
        )
    return trace


def clean_steps(trace: Trace, steps=None) -> np.ndarray:
    """Indices of the steps in ``steps`` (a slice or indices; default all) that are clean (module
    doc): not bad batches, and without a recorded overflow unless the trace was probed."""
    index = np.arange(trace.steps)[slice(None) if steps is None else steps]
    ok = ~trace.nonfinite[index]
    if not trace.overflow_probed:
        ok &= np.isinf(trace.overflow_scale[index])
    return index[ok]


def layer_view(trace: Trace, layer: int | None, steps=None) -> Trace:
    """The clean steps (:func:`clean_steps`) of one layer as a plain :class:`Trace`.

    Args:
        trace (Trace): a trace with layers.
        layer (int or None): index into ``trace.layer_names``; None for the whole model.
        steps (slice or indices, optional): the steps to consider; default all.
    """
    check_layers(trace)
    idx = clean_steps(trace, steps)
    if layer is None:
        counts, zeros, absmax = trace.counts[idx], trace.zeros[idx], trace.absmax[idx]
        name = WHOLE_MODEL
    else:
        counts = trace.layer_counts[idx, layer]
        zeros, absmax = trace.layer_zeros[idx, layer], trace.layer_absmax[idx, layer]
        name = trace.layer_names[layer]
    return Trace(counts, zeros, absmax, np.zeros(idx.size, bool), name=name)


def layer_flushed_curves(trace: Trace, scales, steps=None) -> np.ndarray:
    """Each layer's share of nonzero gradient values flushed to zero at each scale.

    The clean steps in ``steps`` are pooled (:func:`sim.casting.underflow.pooled_flushed_share`).

    Args:
        trace (Trace): a trace with layers.
        scales (float or 1-D array of floats > 0): loss scales.
        steps (slice or indices, optional): a training stage; default all steps.

    Returns:
        float64 array ``(layers, len(scales))``, rows in ``trace.layer_names`` order.
    """
    check_layers(trace)
    s = np.atleast_1d(np.asarray(scales, dtype=np.float64))
    views = (layer_view(trace, i, steps) for i in range(len(trace.layer_names)))
    return np.array([pooled_flushed_share(v, s) for v in views]).reshape(-1, s.size)


@dataclass(frozen=True)
class StageNeed:
    """One layer in one training stage.

    Attributes:
        stage (str): the stage's label.
        steps (int): clean steps in the stage.
        need (int or None): ``k`` of the smallest scale ``2**k`` whose flushed share is within
            the tolerance; None when there is none (see ``reason``).
        safe (int or None): ``k`` of the largest scale ``2**k`` at which the stage's largest
            magnitude stays <= 65504 (float16's largest); None when the layer has no nonzero
            value in the stage (any scale is safe).
        reason (str): why ``need`` is None ("" otherwise).
    """

    stage: str
    steps: int
    need: int | None
    safe: int | None
    reason: str = ""


def stage_steps(n: int, start: float, stop: float) -> slice:
    """The steps of a stage ``[start, stop)`` (fractions of ``n`` steps, rounded to the nearest
    step); at least one step."""
    lo = min(round(start * n), n - 1)
    return slice(lo, max(round(stop * n), lo + 1))


def needed_exponent(view: Trace, tolerance: float = TOLERANCE) -> Tuple[int | None, str]:
    """``(k, reason)``: the smallest ``k`` in :data:`EXPONENTS` at which ``view``'s pooled
    flushed share is <= ``tolerance``, or ``(None, reason)`` when there is none.

    >>> needed_exponent(Trace.from_steps([[1.5 * 2.0**-30, 1.0]]))  # binade -30 needs 2**5
    (5, '')
    """
    if view.steps == 0:
        return None, "no clean steps"
    if view.counts.sum() == 0:
        return None, "no nonzero values"
    ok = pooled_flushed_share(view, np.exp2(EXPONENTS.astype(np.float64))) <= tolerance
    if not ok[-1]:
        return None, f"above 2**{EXPONENTS[-1]} (values below 2**{EXP_MIN + 1})"
    return int(EXPONENTS[np.argmax(ok)]), ""


def safe_exponent(view: Trace) -> int | None:
    """``k`` of :func:`updater.policy.largest_safe_scale` of ``view``'s largest ``absmax``;
    None when it is 0 (or there are no steps)."""
    amax = float(view.absmax.max(initial=0.0))
    return int(math.log2(largest_safe_scale(amax))) if amax > 0 else None


def layer_needs(
    trace: Trace,
    tolerance: float = TOLERANCE,
    stages: Sequence[Tuple[str, float, float]] = STAGES,
) -> List[Dict]:
    """Per layer and stage: the scale it needs and the largest it tolerates.

    Args:
        trace (Trace): a trace with layers.
        tolerance (float, default 1e-3): the flushed share a layer tolerates, in [0, 1).
        stages (sequence of (label, start, stop), default :data:`STAGES`): training stages as
            fractions ``0 <= start < stop <= 1`` of the recorded steps.

    Returns:
        list of dict, one per layer sorted by name and then the whole model (named
        :data:`WHOLE_MODEL`): ``layer`` (str), ``values`` (int: the most values the layer
        had in one recorded step, zeros included) and ``stages`` (list of :class:`StageNeed`).
    """
    check_layers(trace)
    tolerance = check_number("tolerance", tolerance, 0.0, 1.0)
    if tolerance >= 1.0:
        raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
    for label, start, stop in stages:
        if not 0.0 <= start < stop <= 1.0:
            raise ValueError(
                f"stage {label!r} must have 0 <= start < stop <= 1, got ({start!r}, {stop!r})"
            )
    values = trace.layer_counts.sum(axis=2) + trace.layer_zeros
    order = sorted(range(len(trace.layer_names)), key=trace.layer_names.__getitem__)
    rows = []
    for layer in order + [None]:
        needs = []
        for label, start, stop in stages:
            view = layer_view(trace, layer, stage_steps(trace.steps, start, stop))
            need, reason = needed_exponent(view, tolerance)
            needs.append(StageNeed(label, view.steps, need, safe_exponent(view), reason))
        n = values.sum(axis=1) if layer is None else values[:, layer]
        name = WHOLE_MODEL if layer is None else trace.layer_names[layer]
        rows.append({"layer": name, "values": int(n.max(initial=0)), "stages": needs})
    return rows


def format_layer_needs(rows: List[Dict], tolerance: float = TOLERANCE) -> str:
    """The rows of :func:`layer_needs` as a markdown table, with a note per stage where no
    single scale serves every layer.

    Scales are written ``2^k``. "need" is the smallest scale at which the layer's flushed share
    is within ``tolerance`` (give the one the rows were made with); "max" is the largest at
    which it does not overflow ("any": the layer has no nonzero value).
    """
    labels = [s.stage for s in rows[0]["stages"]]
    head = ["layer", "values"] + [f"need {x}" for x in labels] + [f"max {x}" for x in labels]
    cells = []
    for row in rows:
        need = [_pow2(s.need, f"n/a ({s.reason})") for s in row["stages"]]
        safe = [_pow2(s.safe, "any") for s in row["stages"]]
        cells.append(dict(zip(head, [Code(row["layer"]), row["values"], *need, *safe])))
    table = markdown_table(cells, head, align="lr" + "r" * 2 * len(labels))
    notes = []
    for i, label in enumerate(labels):
        stage = [(r["layer"], r["stages"][i]) for r in rows if r["layer"] != WHOLE_MODEL]
        needs = [(s.need, name) for name, s in stage if s.need is not None]
        safes = [(s.safe, name) for name, s in stage if s.safe is not None]
        if needs and safes and max(needs)[0] > min(safes)[0]:
            (k_need, a), (k_safe, b) = max(needs), min(safes)
            notes.append(
                f"- {label}: no single scale serves every layer: `{a}` needs 2^{k_need}, "
                f"`{b}` overflows above 2^{k_safe}."
            )
    steps = ", ".join(f"{s.stage} {s.steps}" for s in rows[-1]["stages"])
    text = table + (
        f"\n\nneed: the smallest scale at which at most {tolerance:g} of the layer's nonzero "
        f"gradient values flush to zero in float16; max: the largest at which its largest "
        f"gradient stays finite. Clean steps per stage (no bad batch; no overflow unless "
        f"probed): {steps}.\n"
    )
    return text + ("\n" + "\n".join(notes) + "\n" if notes else "")


def _pow2(k: int | None, otherwise: str) -> str:
    return otherwise if k is None else f"2^{k}"
