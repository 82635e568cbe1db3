"""Warn when a recorded model's float16 forward pass came near float16's range (the trace's
``forward_peak``, recorded with the updater's ``probes=Probes(forward_headroom=True)``): an
overflow there (e.g. BatchNormalization's running variance) happens before any loss scale
applies, so no policy the simulator replays causes or cures it."""

from __future__ import annotations

import numpy as np

from updater.common.float16 import FORWARD_NEAR_FACTOR as NEAR_FACTOR
from updater.trace import Trace


def forward_headroom_warning(trace: Trace, factor: float = NEAR_FACTOR) -> str | None:
    """One sentence naming the function and the recorded step where the forward pass came
    closest to float16's largest value, when that was within ``factor`` of it; else None (also
    for a trace that did not measure it).

    >>> t = Trace(np.ones((2, 121), np.int64), [0, 0], [1.0, 1.0], [False, False], "m",
    ...           forward_peak=[0.01, 0.5], forward_where=("Affine#1", "Affine#2"))
    >>> print(forward_headroom_warning(t))  # doctest: +NORMALIZE_WHITESPACE
    m: the float16 forward pass came within a factor 4 of float16's range: its largest |value|
    or accumulated magnitude was 0.5 x 65504, in Affine#2 at recorded step 1 (1 of 2 recorded
    steps within the factor); no loss scale causes or cures an overflow there: compute that
    function in float32 with updater.amp.rewrite
    """
    if not trace.has_forward:
        return None
    peak = np.where(np.isnan(trace.forward_peak), -1.0, trace.forward_peak)
    near = peak >= 1.0 / factor
    if not near.any():
        return None
    t = int(np.argmax(peak))
    value = "inf" if np.isinf(peak[t]) else f"{peak[t]:.3g} x 65504"
    step = f"recorded step {t}" + (f" (training step {t * trace.every})" if trace.every > 1 else "")
    return (
        f"{trace.name}: the float16 forward pass came within a factor {factor:g} of float16's "
        f"range: its largest |value| or accumulated magnitude was {value}, in "
        f"{trace.forward_where[t]} at {step} ({int(near.sum())} of {trace.steps} recorded steps "
        "within the factor); no loss scale causes or cures an overflow there: compute that "
        "function in float32 with updater.amp.rewrite"
    )


def forward_headroom_line(trace: Trace, factor: float = NEAR_FACTOR) -> str:
    """What the report says of ``trace``'s forward headroom: the warning of
    :func:`forward_headroom_warning`, or where the largest |value| was, or that it was not
    measured."""
    warning = forward_headroom_warning(trace, factor)
    if warning is not None:
        return "warning: " + warning
    if not trace.has_forward or np.isnan(trace.forward_peak).all():
        return (
            f"{trace.name}: not measured (recorded without `probes=Probes(forward_headroom=True)`)"
        )
    t = int(np.nanargmax(trace.forward_peak))
    return (
        f"{trace.name}: the forward pass stayed more than a factor {factor:g} inside float16's "
        f"range (largest |value| or accumulated magnitude {trace.forward_peak[t]:.3g} x 65504, "
        f"in {trace.forward_where[t]} at recorded step {t})" + _older_measure(trace)
    )


def _older_measure(trace: Trace) -> str:
    """A note for a trace whose BatchNormalization shows no float16 sum anywhere: recorded before
    the accumulators were measured (its batch variance was, a factor N smaller)."""
    where = trace.forward_where
    if any(w.startswith("BatchNormalization") for w in where) and not any(
        "(sum of x^2)" in w for w in where
    ):
        return (
            "; BatchNormalization's float16 sum of x^2 was not measured (recorded before it "
            "was): this says nothing of its headroom until recorded again"
        )
    return ""
