"""Synthetic gradient traces: families of per-step gradient-magnitude histograms.

The trace format itself (:class:`updater.trace.Trace`, its binning and file format) lives in
:mod:`updater.trace`, shared with the updater's recorder; this module makes traces of it.
"""

from __future__ import annotations

import math

import numpy as np

from sim.traces.synthetic import SyntheticTrace
from updater.common.validation import check_int, check_number
from updater.trace import EXP_MAX, EXP_MIN, NBINS, Trace

# ---------------------------------------------------------------- synthetic families
#
# The families sample the binade counts directly (one multinomial draw per step over binade
# shares) instead of sampling every value: a step of 2**16 values costs the same as a step of
# 2**30. The step's largest magnitude is then drawn inside the top nonempty binade (as the
# largest of that binade's values, each log-uniform inside it, and never above the
# distribution's upper end), so ``absmax`` always agrees with the counts:
# ``floor(log2(absmax))`` is the highest binade with a nonzero count.
#
# Magnitudes are log-normal with the upper tail cut at ``tail_z`` standard deviations: real
# gradient histograms fall off far faster above their peak than a log-normal does (the largest
# gradient is bounded and stable from step to step), while the lower side spreads over many
# binades. Without the cut the largest of 2**16 log-normal values would wander by more than a
# binade from step to step, an artefact of the model, not of training.


_erfc = np.frompyfunc(math.erfc, 1, 1)


def _normal_cdf(z) -> np.ndarray:
    return 0.5 * np.asarray(_erfc(-np.asarray(z, dtype=np.float64) / math.sqrt(2.0)), np.float64)


def lognormal_binade_shares(log2_mean, log2_std: float, tail_z: float = math.inf) -> np.ndarray:
    """Binade shares of magnitudes whose ``log2`` is normal, cut above ``tail_z`` std devs.

    Args:
        log2_mean (float or 1-D array): mean of ``log2|g|`` (one row per entry).
        log2_std (float, > 0): standard deviation of ``log2|g|``.
        tail_z (float, default inf): no magnitude above ``2**(log2_mean + tail_z * log2_std)``
            (the normal is truncated there and renormalized), > 0.

    Returns:
        float64 array ``(len(log2_mean), NBINS)`` (or ``(NBINS,)`` for a scalar mean) whose rows
        sum to 1; the end bins absorb the tails, as :func:`binade_histogram` clips.

    >>> s = lognormal_binade_shares(-10.0, 1.0, tail_z=1.0)
    >>> round(float(s[-10 - EXP_MIN:].sum()), 4), float(s[-8 - EXP_MIN:].sum())
    (0.4057, 0.0)
    """
    mean = np.asarray(log2_mean, dtype=np.float64)
    edges = np.arange(EXP_MIN + 1, EXP_MAX + 1, dtype=np.float64)  # inner bin edges
    z = np.minimum((edges - mean[..., None]) / log2_std, tail_z)
    cdf = _normal_cdf(z) / _normal_cdf(tail_z)
    zeros = np.zeros(mean.shape + (1,))
    ones = np.ones(mean.shape + (1,))
    return np.diff(np.concatenate([zeros, cdf, ones], axis=-1), axis=-1)


def _absmax_from_counts(counts: np.ndarray, rng: np.random.Generator, cap=math.inf) -> np.ndarray:
    """Largest magnitude per step, drawn inside the top nonempty binade, at most ``cap``."""
    nonempty = counts > 0
    has_any = nonempty.any(axis=1)
    top = NBINS - 1 - np.argmax(nonempty[:, ::-1], axis=1)
    in_top = np.maximum(counts[np.arange(counts.shape[0]), top], 1)
    # the largest of c log-uniform draws in [0, 1) is U**(1/c)
    frac = rng.random(counts.shape[0]) ** (1.0 / in_top)
    absmax = np.minimum(np.exp2(EXP_MIN + top + frac), cap)
    return np.where(has_any, absmax, 0.0)


