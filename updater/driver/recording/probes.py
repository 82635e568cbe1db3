"""Probes of a recorded step: its forward and backward run again on the same batch at other
powers of two of the scale, to find the smallest scale at which its real backward pass overflows
(``Probes(overflow=True)``) and the share of gradient values float16 flushes to
zero at several scales, against a float32 computation of the same step
(``Probes(flush=True)``).

No gradient in a trace shows an overflow born inside a float16 backward kernel (e.g. the running
sums of BatchNormalization's backward) while every stored gradient times the scale stays below
65520; re-running the step at other scales does. The search probes powers of two of the
recorded attempt's seed ``s`` within the policy's ``[min_scale, max_scale]`` (capped by the largest
power of two the seed's precision holds, 2**15 for a float16 seed) until the threshold is
bracketed: the smallest overflowing scale (inf when none does: the step is censored, finite up to
the highest scale tried, and the simulator's gradient-size rule decides above) next to the largest
finite one. It starts from ``guess`` (the previous probed step's threshold, which moves slowly), so
a step whose threshold did not move costs one or two passes, a censored step one; without a
guess it walks outward from ``s`` (``2s, 4s, ...`` when finite at ``s``, ``s/2, s/4, ...`` when it
overflowed). With overflow monotonic in the scale both find the same bracket. For a step that
overflowed at ``s`` (with a finite loss) the gradients of its largest finite probe are recorded
instead of the overflowed attempt's partial ones.

Flushing, on the steps :mod:`.flush_schedule` chooses (after the overflow search, whose passes
it counts): a float32 copy of the graph (:func:`updater.amp.rewrite` with
every function in the float list; same parameters and inputs) runs the step once at seed 1 for
the true gradients;
the share at a scale is the share of their nonzero values that the float16 backward at that
scale left at exactly zero (anywhere on their way: below 2**-24 after scaling, or zeroed by
float16 arithmetic upstream), measured at the scales
:func:`~updater.driver.recording.flush_scales.flush_scales` gives (one grid from the top of the
probe bounds down, the seed used among them; NaN where that backward overflowed).

Each probe is a forward and a backward per accumulation round (one forward reused for several
backwards is wrong for ``PF.lstm``); with a communicator each worker probes its own gradients, with
no all-reduce and no agreement (a recorder on one worker leaves the others' steps as without one,
and its probes measure that worker's own backward). Afterwards the model is as without probing:
the real attempt's gradients and the state the forward pass moves (BatchNormalization's running
statistics) are put back; the solver is not called. Probes call no data feeder (the round inputs
are written back) and do not count in the updater's counters. Random functions inside the graph
(``F.dropout``, ``F.randn``) draw new numbers in every probe's forward, as in a retry.
"""

from __future__ import annotations

import math
from typing import Callable, List, NamedTuple, Protocol, Union

import numpy as np

from ...common.float16 import FP16_SMALLEST_SUBNORMAL, LARGEST_SEED_POWER, flushed_shares
from ..arrays import copy_array
from .flush_scales import flush_scales


class Rerun(Protocol):
    """What the probes need of the driver: the step's rounds again at another scale, and its
    gradients and forward state (implemented by
    :class:`updater.driver.recording.hook.Recording`)."""

    @property
    def rounds_per_attempt(self) -> int: ...  # forward/backward rounds per attempt (accum_grad)

    def with_gradients(self) -> List: ...  # parameters and need_grad inputs

    def host_grads(self) -> List[np.ndarray]: ...  # host views of the gradients

    def probe(self, scale: float) -> bool: ...  # rounds at ``scale``; finite here?

    def reference_grads(self) -> List[np.ndarray]: ...  # the float32 graph's, at seed 1

    def save_forward_state(self, slot: str): ...  # a copy with ``restore()``; None: no state


class ProbeResult(NamedTuple):
    """What the probes found.

    Attributes:
        threshold (float): the smallest probed (or known) scale at which the step overflowed;
            inf when none did up to ``highest``.
        passes (int): forward/backward rounds the probes ran.
        finite_seed (float or None): for a step that overflowed at its scale, the largest probed
            scale at which it was finite (None when it was finite at its scale, or nowhere).
        finite_grads (list of arrays or None): the host gradients of that finite probe.
        flush (float64 array or None): with flush measurement, the flushed share at
            ``flush_scales(seed, bounds)`` (NaN where the backward overflowed); else None.
        finite_scale (float): the largest scale the overflow search saw the step finite at (0:
            none, or no search); with ``threshold`` inf the step is censored above it.
        flush_passes (int): of ``passes``, those of the flush measurement (0: not measured).
        flush_scales (float64 array or None): the scales ``flush`` was measured at (None: not
            measured).
    """

    threshold: float
    passes: int
    finite_seed: float | None
    finite_grads: List[np.ndarray] | None
    flush: np.ndarray | None = None
    finite_scale: float = 0.0
    flush_passes: int = 0
    flush_scales: np.ndarray | None = None


def probe_bounds(policy, seed_type) -> tuple:
    """``(lowest, highest)`` scale to probe: the policy's bounds (1 and 2**15 for a policy
    without them), the highest capped by what the seed's precision holds."""
    low = float(getattr(policy, "min_scale", 1.0))
    high = float(getattr(policy, "max_scale", 2.0**15))
    return low, min(high, LARGEST_SEED_POWER[np.dtype(seed_type).name])


