"""The report's sections on the real models: their traces and measured runs, the simulator's
predictions checked against those runs, and the scale each layer needs."""

from __future__ import annotations

from typing import Any, Dict, Sequence

from sim.replay.layers import TOLERANCE, format_layer_needs
from sim.replay.measured import RECORDED
from sim.replay.metrics import METRICS
from sim.replay.predictions import prediction_goals, recordings_compared
from sim.replay.spread import CALIBRATED
from sim.report.experiments import ReportData
from sim.report.tables import format_percent as pct
from sim.report.tables import format_value, in_words, markdown_table, with_percents
from sim.traces.real import CHECK_ORDERS, RECORDINGS

NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five"}
STICKS = {"probed": "the run's probed thresholds", "seen": "the run's own overflows only"}
"""What a measured safe scale knows of overflows, in words (``MeasuredRun.stick``)."""


def _metric_cell(metric: str, value: float) -> str:
    return pct(value) if METRICS[metric].kind == "share" else format_value(value, name=metric)


def prediction_table(rows: Sequence[Dict[str, Any]]) -> str:
    """The predictions against the real runs: one row per (model, policy, batch order of the
    real run), per metric the prediction (with its interval, where it has one) and the measured
    value."""
    table: Dict[tuple, Dict[str, Any]] = {}
    for r in rows:
        key = (r["model"], r["policy"], r["order"])
        row = table.setdefault(key, dict(zip(("model", "policy", "order"), key)))
        m = r["metric"]
        row[f"{m}_p"] = _metric_cell(m, r["predicted"])
        if r["low"] is not None:
            row[f"{m}_p"] += f" ({_metric_cell(m, r['low'])}-{_metric_cell(m, r['high'])})"
        row[f"{m}_m"] = _metric_cell(m, r["measured"])
        row["stick"] = STICKS[r["stick"]]
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    columns = ["model", "policy", "order"] + [f"{m}_{k}" for m in metrics for k in "pm"]
    heads = ["model", "policy", "batch order"] + [
        f"{METRICS[m].head}, {'predicted (interval)' if k == 'p' else 'measured'}"
        for m in metrics
        for k in "pm"
    ]
    return markdown_table(list(table.values()), columns + ["stick"], heads + ["safe scale from"])


def recordings_table(compared: Sequence[Dict[str, Any]]) -> str:
    """:func:`sim.replay.predictions.recordings_compared` rows, as a table."""
    rows = [
        {
            **r,
            "level": f"{r['level']:.0%}",
            "inside": f"{r['inside']} of {r['runs']}",
            "width": f"{r['width']:.3g}",
        }
        for r in compared
    ]
    return markdown_table(
        rows,
        ["spread", "level", "inside", "width"],
        ["interval of the skipped steps from", "level", "real runs inside", "mean width (steps)"],
    )


def real_section(data: ReportData) -> str:
    """The section on the real models ("" without them): how they were recorded and checked,
    the measured runs, the forward pass's headroom, the predictions against the runs with their
    goals, how many recordings, and where the remaining error comes from."""
    if not data.real:
        return ""
    skipped = recordings_compared(data.predictions)
    forward = "\n".join(f"- batch order {k}: {line}" for (_, k), line in data.forward.items())
    return "\n\n".join(
        [
            "## Real models: predictions checked against real runs",
            _method_text(data.real),
            _runs_table(data.measured),
            FORWARD_TEXT,
            forward,
            SPREAD_TEXT,
            prediction_table(data.predictions),
            "The goals the predictions are held to (`sim.replay.predictions.prediction_goals`):",
            *_goals_text(data.predictions),
            _recordings_text(skipped),
            recordings_table(skipped),
            "Where the remaining error comes from:",
            _error_text(data.measured, data.real),
        ]
    )