def _sample_steps(shares, steps, values_per_step, zero_share, rng) -> tuple:
    """Per-step zeros and binade counts for ``steps`` steps of ``values_per_step`` values."""
    zeros = rng.binomial(values_per_step, zero_share, size=steps).astype(np.int64)
    shares = np.broadcast_to(shares, (steps, NBINS))
    counts = rng.multinomial(values_per_step - zeros, shares).astype(np.int64)
    return counts, zeros


def _lognormal_counts(means, log2_std, tail_z, steps, values_per_step, zero_share, seed):
    check_int("steps", steps, 1)
    check_int("values_per_step", values_per_step, 1)
    check_number("log2_std", log2_std, 1e-3, 40.0)
    check_number("tail_z", tail_z, 0.1, 40.0)
    check_number("zero_share", zero_share, 0.0, 1.0)
    check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    means = np.broadcast_to(np.asarray(means, dtype=np.float64), (steps,))
    shares = lognormal_binade_shares(means, log2_std, tail_z)
    counts, zeros = _sample_steps(shares, steps, values_per_step, zero_share, rng)
    absmax = _absmax_from_counts(counts, rng, cap=np.exp2(means + tail_z * log2_std))
    return counts, zeros, absmax


def lognormal_trace(
    steps: int = 10000,
    values_per_step: int = 2**16,
    log2_mean: float = -12.5,
    log2_std: float = 5.0,
    tail_z: float = 3.0,
    zero_share: float = 0.0,
    seed: int = 0,
    name: str = "stationary",
) -> Trace:
    """Stationary family: every step draws ``log2|g|`` from one (upper-truncated) normal.

    With the defaults the largest magnitude is 2**2.5, so the largest safe power-of-two scale is
    2**13 (below the usual cap 2**15, so overflows happen), and 0.62% of nonzero values flush
    to zero at scale 1 (0.1% at scale 8, none to speak of at 2**13).

    Args:
        steps (int, default 10000): number of steps, >= 1.
        values_per_step (int, default 2**16): gradient values per step, >= 1.
        log2_mean (float, default -12.5): mean of ``log2|g|``, in [-70, 30].
        log2_std (float, default 5.0): standard deviation of ``log2|g|``, in [0.001, 40].
        tail_z (float, default 3.0): upper cut in standard deviations, in [0.1, 40].
        zero_share (float, default 0.0): probability that a value is exactly zero, in [0, 1].
        seed (int, default 0): seed for ``numpy.random.default_rng``, >= 0.
        name (str, default "stationary"): the trace's label.

    >>> t = lognormal_trace(steps=3, seed=1)
    >>> t.counts.shape, int(t.counts[0].sum()), bool(4.0 <= t.absmax.min() <= t.absmax.max() <= 8.0)
    ((3, 121), 65536, True)
    """
    check_number("log2_mean", log2_mean, -70.0, 30.0)
    counts, zeros, absmax = _lognormal_counts(
        log2_mean, log2_std, tail_z, steps, values_per_step, zero_share, seed
    )
    return SyntheticTrace(counts, zeros, absmax, np.zeros(steps, bool), name=name)


