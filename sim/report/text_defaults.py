"""The report's section on choosing the defaults: the sweeps, the selection rule's choice and
why, with and without the real traces."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from sim.replay.selection import DYNAMIC_GRID, HEADROOM_GRID, HEADROOM_MAX_MARGIN
from sim.report.experiments import ReportData
from sim.report.flush_cells import bounded, flush_cells, not_measured
from sim.report.tables import find_row, format_value, share_table
from sim.report.tables import format_percent as pct
from updater.policy import DynamicScale, HeadroomScale


def _mean(rows, key: str) -> float:
    return float(np.mean([r[key] for r in rows]))


def sweep_table(rows: Sequence[Dict[str, Any]], keys: Sequence[str], families) -> str:
    """A sweep table: the settings, the signal lost per family, its mean and worst, skips; a
    family's figure and the mean as bounds or ``>=`` where the trace did not measure flushing
    at the replayed scales (:func:`sim.report.flush_cells.flush_cells`)."""
    rows = sorted(rows, key=lambda r: r["lost_mean"])
    columns = {k: k for k in keys}
    columns.update({f"lost_{f}": f"signal lost, {f}" for f in families})
    columns.update(
        lost_mean="signal lost, mean",
        lost_worst="signal lost, worst",
        skipped_mean="skipped steps / run",
    )
    lost = [c for c in columns if c.startswith("lost_")]
    return share_table([_lost_cells(r, families) for r in rows], columns, lost)


def _lost_cells(row: Dict[str, Any], families) -> Dict[str, Any]:
    """``row`` with its family figures, mean and worst as :func:`flush_cells` prints them (the
    worst: ``>=`` the largest low bound where a family measured no flushing, the largest low
    to the largest high bound where one is only bounded)."""
    out = dict(flush_cells(row)) if "flush_basis" in row else dict(row)
    found = [row[f"flush_{f}"] for f in families if f"flush_{f}" in row]
    for f in families:
        if f"flush_{f}" in row:
            out[f"lost_{f}"] = flush_cells(row[f"flush_{f}"])["signal_lost"]
    if any(bounded(e) for e in found):
        worst = {"signal_lost": row["lost_worst"], "flush_unmeasured": 1.0}
        worst["flush_basis"] = "none" if any(not_measured(e) for e in found) else "measured"
        for end in ("signal_lost_low", "signal_lost_high", "mean_flushed_low", "mean_flushed_high"):
            worst[end] = max(e.get(end, e["signal_lost"]) for e in found)
        out["lost_worst"] = flush_cells(worst)["signal_lost"]
    return out


def defaults_section(data: ReportData) -> str:
    """The section on choosing the defaults: the rule, each policy's sweep table with its
    current default and the setting the rule chose, why, and the evidence's limits."""
    return f"""\
## Choosing the defaults

Rule (`sim.replay.selection.choose`): the setting with the lowest **signal lost** averaged over \
the \
families; among settings within 5% of that lowest mean, the one whose worst family is best; \
differences below 3% (relative) count as ties, and a tie goes to the setting closest to the \
current default (smallest sum of |log2(value / default)|). {data.config.sweep_runs} runs per \
setting, same seeds and jitter as above.

{_dynamic_part(data)}

{_headroom_part(data)}

{_what_real_changed(data)}

Limits of this evidence: the synthetic traces are models (log-normal bodies, a calibrated SSD \
histogram) and the real ones come from {len(data.real)} small models; underflow is counted per \
value whether or not it matters to training (the paper's SSD values below 2^-27 did not), and a \
skipped step is counted as losing the whole step. A trace recorded from your own model \
(`GradientRecorder`, then `dls simulate --trace run.npz`) replays through the same code."""


def _fv(row, key) -> str:
    return format_value(row[key], name=key)


def _dynamic_part(data: ReportData) -> str:
    """DynamicScale's sweep table, its current default and the setting the rule chose, why."""
    dyn, families = DynamicScale(), data.family_names
    dyn_now = find_row(
        data.dynamic_sweep,
        init_scale=dyn.init_scale,
        growth_interval=dyn.growth_interval,
        hysteresis=dyn.hysteresis,
    )
    dyn_best = data.chosen["dynamic"]
    return f"""\
### DynamicScale: init_scale x growth_interval x hysteresis

{sweep_table(data.dynamic_sweep, list(DYNAMIC_GRID), families)}

Current default (init {format_value(dyn.init_scale, name="init_scale")}, growth_interval \
{dyn.growth_interval}, hysteresis {dyn.hysteresis}): mean loss {pct(dyn_now["lost_mean"])}, \
worst {pct(dyn_now["lost_worst"])}. Chosen by the rule: **init_scale=\
{_fv(dyn_best, "init_scale")}, growth_interval={_fv(dyn_best, "growth_interval")}, hysteresis=\
{_fv(dyn_best, "hysteresis")}** with mean {pct(dyn_best["lost_mean"])}, worst \
{pct(dyn_best["lost_worst"])}.

{_dynamic_why(data.dynamic_sweep, dyn_best, families)}"""