def _method_text(real: Sequence[str]) -> str:
    """How the real models were recorded, and how the checked runs were measured."""
    models = ", ".join(f"`{m}`" for m in real)
    count = NUMBERS.get(len(real), str(len(real))).capitalize()
    return f"""\
{count} real nnabla models ({models}; what each is: the families table above) were trained in \
`cpu:half` with the updater under the default `DynamicScale()`, each **{_count(RECORDINGS)} \
times, in batch orders {in_words(RECORDINGS)}** (the same weights and data, other batches: two \
samples of training), and every step recorded with `GradientRecorder(per_parameter=True)` and \
the updater's `probes=Probes(overflow=True, flush=True, forward_headroom=True)` (`<model>.npz` and \
`<model>.order<k>.npz`, shipped in the package in `sim/traces/data`, written by `python -m \
sim.nnabla_studies.real_traces`, fixed seeds; see \
[sim/traces/data/README.md](../sim/traces/data/README.md)). On each recorded step the recorder \
**probed the overflow threshold** (the step's forward and backward again at other powers of \
two within the policy's bounds, from the previous step's threshold until the threshold is \
bracketed: the smallest scale at which its real backward pass overflows, overflows born inside \
the backward kernels included; a step still finite at 2^15 is stored as "above 2^15" and never \
overflows at or below it in the replay; a probed threshold S replays at S/sqrt(2), the middle of \
its bracket (S/2, S], so the jittered spread converges to the exact replay) and **measured \
flushing** (the share of the true nonzero gradient values, from a float32 copy of the graph, \
that float16 left at zero at the scale used and at 2^-4, 2^-8 and 2^-12 times it); training is \
left exactly as without the probes (`updater.driver.recording.probes`). The simulator replays \
those measurements. The same models were then trained again for real, from the same weights, **in \
batch order {in_words(CHECK_ORDERS)}, which no recording used**, under three other policies: \
`nnabla-legacy` (scale 8, doubling every 2000 steps: underflow), `dynamic-fast` \
(`DynamicScale(growth_interval=50)`: it climbs back to 2^15 50 steps after each backoff, so it \
overflows more often) and `headroom` (`HeadroomScale()`: it rests near the largest safe scale, \
where the censored thresholds matter). At every step of every run a float32 copy of the \
training graph (same parameters, same batch) computed the true gradients: the measured \
**flushed** share is the share of the true nonzero values that the float16 backward pass left \
at exactly zero, and the measured safe scale follows from the true largest |gradient| and from \
what the run knows of overflows, its stick (column "safe scale from"): every run here probed its \
own thresholds as the recording does (`measure_run(..., probes=Probes(overflow=True))`); a run \
without would know only the steps it saw overflow, and its safe scale would be too high wherever \
an overflow is born inside the backward kernels at a scale the run did not use \
(`sim.nnabla_studies.real_runs`, `sim.replay.measured.MeasuredRun.metrics`)."""


def _runs_table(measured: Sequence[Dict[str, Any]]) -> str:
    """The measured real runs, one row each (:func:`sim.report.experiments.measured_rows`)."""
    rows = with_percents(
        [{**r, "small": r["flushed_small"], "stick": STICKS[r["stick"]]} for r in measured],
        ["accuracy", "flushed", "small"],
    )
    return markdown_table(rows, list(RUN_COLUMNS), list(RUN_COLUMNS.values()))


RUN_COLUMNS = {
    "model": "model",
    "policy": "policy",
    "order": "batch order",
    "steps": "steps",
    "skipped": "skipped",
    "overflow_prone": "steps overflowing at 2^15 (probed)",
    "final_scale": "final scale",
    "accuracy": "test accuracy",
    "flushed": "flushed (applied steps)",
    "small": "of which below 2^-24 after scaling",
    "stick": "safe scale from",
}
"""The measured runs table's columns (row keys) and their heads."""

FORWARD_TEXT = """\
The float16 forward pass's headroom in each recording (`Probes(forward_headroom=True)`: \
the largest |value| a function produced or, for the kernels that accumulate, the largest sum \
they reach, relative to 65504; `updater.driver.recording.forward_peak`): no loss scale causes or \
cures an overflow there. nnabla's `cpu:half` BatchNormalization sums x and x^2 over the N values \
of a channel in float16 (its source, `forward_impl_batch`), so it overflows once N x E[x^2] passes \
65504 while the batch variance stays small; the recorder replays that loop in float16 (a test \
finds the overflow point on `cpu:half`: the measure reaches 1 at the very batch whose running \
variance goes inf). A recording made before this measure holds BatchNormalization's batch \
variance, a factor N below its sum of x^2, and its line says so."""
"""What the forward pass's headroom lines measure (one line per recording follows)."""


SPREAD_TEXT = f"""\
From the recordings the simulator predicts what the other policies will do: the mean of the \
recordings' exact replays (jitter 0), and in parentheses the interval `dls simulate` and \
`dls tune` print (`sim.replay.intervals`, `sim.replay.spread.calibrated_interval`): the \
standard deviation of the metric over block-bootstrapped recordings (stretches of training \
re-drawn from nearby stretches of either recording) times a factor calibrated on the shipped \
recordings' batch orders under policies none of the checked ones (\
{CALIBRATED["skipped"][0]:g} for the skipped steps, level {CALIBRATED["skipped"][1]:.0%}; \
{CALIBRATED["below_half_safe"][0]:g} for the steps below half the safe scale, level \
{CALIBRATED["below_half_safe"][1]:.0%}; `python -m benchmarks.bench_interval`: \
reports/interval.md), at least the recordings' own disagreement, centred on their mean \
and widened to whole steps. The flushed share has no interval. Shares are per step (flushed: \
averaged over applied steps)."""
"""What the predictions are: the recordings' mean and the calibrated interval."""


