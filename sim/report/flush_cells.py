"""How a table shows a flushed share: measured, exact, bounds where the replay went beyond the
scales the trace measured flushing at, or ``not measured`` (:mod:`sim.replay.flush_basis`); the
one format of ``dls simulate``, ``tune``, ``sweep`` and ``dls report``."""

from __future__ import annotations

from typing import Any, Dict, List

from sim.replay.flush_basis import flush_basis
from sim.replay.metrics import head
from sim.tables import format_percent, format_value

RECORDING_GUIDE = "docs/guide/recording.md"
"""Where the recording guide says which probes measure flushing."""


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
        out["mean_flushed"] = range_text(row["mean_flushed_low"], row["mean_flushed_high"])
        lost = range_text(low, high)
    for name in ("signal_lost", "lost_mean"):
        if name in row:
            out[name] = lost
    return out


def flush_word(row: Dict[str, Any]) -> str:
    """What ``row``'s flushed share rests on, in a word: ``not measured`` (a trace without flush
    measurements), ``bounded`` (partly beyond the measured scales, not exact there),
    ``measured``, or ``exact`` (a synthetic family's histogram)."""
    if not_measured(row):
        return "not measured"
    if bounded(row):
        return "bounded"
    return "exact" if row.get("flush_basis") == "model" else "measured"


def table_notes(rows: List[Dict[str, Any]], traces: Dict[str, Any]) -> List[str]:
    """One line per trace of ``rows`` (a sweep's or a report's rows, one per setting or policy)
    whose flushed share some row printed as ``not measured`` or as bounds
    (:func:`flush_cells`), saying why; ``traces`` maps the rows' ``trace`` to the trace
    (:func:`measured_scales`)."""
    notes = []
    for name in sorted({r["trace"] for r in rows}):
        mine = [r for r in rows if r["trace"] == name]
        if any(not_measured(r) for r in mine):
            notes.append(
                f"{name}: flushing not measured (a recording without Probes(flush=True)): "
                f"flushed prints 'not measured' and {head('signal_lost')} '>=' the skipped "
                "steps' share; record with Probes(overflow=True, flush=True) to measure it "
                f"({RECORDING_GUIDE})"
            )
            continue
        some = [r for r in mine if bounded(r)]
        ranged = [r for r in some if _prints_range(r)]
        if not some:
            continue
        scales = measured_scales(traces[name]) if name in traces else None
        span = "" if scales is None else f" ({scale_text(scales[0])} to {scale_text(scales[1])})"
        where = (
            f"{name}: for {len(some)} of {len(mine)} rows the policy's scale lay outside the "
            f"scales {name} measured flushing at{span} on some applied steps"
        )
        if not ranged:
            notes.append(f"{where}; the flushing there moves no printed figure")
            continue
        notes.append(
            f"{where}: {len(ranged)} print their flushed share or {head('signal_lost')} as "
            "bounds (above those scales between 0 and the share at the highest; below, at least "
            "the share at the lowest); record under a policy that visits these scales "
            f"({RECORDING_GUIDE})"
        )
    return notes


def _prints_range(row: Dict[str, Any]) -> bool:
    """Whether :func:`flush_cells` prints one of ``row``'s figures as a range."""
    cells = flush_cells(row)
    return any("-" in str(cells.get(k, "")) for k in ("mean_flushed", "signal_lost"))


def range_text(low: float, high: float) -> str:
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


def scale_text(value: float) -> str:
    """A scale as people write it (``2^15``)."""
    return format_value(value, name="scale")