def drifting_trace(  # noqa: PLR0913 (tests/test_layout.py: PUBLIC_SIGNATURES)
    steps: int = 10000,
    values_per_step: int = 2**16,
    log2_mean_start: float = -12.5,
    log2_mean_end: float = -26.5,
    log2_std: float = 5.0,
    tail_z: float = 3.0,
    zero_share: float = 0.0,
    seed: int = 0,
    name: str = "drifting",
) -> Trace:
    """Drifting family: magnitudes shrink over training (late-training underflow).

    The mean of ``log2|g|`` moves linearly from ``log2_mean_start`` to ``log2_mean_end`` (so
    magnitudes shrink geometrically); with the defaults the largest safe scale climbs from 2**13
    to 2**27 (past the usual cap 2**15 after a tenth of the steps) and, at scale 8, 38% of the
    nonzero values flush to zero by the end (0.35% at 2**15).

    Args:
        steps (int, default 10000): number of steps, >= 1.
        values_per_step (int, default 2**16): gradient values per step, >= 1.
        log2_mean_start (float, default -12.5): mean of ``log2|g|`` at the first step.
        log2_mean_end (float, default -26.5): mean of ``log2|g|`` at the last step.
        log2_std (float, default 5.0): standard deviation of ``log2|g|``, in [0.001, 40].
        tail_z (float, default 3.0): upper cut in standard deviations, in [0.1, 40].
        zero_share (float, default 0.0): probability of an exact zero, in [0, 1].
        seed (int, default 0): seed, >= 0.
        name (str, default "drifting"): the trace's label.
    """
    check_number("log2_mean_start", log2_mean_start, -70.0, 30.0)
    check_number("log2_mean_end", log2_mean_end, -70.0, 30.0)
    check_int("steps", steps, 1)
    means = np.linspace(log2_mean_start, log2_mean_end, steps)
    counts, zeros, absmax = _lognormal_counts(
        means, log2_std, tail_z, steps, values_per_step, zero_share, seed
    )
    return SyntheticTrace(counts, zeros, absmax, np.zeros(steps, bool), name=name)


def spiky_trace(  # noqa: PLR0913 (tests/test_layout.py: PUBLIC_SIGNATURES)
    steps: int = 10000,
    values_per_step: int = 2**16,
    log2_mean: float = -12.5,
    log2_std: float = 5.0,
    tail_z: float = 3.0,
    spike_prob: float = 0.002,
    spike_log2_factor: int = 10,
    spike_values: int = 16,
    zero_share: float = 0.0,
    seed: int = 0,
    name: str = "spikes",
) -> Trace:
    """Stationary family with occasional spikes: on rare steps the largest values jump.

    On a spike step (probability ``spike_prob``, independently per step) the ``spike_values``
    largest magnitudes are multiplied by ``2**spike_log2_factor``: their binades move up by
    exactly that many bins and ``absmax`` is multiplied by the same factor; the rest of the
    step is unchanged. With the defaults a spike overflows at any scale of 2**4 or more.

    Args:
        steps (int, default 10000): number of steps, >= 1.
        values_per_step (int, default 2**16): gradient values per step, >= 1.
        log2_mean (float, default -12.5): mean of ``log2|g|``.
        log2_std (float, default 5.0): standard deviation of ``log2|g|``.
        tail_z (float, default 3.0): upper cut in standard deviations.
        spike_prob (float, default 0.002): chance that a step spikes, in [0, 1].
        spike_log2_factor (int, default 10): spike size in binades, in [1, 60].
        spike_values (int, default 16): values moved up on a spike step, >= 1.
        zero_share (float, default 0.0): probability of an exact zero, in [0, 1].
        seed (int, default 0): seed, >= 0.
        name (str, default "spikes"): the trace's label.
    """
    check_number("spike_prob", spike_prob, 0.0, 1.0)
    check_int("spike_log2_factor", spike_log2_factor, 1)
    if spike_log2_factor > 60:
        raise ValueError(f"spike_log2_factor must be an int in [1, 60], got {spike_log2_factor!r}")
    check_int("spike_values", spike_values, 1)
    base = lognormal_trace(
        steps, values_per_step, log2_mean, log2_std, tail_z, zero_share, seed=seed, name=name
    )
    rng = np.random.default_rng([seed, 1])
    spikes = np.flatnonzero(rng.random(steps) < spike_prob)
    counts, absmax = base.counts.copy(), base.absmax.copy()
    for t in spikes:
        moved = np.zeros(NBINS, np.int64)
        left = spike_values
        for b in range(NBINS - 1, -1, -1):
            take = min(left, int(counts[t, b]))
            counts[t, b] -= take
            moved[min(b + spike_log2_factor, NBINS - 1)] += take
            left -= take
            if left == 0:
                break
        counts[t] += moved
        if moved.any():
            absmax[t] *= 2.0**spike_log2_factor
    return SyntheticTrace(counts, base.zeros, absmax, base.nonfinite, name=name)


