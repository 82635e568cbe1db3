"""Settings tuned on a user's own traces: the report's sweep of one policy and its selection rule
(:mod:`sim.replay.selection`), run on the given traces instead of the report's families."""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping

from sim.replay.intervals import replay_intervals
from sim.replay.pool import simulate_pooled
from sim.replay.selection import (
    DYNAMIC_GRID,
    FLUSH_MEANS,
    HEADROOM_GRID,
    HEADROOM_MAX_MARGIN,
    choose,
    per_setting,
    tied,
)
from sim.replay.sweep import sweep_grid
from sim.tables import format_percent
from updater.policy import DynamicScale, HeadroomScale
from updater.trace import Trace

TUNED = {"dynamic": (DynamicScale, DYNAMIC_GRID), "headroom": (HeadroomScale, HEADROOM_GRID)}
"""The policies ``tune`` can tune: name -> (class, the report's grid of its settings)."""


def setting_text(value) -> str:
    """A setting as Python source: powers of two as ``2**k``, whole numbers as ints.

    >>> setting_text(32768.0), setting_text(2**-8), setting_text(2000), setting_text(0.5)
    ('2**15', '2**-8', '2000', '2**-1')
    """
    if isinstance(value, bool):
        return repr(value)
    exponent = math.log2(value) if value > 0 else 0.5
    if isinstance(value, float) and exponent == int(exponent):
        return f"2**{int(exponent)}"
    return repr(int(value)) if float(value) == int(value) else repr(value)


def tune(
    traces: Mapping[str, Trace],
    policy: str = "dynamic",
    runs: int = 16,
    seed: int = 0,
    jitter: float = 0.25,
    progress=None,
) -> Dict[str, Any]:
    """Sweep the report's grid of ``policy`` over ``traces`` and pick with the report's rule.

    Args:
        traces (mapping name -> Trace): the user's traces (every one counts as a family).
        policy (str, default "dynamic"): "dynamic" (DynamicScale) or "headroom" (HeadroomScale).
        runs (int, default 16), seed (int, default 0), jitter (float, default 0.25): as in
            :func:`sim.replay.sweep.run_sweep`.
        progress (optional): a stage reporter, as in :func:`sim.replay.sweep.run_sweep`.

    Returns:
        dict: ``chosen`` and ``default`` (the per-setting rows, :func:`per_setting`, of the
        chosen settings and of the policy's defaults), ``rows`` (every setting), ``by_trace``
        (``trace``, ``which`` ("chosen" or "default"), ``signal_lost`` and ``skipped`` on each
        trace, trace by trace: what the pooled rows average), ``line`` (the
        updater's constructor with the chosen policy, to paste), ``notes`` (lines on what
        limits the choice: ties, traces too short to test the growth interval, signal lost
        resting on unmeasured flushing), ``intervals`` (per trace and ``which``, the
        :func:`sim.replay.intervals.replay_intervals` of the chosen and the default settings).

    Raises:
        ValueError: an unknown policy or no traces.
    """
    if policy not in TUNED:
        raise ValueError(f"policy must be one of {', '.join(TUNED)}, got {policy!r}")
    if not traces:
        raise ValueError("tune needs at least one trace")
    make, grid = TUNED[policy]
    rows = sweep_grid(
        make,
        grid,
        traces,
        runs,
        seed,
        jitter,
        progress,
        stage="{name} sweep on {{trace}} ({{settings}} settings)",
    )
    folded = per_setting(rows, list(grid))
    defaults = {k: getattr(make(), k) for k in grid}
    eligible = [r for r in folded if policy != "headroom" or r["margin"] <= HEADROOM_MAX_MARGIN]
    chosen = choose(eligible, defaults)
    default = next(r for r in folded if all(r[k] == v for k, v in defaults.items()))
    settings = ", ".join(f"{k}={setting_text(chosen[k])}" for k in grid)
    line = f"DynamicLossScalingUpdater(solver, loss, feed, policy={make.__name__}({settings}))"
    notes = _notes(traces, grid, len(tied(eligible)), len(eligible))
    notes += flush_notes(eligible, chosen, default)
    by_trace = _by_trace(rows, grid, chosen, default)
    intervals = [
        {
            "trace": name,
            "which": which,
            "intervals": _intervals(make, grid, setting, trace, runs, seed, jitter),
        }
        for name, trace in traces.items()
        for which, setting in (("chosen", chosen), ("default", default))
    ]
    return {
        "chosen": chosen,
        "default": default,
        "rows": folded,
        "by_trace": by_trace,
        "line": line,
        "notes": notes,
        "intervals": intervals,
    }


