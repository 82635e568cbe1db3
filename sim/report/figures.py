"""The report's figures: PNG files written from the experiments' results (:mod:`sim.plots.runs`,
:mod:`sim.plots.gradients`)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Mapping, Sequence

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


def figure_plan(traces: Mapping[str, Trace]) -> Dict[str, Callable[..., Figure]]:
    """The report's figures by file name, each as a function of ``(results, ssd_values)``
    that draws it (arguments as in :func:`write_figures`): the names are known before the
    experiments run."""
    drifting = traces["drifting"]
    sources: Dict[str, object] = {f: traces[f] for f in UNDERFLOW_FAMILIES}
    plan: Dict[str, Callable[..., Figure]] = {
        f"trajectories_{name}.png": lambda results, _, name=name: plot_trajectory_panels(
            results[name]
        )
        for name in traces
    }
    plan["policy_comparison.png"] = lambda results, _: plot_comparison_panels(
        [r for rs in results.values() for r in rs]
    )
    plan["histogram_ssd.png"] = lambda *_: plot_histogram(traces["ssd"])
    plan["histogram_drifting_end.png"] = lambda *_: plot_histogram(
        drifting, step=drifting.steps - 1, scales=(8.0, 2.0**8, 2.0**15)
    )
    plan["underflow_vs_scale.png"] = lambda _, values: plot_underflow_vs_scale(
        {**sources, "ssd, exact float16 counts on sampled values": values}
    )
    layered = [t for t in traces.values() if t.has_layers]
    if layered:
        plan["layers_flush.png"] = lambda *_: plot_layer_flush(layered)
    return plan


def write_figures(
    out: Path,
    traces: Mapping[str, Trace],
    results: Dict[str, Sequence[RunResult]],
    ssd_values: np.ndarray,
    overwrite: bool = False,
) -> List[Path]:
    """Write the report's figures into ``out`` and return their paths.

    Args:
        out (Path): an existing folder.
        traces (mapping family -> Trace): the report's traces (``ssd`` and ``drifting`` among
            them); those with per-layer histograms get the per-layer figure.
        results (mapping family -> list of RunResult): the policy comparison.
        ssd_values (array): values sampled from the SSD calibration (exact float16 curve).
        overwrite (bool, default False): replace figures dls did not write.
    """
    return [
        save_figure(draw(results, ssd_values), out / name, overwrite=overwrite)
        for name, draw in figure_plan(traces).items()
    ]
