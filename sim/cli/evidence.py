"""What ``dls simulate`` and ``dls tune`` say their figures rest on: whether flushing was
measured at the replayed scales (:mod:`sim.replay.flush_basis`) and the predictive interval of
skipped steps and the below-half share (:mod:`sim.replay.intervals`)."""

from __future__ import annotations

from typing import Any, Dict, List

from sim.replay.flush_basis import flush_basis
from sim.replay.metrics import METRICS, head
from sim.tables import format_percent, format_value

RECORDING_GUIDE = "docs/guide/recording.md"
"""Where the recording guide says which probes measure flushing."""
INTERVAL_GUIDE = "docs/simulator/cli.md#the-predictive-interval"
"""Where the docs say how the predictive interval is made and how well it held."""


def not_measured(row: Dict[str, Any]) -> bool:
    """Whether some replayed recording of ``row`` measured no flushing at all."""
    return "none" in str(row.get("flush_basis", ""))


def bounded(row: Dict[str, Any]) -> bool:
    """Whether ``row``'s flushed share rests partly on no measurement (only bounded)."""
    return bool(row.get("flush_unmeasured", 0) > 0)


def flush_cells(row: Dict[str, Any]) -> Dict[str, Any]:
    """``row`` with its ``mean_flushed`` and ``signal_lost`` cells (and ``lost_mean``, ``tune``'s
    name) as text where flushing was not measured: ``not measured`` and ``>=`` the skipped
    steps' share when the trace measured none, the bounds ``low-high`` when part of it rests
    on extrapolation (one figure where both print alike); unchanged where every share was
    measured or exact."""
    if not bounded(row):
        return row
    out = dict(row)
    low, high = row["signal_lost_low"], row["signal_lost_high"]
    if not_measured(row):
        out["mean_flushed"] = "not measured"
        lost = f">={format_percent(low)}"
    else:
        out["mean_flushed"] = _range(row["mean_flushed_low"], row["mean_flushed_high"])
        lost = _range(low, high)
    for name in ("signal_lost", "lost_mean"):
        if name in row:
            out[name] = lost
    return out


def _range(low: float, high: float) -> str:
    """``low-high`` in percent, or one figure where both print alike."""
    text = [format_percent(low), format_percent(high)]
    return text[0] if text[0] == text[1] else "-".join(text)


def measured_scales(trace) -> tuple | None:
    """The lowest and highest scale at which ``trace`` (a Trace or a TracePool) measured
    flushing, or None where it measured none."""
    found = [flush_basis(t).scales for t in getattr(trace, "traces", [trace])]
    found = [s for s in found if s is not None]
    if not found:
        return None
    return min(s[0] for s in found), max(s[1] for s in found)


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
        span = "" if scales is None else f" ({_scale(scales[0])} to {_scale(scales[1])})"
        rests = row["flush_unmeasured_lost"] / row["signal_lost"] if row["signal_lost"] else 0.0
        where = (
            f"on {format_percent(row['flush_unmeasured'])} of applied steps the policy's scale "
            f"lay outside the scales {name} measured flushing at{span}"
        )
        if "-" not in _range(row["signal_lost_low"], row["signal_lost_high"]):
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


def _scale(value: float) -> str:
    return format_value(value, name="scale")


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
