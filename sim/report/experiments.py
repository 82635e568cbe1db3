"""The report's experiments, as data: traces, the policy comparison, the setting sweeps and
the exact SSD counts, each returning rows (dicts) whose fields are named.

:mod:`sim.report.build` runs them in order and hands the results to :mod:`sim.report.figures` and
:mod:`sim.report.text`. The same configuration always gives the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping

import numpy as np

from sim.casting.counts import classify
from sim.casting.underflow import pooled_flushed_share
from sim.replay.measured import MeasuredRun, measured_paths
from sim.replay.pool import TracePool
from sim.replay.predictions import prediction_rows
from sim.replay.result import RunResult, safe_scales
from sim.replay.run import simulate_many
from sim.replay.selection import DYNAMIC_GRID, HEADROOM_GRID, per_setting
from sim.replay.sweep import sweep_grid
from sim.report.tables import format_percent
from sim.traces.families import (
    FAMILIES,
    SSD_ZERO_SHARE,
    make_trace,
    sample_values,
    ssd_binade_shares,
)
from sim.traces.real import MODEL_NOTES, MODELS, RECORDINGS, SHIPPED, trace_path, traces_dir
from updater.common.float16 import LARGEST_SEED_POWER
from updater.common.names import shown
from updater.policy import DynamicScale, HeadroomScale
from updater.policy.presets import PRESETS
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

SSD_SCALES = (1.0, 8.0, 2.0**15)
"""Scales of the exact SSD counts."""

END_SHARE = 0.1
"""The end of a run, for ``lost_end``: its last 10% of steps."""


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
        real_traces (str or None, default "shipped"): folder of the real models' traces and
            measured runs (:mod:`sim.nnabla_studies.real_traces`): ``"shipped"`` for those
            shipped in the package (:data:`sim.traces.real.SHIPPED_DIR`), else a path
            (relative to the current folder); None leaves the real traces out.
    """

    steps: int = 10000
    runs: int = 64
    sweep_runs: int = 32
    seed: int = 0
    jitter: float = 0.25
    ssd_values: int = 2**20
    real_traces: str | None = SHIPPED


QUICK = ReportConfig(steps=600, runs=4, sweep_runs=2, ssd_values=2**14)
"""A small configuration for tests and smoke runs."""


@dataclass
class ReportData:
    """Every number the report's text shows, by name.

    Attributes:
        config (ReportConfig): sizes and seeds.
        families (list of dict): :func:`family_rows`, one per trace family.
        compare (list of dict): :func:`compare` rows, one per (family, policy).
        dynamic_sweep (list of dict): :func:`sweep` rows of DynamicScale over
            :data:`DYNAMIC_GRID`.
        headroom_sweep (list of dict): :func:`sweep` rows of HeadroomScale over
            :data:`HEADROOM_GRID`, each with its ``jitter`` (the report's and twice it).
        ssd (dict): :func:`ssd_numbers`.
        chosen (dict): ``"dynamic"`` and ``"headroom"``: the sweep rows picked by
            :func:`sim.replay.selection.choose_defaults`.
        real (list of str): the real models' traces among the families (empty without them).
        synthetic_sweeps (dict): ``dynamic_sweep`` and ``headroom_sweep`` folded over the
            synthetic families only.
        chosen_synthetic (dict): the rows picked from ``synthetic_sweeps``.
        predictions (list of dict): :func:`sim.replay.predictions.prediction_rows`.
        measured (list of dict): one row per measured real run (:func:`measured_rows`).
        layers (dict model -> list of dict): :func:`sim.replay.layers.layer_needs` of each real
        trace.
        forward (dict (model, batch order) -> str):
            :func:`sim.replay.headroom.forward_headroom_line` of each real recording.
    """

    config: ReportConfig
    families: List[Dict[str, Any]]
    compare: List[Dict[str, Any]]
    dynamic_sweep: List[Dict[str, Any]]
    headroom_sweep: List[Dict[str, Any]]
    ssd: Dict[Any, Any]
    chosen: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    real: List[str] = field(default_factory=list)
    synthetic_sweeps: Dict[str, List[Dict[str, Any]]] = field(default_factory=dict)
    chosen_synthetic: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    predictions: List[Dict[str, Any]] = field(default_factory=list)
    measured: List[Dict[str, Any]] = field(default_factory=list)
    layers: Dict[str, List[Dict[str, Any]]] = field(default_factory=dict)
    forward: Dict[tuple, str] = field(default_factory=dict)

    @property
    def family_names(self) -> List[str]:
        """The trace families, in report order."""
        return [r["family"] for r in self.families]

    def result(self, family: str, policy: str) -> Dict[str, Any]:
        """The comparison row of ``policy`` (a label of :data:`COMPARED`) on ``family``."""
        for r in self.compare:
            if r["trace"] == family and r["label"] == policy:
                return r
        raise KeyError(f"no comparison row for policy {policy!r} on family {family!r}")


