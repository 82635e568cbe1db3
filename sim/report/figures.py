"""The report's figures: PNG files written from the experiments' results (:mod:`sim.plots.runs`,
:mod:`sim.plots.gradients`)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Sequence

import numpy as np

from sim.plots.common import save_figure
from sim.plots.gradients import plot_histogram, plot_underflow_vs_scale
from sim.plots.layers import plot_layer_flush
from sim.plots.runs import plot_comparison_panels
from sim.plots.trajectories import plot_trajectory_panels
from sim.replay.result import RunResult
from updater.trace import Trace

UNDERFLOW_FAMILIES = ("stationary", "drifting", "ssd")
"""Traces whose underflow-vs-scale curves the report draws."""


def write_figures(
    out: Path,
    traces: Mapping[str, Trace],
    results: Dict[str, Sequence[RunResult]],
    ssd_values: np.ndarray,
) -> List[Path]:
    """Write the report's figures into ``out`` and return their paths.

    Args:
        out (Path): an existing folder.
        traces (mapping family -> Trace): the report's traces (``ssd`` and ``drifting`` among
            them); those with per-layer histograms get the per-layer figure.
        results (mapping family -> list of RunResult): the policy comparison.
        ssd_values (array): values sampled from the SSD calibration (exact float16 curve).
    """
    files = [
        save_figure(plot_trajectory_panels(rs), out / f"trajectories_{family}.png")
        for family, rs in results.items()
    ]
    every_run = [r for rs in results.values() for r in rs]
    files.append(save_figure(plot_comparison_panels(every_run), out / "policy_comparison.png"))
    files.append(save_figure(plot_histogram(traces["ssd"]), out / "histogram_ssd.png"))
    drifting = traces["drifting"]
    end = plot_histogram(drifting, step=drifting.steps - 1, scales=(8.0, 2.0**8, 2.0**15))
    files.append(save_figure(end, out / "histogram_drifting_end.png"))
    sources: Dict[str, object] = {f: traces[f] for f in UNDERFLOW_FAMILIES}
    sources["ssd, exact float16 counts on sampled values"] = ssd_values
    files.append(save_figure(plot_underflow_vs_scale(sources), out / "underflow_vs_scale.png"))
    layered = [t for t in traces.values() if t.has_layers]
    if layered:
        files.append(save_figure(plot_layer_flush(layered), out / "layers_flush.png"))
    return files
