"""Settings tuned on a user's own traces: the report's sweep of one policy and its selection rule
(:mod:`sim.replay.selection`), run on the given traces instead of the report's families."""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping

from sim.replay.selection import (
    DYNAMIC_GRID,
    HEADROOM_GRID,
    HEADROOM_MAX_MARGIN,
    choose,
    per_setting,
    tied,
)
from sim.replay.sweep import sweep_grid
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
        limits the choice: ties, traces too short to test the growth interval).

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
    by_trace = [  # trace by trace, as the rows run
        {
            "trace": r["trace"],
            "which": which,
            "signal_lost": r["signal_lost"],
            "skipped": r["skipped"],
        }
        for name in dict.fromkeys(r["trace"] for r in rows)
        for which, setting in (("chosen", chosen), ("default", default))
        for r in rows
        if r["trace"] == name and all(r[k] == setting[k] for k in grid)
    ]
    return {
        "chosen": chosen,
        "default": default,
        "rows": folded,
        "by_trace": by_trace,
        "line": line,
        "notes": notes,
    }


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