def tell(progress, method: str, *args) -> None:
    """Call a stage reporter's ``start(total)`` or ``stage(name)`` (``dls``'s StageProgress);
    a bool or None progress has no stages."""
    call = getattr(progress, method, None)
    if call is not None:
        call(*args)


def make_traces(config: ReportConfig) -> Dict[str, Trace]:
    """Every trace family at the configuration's steps and seed."""
    return {f: make_trace(f, steps=config.steps, seed=config.seed) for f in FAMILIES}


def real_traces_dir(config: ReportConfig) -> Path | None:
    """The folder of the real traces (:func:`sim.traces.real.traces_dir` of
    ``config.real_traces``), or None when they are left out."""
    return None if config.real_traces is None else traces_dir(config.real_traces)


def check_real_traces(config: ReportConfig) -> None:
    """Raise FileNotFoundError naming what is missing from the real traces' folder (each
    model's recordings and its measured runs); nothing when the real traces are left out."""
    folder = real_traces_dir(config)
    if folder is None:
        return
    wanted = [trace_path(folder, m, k) for m in MODELS for k in RECORDINGS]
    wanted += [p for m in MODELS for p in measured_paths(folder, m)]
    missing = [p.name for p in wanted if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{shown(folder)} lacks {', '.join(missing)}: record them with "
            "python -m sim.nnabla_studies.real_traces "
            f"--out {shown(folder)}, or leave the real models out (dls report --real-traces none)"
        )


def load_real_pools(config: ReportConfig) -> Dict[str, TracePool]:
    """The real models' recordings (:data:`sim.traces.real.MODELS`, batch orders
    :data:`sim.traces.real.RECORDINGS`), one pool per model; empty when left out.

    Raises:
        FileNotFoundError: a trace or a measured run is missing (:func:`check_real_traces`).
    """
    check_real_traces(config)
    folder = real_traces_dir(config)
    if folder is None:
        return {}
    return {
        m: TracePool([Trace.load(trace_path(folder, m, k)) for k in RECORDINGS]) for m in MODELS
    }


def load_real_traces(config: ReportConfig) -> Dict[str, Trace]:
    """The real models' first recordings (batch order 0), empty when left out
    (:func:`load_real_pools`)."""
    return {m: pool.traces[0] for m, pool in load_real_pools(config).items()}


