"""Run loss-scaling policies over gradient traces: many runs at once, trajectories and metrics.

The simulator uses the same policy objects as the nnabla updater (:mod:`updater.policy`). One
call advances K runs together: the policy's state holds arrays of shape ``(K,)``.

Step rule (what the real updater sees). At step ``t`` run ``r`` uses the scale ``s`` held in its
state. The step's gradients, scaled, have largest magnitude ``a = absmax[t] * f[t, r] * s``,
where ``f`` is the run's jitter factor (below). The step overflows iff ``a >= 65520`` (the
float16 cast rounds 65520 and above to inf) or ``s >= L[t] / f[t, r]`` (the trace recorded the
step overflowing at ``overflow_scale[t]``; with a power-of-two scale, scaling is exact, so a step
that overflows at one scale overflows at every larger one; ``L`` is that threshold, or for a
probed trace the middle of its bracket, :func:`sim.replay.result.overflow_limits`), and
``s > finite_scale[t]`` (a step seen finite at a scale never overflows at or below it, jitter or
not: a censored step, finite at the highest probed scale, stays finite up to it). It is skipped iff
it overflows or the trace marks it non-finite (a bad batch: a non-finite loss or input,
whatever the scale). The policy is then advanced with ``grads_finite = not skipped`` and
``grad_absmax = a`` (the largest scaled gradient, as the updater measures it before
unscaling), and with ``bad_batch=True`` on a bad batch (the policy's third outcome, which the
updater gives it too). :func:`simulate`, :func:`simulate_many`, :func:`simulate_scalar` and
:func:`sim.replay.exact.exact_metrics` all apply this rule through one function.

Recorded overflows. A trace recorded from a real run (the updater's ``GradientRecorder``)
holds one attempt per step. With ``Probes(overflow=True)`` its ``overflow_scale`` is measured: the
smallest power-of-two scale, within the recording policy's bounds, at which the step's real
backward pass overflowed (inf: none did), including overflows born inside backward kernels that
no stored gradient shows; above the probed range the gradient-size rule decides. Without probes
it is only the scale at which the run saw the step overflow, so below it the step replays as
finite unless its ``absmax`` says otherwise (an intermediate backward value may overflow
first), and an overflowed attempt's histogram and ``absmax`` are stand-ins (its finite values,
``absmax`` at least ``65520 / s_o``). A bad batch is skipped at every scale.
Jitter multiplies the recorded threshold's effect like every gradient: the test is on
``s * f[t, r]``.

Seeds (why many runs differ). Run ``r`` multiplies every gradient of step ``t`` by
``f[t, r] = 2 ** (jitter * z[t, r])`` with ``z`` standard normal from
``numpy.random.default_rng(seed)``: batch-to-batch variation of the gradient's overall size on
top of the trace. With ``jitter=0`` every run sees the trace exactly and all runs are equal.

Results, flushed shares and metrics: :mod:`sim.replay.result`.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np

from sim.replay.clock import training_clock
from sim.replay.result import (
    MIN_BLOCK_RUNS,
    RUN_BLOCK,
    RunResult,
    overflow_thresholds,
    policy_label,
    run_blocks,
    run_result,
)
from sim.traces.named import named_trace
from updater.common.float16 import FP16_OVERFLOW
from updater.common.validation import check_instance, check_int, check_number
from updater.policy.base import set_setting
from updater.policy.presets import as_policy
from updater.trace import Trace

MAX_JITTER = 8.0
"""Largest jitter accepted (std of log2 of the per-step gradient size factor)."""


# ---------------------------------------------------------------- argument checks


def _check_runs_seed_jitter(runs, seed, jitter) -> None:
    check_int("runs", runs, 1)
    check_int("seed", seed, 0)
    check_number("jitter", jitter, 0.0, MAX_JITTER, hint=" (log2 units)")


def _replayed_trace(trace, runs, seed, jitter) -> Trace:
    """``trace`` (a Trace or a name :func:`sim.traces.named.named_trace` takes, families made
    with ``seed``) on the training clock, once ``runs``, ``seed`` and ``jitter`` are checked."""
    _check_runs_seed_jitter(runs, seed, jitter)
    if isinstance(trace, (str, Path)):
        trace = named_trace(trace, seed=seed)
    check_instance("trace", trace, Trace)
    return training_clock(trace)


def jitter_factors(steps: int, runs: int, seed: int = 0, jitter: float = 0.25) -> np.ndarray:
    """Per-(step, run) gradient size factors ``2 ** (jitter * z)``, z standard normal.

    Args:
        steps (int, >= 1), runs (int, >= 1): shape of the result.
        seed (int, default 0): seed for ``numpy.random.default_rng``, >= 0.
        jitter (float, default 0.25): std of the factor's log2, in [0, 8].

    Returns:
        float64 array ``(steps, runs)``, or ``(steps, 1)`` of ones when ``jitter == 0``. Run
        ``r``'s factors do not depend on how many runs are drawn.
    """
    _check_runs_seed_jitter(runs, seed, jitter)
    if jitter == 0:
        return np.ones((steps, 1))
    rng = np.random.default_rng(seed)
    factor = np.empty((steps, runs))  # run r's noise: row r of z, transposed block by block
    for cols in run_blocks(steps, runs):  # drawn a block at a time: the same stream, in order
        z = rng.standard_normal((cols.stop - cols.start, steps), dtype=np.float32)
        block = np.multiply(jitter, z.T, out=factor[:, cols], dtype=np.float64)
        np.exp2(block, out=block)
    return factor


# ---------------------------------------------------------------- the simulation


def _progress(iterable, total: int, progress, desc: str):
    """Wrap a simulation's step loop for progress display.

    Args:
        iterable: the loop.
        total (int): its length.
        progress: None (a tqdm bar when stderr is a terminal), a bool (a bar or none), or a
            reporter with a ``bar(iterable, total, desc)`` method (the ``dls`` command's, which
            names stages and prints status lines when stderr is not a terminal).
        desc (str): the policies' labels joined by ``+``; more than three are shown by number.
    """
    bar = getattr(progress, "bar", None)
    if bar is not None:
        return bar(iterable, total, desc)
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return iterable
    from tqdm.auto import tqdm

    labels = desc.split("+")
    if len(labels) > 3:
        desc = f"{len(labels)} policies ({labels[0]}, ..., {labels[-1]})"
    return tqdm(iterable, total=total, desc=desc, mininterval=0.5, leave=False)


def simulate(
    policy,
    trace: Trace | str | Path,
    runs: int = 1,
    seed: int = 0,
    jitter: float = 0.25,
    label: str | None = None,
    progress: bool | None = None,
) -> RunResult:
    """Run ``policy`` over ``trace`` for ``runs`` runs at once (arrays of states).

    See the module docstring for the step rule, the jitter that makes runs differ and the
    underflow approximation.

    Args:
        policy: a policy from :mod:`updater.policy` (StaticScale, DynamicScale, ...).
        trace (Trace or str): the gradient trace, or a name ``dls --trace`` takes: a family
            (``"spikes"``, 10000 steps made with ``seed``), a shipped recording
            (``"digits_conv_bn"``) or a trace file's path (:func:`sim.traces.named.named_trace`);
            one recorded every N steps replays on the training clock
            (:func:`sim.replay.clock.training_clock`).
        runs (int, default 1): runs advanced together, >= 1.
        seed (int, default 0): seed of the jitter, >= 0.
        jitter (float, default 0.25): std of log2 of the per-(step, run) gradient size factor, in
            [0, 8]; 0 makes every run replay the trace exactly.
        label (str, optional): name for tables; default the preset name or class name.
        progress (bool, optional): show a tqdm bar; default: when stderr is a terminal.

    Returns:
        RunResult: trajectories (steps x runs) and per-run metrics.

    >>> from sim.traces.families import lognormal_trace
    >>> from updater.policy import DynamicScale
    >>> r = simulate(DynamicScale(hysteresis=1), lognormal_trace(steps=50), runs=4)
    >>> r.scale.shape, bool(r.overflow[0].all()), float(r.scale[1, 0])
    ((50, 4), True, 16384.0)
    """
    policy = as_policy(policy)
    trace = _replayed_trace(trace, runs, seed, jitter)
    factor = jitter_factors(trace.steps, runs, seed, jitter)
    desc = label or policy_label(policy)
    scale, overflow = _advance(policy, trace, factor, runs, progress, desc)
    return run_result(policy, trace, factor, scale, overflow, label)


def _overflow_limits(trace: Trace) -> list:
    """Per step: None (nothing recorded) or ``(threshold, floor)`` before jitter (inf: no
    threshold; :func:`sim.replay.result.overflow_thresholds`); :func:`_row_limit` jitters it."""
    threshold, floor = overflow_thresholds(trace)
    limits: list = [None] * trace.steps
    for t in np.flatnonzero(trace.thresholds.known):
        limits[t] = (np.inf if threshold is None else float(threshold[t]), float(floor[t, 0]))
    return limits


def _row_limit(limit, factor):
    """A step's ``limit`` under jitter ``factor``: the threshold divided by it (inf stays inf)."""
    if limit is not None:
        return (limit[0] if limit[0] == np.inf else limit[0] / factor), limit[1]