def nan_trace(  # noqa: PLR0913 (tests/test_layout.py: PUBLIC_SIGNATURES)
    steps: int = 10000,
    values_per_step: int = 2**16,
    log2_mean: float = -12.5,
    log2_std: float = 5.0,
    tail_z: float = 3.0,
    nan_prob: float = 0.002,
    zero_share: float = 0.0,
    seed: int = 0,
    name: str = "nan",
) -> Trace:
    """Stationary family with rare NaN batches: some steps are non-finite at every scale.

    Each step is a bad batch with probability ``nan_prob`` (``nonfinite`` True); its histogram
    still describes the finite values.

    Args:
        steps (int, default 10000): number of steps, >= 1.
        values_per_step (int, default 2**16): gradient values per step, >= 1.
        log2_mean (float, default -12.5): mean of ``log2|g|``.
        log2_std (float, default 5.0): standard deviation of ``log2|g|``.
        tail_z (float, default 3.0): upper cut in standard deviations.
        nan_prob (float, default 0.002): chance that a step is a NaN batch, in [0, 1].
        zero_share (float, default 0.0): probability of an exact zero, in [0, 1].
        seed (int, default 0): seed, >= 0.
        name (str, default "nan"): the trace's label.
    """
    check_number("nan_prob", nan_prob, 0.0, 1.0)
    base = lognormal_trace(
        steps, values_per_step, log2_mean, log2_std, tail_z, zero_share, seed=seed, name=name
    )
    rng = np.random.default_rng([seed, 2])
    nonfinite = rng.random(steps) < nan_prob
    return SyntheticTrace(base.counts, base.zeros, base.absmax, nonfinite, name=name)


# ---------------------------------------------------------------- SSD calibration

SSD_ZERO_SHARE = 0.668
"""Share of exact zeros in the SSD activation gradients (NVIDIA guide: 66.8%; paper: 67%)."""
SSD_FLUSHED_AT_1 = 0.947
"""Share of NONZERO values flushed by a float16 cast at scale 1 (31.4% of all values)."""
SSD_FLUSHED_AT_32K = 0.001
"""Share of nonzero values still flushed at scale 2**15 ("all but 0.1%")."""


def ssd_binade_shares() -> np.ndarray:
    """Binade shares of the nonzero SSD activation gradients (calibration, see :func:`ssd_trace`).

    Returns:
        float64 array ``(NBINS,)`` summing to 1.
    """
    shares = np.zeros(NBINS)
    plateau = np.arange(-40, -25)  # binades -40 .. -26: 15 equal bins
    shares[plateau - EXP_MIN] = (SSD_FLUSHED_AT_1 - SSD_FLUSHED_AT_32K) / plateau.size
    survive = 1.0 - SSD_FLUSHED_AT_1
    upper = np.arange(-25, -7)  # geometric tail, halving per binade, nothing from 2**-7 up
    shares[upper - EXP_MIN] = survive * 0.5 ** (upper + 26)
    lower = np.arange(EXP_MIN, -40)  # geometric tail below 2**-40, halving per binade
    shares[lower - EXP_MIN] = SSD_FLUSHED_AT_32K * 0.5 ** (-40 - lower)
    return shares / shares.sum()


