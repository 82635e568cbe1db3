"""What ``dls simulate`` and ``dls tune`` say their figures rest on: whether flushing was
measured at the replayed scales (:mod:`sim.replay.flush_basis`) and the predictive interval of
skipped steps and the below-half share (:mod:`sim.replay.intervals`)."""

from __future__ import annotations

from typing import Any, Dict, List

from sim.replay.metrics import METRICS, head
from sim.report.flush_cells import (
    RECORDING_GUIDE,
    bounded,
    flush_cells,
    flush_word,
    measured_scales,
    not_measured,
    range_text,
    scale_text,
    table_notes,
)
from sim.tables import format_percent, format_value

INTERVAL_GUIDE = "docs/simulator/cli.md#the-predictive-interval"
"""Where the docs say how the predictive interval is made and how well it held."""

__all__ = ["flush_cells", "flush_notes", "flush_word", "interval_text", "table_notes"]


def flush_notes(row: Dict[str, Any], trace) -> List[str]:
    """The lines that say what ``row``'s flushed share (of a replay over ``trace``) rests on."""
    name = getattr(trace, "name", "the trace")
    lost = head("signal_lost")
    if not_measured(row):
        return [
            f"flushing not measured: {name} holds no flush measurement (a recording without "
            "Probes(flush=True); its histogram keeps only what float16 kept at the recorded "
            f"scale), so the flushed share is unknown and {lost} is at least the skipped steps' "
            f"share ({format_percent(row['signal_lost_low'])}); record with "
            f"Probes(overflow=True, flush=True) to measure it ({RECORDING_GUIDE})"
        ]
    notes = []
    if bounded(row):
        scales = measured_scales(trace)
        span = "" if scales is None else f" ({scale_text(scales[0])} to {scale_text(scales[1])})"
        rests = row["flush_unmeasured_lost"] / row["signal_lost"] if row["signal_lost"] else 0.0
        where = (
            f"on {format_percent(row['flush_unmeasured'])} of applied steps the policy's scale "
            f"lay outside the scales {name} measured flushing at{span}"
        )
        if "-" not in range_text(row["signal_lost_low"], row["signal_lost_high"]):
            notes.append(  # the bounds print alike: say so, briefly
                f"{where}; {format_percent(rests)} of the replayed {lost} rests on them, less "
                "than its printed digits"
            )
        else:
            notes.append(
                f"{lost} bounded, not measured: {where}; there the flushed share is only bounded "
                "(above them: between 0 and the share at the highest measured scale; below: at "
                f"least the share at the lowest), and {format_percent(rests)} of the replayed "
                f"{lost} ({format_percent(row['signal_lost'])}) rests on that extrapolation; "
                f"record under a policy that visits these scales ({RECORDING_GUIDE})"
            )
    if row.get("flush_exact_beyond", 0) > 0:
        notes.append(
            f"flushing above the measured scales on {format_percent(row['flush_exact_beyond'])} "
            "of applied steps is exact: nothing flushed at the highest measured scale, and a "
            "larger power-of-two scale flushes no more"
        )
    return notes


def interval_text(intervals: Dict[str, Dict[str, Any]]) -> str:
    """The predictive intervals of :func:`sim.replay.intervals.replay_intervals` in words: each
    metric's interval, its level and the recordings' exact replays, then the recordings they
    rest on and the calibration."""
    parts, n = [], 0
    for metric, iv in intervals.items():
        low, high = (_value(metric, iv[k]) for k in ("low", "high"))
        each = ", ".join(_value(metric, v) for v in iv["each"])
        replayed = "replayed exactly" if len(iv["each"]) == 1 else "each replayed exactly"
        parts.append(
            f"{METRICS[metric].label} {low} to {high} at level {iv['level']:.0%} "
            f"({replayed}: {each})"
        )
        n = iv["recordings"]
    recordings = f"{n} recording" + "s" * (n != 1)
    return (
        f"{'; '.join(parts)}; for a run in a batch order no recording saw, over {recordings} "
        f"(their variation within, times a factor calibrated on the shipped models' batch "
        f"orders: {INTERVAL_GUIDE})"
    )


def _value(metric: str, value: float) -> str:
    return format_percent(value) if metric != "skipped" else format_value(value, name=metric)