def _step_outcome(scaled_absmax, scale, limit, bad, out=None):
    """The step rule (module doc), for one run (scalars) or many (arrays of one shape).

    Args:
        scaled_absmax: ``a``, the largest scaled gradient magnitude.
        scale: the loss scale ``s``.
        limit: None, or ``(limit, floor)``: the loss scale from which the step overflows
            (recorded threshold divided by the jitter factor) and the scale at or below which
            it never does (0: not known); the floor a number, or an array with one per run.
        bad (bool, or bool array with one per run): the step is a bad batch.
        out (bool array, optional): where to write the overflow flags.

    Returns:
        ``(overflow, grads_finite)``.
    """
    ovf = np.greater_equal(scaled_absmax, FP16_OVERFLOW, out=out)
    if limit is not None:
        ovf = np.logical_or(ovf, np.greater_equal(scale, limit[0]), out=out)
        if isinstance(limit[1], np.ndarray):  # per run (sim.replay.exact)
            ovf = np.logical_and(ovf, np.greater(scale, limit[1]) | (limit[1] <= 0), out=out)
        elif limit[1] > 0:
            ovf = np.logical_and(ovf, np.greater(scale, limit[1]), out=out)
    if isinstance(bad, np.ndarray):
        return ovf, np.logical_and(np.logical_not(ovf), np.logical_not(bad))
    return ovf, (np.zeros_like(ovf) if bad else np.logical_not(ovf))


