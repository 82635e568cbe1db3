"""The simulation report: figures and ``README.md`` under ``reports/``, with fixed seeds.

:func:`build_report` runs the experiments (:mod:`sim.report.experiments`: the policy comparison on
every trace family, the setting sweeps, the exact SSD counts), picks the defaults
(:mod:`sim.replay.selection`), writes the figures (:mod:`sim.report.figures`) and the markdown
(:mod:`sim.report.text`). The same configuration always gives the same files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Union

from sim.replay.headroom import forward_headroom_line
from sim.replay.layers import layer_needs
from sim.replay.selection import choose, choose_defaults
from sim.report.experiments import (
    QUICK,
    ReportConfig,
    ReportData,
    compare,
    default_sweeps,
    family_rows,
    load_real_pools,
    make_traces,
    measured_rows,
    predictions,
    ssd_numbers,
    ssd_sample,
    tell,
)
from sim.report.figures import figure_plan, write_figures
from sim.report.provenance import provenance
from sim.report.text import render
from sim.traces.real import RECORDINGS
from updater.common.identity import kind_by_suffix
from updater.common.writing import check_target, write_text

__all__ = ["QUICK", "ReportConfig", "build_report", "choose"]

FULL = ReportConfig()
"""The configuration of the committed report (``dls report``)."""


def _chosen(dynamic_rows, headroom_rows, jitter):
    return choose_defaults(dynamic_rows, [r for r in headroom_rows if r["jitter"] == jitter])


def _check_targets(out: Path, traces, overwrite: bool) -> None:
    """Before any work: every file the report writes into ``out`` may be written
    (:func:`updater.common.writing.check_target`); ``out`` made."""
    for name in [*figure_plan(traces), "README.md"]:
        check_target(out / name, overwrite, kind=kind_by_suffix(name))
    out.mkdir(parents=True, exist_ok=True)


def _forward_lines(pools) -> dict:
    """The forward pass's headroom line of each real recording, by ``(model, batch order)``."""
    return {
        (name, k): forward_headroom_line(t)
        for name, pool in pools.items()
        for k, t in zip(RECORDINGS, pool.traces)
    }


def build_report(
    out_dir: Union[str, Path] = "reports",
    config: ReportConfig = FULL,
    progress=None,
    overwrite: bool = False,
) -> Dict[str, Any]:
    """Write the figures and ``README.md`` of the report into ``out_dir``.

    Args:
        out_dir (str or Path, default "reports"): output folder (created if missing). Only the
            files listed in the returned ``files`` are written.
        config (ReportConfig, default ReportConfig()): sizes and seeds.
        progress (bool or reporter, optional): tqdm bars; default when stderr is a terminal;
            or a stage reporter such as ``dls``'s StageProgress (named stages).
        overwrite (bool, default False): replace files in ``out_dir`` that dls did not write;
            without it such a file stops the report before any work
            (:func:`updater.common.writing.check_target`).

    Returns:
        dict with ``files`` (paths written), ``data`` (the :class:`ReportData` the text was
        rendered from) and, from it, ``compare`` (summary rows), ``dynamic_sweep``,
        ``headroom_sweep``, ``ssd`` (exact SSD numbers) and ``chosen`` (picked settings).
    """
    if not isinstance(config, ReportConfig):
        raise TypeError(f"config must be a ReportConfig, got {type(config).__name__}")
    out = Path(out_dir)
    pools = load_real_pools(config)
    real = {model: pool.traces[0] for model, pool in pools.items()}  # the first recordings
    traces = {**make_traces(config), **real}
    _check_targets(out, traces, overwrite)
    # per trace: compare, 3 sweeps; figures; SSD; predictions
    tell(progress, "start", 4 * len(traces) + 2 + bool(real))

    comparison = compare(traces, config, progress)
    tell(progress, "stage", "figures")
    values = ssd_sample(config)
    files = write_figures(out, traces, comparison.results, values, overwrite)
    rows = comparison.rows
    del comparison  # its trajectories are large; the rest needs only the summary rows

    sweeps = default_sweeps(traces, config, progress)
    synthetic = sweeps.pop("synthetic_sweeps")
    if real:
        tell(progress, "stage", "predictions from the real traces against the real runs")
    data = ReportData(
        config=config,
        families=family_rows(traces),
        compare=rows,
        ssd=ssd_numbers(values),
        real=list(real),
        synthetic_sweeps=synthetic,
        predictions=predictions(config, pools),
        measured=measured_rows(config, real),
        layers={name: layer_needs(t) for name, t in real.items()},
        forward=_forward_lines(pools),
        **sweeps,
    )
    tell(progress, "stage", "exact float16 counts on SSD samples; README.md")
    data.chosen = _chosen(data.dynamic_sweep, data.headroom_sweep, config.jitter)
    data.chosen_synthetic = _chosen(
        synthetic["dynamic_sweep"], synthetic["headroom_sweep"], config.jitter
    )
    files.append(write_text(out / "README.md", render(data, provenance(out)), overwrite=overwrite))
    return {
        "files": files,
        "data": data,
        "compare": data.compare,
        "dynamic_sweep": data.dynamic_sweep,
        "headroom_sweep": data.headroom_sweep,
        "ssd": data.ssd,
        "chosen": data.chosen,
    }