def measured_rows(config: ReportConfig, traces: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """:meth:`sim.replay.measured.MeasuredRun.summary` of each measured real run of the models
    of ``traces`` (:func:`sim.replay.measured.measured_paths`): the recordings' own runs, then
    the checked policies'."""
    folder = real_traces_dir(config)
    return [MeasuredRun.load(p).summary() for m in traces for p in measured_paths(folder, m)]


def predictions(config: ReportConfig, pools: Mapping[str, TracePool]) -> List[Dict[str, Any]]:
    """:func:`sim.replay.predictions.prediction_rows` of the real models' recordings (the
    report's seed)."""
    return prediction_rows(pools, real_traces_dir(config), config.seed)


def family_rows(traces: Mapping[str, Trace]) -> List[Dict[str, Any]]:
    """One row per trace: safe scale at the start/end (medians over the first and last tenth
    of the steps; for a probed trace below each step's threshold and at most the highest
    scale the probes reach: :func:`sim.replay.result.safe_scales`), flushed shares, bad steps."""
    rows = []
    for name, t in traces.items():
        cap = LARGEST_SEED_POWER["float16"] if t.overflow_probed else None
        safe = safe_scales(t.absmax, t.overflow_scale, cap, t.finite_scale)
        tenth = max(t.steps // 10, 1)
        rows.append(
            {
                "family": name,
                "what": FAMILY_NOTES.get(name) or MODEL_NOTES.get(name, ""),
                "safe_first": float(np.median(safe[:tenth])),
                "safe_last": float(np.median(safe[-tenth:])),
                "flushed_1": format_percent(pooled_flushed_share(t, 1.0)),
                "flushed_8": format_percent(pooled_flushed_share(t, 8.0)),
                "flushed_32k": format_percent(pooled_flushed_share(t, 2.0**15)),
                "bad_steps": int(t.nonfinite.sum()),
            }
        )
    return rows


def lost_at_end(result: RunResult, share: float = END_SHARE) -> float:
    """Signal lost (a skipped step loses all, an applied step its flushed share) over the last
    ``share`` of the steps, averaged over runs."""
    n = max(int(result.steps * share), 1)
    return float(np.where(result.skipped[-n:], 1.0, result.flushed[-n:]).mean())


@dataclass
class Comparison:
    """The policy comparison.

    Attributes:
        rows (list of dict): one per (family, policy):
            :meth:`sim.replay.result.RunResult.summary` plus ``lost_end`` (:func:`lost_at_end`).
        results (dict family -> list of RunResult): the trajectories (for the figures).
    """

    rows: List[Dict[str, Any]]
    results: Dict[str, List[RunResult]]


def compare(traces: Mapping[str, Trace], config: ReportConfig, progress=None) -> Comparison:
    """Run the :data:`COMPARED` presets on every trace."""
    policies = [PRESETS[n] for n in COMPARED]
    rows: List[Dict[str, Any]] = []
    results: Dict[str, List[RunResult]] = {}
    for name, t in traces.items():
        tell(progress, "stage", f"policy comparison on {name} ({len(policies)} policies)")
        results[name] = simulate_many(
            policies,
            t,
            runs=config.runs,
            seed=config.seed,
            jitter=config.jitter,
            labels=list(COMPARED),
            progress=progress,
        )
        rows.extend({**r.summary(), "lost_end": lost_at_end(r)} for r in results[name])
    return Comparison(rows, results)


def default_sweeps(traces: Mapping[str, Trace], config: ReportConfig, progress=None):
    """The sweeps that choose the defaults: DynamicScale over :data:`DYNAMIC_GRID`, and
    HeadroomScale over :data:`HEADROOM_GRID` at the report's jitter and at twice it.

    Returns:
        dict with the :func:`per_setting` rows over every trace under ``dynamic_sweep`` and
        ``headroom_sweep`` (the :class:`ReportData` fields; each headroom row also holds its
        ``jitter``), and ``synthetic_sweeps``: the same folded over the synthetic families only.
    """
    runs, seed = config.sweep_runs, config.seed
    dynamic = sweep_grid(DynamicScale, DYNAMIC_GRID, traces, runs, seed, config.jitter, progress)
    headroom = {
        jitter: sweep_grid(HeadroomScale, HEADROOM_GRID, traces, runs, seed, jitter, progress)
        for jitter in (config.jitter, 2 * config.jitter)
    }

    def fold(families=None):
        return {
            "dynamic_sweep": per_setting(dynamic, list(DYNAMIC_GRID), families),
            "headroom_sweep": [
                {"jitter": jitter, **r}
                for jitter, rows in headroom.items()
                for r in per_setting(rows, list(HEADROOM_GRID), families)
            ],
        }

    return {**fold(), "synthetic_sweeps": fold([f for f in traces if f in FAMILIES])}


def ssd_sample(config: ReportConfig) -> np.ndarray:
    """The values sampled from the SSD calibration (``config.ssd_values``, ``config.seed``)."""
    return sample_values(ssd_binade_shares(), config.ssd_values, SSD_ZERO_SHARE, config.seed)


def ssd_numbers(values: np.ndarray) -> Dict[Any, Any]:
    """Exact float16 counts (:func:`sim.casting.counts.classify`) on SSD sample ``values``.

    Returns:
        dict: ``n`` (values), per scale of :data:`SSD_SCALES` a dict of shares (``zeros_in``,
        ``flushed_all``, ``left_nonzero_all`` of all values; ``flushed_nonzero``,
        ``subnormal``, ``normal`` of nonzero values), ``overflow`` (count) and
        ``rel_err_mean``; ``band_share`` (nonzero values in [2^-27, 2^-24)), ``band_kept_1``
        and ``band_kept_8`` (their share kept at scale 1 and 8), ``in_32_30`` (all values in
        [2^-32, 2^-30)).
    """
    out: Dict[Any, Any] = {"n": int(values.size)}
    for s in SSD_SCALES:
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