def _advance(policy, trace, factor, runs, progress, desc):
    """The inner loop: per step two multiplies (the gradient size under each run's jitter, then
    under its scale), one or two compares and the policy update. ``runs`` is a multiple of the
    columns of ``factor`` (stacked policies repeat them) or it has one (no jitter); only the
    trajectories are (steps, runs) arrays, a step's sizes and limits live for its row."""
    steps = trace.steps
    scale = np.empty((steps + 1, runs))
    overflow = np.empty((steps, runs), dtype=bool)
    bad = trace.nonfinite.tolist()
    limits = _overflow_limits(trace)
    repeat = runs // factor.shape[1] if factor.shape[1] > 1 else 1
    row = np.empty(factor.shape[1] * repeat)  # the step's unscaled sizes, reused
    needs_absmax = policy.needs_grad_absmax
    update = policy.update
    state = policy.init((runs,))
    for t in _progress(range(steps), steps, progress, desc):
        s = state.scale
        scale[t] = s
        f = factor[t] if repeat == 1 else np.tile(factor[t], repeat)
        a = np.multiply(trace.absmax[t], f, out=row) * s
        _, finite = _step_outcome(a, s, _row_limit(limits[t], f), bad[t], out=overflow[t])
        if bad[t]:  # the policy's third outcome
            state = update(state, finite, a if needs_absmax else None, True)
        else:
            state = update(state, finite, a) if needs_absmax else update(state, finite)
    scale[steps] = state.scale
    return scale, overflow


def stack_policies(policies: Sequence, runs: int = 1):
    """One policy object whose settings are arrays: policy ``i``'s settings fill runs
    ``i * runs`` to ``(i + 1) * runs - 1``.

    The policy contract (:mod:`updater.policy`) makes ``init``/``update`` elementwise in the
    settings as well as in the state, so the stacked object advances every setting at once. It
    is built through the class's constructor, which validates array settings element by
    element, from one element per policy (then repeated ``runs`` times: the checks run once per
    policy, not once per run); all policies must be of one class.

    Args:
        policies (sequence of policies of one class): at least one.
        runs (int, default 1): runs per policy, >= 1.
    """
    policies = [as_policy(p) for p in policies]
    if not policies:
        raise ValueError("policies must hold at least one policy, got none")
    cls = type(policies[0])
    for p in policies:
        if type(p) is not cls:
            raise TypeError(
                f"policies must all be of one class to stack, got {cls.__name__} and "
                f"{type(p).__name__}"
            )
    _check_runs_seed_jitter(runs, 0, 0.0)
    columns = {f.name: [getattr(p, f.name) for p in policies] for f in dataclasses.fields(cls)}
    stacked = cls(**{name: np.asarray(v) for name, v in columns.items()})  # checked per policy
    for name in columns:  # then each policy's settings repeated for its runs, checked already
        set_setting(stacked, name, np.repeat(getattr(stacked, name), runs))
    return stacked


