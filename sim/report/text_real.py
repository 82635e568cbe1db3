"""The report's sections on the real models: their traces and measured runs, the simulator's
predictions checked against those runs, and the scale each layer needs."""

from __future__ import annotations

from typing import Any, Dict, Sequence

import numpy as np

from sim.replay.layers import TOLERANCE, format_layer_needs
from sim.replay.measured import RECORDED
from sim.replay.metrics import METRICS
from sim.replay.predictions import RANGE_RUNS
from sim.report.experiments import ReportData
from sim.report.tables import format_percent as pct
from sim.report.tables import format_value, markdown_table, with_percents


def _metric_cell(metric: str, value: float) -> str:
    return pct(value) if METRICS[metric].kind == "share" else format_value(value, name=metric)


def prediction_table(rows: Sequence[Dict[str, Any]]) -> str:
    """The predictions against the real runs: one row per (model, policy), per metric the
    prediction with its spread and the measured value."""
    table: Dict[tuple, Dict[str, Any]] = {}
    for r in rows:
        key = (r["model"], r["policy"])
        row = table.setdefault(key, {"model": key[0], "policy": key[1]})
        m = r["metric"]
        spread = f"{_metric_cell(m, r['low'])}-{_metric_cell(m, r['high'])}"
        row[f"{m}_p"] = f"{_metric_cell(m, r['predicted'])} ({spread})"
        row[f"{m}_m"] = _metric_cell(m, r["measured"])
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    columns = ["model", "policy"] + [f"{m}_{k}" for m in metrics for k in "pm"]
    heads = ["model", "policy"] + [
        f"{METRICS[m].head}, {'predicted (spread)' if k == 'p' else 'measured'}"
        for m in metrics
        for k in "pm"
    ]
    return markdown_table(list(table.values()), columns, heads)


