"""Per-run metrics of a simulated run, their average over runs, and what each one is called.

:data:`METRICS` is the one list of summary metrics: their order in tables, their short table
heads, their long labels (figure axes and titles) and their kind, which says how to print them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict

import numpy as np

from sim.replay.columns import applied_sum, count_true, first_true
from sim.replay.flush_basis import flush_summary


@dataclass(frozen=True)
class Metric:
    """How people read one summary metric.

    Attributes:
        head (str): short column head (report tables).
        label (str): long label (figure axes and titles).
        kind (str): ``"count"`` (mean over runs), ``"share"`` (in [0, 1], printed as a
            percentage), ``"steps"`` (a median step count) or ``"scale"`` (a loss scale).
        lower_is_better (bool): whether a lower value is better.
        per_run (bool, default True): :attr:`sim.replay.result.RunResult.metrics` holds one
            value per run (else the metric exists only in the summary row).
    """

    head: str
    label: str
    kind: str
    lower_is_better: bool
    per_run: bool = True


METRICS: Dict[str, Metric] = {
    "overflows": Metric("overflows", "overflows per run", "count", True),
    "skipped": Metric("skipped", "skipped steps per run", "count", True),
    "mean_flushed": Metric(
        "flushed (applied steps)",
        "share of nonzero values flushed (applied steps)",
        "share",
        True,
    ),
    "signal_lost": Metric(
        "signal lost", "share of gradient values lost (skips + underflow)", "share", True
    ),
    "steps_to_safe": Metric(
        "steps to 2x of safe (median)",
        "steps until within 2x of the safe scale (median)",
        "steps",
        True,
    ),
    "never_safe": Metric(
        "runs never there", "runs never within 2x of the safe scale", "count", True, False
    ),
    "below_half_safe": Metric(
        "steps below safe/2", "share of steps below half the safe scale", "share", True
    ),
    "final_scale": Metric("final scale (median)", "final scale (median)", "scale", False),
}
"""The summary metrics of :func:`summarize`, in table order (an ordered mapping)."""

SUMMARY_COLUMNS = ("label", "trace", "runs", *METRICS)
"""Columns of a summary table: what ran, then every metric."""

SHARES = tuple(name for name, m in METRICS.items() if m.kind == "share")
"""Metrics printed as percentages."""

LABEL_HEADS = {"label": "policy", "trace": "trace", "runs": "runs"}
"""Heads of a summary table's columns that say what ran."""


def head(column: str) -> str:
    """The one name of a summary column: a metric's :attr:`Metric.head` (the report's, the
    terminal's and the CSV's), a label column's :data:`LABEL_HEADS` entry, else the column
    itself (a setting's name, as typed).

    >>> head("signal_lost"), head("label"), head("growth_interval")
    ('signal lost', 'policy', 'growth_interval')
    """
    if column in METRICS:
        return METRICS[column].head
    return LABEL_HEADS.get(column, column)


def csv_head(column: str) -> str:
    """:func:`head` with the unit of a CSV cell: shares are written in percent, ``(%)``.

    >>> csv_head("signal_lost"), csv_head("skipped")
    ('signal lost (%)', 'skipped')
    """
    return f"{head(column)} (%)" if column in SHARES else head(column)


def csv_value(column: str, value):
    """A CSV cell: shares in percent (the unit :func:`csv_head` names), others as they are."""
    return 100.0 * value if column in SHARES else value


def legend(columns) -> str:
    """The legend line under a terminal table: each metric column's head, then its label and
    unit.

    >>> legend(["trace", "skipped", "overflows"])
    'skipped = skipped steps per run; overflows = overflows per run'
    >>> legend(["below_half_safe"])
    'steps below safe/2 = share of steps below half the safe scale, %'
    """
    return "; ".join(
        f"{m.head} = {m.label}" + (", %" if m.kind == "share" else "")
        for m in (METRICS[c] for c in columns if c in METRICS)
        if m.label != m.head or m.kind == "share"
    )


def run_metrics(scale, overflow, skipped, safe, flushed, nonfinite) -> Dict[str, np.ndarray]:
    """Per-run metrics from (steps, runs) trajectories.

    - ``overflows``: steps that overflowed (recorded overflows included; bad batches not
      counted, even when their gradients would overflow too);
    - ``skipped``: steps skipped for any reason (overflow or bad batch);
    - ``mean_flushed``: share of nonzero values flushed to zero, averaged over applied steps
      (NaN if every step was skipped);
    - ``signal_lost``: share of nonzero gradient values that never reach an update, averaged
      over all steps (a skipped step loses all of them, an applied step its flushed share);
    - ``steps_to_safe``: steps before the scale is first within a factor 2 of the largest safe
      scale (``safe / 2 <= scale <= 2 * safe``); NaN if never;
    - ``below_half_safe``: share of steps with ``scale < safe / 2``.
    """
    steps = scale.shape[0]
    n_skipped = count_true(skipped)
    n_applied = steps - n_skipped
    flushed_applied = applied_sum(skipped, flushed)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_flushed = flushed_applied / n_applied
        ratio = scale / safe
    within = np.greater_equal(ratio, 0.5)
    flags = np.less_equal(ratio, 2.0)
    within &= flags
    first, reached = first_true(within)
    bad = np.asarray(nonfinite, dtype=bool)
    overflows = count_true(overflow)
    if bad.any():  # bad batches are not counted
        overflows -= count_true(overflow[bad])
    return {
        "overflows": overflows,
        "skipped": n_skipped,
        "mean_flushed": mean_flushed,
        "signal_lost": (flushed_applied + n_skipped) / steps,
        "steps_to_safe": np.where(reached, first.astype(np.float64), np.nan),
        "below_half_safe": count_true(np.less(ratio, 0.5, out=flags)) / steps,
    }


def summarize(metrics: Dict[str, np.ndarray], steps: int, **labels) -> Dict[str, Any]:
    """Average per-run metrics into one row.

    Means over runs for counts and shares; the median for ``steps_to_safe`` over runs that got
    there (``never_safe`` counts the others) and the median of ``final_scale``; with the
    flush metrics (:func:`sim.replay.flush_basis.flush_run_metrics`) their
    :func:`~sim.replay.flush_basis.flush_summary` too.
    """
    to_safe = metrics["steps_to_safe"]
    got = to_safe[~np.isnan(to_safe)]
    row = dict(labels)
    row.update(
        steps=steps,
        runs=int(to_safe.size),
        overflows=float(np.mean(metrics["overflows"])),
        skipped=float(np.mean(metrics["skipped"])),
        mean_flushed=float(np.nanmean(metrics["mean_flushed"]))
        if np.isfinite(metrics["mean_flushed"]).any()
        else math.nan,
        signal_lost=float(np.mean(metrics["signal_lost"])),
        steps_to_safe=float(np.median(got)) if got.size else math.nan,
        never_safe=int(to_safe.size - got.size),
        below_half_safe=float(np.mean(metrics["below_half_safe"])),
        final_scale=float(np.median(metrics["final_scale"])),
    )
    if "flush_basis" in metrics:  # what the flushed shares rest on
        row.update(flush_summary(metrics, steps))
    return row