def simulate_many(
    policies: Sequence,
    trace: Trace | str | Path,
    runs: int = 1,
    seed: int = 0,
    jitter: float = 0.25,
    labels: Sequence[str] | None = None,
    progress: bool | None = None,
) -> List[RunResult]:
    """Run each policy over ``trace``; policies of one class advance together.

    Policies of the same class are stacked (:func:`stack_policies`) so that all their runs
    advance in one vectorized loop; every policy sees the same jitter (same ``seed``), so the
    comparison uses common random numbers. Results equal :func:`simulate` of each policy alone.

    Args:
        policies (sequence of policies): at least one.
        trace, runs, seed, jitter, progress: as in :func:`simulate`.
        labels (sequence of str, optional): one label per policy.

    Returns:
        list of RunResult, in the order of ``policies``.
    """
    policies = list(policies)
    if not policies:
        raise ValueError("policies must hold at least one policy, got none")
    if labels is not None and len(labels) != len(policies):
        raise ValueError(f"labels must have {len(policies)} entries, got {len(labels)}")
    policies = [as_policy(p) for p in policies]
    trace = _replayed_trace(trace, runs, seed, jitter)
    labels = [policy_label(p) for p in policies] if labels is None else list(labels)
    factor = jitter_factors(trace.steps, runs, seed, jitter)
    results: List[Any] = [None] * len(policies)
    groups: Dict[type, List[int]] = {}
    for i, p in enumerate(policies):
        groups.setdefault(type(p), []).append(i)
    for members in groups.values():
        stacked = stack_policies([policies[i] for i in members], runs)
        n = len(members)
        desc = "+".join(labels[i] for i in members)
        scale, overflow = _advance(stacked, trace, factor, n * runs, progress, desc)
        for j, i in enumerate(members):
            cols = slice(j * runs, (j + 1) * runs)
            results[i] = run_result(
                policies[i], trace, factor, scale[:, cols], overflow[:, cols], labels[i]
            )
    return results


def simulate_scalar(policy, trace: Trace, runs: int = 1, seed: int = 0, jitter: float = 0.25):
    """Reference loop: each run alone, step by step, with scalar states (slow; for tests and
    benchmarks). Same step rule as :func:`simulate` (the same function decides each step).

    Returns:
        ``(scale, overflow)``: float64 ``(steps + 1, runs)`` scales (row ``t`` used at step
        ``t``, the last row after the last step) and bool ``(steps, runs)`` overflow flags.
    """
    policy = as_policy(policy)
    trace = _replayed_trace(trace, runs, seed, jitter)
    factor = np.broadcast_to(jitter_factors(trace.steps, runs, seed, jitter), (trace.steps, runs))
    absmax = trace.absmax[:, None] * factor
    limits = _overflow_limits(trace)
    scale = np.empty((trace.steps + 1, runs))
    overflow = np.empty((trace.steps, runs), dtype=bool)
    for r in range(runs):
        state = policy.init()
        for t in range(trace.steps):
            s = float(state.scale)
            scale[t, r] = s
            a = float(absmax[t, r]) * s
            limit = _row_limit(limits[t], float(factor[t, r]))
            ovf, finite = _step_outcome(a, s, limit, bool(trace.nonfinite[t]))
            overflow[t, r] = ovf
            absmax_t = a if policy.needs_grad_absmax else None
            state = policy.update(state, bool(finite), absmax_t, bool(trace.nonfinite[t]))
        scale[trace.steps, r] = float(state.scale)
    return scale, overflow


# ---------------------------------------------------------------- memory


def memory_estimate(steps: int, runs: int, policies: int = 1) -> int:
    """Bytes a :func:`simulate` or :func:`simulate_many` call (on a synthetic family drawn for
    it, as ``dls simulate`` and ``dls sweep`` do) needs at its peak: an estimate.

    Per step about 7000 bytes: the trace (about 1000 bytes a step kept, 5800 while a synthetic
    family is drawn) and the per-step tables of the underflow model. Per step and run, 8 bytes
    (the jitter factors) plus 9 per policy advancing together (its kept scales and overflow
    flags): nothing else is held per (step, run). Per step and run of the widest block of runs
    (:func:`sim.replay.result.run_blocks`), 48 bytes: the block's safe scales, flushed shares and
    their temporaries while the metrics are worked out. Per run and policy, 170 bytes whatever
    the steps (the stacked states and their temporaries, the metrics and summaries).
    Measured as the peak resident memory of ``dls simulate`` less that of a one-run, one-step
    command: tests/sim/cli/test_memory.py checks it against both that and tracemalloc's peak
    (``--steps 1 --runs 1000000`` peaked at 186 MiB, this says 190 MiB; ``--steps 1000 --runs
    2000`` at 115 MiB, this says 131 MiB).

    Args:
        steps (int, >= 1): steps of the trace.
        runs (int, >= 1): runs per policy.
        policies (int, default 1): policies advancing together.

    >>> memory_estimate(10000, 64)
    111610880
    """
    widest = min(runs, 2 * max(MIN_BLOCK_RUNS, RUN_BLOCK // steps))
    return steps * (7000 + (8 + 9 * policies) * runs + 48 * widest) + 170 * runs * policies
