"""The simulation report: figures and ``README.md`` under ``reports/``, with fixed seeds.

:func:`build_report` runs the policy comparison on every trace family, the SSD reproduction,
and the setting sweeps that choose the project's defaults, then writes PNG figures and a
markdown file. The same configuration always gives the same files.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence, Union

import numpy as np

from sim import plots
from sim.fp16 import classify
from sim.run import simulate_many
from sim.tables import format_value, markdown_table
from sim.traces import (
    FAMILIES,
    SSD_ZERO_SHARE,
    make_trace,
    sample_values,
    ssd_binade_shares,
)
from sim.underflow import pooled_flushed_share
from updater.policy import DynamicScale, HeadroomScale, largest_safe_scale
from updater.presets import PRESETS
from updater.trace import Trace

COMPARED = ("nnabla-legacy", "pytorch", "deepspeed", "dynamic", "headroom")
"""Presets compared on every family."""

FAMILY_NOTES = {
    "stationary": "log-normal magnitudes (log2 mean -12.5, std 5, cut at +3 std), 2^16 values",
    "drifting": "as stationary, log2 mean drifting from -12.5 to -26.5 (late-training underflow)",
    "spikes": "as stationary; 0.2% of steps: the 16 largest values x2^10",
    "nan": "as stationary; 0.2% of steps are NaN batches (bad at every scale)",
    "ssd": "calibrated to Multibox SSD (Micikevicius et al. 2018): 66.8% zeros, 2^20 values",
}


@dataclass(frozen=True)
class ReportConfig:
    """Sizes and seeds of the report (the defaults are what ``dls report`` uses).

    Args:
        steps (int, default 10000): steps per trace.
        runs (int, default 64): runs per policy in the comparison.
        sweep_runs (int, default 32): runs per setting in the sweeps.
        seed (int, default 0): seed of traces, jitter and SSD samples.
        jitter (float, default 0.25): log2 std of the per-step gradient size factor.
        ssd_values (int, default 2**20): values sampled for the exact SSD counts.
    """

    steps: int = 10000
    runs: int = 64
    sweep_runs: int = 32
    seed: int = 0
    jitter: float = 0.25
    ssd_values: int = 2**20


QUICK = ReportConfig(steps=600, runs=4, sweep_runs=2, ssd_values=2**14)
"""A small configuration for tests and smoke runs."""

DYNAMIC_GRID = {
    "init_scale": (2.0**10, 2.0**15),
    "growth_interval": (250, 500, 1000, 2000, 4000),
    "hysteresis": (1, 2, 3),
}
HEADROOM_GRID = {
    "margin": (1.0, 2.0, 4.0, 8.0),
    "backoff_factor": (0.5, 2.0**-8),
}


def _pct(x: float, digits: int = 3) -> str:
    return (
        "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}g}%"
    )


def _tell(progress, method: str, *args) -> None:
    """Call a stage reporter's ``start(total)`` or ``stage(name)`` (``dls``'s StageProgress);
    a bool or None progress has no stages."""
    call = getattr(progress, method, None)
    if call is not None:
        call(*args)


def _traces(config: ReportConfig) -> Dict[str, Trace]:
    return {f: make_trace(f, steps=config.steps, seed=config.seed) for f in FAMILIES}


def family_rows(traces: Dict[str, Trace]) -> List[Dict[str, Any]]:
    """One row per trace: safe scale at the start/end, flushed shares, bad steps."""
    rows = []
    for name, t in traces.items():
        safe = largest_safe_scale(t.absmax)
        tenth = max(t.steps // 10, 1)
        rows.append(
            {
                "family": name,
                "what": FAMILY_NOTES.get(name, ""),
                "safe_first": float(np.median(safe[:tenth])),
                "safe_last": float(np.median(safe[-tenth:])),
                "flushed_1": _pct(pooled_flushed_share(t, 1.0)),
                "flushed_8": _pct(pooled_flushed_share(t, 8.0)),
                "flushed_32k": _pct(pooled_flushed_share(t, 2.0**15)),
                "bad_steps": int(t.nonfinite.sum()),
            }
        )
    return rows


def compare(traces: Dict[str, Trace], config: ReportConfig, progress=None):
    """Run the compared presets on every trace; return (summary rows, results per family)."""
    policies = [PRESETS[n] for n in COMPARED]
    rows, kept = [], {}
    for name, t in traces.items():
        _tell(progress, "stage", f"policy comparison on {name} ({len(policies)} policies)")
        results = simulate_many(
            policies,
            t,
            runs=config.runs,
            seed=config.seed,
            jitter=config.jitter,
            labels=list(COMPARED),
            progress=progress,
        )
        rows.extend(r.summary() for r in results)
        kept[name] = results
    return rows, kept


def sweep_grid(
    make,
    grid: Dict[str, Sequence],
    traces: Dict[str, Trace],
    runs: int,
    seed: int,
    jitter: float,
    progress=None,
) -> List[Dict[str, Any]]:
    """Every combination of ``grid`` (settings of ``make``) on every trace; one row per
    combination with per-family ``signal_lost`` and ``skipped`` and their means/worst."""
    keys = list(grid)
    combos = [dict(zip(keys, values)) for values in itertools.product(*grid.values())]
    policies = [make(**c) for c in combos]
    per_family = {}
    for name, t in traces.items():
        what = f"{len(policies)} settings, jitter {jitter:g}"
        _tell(progress, "stage", f"{make.__name__} sweep on {name} ({what})")
        results = simulate_many(
            policies,
            t,
            runs=runs,
            seed=seed,
            jitter=jitter,
            labels=[str(i) for i in range(len(policies))],
            progress=progress,
        )
        per_family[name] = [r.summary() for r in results]
    rows = []
    for i, combo in enumerate(combos):
        row: Dict[str, Any] = dict(combo)
        lost = {f: per_family[f][i]["signal_lost"] for f in traces}
        for f in traces:
            row[f"lost_{f}"] = lost[f]
        row["lost_mean"] = float(np.mean(list(lost.values())))
        row["lost_worst"] = float(max(lost.values()))
        row["skipped_mean"] = float(np.mean([per_family[f][i]["skipped"] for f in traces]))
        row["flushed_mean"] = float(np.nanmean([per_family[f][i]["mean_flushed"] for f in traces]))
        rows.append(row)
    return rows


def choose(
    rows: List[Dict[str, Any]],
    defaults: Dict[str, Any],
    tolerance: float = 0.05,
    tie: float = 0.03,
) -> Dict[str, Any]:
    """The rule used to pick defaults.

    Among rows whose mean loss is within ``tolerance`` (relative) of the lowest, keep those
    whose worst-family loss is within ``tie`` of the best worst, then those whose mean is within
    ``tie`` of the best mean among them; of these ties, pick the one closest to ``defaults``
    (the current settings; distance: sum over settings of ``|log2(value / default)|``), then
    the lowest mean. So a setting moves only as far as the evidence pushes it.
    """
    best = min(r["lost_mean"] for r in rows)
    near = [r for r in rows if r["lost_mean"] <= best * (1 + tolerance)]
    worst = min(r["lost_worst"] for r in near)
    near = [r for r in near if r["lost_worst"] <= worst * (1 + tie)]
    best = min(r["lost_mean"] for r in near)
    near = [r for r in near if r["lost_mean"] <= best * (1 + tie)]

    def distance(r):
        return sum(abs(math.log2(r[k] / v)) for k, v in defaults.items() if k in r and r[k] > 0 < v)

    return min(near, key=lambda r: (distance(r), r["lost_mean"]))


def ssd_numbers(config: ReportConfig) -> Dict[str, Any]:
    """Exact float16 counts (sim.fp16.classify) on values sampled from the SSD calibration."""
    values = sample_values(ssd_binade_shares(), config.ssd_values, SSD_ZERO_SHARE, config.seed)
    out: Dict[str, Any] = {"n": int(values.size)}
    for s in (1.0, 8.0, 2.0**15):
        c = classify(values, s)
        out[s] = {
            "zeros_in": c.zeros_in / c.total,
            "flushed_all": c.flushed / c.total,
            "flushed_nonzero": c.share_flushed,
            "left_nonzero_all": (c.subnormal + c.normal) / c.total,
            "subnormal": c.share_subnormal,
            "normal": c.share_normal,
            "overflow": c.overflow,
            "rel_err_mean": c.rel_err_mean,
        }
    a = np.abs(values.astype(np.float64))
    band = values[(a >= 2.0**-27) & (a < 2.0**-24)]
    out["band_share"] = band.size / max(int(np.count_nonzero(values)), 1)
    out["band_kept_1"] = 1.0 - classify(band, 1.0).share_flushed
    out["band_kept_8"] = 1.0 - classify(band, 8.0).share_flushed
    out["in_32_30"] = float(np.mean((a >= 2.0**-32) & (a < 2.0**-30)))
    return out


# ---------------------------------------------------------------- the markdown


def _settings(p) -> str:
    return ", ".join(f"{k}={format_value(v)}" for k, v in p.settings().items())


def _results_table(rows) -> str:
    cols = [
        "trace",
        "label",
        "overflows",
        "skipped",
        "mean_flushed",
        "signal_lost",
        "steps_to_safe",
        "never_safe",
        "below_half_safe",
        "final_scale",
    ]
    heads = [
        "family",
        "policy",
        "overflows",
        "skipped",
        "flushed (applied steps)",
        "signal lost",
        "steps to 2x of safe (median)",
        "runs never there",
        "steps below safe/2",
        "final scale (median)",
    ]
    shown = []
    for r in rows:
        r = dict(r)
        for k in ("mean_flushed", "signal_lost", "below_half_safe"):
            r[k] = _pct(r[k])
        shown.append(r)
    return markdown_table(shown, cols, heads)


def _sweep_table(rows, keys, families) -> str:
    cols = [*keys, *(f"lost_{f}" for f in families), "lost_mean", "lost_worst", "skipped_mean"]
    heads = [*keys, *families, "mean", "worst", "skipped / run"]
    shown = []
    for r in rows:
        r = dict(r)
        for c in cols:
            if c.startswith("lost_"):
                r[c] = _pct(r[c])
        shown.append(r)
    return markdown_table(shown, cols, heads)


def _find(rows, **match):
    for r in rows:
        if all(r[k] == v for k, v in match.items()):
            return r
    raise KeyError(match)


def build_report(
    out_dir: Union[str, Path] = "reports",
    config: ReportConfig = ReportConfig(),
    progress=None,
) -> Dict[str, Any]:
    """Write the figures and ``README.md`` of the report into ``out_dir``.

    Args:
        out_dir (str or Path, default "reports"): output folder (created if missing). Only the
            files listed in the returned ``files`` are written.
        config (ReportConfig, default ReportConfig()): sizes and seeds.
        progress (bool or reporter, optional): tqdm bars; default when stderr is a terminal;
            or a stage reporter such as ``sim.cli.StageProgress`` (named stages).

    Returns:
        dict with ``files`` (paths written), ``compare`` (summary rows), ``dynamic_sweep``,
        ``headroom_sweep``, ``ssd`` (exact SSD numbers) and ``chosen`` (picked settings).
    """
    if not isinstance(config, ReportConfig):
        raise TypeError(f"config must be a ReportConfig, got {type(config).__name__}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: List[Path] = []
    traces = _traces(config)
    _tell(progress, "start", 4 * len(traces) + 2)  # per family: compare, 3 sweeps; figures; SSD

    rows, kept = compare(traces, config, progress)
    _tell(progress, "stage", "figures")
    for family, results in kept.items():
        files.append(
            plots.save_figure(
                plots.plot_trajectory_panels(results), out / f"trajectories_{family}.png"
            )
        )
    every_run = [r for results in kept.values() for r in results]
    files.append(
        plots.save_figure(plots.plot_comparison_panels(every_run), out / "policy_comparison.png")
    )
    files.append(plots.save_figure(plots.plot_histogram(traces["ssd"]), out / "histogram_ssd.png"))
    files.append(
        plots.save_figure(
            plots.plot_histogram(
                traces["drifting"], step=traces["drifting"].steps - 1, scales=(8.0, 2.0**8, 2.0**15)
            ),
            out / "histogram_drifting_end.png",
        )
    )
    ssd_vals = sample_values(ssd_binade_shares(), config.ssd_values, SSD_ZERO_SHARE, config.seed)
    sources = {f: traces[f] for f in ("stationary", "drifting", "ssd")}
    sources["ssd, exact float16 counts on sampled values"] = ssd_vals
    files.append(
        plots.save_figure(plots.plot_underflow_vs_scale(sources), out / "underflow_vs_scale.png")
    )

    dyn_rows = sweep_grid(
        DynamicScale, DYNAMIC_GRID, traces, config.sweep_runs, config.seed, config.jitter, progress
    )
    head_rows = []
    for jitter in (config.jitter, 2 * config.jitter):
        for r in sweep_grid(
            HeadroomScale, HEADROOM_GRID, traces, config.sweep_runs, config.seed, jitter, progress
        ):
            head_rows.append({"jitter": jitter, **r})
    dyn_best = choose(dyn_rows, DynamicScale().settings())
    head_main = [r for r in head_rows if r["jitter"] == config.jitter]
    # margins above 2 land more than a factor 2 below the largest safe scale: they cannot meet
    # HeadroomScale's goal (within a factor 2 after at most 3 steps), so they are not eligible.
    head_best = choose([r for r in head_main if r["margin"] <= 2], HeadroomScale().settings())
    _tell(progress, "stage", "exact float16 counts on SSD samples; README.md")
    ssd = ssd_numbers(config)

    text = _markdown(config, traces, rows, dyn_rows, head_rows, dyn_best, head_best, ssd)
    readme = out / "README.md"
    tmp = readme.with_name(readme.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(readme)
    files.append(readme)
    return {
        "files": files,
        "compare": rows,
        "dynamic_sweep": dyn_rows,
        "headroom_sweep": head_rows,
        "ssd": ssd,
        "chosen": {"dynamic": dyn_best, "headroom": head_best},
    }


def _markdown(config, traces, rows, dyn_rows, head_rows, dyn_best, head_best, ssd) -> str:
    families = list(traces)
    steps = config.steps
    cur_dyn = DynamicScale()
    cur_head = HeadroomScale()
    cur_dyn_row = _find(
        dyn_rows,
        init_scale=cur_dyn.init_scale,
        growth_interval=cur_dyn.growth_interval,
        hysteresis=cur_dyn.hysteresis,
    )
    head_main = [r for r in head_rows if r["jitter"] == config.jitter]
    head_noisy = [r for r in head_rows if r["jitter"] != config.jitter]
    cur_head_row = _find(head_main, margin=cur_head.margin, backoff_factor=cur_head.backoff_factor)
    by = {(r["trace"], r["label"]): r for r in rows}
    L: List[str] = []
    add = L.append
    add("# Simulation report: loss-scaling policies on float16 gradient traces")
    add("")
    add(
        "Generated by `dls report` (library: `sim.report.build_report`); every number and figure "
        "here comes from that command with fixed seeds, so rerunning it rewrites the same files. "
        f"Configuration: `{asdict(config)}`."
    )
    add("")
    add(
        "How to read it. Each policy (the same code the nnabla updater runs, `updater/policy.py`) "
        f"is replayed over {steps} steps of each trace, {config.runs} runs per policy. A step "
        "overflows when its largest scaled gradient reaches 65520 (float16 rounds that to inf) "
        "and is then skipped; a bad batch is skipped at any scale. Runs differ by a per-step "
        f"gradient size factor 2^(jitter*z), jitter={config.jitter} (log2 std), z standard normal, "
        "the same for every policy (common random numbers). Underflow is measured per step from "
        "the trace's binade histogram (see `sim/run.py`)."
    )
    add("")
    add("Metrics (per run, then averaged over runs):")
    add("")
    add(
        "- **overflows**: steps whose scaled gradients overflowed; **skipped**: overflows plus "
        "bad batches."
    )
    add(
        "- **flushed**: share of nonzero gradient values flushed to zero, averaged over applied "
        "steps."
    )
    add(
        "- **signal lost**: share of nonzero gradient values that never reach an update, over all "
        "steps (a skipped step loses all of them, an applied step its flushed share). Lower is "
        "better; this is the single number used to choose settings below."
    )
    add(
        "- **steps to 2x of safe**: steps until the scale is first within a factor 2 of the "
        "largest safe power of two (capped at the policy's max_scale); **below safe/2**: share "
        "of steps spent more than a factor 2 under it."
    )
    add("")
    add("## Trace families")
    add("")
    add(
        markdown_table(
            family_rows(traces),
            [
                "family",
                "what",
                "safe_first",
                "safe_last",
                "flushed_1",
                "flushed_8",
                "flushed_32k",
                "bad_steps",
            ],
            [
                "family",
                "what",
                "safe scale, first 10%",
                "safe scale, last 10%",
                "flushed at 1",
                "flushed at 8",
                "flushed at 2^15",
                "bad batches",
            ],
        )
    )
    add("")
    add(
        "Flushed shares are of nonzero values, all steps pooled; safe scales are medians of the "
        "largest power of two with scale x absmax <= 65504 (uncapped)."
    )
    add("")
    add("## Policies compared")
    add("")
    prow = [
        {"name": n, "class": type(PRESETS[n]).__name__, "settings": _settings(PRESETS[n])}
        for n in COMPARED
    ]
    add(markdown_table(prow, ["name", "class", "settings"]))
    add("")
    add(
        "`pytorch`: GradScaler's start 2^16 capped at 2^15, the largest power of two a float16 "
        "backward seed holds (nnabla's half mode seeds backward in float16), x2 / x0.5 / 2000, "
        "no hysteresis, no floor (min_scale 2^-24 stands in for none). `deepspeed`: "
        "hysteresis 2 as in DeepSpeed's DynamicLossScaler and Megatron-LM (the first overflow "
        "after a growth is absorbed, every later one backs off until the next growth), min "
        "scale 1, window 1000, same capped start. `dynamic` and `headroom`: "
        "this project's current defaults. `nnabla-legacy`: nnabla's old updater (start 8, "
        "N=2000, growth after N+2 then every N+1 finite steps, no floor or cap)."
    )
    add("")
    add("## Results on every family")
    add("")
    add(_results_table(rows))
    add("")
    add("![policy comparison](policy_comparison.png)")
    add("")
    for f in families:
        add(f"![trajectories on {f}](trajectories_{f}.png)")
        add("")
    add("What the table shows:")
    add("")
    lg, dy, hd = (by[("ssd", n)] for n in ("nnabla-legacy", "dynamic", "headroom"))
    add(
        f"- On **ssd**, nnabla's legacy policy loses {_pct(lg['signal_lost'])} of the nonzero "
        f"gradient values (it starts at 8 and doubles only every ~2000 steps), our current "
        f"`dynamic` default {_pct(dy['signal_lost'])} (it starts at "
        f"{format_value(PRESETS['dynamic'].init_scale)} and needs "
        f"{format_value(dy['steps_to_safe'])} steps to come within 2x of the safe scale), "
        f"`headroom` {_pct(hd['signal_lost'])}."
    )
    lg, pt, ds, dy, hd = (by[("nan", n)] for n in COMPARED)

    def ends(r, name):
        floor = " (its floor)" if r["final_scale"] == PRESETS[name].min_scale else ""
        return format_value(r["final_scale"]) + floor

    add(
        f"- On **nan** (bad batches), every backoff without a floor compounds: the legacy policy "
        f"ends at a median scale of {format_value(lg['final_scale'])} and PyTorch-style at "
        f"{format_value(pt['final_scale'])}; `dynamic` ends at {ends(dy, 'dynamic')}, "
        f"DeepSpeed-style (hysteresis 2) at {ends(ds, 'deepspeed')}, `headroom` at "
        f"{format_value(hd['final_scale'])} (it jumps back on the next finite step)."
    )
    st = {n: by[("stationary", n)] for n in COMPARED}
    add(
        f"- On **stationary**, growth-based policies pay for probing: skipped steps per run are "
        f"{format_value(st['pytorch']['skipped'])} (pytorch), "
        f"{format_value(st['deepspeed']['skipped'])} "
        f"(deepspeed: window 1000 probes twice as often, and with hysteresis 2 a probe costs "
        f"two overflows, the first absorbed, the second backing off), "
        f"{format_value(st['dynamic']['skipped'])} (dynamic) and "
        f"{format_value(st['headroom']['skipped'])} (headroom)."
    )
    dr = {n: by[("drifting", n)] for n in COMPARED}
    add(
        f"- On **drifting**, the legacy policy's scale cannot keep up with shrinking gradients: "
        f"{_pct(dr['nnabla-legacy']['mean_flushed'])} of nonzero values flushed on average, "
        f"against {_pct(dr['dynamic']['mean_flushed'])} for `dynamic` and "
        f"{_pct(dr['headroom']['mean_flushed'])} for `headroom`."
    )
    add("")
    add("## Multibox SSD: reproducing the paper's conclusion")
    add("")
    add(
        "Micikevicius et al., *Mixed Precision Training* (ICLR 2018), Fig. 3: 67% of SSD's "
        "activation-gradient values are zero, most nonzero values lie below float16's smallest "
        "subnormal 2^-24, training diverges without loss scaling and matches FP32 with a scale "
        "of 8 (values in [2^-27, 2^-24) mattered, smaller ones did not). NVIDIA's guide (as "
        "relayed in `reference/other-loss-scalers.md`): 66.8% zeros; casting to float16 zeroes "
        "another 31%, leaving 5.3% (of the nonzero values) nonzero; x32K would recover all but "
        "0.1% without overflow. The trace `ssd` is calibrated to these numbers "
        "(`sim.traces.ssd_trace`). Below, exact float16 counts (`sim.fp16.classify`) on "
        f"{ssd['n']} values sampled from that calibration (seed {config.seed}):"
    )
    add("")
    srows = []
    for s in (1.0, 8.0, 2.0**15):
        d = ssd[s]
        srows.append(
            {
                "scale": format_value(s),
                "zeros": _pct(d["zeros_in"]),
                "flushed_all": _pct(d["flushed_all"]),
                "flushed_nonzero": _pct(d["flushed_nonzero"]),
                "left": _pct(d["left_nonzero_all"]),
                "subnormal": _pct(d["subnormal"]),
                "overflow": d["overflow"],
                "rel": f"{d['rel_err_mean']:.2e}",
            }
        )
    add(
        markdown_table(
            srows,
            [
                "scale",
                "zeros",
                "flushed_all",
                "flushed_nonzero",
                "left",
                "subnormal",
                "overflow",
                "rel",
            ],
            [
                "scale",
                "exact zeros (all values)",
                "flushed (all values)",
                "flushed (nonzero values)",
                "still nonzero (all values)",
                "subnormal (nonzero values)",
                "overflowed values",
                "mean rel. error of survivors",
            ],
        )
    )
    add("")
    one, eight, big = ssd[1.0], ssd[8.0], ssd[2.0**15]
    add(
        f"- **Without scaling** the cast flushes {_pct(one['flushed_all'])} of all values "
        f"({_pct(one['flushed_nonzero'])} of the nonzero ones) on top of "
        f"{_pct(one['zeros_in'])} exact zeros: only {_pct(1 - one['flushed_nonzero'])} of the "
        "nonzero values survive (guide: another 31% zeroed, 5.3% left). Most gradient signal "
        "is gone, consistent with the paper's divergence."
    )
    add(
        f"- **At scale 8** the values in [2^-27, 2^-24) ({_pct(ssd['band_share'])} of the nonzero "
        f"values) survive: {_pct(ssd['band_kept_8'])} of them stay nonzero, against "
        f"{_pct(ssd['band_kept_1'])} at scale 1. What is still flushed at 8 "
        f"({_pct(eight['flushed_nonzero'])} of nonzero values) lies below 2^-27, which the "
        "paper found did not matter: scale 8 is enough, as the paper says."
    )
    add(
        f"- **At scale 2^15** only {_pct(big['flushed_nonzero'])} of the nonzero values are lost "
        f"(guide: all but 0.1%), with {big['overflow']} overflowed values."
    )
    add(f"- Share of all values in [2^-32, 2^-30): {_pct(ssd['in_32_30'])} (guide: 4%).")
    add("")
    add("![SSD histogram](histogram_ssd.png)")
    add("")
    add("![underflow vs scale](underflow_vs_scale.png)")
    add("")
    add("![drifting trace, last step](histogram_drifting_end.png)")
    add("")
    add("## Choosing the defaults")
    add("")
    add(
        "Rule (`sim.report.choose`): the setting with the lowest **signal lost** averaged over "
        "the families; among settings within 5% of that lowest mean, the one whose worst family "
        "is best; differences below 3% (relative) count as ties, and a tie goes to the setting "
        "closest to the current default (smallest sum of |log2(value / default)|). "
        f"{config.sweep_runs} runs per setting, same seeds and jitter as above."
    )
    add("")
    add("### DynamicScale: init_scale x growth_interval x hysteresis")
    add("")
    shown = sorted(dyn_rows, key=lambda r: r["lost_mean"])
    add(_sweep_table(shown, list(DYNAMIC_GRID), families))
    add("")
    add(
        f"Current default (init 2^{int(math.log2(cur_dyn.init_scale))}, growth_interval "
        f"{cur_dyn.growth_interval}, hysteresis {cur_dyn.hysteresis}): mean loss "
        f"{_pct(cur_dyn_row['lost_mean'])}, worst {_pct(cur_dyn_row['lost_worst'])}. Chosen by "
        f"the rule: **init_scale={format_value(dyn_best['init_scale'])}, growth_interval="
        f"{dyn_best['growth_interval']}, hysteresis={dyn_best['hysteresis']}** with mean "
        f"{_pct(dyn_best['lost_mean'])}, worst {_pct(dyn_best['lost_worst'])}."
    )
    add("")
    add(_dynamic_why(dyn_rows, dyn_best, families))
    add("")
    add("### HeadroomScale: margin x backoff_factor (and twice the jitter)")
    add("")
    add(f"Jitter {config.jitter}:")
    add("")
    add(
        _sweep_table(sorted(head_main, key=lambda r: r["lost_mean"]), list(HEADROOM_GRID), families)
    )
    add("")
    add(f"Jitter {2 * config.jitter} (noisier step-to-step gradient size):")
    add("")
    add(
        _sweep_table(
            sorted(head_noisy, key=lambda r: r["lost_mean"]), list(HEADROOM_GRID), families
        )
    )
    add("")
    add(
        f"Current default (margin {format_value(cur_head.margin)}, backoff_factor "
        f"{format_value(cur_head.backoff_factor)}): mean loss {_pct(cur_head_row['lost_mean'])}, "
        f"worst {_pct(cur_head_row['lost_worst'])}. Chosen by the rule: **margin="
        f"{format_value(head_best['margin'])}, backoff_factor="
        f"{format_value(head_best['backoff_factor'])}** with mean {_pct(head_best['lost_mean'])}, "
        f"worst {_pct(head_best['lost_worst'])}."
    )
    add("")
    add(_headroom_why(head_main, head_noisy, head_best))
    add("")
    add(
        "Limits of this evidence: the traces are models (log-normal bodies, a calibrated SSD "
        "histogram), underflow is counted per value whether or not it matters to training (the "
        "paper's SSD values below 2^-27 did not), and a skipped step is counted as losing the "
        "whole step. Recorded traces from real runs (`dls simulate --trace run.npz`) replay "
        "through the same code."
    )
    add("")
    return "\n".join(L)


def _dynamic_why(rows, best, families) -> str:
    lines = []
    low = [r for r in rows if r["init_scale"] == 2.0**10]
    high = [r for r in rows if r["init_scale"] == 2.0**15]
    if low and high and "ssd" in families:
        lines.append(
            f"- **init_scale**: starting at 2^15 instead of 2^10 cuts the loss on ssd from "
            f"{_pct(np.mean([r['lost_ssd'] for r in low]))} to "
            f"{_pct(np.mean([r['lost_ssd'] for r in high]))} (mean over the other settings): a "
            "start below the safe scale costs thousands of steps of underflow, while a start "
            "above it costs a few skipped steps (one per halving)."
        )
    for key in ("growth_interval", "hysteresis"):
        values = sorted({r[key] for r in rows})
        same = [r for r in rows if r["init_scale"] == best["init_scale"]]
        parts = []
        for v in values:
            sub = [r for r in same if r[key] == v]
            parts.append(
                f"{v}: mean {_pct(np.mean([r['lost_mean'] for r in sub]))}, skipped "
                f"{np.mean([r['skipped_mean'] for r in sub]):.3g}/run"
            )
        lines.append(
            f"- **{key}** (averaged over the other setting, init "
            f"{format_value(best['init_scale'])}): " + "; ".join(parts) + "."
        )
    other = [
        r for r in rows
        if r["init_scale"] == best["init_scale"] and r["growth_interval"] == best["growth_interval"]
        and r["hysteresis"] != best["hysteresis"]
    ]  # fmt: skip
    fams = [f for f in ("stationary", "nan") if f"lost_{f}" in best]
    if other and fams:
        parts = [
            f"{f}: {_pct(best[f'lost_{f}'])} with hysteresis {best['hysteresis']} against "
            + ", ".join(f"{_pct(o[f'lost_{f}'])} with {o['hysteresis']}" for o in other)
            for f in fams
        ]
        lines.append(
            f"- At growth_interval {best['growth_interval']}, hysteresis h costs h - 1 extra "
            "overflows per probe (after each growth the first backoff needs h overflows) and "
            "shields only against the first h - 1 bad batches after a growth (only growth "
            "refills it, and a bad batch resets the growth count; `consecutive_hysteresis=True` "
            "refills it on every finite step): " + "; ".join(parts) + "."
        )
    return "\n".join(lines)


def _headroom_why(main, noisy, best) -> str:
    lines = []
    for label, rows in (("jitter x1", main), ("jitter x2", noisy)):
        parts = []
        for m in sorted({r["margin"] for r in rows}):
            sub = [r for r in rows if r["margin"] == m]
            parts.append(
                f"margin {format_value(m)}: mean {_pct(np.mean([r['lost_mean'] for r in sub]))}, "
                f"skipped {np.mean([r['skipped_mean'] for r in sub]):.3g}/run"
            )
        lines.append(f"- **margin** ({label}): " + "; ".join(parts) + ".")
    lines.append(
        "- Only margins <= 2 are eligible as the default: a margin m lands a factor m below the "
        "largest safe scale, and the policy's goal is to be within a factor 2 of it after at "
        "most 3 steps. Where gradients jump a lot from step to step, set margin=4 by hand."
    )
    lines.append(
        "- **backoff_factor** barely matters on these traces: after an overflow the next finite "
        "step jumps straight to the measured safe scale whatever the backoff; a deep backoff "
        "(2^-8) bounds the overflows in a row after a sudden jump in gradient size to "
        "ceil(jump in binades / 8) instead of one per binade."
    )
    return "\n".join(lines)