def _by_trace(rows, grid, chosen, default) -> list:
    """The sweep's ``rows`` of the chosen and the default settings, trace by trace (what
    :func:`tune`'s ``by_trace`` holds)."""
    return [  # trace by trace, as the rows run
        {
            "trace": r["trace"],
            "which": which,
            "signal_lost": r["signal_lost"],
            "skipped": r["skipped"],
            **{k: r[k] for k in (*FLUSH_MEANS, "flush_basis") if k in r},
        }
        for name in dict.fromkeys(r["trace"] for r in rows)
        for which, setting in (("chosen", chosen), ("default", default))
        for r in rows
        if r["trace"] == name and all(r[k] == setting[k] for k in grid)
    ]


def _intervals(make, grid, setting, trace, runs: int, seed: int, jitter: float) -> dict:
    """:func:`sim.replay.intervals.replay_intervals` of the policy ``make`` with ``setting``'s
    values of ``grid`` over ``trace``, from ``runs`` jittered runs."""
    policy = make(**{k: setting[k] for k in grid})
    (result,) = simulate_pooled([policy], trace, runs, seed, jitter)
    return replay_intervals(policy, trace, result)


def flush_notes(rows, chosen, default) -> list:
    """A line when some of ``rows``' signal lost rests on unmeasured flushing
    (:mod:`sim.replay.flush_basis`): the ranking is then not the traces' to make."""
    bounded = [r for r in rows if r.get("flush_unmeasured", 0) > 0]
    if not bounded:
        return []
    guide = "docs/guide/recording.md"
    if any("none" in r["flush_basis"] for r in rows):
        return [
            "note: not a confident ranking: the traces measured no flushing, so the settings are "
            "ranked on their skipped steps and on the histogram's binade model of flushing (which "
            "for a recording holds only what float16 kept); record with Probes(overflow=True, "
            f"flush=True) to rank by flushing too ({guide})"
        ]
    lost = {
        w: f"{format_percent(r['signal_lost_low'])}-{format_percent(r['signal_lost_high'])}"
        for w, r in (("chosen", chosen), ("default", default))
    }
    return [
        f"note: not a confident ranking: for {len(bounded)} of {len(rows)} settings the traces did "
        "not measure flushing at the scales replayed, so their signal lost is only bounded "
        f"(chosen {lost['chosen']}, default {lost['default']}); the choice rests on the skipped "
        "steps and on flushing where it was measured; record with Probes(overflow=True, "
        f"flush=True) under a policy that visits the scales compared ({guide})"
    ]


def _notes(traces: Mapping[str, Trace], grid, ties: int, settings: int) -> list:
    """What limits the choice: traces shorter than every growth interval of the grid (no
    setting grows the scale in them; a grid without growth intervals, the headroom policy's,
    has no such limit) and settings the losses cannot tell apart."""
    notes = []
    shortest = min(grid.get("growth_interval", [0]))  # 0: no interval, no trace too short
    short = [f"{name} ({t.steps} steps)" for name, t in traces.items() if t.steps < shortest]
    if short:
        notes.append(
            f"note: {', '.join(short)} shorter than every growth interval of the grid "
            f"(from {shortest}): no setting grows the scale there, so the growth interval is "
            "not tested; record a longer run"
        )
    if ties > 1:
        notes.append(
            f"note: {ties} of {settings} settings tie (within 3% on mean and worst signal lost): "
            "the traces cannot tell them apart; of these the choice is the one nearest the default"
        )
    return notes