def _goals_text(preds: Sequence[Dict[str, Any]]) -> list:
    """The goals table, then the runs that miss their goal (or that none does)."""
    goals = prediction_goals(preds)
    goal_table = markdown_table(
        [{**g, "met": "met" if g["met"] else "missed"} for g in goals],
        ["goal", "result", "met"],
        ["goal", "result", "goal met"],
    )
    misses = "\n".join(
        f"- {METRICS[g['metric']].label}: {m['model']} under {m['policy']} (batch order "
        f"{m['order']}): {m['by']}"
        for g in goals
        for m in g["misses"]
    )
    return [goal_table, "Runs that miss:\n\n" + misses if misses else "No run misses its goal."]


def _recordings_text(skipped: Sequence[Dict[str, Any]]) -> str:
    """How many recordings: the paragraph before :func:`recordings_table`."""
    apart = f"{skipped[0]['apart']:.3g}" if skipped else "n/a"
    return f"""\
**How many recordings.** The same skipped-steps check with the interval from each recording \
alone (what `dls simulate --trace FILE` prints from one recording) and from all of them \
(`sim.replay.predictions.recordings_compared`). The recordings' exact replays lie {apart} \
skipped steps apart on average (the largest minus the smallest, per model and policy):"""


def _error_text(measured: Sequence[Dict[str, Any]], real: Sequence[str]) -> str:
    """Where the remaining error comes from: different trajectories, flushing between the
    measured scales (with the measured runs' numbers)."""
    recorded = [r for r in measured if r["policy"] == RECORDED]
    checked = [r for r in measured if r["policy"] != RECORDED]
    overflows = sum(r["overflows"] for r in checked)
    inside = sum(r["overflows_inside"] for r in checked)
    arithmetic = ", ".join(
        f"{r['model']} under {r['policy']} {pct(r['flushed'] - r['flushed_small'])}"
        for r in checked
    )
    blind = ", ".join(
        f"{r['model']} (batch order {r['order']}) {pct(r['flushed'])}" for r in recorded
    )
    prone = "; ".join(
        f"{m}: recordings {in_words([r['overflow_prone'] for r in recorded if r['model'] == m])}, "
        + ", ".join(f"{r['policy']} {r['overflow_prone']}" for r in checked if r["model"] == m)
        for m in real
        if any(r["overflow_prone"] for r in measured if r["model"] == m)
    )
    return f"""\
- **Different trajectories.** The real run sees batches no recording saw, and a policy that \
skips or flushes differently applies different updates, so its weights, and its gradients, \
drift from the recorded runs': overflows happen at other steps. The bootstrap within a \
recording covers this only in part, which is why its spread is scaled by a factor calibrated \
on other batch orders. Each run's own probes show how far the gradients \
drift: the steps they found overflowing at 2^15 ({prone or "none in any run"}). A checked run \
with more or fewer such steps than every recording lies outside every exact replay; only an \
interval that allows for other batch orders holds it. Of the {overflows} overflows of the \
checked runs, \
{inside} happened while the true parameter gradients times the scale stayed below 65520 (inside \
the backward pass): those the probes measure, and no parameter gradient shows.
- **Flushing between the measured scales.** The measured share is interpolated in log2 of the \
scale between the four measured scales, and outside them the binade model is shifted by the \
difference at the nearest one. The recorded runs themselves flushed {blind} of the true nonzero \
values. Of the checked runs' flushed shares, the part that is not a value below 2^-24 after \
scaling ({arithmetic}) was zeroed by float16 arithmetic inside the backward pass (e.g. a ReLU \
whose float16 input is not positive while its float32 input is), which the measurement includes \
and the binade model alone does not."""


def _count(orders) -> str:
    return NUMBERS.get(len(orders), str(len(orders)))


def layers_section(data: ReportData) -> str:
    if not data.layers:
        return ""
    tables = "\n\n".join(
        f"**{model}**\n\n{format_layer_needs(rows)}" for model, rows in data.layers.items()
    )
    return f"""\
## Per-layer view of the real models

One loss scale serves every layer, but layers' gradients differ in size and drift during training \
(Zhao et al., *Adaptive Loss Scaling for Mixed Precision Training*, 2019). The real traces were \
recorded with per-parameter histograms (`GradientRecorder(per_parameter=True)`; a "layer" here is \
one parameter array, so a weight and its bias are two). For each one, the figure shows the share \
of its nonzero gradient values that float16 flushes to zero against the loss scale (all clean \
recorded steps pooled: no bad batch, and no overflow unless the trace was probed; the binade \
model of `sim.casting.underflow`), and the tables give the scale each layer alone needs to keep \
that share within {TOLERANCE:g} (need) and the largest at which its gradients stay finite (max), \
early, mid-way and late in training (the first, middle and last tenth of the steps; \
`sim.replay.layers`).

![per-layer flushed share against the loss scale](layers_flush.png)

{tables}

How to read it: a need is a lower bound when it is close to the scale the recording ran at \
(2^15 here, mostly): values that float16 flushed during the recording are zeros in the trace. \
The max counts the parameter gradients only, not overflows inside the backward pass, and a \
float16 backward seed cannot exceed 2^15 anyway. Where one layer's need is above another \
layer's max, no single global scale serves both: the case for per-layer scales."""