def probe_step(
    step: Rerun,
    seed: float,
    finite: bool,
    known_overflow: float,
    overflow: bool,
    flush: Union[bool, Callable[[int], bool]],
    bounds: tuple,
    guess: float | None = None,
) -> ProbeResult:
    """Probe the current step (module doc) after its attempt at ``seed``: the overflow search,
    then the flush measurement.

    Args:
        step (Rerun): the driver, between its last attempt and ``step()``; its round inputs for
            ``accum_grad > 1`` must have been kept.
        seed (float): the seed of the recorded attempt.
        finite (bool): whether that attempt's gradients were finite (agreed across workers).
        known_overflow (float): the smallest seed at which an earlier attempt of this step
            overflowed (inf when none): probes above it are not needed.
        overflow (bool): find the overflow threshold.
        flush (bool or callable): measure the flushed shares; a callable is asked after the
            search, with the passes it ran
            (:meth:`updater.driver.recording.flush_schedule.FlushSchedule.due`).
        bounds (tuple): ``(lowest, highest)`` scale to probe (:func:`probe_bounds`), for the
            overflow search and the flush scales alike.
        guess (float or None, default None): where the threshold likely is (the previous
            step's); the search probes nearest it first. None: the seed (walk outward).

    Returns:
        ProbeResult.
    """
    if not overflow and (not flush or (callable(flush) and not flush(0))):
        return ProbeResult(threshold=known_overflow, passes=0, finite_seed=None, finite_grads=None)
    kept = [(v, copy_array(v.grad)) for v in step.with_gradients() if not v.grad.zeroing]
    used = [np.array(g) for g in step.host_grads()] if flush else None
    moved = step.save_forward_state("probe")
    threshold, finite_seed, finite_grads, shares, scales = known_overflow, None, None, None, None
    finite_scale, searched, measured = 0.0, 0, 0
    try:
        if overflow:
            threshold, finite_scale, finite_grads, searched = _bracket(
                step, seed, finite, known_overflow, bounds, seed if guess is None else guess
            )
            finite_seed = finite_scale if not finite and finite_scale > 0 else None
        if flush and (not callable(flush) or not overflow or flush(searched)):
            scales, shares, measured = _flushed(step, (seed, finite, used), bounds, threshold)
    finally:
        for p, saved in kept:
            p.grad.copy_from(saved, use_current_context=False)
        if moved is not None:
            moved.restore()
    return ProbeResult(
        threshold=threshold,
        passes=searched + measured,
        finite_seed=finite_seed,
        finite_grads=finite_grads,
        flush=shares,
        finite_scale=finite_scale,
        flush_passes=measured,
        flush_scales=scales,
    )


def _flushed(step: Rerun, attempt: tuple, bounds: tuple, threshold: float) -> tuple:
    """The scales of :func:`~updater.driver.recording.flush_scales.flush_scales`, the flushed
    shares at them (NaN where the backward overflowed, or would: at or above ``threshold``, the
    smallest scale known to overflow) and the passes run. ``attempt``: the recorded attempt's
    seed, whether its gradients were finite, and those gradients (its scale's pass is free)."""
    seed, finite, used = attempt
    true = step.reference_grads()
    passes = step.rounds_per_attempt
    scales = flush_scales(seed, bounds)
    shares = np.full(scales.size, np.nan)
    for i, scale in enumerate(scales):
        if not FP16_SMALLEST_SUBNORMAL <= scale < threshold:  # NaN: out of bounds, or overflows
            continue
        if scale == seed:
            ok, half = finite, used
        else:
            ok = step.probe(scale)
            half, passes = step.host_grads(), passes + step.rounds_per_attempt
        if ok:
            shares[i] = flushed_shares(true, half, scale)[0]
    return scales, shares, passes


def _bracket(step: Rerun, seed, finite, known_overflow, bounds, guess) -> tuple:
    """The overflow search: probes at ``seed * 2**k`` within ``bounds``, each the untried scale
    nearest ``guess`` (log2) strictly between the largest scale seen finite and the smallest
    seen overflowing, until no such scale is left. With overflow monotonic in the scale, any
    ``guess`` gives the same bracket; ``guess == seed`` walks outward from the seed one power of
    two at a time. Returns ``(threshold, finite_scale, finite_grads, passes)``: the smallest
    overflowing scale (inf: none), the largest finite one (0: none), for a step that overflowed
    at ``seed`` the gradients of that finite probe (else None), and the rounds run."""
    low, high = bounds
    over = min(known_overflow, math.inf if finite else seed)
    fin, grads, passes = (seed if finite else 0.0), None, 0
    k_low, k_high = math.ceil(math.log2(low / seed)), math.floor(math.log2(high / seed))
    want = math.log2(guess / seed)
    while True:
        first = k_low if fin == 0 else max(k_low, math.floor(math.log2(fin / seed)) + 1)
        last = k_high if over == math.inf else min(k_high, math.ceil(math.log2(over / seed)) - 1)
        if first > last:
            return over, fin, grads, passes
        scale = seed * 2.0 ** min(max(round(want), first), last)
        ok = step.probe(scale)
        passes += step.rounds_per_attempt
        if not ok:
            over = scale
            continue
        fin = scale
        if not finite:
            grads = [np.array(g) for g in step.host_grads()]