def _headroom_part(data: ReportData) -> str:
    """HeadroomScale's sweep tables at the jitter and twice it, its current default and the
    setting the rule chose, why."""
    config, families, head = data.config, data.family_names, HeadroomScale()
    main = [r for r in data.headroom_sweep if r["jitter"] == config.jitter]
    noisy = [r for r in data.headroom_sweep if r["jitter"] != config.jitter]
    head_now = find_row(main, margin=head.margin, backoff_factor=head.backoff_factor)
    head_best = data.chosen["headroom"]
    return f"""\
### HeadroomScale: margin x backoff_factor (and twice the jitter)

Jitter {config.jitter}:

{sweep_table(main, list(HEADROOM_GRID), families)}

Jitter {2 * config.jitter} (noisier step-to-step gradient size):

{sweep_table(noisy, list(HEADROOM_GRID), families)}

Current default (margin {format_value(head.margin, name="margin")}, backoff_factor \
{format_value(head.backoff_factor, name="backoff_factor")}): mean loss \
{pct(head_now["lost_mean"])}, worst {pct(head_now["lost_worst"])}. Chosen by the rule: \
**margin={_fv(head_best, "margin")}, backoff_factor={_fv(head_best, "backoff_factor")}** with \
mean {pct(head_best["lost_mean"])}, worst {pct(head_best["lost_worst"])}.

{_headroom_why(main, noisy)}"""


def _what_real_changed(data: ReportData) -> str:
    """What including the real traces changed in the choice of defaults."""
    if not data.real:
        return "The real models' traces were left out of this report (`--real-traces none`)."
    parts = []
    for name, grid in (("dynamic", DYNAMIC_GRID), ("headroom", HEADROOM_GRID)):
        both, synthetic = data.chosen[name], data.chosen_synthetic[name]
        cls = "DynamicScale" if name == "dynamic" else "HeadroomScale"
        picked = ", ".join(f"{k}={format_value(both[k], name=k)}" for k in grid)
        if all(both[k] == synthetic[k] for k in grid):
            parts.append(f"{cls}: the same choice ({picked}) as on the synthetic families alone")
        else:
            before = ", ".join(f"{k}={format_value(synthetic[k], name=k)}" for k in grid)
            parts.append(f"{cls}: {picked}, where the synthetic families alone pick {before}")
    real = ", ".join(f"`{m}`" for m in data.real)
    return (
        f"With and without the real traces. The sweeps above include the real models' traces "
        f"({real}) as families next to the synthetic ones; the rule was also run on the synthetic "
        "families alone. " + "; ".join(parts) + "."
    )


def _dynamic_why(rows, best, families) -> str:
    lines: List[str] = []
    low = [r for r in rows if r["init_scale"] == 2.0**10]
    high = [r for r in rows if r["init_scale"] == 2.0**15]
    if low and high and "ssd" in families:
        lines.append(
            f"- **init_scale**: starting at 2^15 instead of 2^10 cuts the loss on ssd from "
            f"{pct(_mean(low, 'lost_ssd'))} to {pct(_mean(high, 'lost_ssd'))} (mean over the "
            "other settings): a start below the safe scale costs thousands of steps of "
            "underflow, while a start above it costs a few skipped steps (one per halving)."
        )
    same = [r for r in rows if r["init_scale"] == best["init_scale"]]
    for key in ("growth_interval", "hysteresis"):
        parts = []
        for v in sorted({r[key] for r in rows}):
            sub = [r for r in same if r[key] == v]
            parts.append(
                f"{format_value(v, name=key)}: mean {pct(_mean(sub, 'lost_mean'))}, skipped "
                f"{format_value(_mean(sub, 'skipped_mean'), name='skipped')}/run"
            )
        lines.append(
            f"- **{key}** (averaged over the other setting, init "
            f"{format_value(best['init_scale'], name='init_scale')}): " + "; ".join(parts) + "."
        )
    other = sorted(
        (r for r in same if r["growth_interval"] == best["growth_interval"]),
        key=lambda r: r["hysteresis"],
    )
    other = [r for r in other if r["hysteresis"] != best["hysteresis"]]
    fams = [f for f in ("stationary", "nan") if f"lost_{f}" in best]
    if other and fams:
        parts = [
            f"{f}: {pct(best[f'lost_{f}'])} with hysteresis {best['hysteresis']} against "
            + ", ".join(f"{pct(o[f'lost_{f}'])} with {o['hysteresis']}" for o in other)
            for f in fams
        ]
        lines.append(
            f"- At growth_interval {best['growth_interval']}, hysteresis h costs h - 1 extra "
            "overflows per probe (after each growth the first backoff needs h overflows), and "
            "bad batches no longer need it: the updater tells them apart from overflows and "
            "the policy keeps its state on them (only growth refills the hysteresis; "
            "`consecutive_hysteresis=True` refills it on every finite step): "
            + "; ".join(parts)
            + "."
        )
    return "\n".join(lines)


def _headroom_why(main, noisy) -> str:
    lines = []
    for label, rows in (("jitter x1", main), ("jitter x2", noisy)):
        parts = []
        for m in sorted({r["margin"] for r in rows}):
            sub = [r for r in rows if r["margin"] == m]
            parts.append(
                f"margin {format_value(m, name='margin')}: mean {pct(_mean(sub, 'lost_mean'))}, "
                f"skipped {format_value(_mean(sub, 'skipped_mean'), name='skipped')}/run"
            )
        lines.append(f"- **margin** ({label}): " + "; ".join(parts) + ".")
    lines.append(
        f"- Only margins <= {format_value(HEADROOM_MAX_MARGIN, name='margin')} are eligible as "
        "the default: a margin m lands a factor m below the largest safe scale, and the "
        "policy's goal is to be within a factor 2 of it after at most 3 steps. Where gradients "
        "jump a lot from step to step, set margin=4 by hand."
    )
    lines.append(
        "- **backoff_factor** barely matters on these traces: after an overflow the next finite "
        "step jumps straight to the measured safe scale whatever the backoff; a deep backoff "
        "(2^-8) bounds the overflows in a row after a sudden jump in gradient size to "
        "ceil(jump in binades / 8) instead of one per binade."
    )
    return "\n".join(lines)