def ssd_trace(
    steps: int = 10000,
    values_per_step: int = 2**20,
    seed: int = 0,
    name: str = "ssd",
) -> Trace:
    """A stationary trace calibrated to the Multibox SSD activation gradients.

    Calibrated to Micikevicius et al., "Mixed Precision Training" (ICLR 2018), Fig. 3 and
    Sec. 3.2, and NVIDIA's mixed-precision training guide (its SSD histogram discussion):

    - 66.8% of values are exact zeros (the paper: 67%);
    - a float16 cast at scale 1 flushes 94.7% of the nonzero values (31.4% of all values, "another
      31%"), leaving 5.3% of the nonzero values nonzero: most nonzero values lie below float16's
      subnormal range;
    - at scale 2**15 ("32K") all but 0.1% of the nonzero values survive, without overflow;
    - the values in [2**-27, 2**-24), which the paper says mattered, survive at scale 8; the
      guide's "4% of values in [2**-32, 2**-30)" comes out as 4.2%.

    Shape between those anchors (our choice, not the paper's): ``log2|g|`` uniform over
    the 15 binades [2**-40, 2**-25) holding 94.6% of the nonzero values, a tail above halving per
    binade up to 2**-7 (5.3%; the largest values of a step of 2**20 values reach 2**-12 to
    2**-8), and a tail below 2**-40 halving per binade (0.1%). The largest safe scale is then
    2**22 or more, so 2**15 never overflows.

    Args:
        steps (int, default 10000): number of steps, >= 1.
        values_per_step (int, default 2**20): values per step, >= 1.
        seed (int, default 0): seed, >= 0.
        name (str, default "ssd"): the trace's label.
    """
    check_int("steps", steps, 1)
    check_int("values_per_step", values_per_step, 1)
    check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    counts, zeros = _sample_steps(ssd_binade_shares(), steps, values_per_step, SSD_ZERO_SHARE, rng)
    absmax = _absmax_from_counts(counts, rng)
    return SyntheticTrace(counts, zeros, absmax, np.zeros(steps, bool), name=name)


def sample_values(shares, n: int, zero_share: float = 0.0, seed: int = 0) -> np.ndarray:
    """Draw actual float32 gradient values from binade shares (for exact float16 counts).

    Each nonzero value falls in a binade drawn from ``shares`` and is log-uniform inside it, with
    a random sign; a ``zero_share`` of the values are exact zeros.

    Args:
        shares (array of NBINS floats >= 0, summing to 1): binade shares of nonzero values.
        n (int, >= 1): number of values.
        zero_share (float, default 0.0): share of exact zeros, in [0, 1].
        seed (int, default 0): seed, >= 0.

    >>> v = sample_values(ssd_binade_shares(), 1000, SSD_ZERO_SHARE, seed=3)
    >>> v.dtype, v.shape
    (dtype('float32'), (1000,))
    """
    check_int("n", n, 1)
    check_number("zero_share", zero_share, 0.0, 1.0)
    check_int("seed", seed, 0)
    shares = np.asarray(shares, dtype=np.float64)
    if shares.shape != (NBINS,) or (shares < 0).any() or not np.isclose(shares.sum(), 1.0):
        raise ValueError(f"shares must be {NBINS} non-negative numbers summing to 1")
    rng = np.random.default_rng(seed)
    binade = rng.choice(NBINS, size=n, p=shares) + EXP_MIN
    mag = np.exp2(binade + rng.random(n))
    values = np.where(rng.random(n) < 0.5, -mag, mag)
    values[rng.random(n) < zero_share] = 0.0
    return values.astype(np.float32)


FAMILIES = {
    "stationary": lognormal_trace,
    "drifting": drifting_trace,
    "spikes": spiky_trace,
    "nan": nan_trace,
    "ssd": ssd_trace,
}
"""Trace families by name; each maker takes ``steps=`` and ``seed=``."""


def make_trace(family: str, steps: int = 10000, seed: int = 0, **settings) -> Trace:
    """Make a trace of a named family (see :data:`FAMILIES`).

    Args:
        family (str): one of ``stationary``, ``drifting``, ``spikes``, ``nan``, ``ssd``.
        steps (int, default 10000): number of steps, >= 1.
        seed (int, default 0): seed, >= 0.
        **settings: further keyword settings of that family's maker.
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    return FAMILIES[family](steps=steps, seed=seed, **settings)
