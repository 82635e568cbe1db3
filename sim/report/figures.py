"""The report's figures: PNG files written from the experiments' results (:mod:`sim.plots.runs`,
:mod:`sim.plots.gradients`)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from sim.plots.common import save_figure
from sim.plots.gradients import plot_histogram, plot_underflow_vs_scale
from sim.plots.layers import plot_layer_flush
from sim.plots.runs import plot_comparison_panels
from sim.plots.trajectories import plot_trajectory_panels
from sim.replay.result import RunResult
from updater.trace import Trace

UNDERFLOW_FAMILIES = ("stationary", "drifting", "ssd")
"""Traces whose underflow-vs-scale curves the report draws."""


def report_figures(
    traces: Mapping[str, Trace],
    results: Dict[str, Sequence[RunResult]],
    ssd_values: np.ndarray,
) -> Dict[str, Figure]:
    """The report's figures by file name (arguments as in :func:`write_figures`)."""
    figures = {
        f"trajectories_{family}.png": plot_trajectory_panels(rs) for family, rs in results.items()
    }
    every_run = [r for rs in results.values() for r in rs]
    figures["policy_comparison.png"] = plot_comparison_panels(every_run)
    figures["histogram_ssd.png"] = plot_histogram(traces["ssd"])
    drifting = traces["drifting"]
    figures["histogram_drifting_end.png"] = plot_histogram(
        drifting, step=drifting.steps - 1, scales=(8.0, 2.0**8, 2.0**15)
    )
    sources: Dict[str, object] = {f: traces[f] for f in UNDERFLOW_FAMILIES}
    sources["ssd, exact float16 counts on sampled values"] = ssd_values
    figures["underflow_vs_scale.png"] = plot_underflow_vs_scale(sources)
    layered = [t for t in traces.values() if t.has_layers]
    if layered:
        figures["layers_flush.png"] = plot_layer_flush(layered)
    return figures


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
    return [
        save_figure(fig, out / name)
        for name, fig in report_figures(traces, results, ssd_values).items()
    ]