def real_section(data: ReportData) -> str:
    if not data.real:
        return ""
    preds, config = data.predictions, data.config
    measured = with_percents(
        [{**r, "small": r["flushed_small"]} for r in data.measured], ["flushed", "small"]
    )
    runs_table = markdown_table(
        measured,
        ["model", "policy", "steps", "skipped", "final_scale", "accuracy", "flushed", "small"],
        ["model", "policy", "steps", "skipped", "final scale", "test accuracy",
         "flushed (applied steps)", "of which below 2^-24 after scaling"],
    )  # fmt: skip
    errors = []
    for metric in dict.fromkeys(r["metric"] for r in preds):
        sub = [r for r in preds if r["metric"] == metric]
        worst = max(sub, key=lambda r: abs(r["error"]))
        inside = sum(r["low"] <= r["measured"] <= r["high"] for r in sub)
        errors.append(
            f"- **{METRICS[metric].label}**: mean |predicted - measured| "
            f"{_metric_cell(metric, float(np.mean([abs(r['error']) for r in sub])))}; "
            f"largest on {worst['model']} under {worst['policy']} (predicted "
            f"{_metric_cell(metric, worst['predicted'])}, measured "
            f"{_metric_cell(metric, worst['measured'])}); the measured value lies inside the "
            f"jittered spread in {inside} of {len(sub)} cases."
        )
    recorded = [r for r in data.measured if r["policy"] == RECORDED]
    checked = [r for r in data.measured if r["policy"] != RECORDED]
    blind = ", ".join(
        f"{r['model']} {pct(r['flushed'])} ({pct(r['flushed_small'])} below 2^-24 after scaling)"
        for r in recorded
    )
    below = ", ".join(f"{r['model']} {pct(r['below_max_scale'])}" for r in recorded)
    overflows = sum(r["overflows"] for r in checked)
    inside = sum(r["overflows_inside"] for r in checked)
    arithmetic = ", ".join(
        f"{r['model']} under {r['policy']} {pct(r['flushed'] - r['flushed_small'])}"
        for r in checked
    )
    models = ", ".join(f"`{m}`" for m in data.real)
    return f"""\
## Real models: predictions checked against real runs

Three real nnabla models ({models}; what each is: the families table above) were trained in \
`cpu:half` with the updater under the default `DynamicScale()`, and every step's gradients \
recorded with `GradientRecorder` (`<model>.npz`, shipped in the package in `sim/traces/data`, \
written by `python -m sim.nnabla_studies.real_traces`, fixed seeds; see \
[sim/traces/data/README.md](../sim/traces/data/README.md)). The same models were then trained \
again for real, from \
the same weights and batches, under two other policies: `nnabla-legacy` (scale 8, doubling \
every 2000 steps: underflow) and `dynamic-fast` (`DynamicScale(growth_interval=50)`: it climbs \
back to 2^15 50 steps after each backoff, so it overflows more often). At every step of every \
run, the recording included, a float32 copy of the training graph (same parameters, same batch) \
computed the true gradients: the measured **flushed** share is the share of the true nonzero \
values that the float16 backward pass left at exactly zero, and the measured safe scale follows \
from the true largest |gradient| (`sim.nnabla_studies.real_runs`).

{runs_table}

From each recorded trace the simulator predicts what the other policies will do: the trace \
replayed exactly (jitter 0), and in parentheses the 5th-95th percentile of {RANGE_RUNS} runs \
with the report's jitter ({config.jitter}). Shares are per step (flushed: averaged over \
applied steps).

{prediction_table(preds)}

Prediction error:

{chr(10).join(errors)}

Where the error comes from:

- **What the recording flushed.** The trace holds the recorded run's float16 gradients after \
unscaling: a value that float16 zeroed in that run is a zero in the trace, not a small value. \
Measured with the same float32 shadow, the recorded runs (`DynamicScale()`, the first rows of \
the runs table) flushed {blind} of the true nonzero values: a predicted flushed share misses \
about that much at any scale.
- **Overflows above the recorded scale.** A trace records an overflow only where the recording \
overflowed; elsewhere the simulator decides from the largest parameter gradient. The recorded \
runs spent {below} of their steps below 2^15 (after an overflow `DynamicScale()` grows back \
only after 2000 finite steps), so whether those steps overflow at 2^15 was never observed. Of \
the {overflows} overflows of the checked runs, {inside} happened while the true parameter \
gradients times the scale stayed below 65520: they overflowed inside the backward pass \
(intermediate values), which no parameter gradient shows.
- **Float16 arithmetic on the way.** Of the measured flushed shares, the part that is not a \
value below 2^-24 after scaling ({arithmetic}) was zeroed by float16 arithmetic inside the \
backward pass, for example a ReLU whose float16 input is not positive while its float32 input \
is; the simulator's flush model covers only values below 2^-24.
- **Different trajectories.** A policy that skips or flushes differently applies different \
updates, so the measured run's weights, and its gradients, drift from the recorded run's: \
overflows happen at other steps, and the number of skipped steps can differ by a few even when \
the gradient sizes are predicted right.
- **The binade model** (values spread evenly inside each binade of the histogram) is exact for \
power-of-two scales such as these, so it adds no error here."""


def layers_section(data: ReportData) -> str:
    if not data.layers:
        return ""
    tables = "\n\n".join(
        f"**{model}**\n\n{format_layer_needs(rows)}" for model, rows in data.layers.items()
    )
    return f"""\
## Per-layer view of the real models

One loss scale serves every layer, but layers' gradients differ in size and drift during \
training (Zhao et al., *Adaptive Loss Scaling for Mixed Precision Training*, 2019). The real \
traces were recorded with per-parameter histograms (`GradientRecorder(per_parameter=True)`; a \
"layer" here is one parameter array, so a weight and its bias are two). For each one, the figure \
shows the share of its nonzero gradient values that float16 flushes to zero against the loss \
scale (all recorded steps without overflow pooled, the binade model of `sim.fp16.underflow`), \
and the \
tables give the scale each layer alone needs to keep that share within {TOLERANCE:g} (need) and \
the largest at which its gradients stay finite (max), early, mid-way and late in training \
(the first, middle and last tenth of the steps; `sim.replay.layers`).

![per-layer flushed share against the loss scale](layers_flush.png)

{tables}

How to read it: a need is a lower bound when it is close to the scale the recording ran at \
(2^15 here, mostly): values that float16 flushed during the recording are zeros in the trace. \
The max counts the parameter gradients only, not overflows inside the backward pass, and a \
float16 backward seed cannot exceed 2^15 anyway. Where one layer's need is above another \
layer's max, no single global scale serves both: the case for per-layer scales."""
