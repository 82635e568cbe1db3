"""The float16 simulation testbed: imports ``updater``, never the other way; NumPy only outside
``sim.nnabla_studies``. ``sim.__version__`` is the distribution's (the same as
``updater.__version__``)."""

from updater import __version__
from updater.common.moved import alias_moved

__all__ = ["__version__"]

MOVED = {
    "sim.amp_evidence": "sim.nnabla_studies.amp_evidence",
    "sim.cli.checks": "sim.cli.preflight",
    "sim.cli_checks": "sim.cli.preflight",
    "sim.cli_settings": "sim.cli.settings",
    "sim.demo": "sim.nnabla_studies.demo",
    "sim.experiments": "sim.report.experiments",
    "sim.fp16": "sim.casting",
    "sim.fp16.counts": "sim.casting.counts",
    "sim.fp16.scales": "sim.casting.scales",
    "sim.fp16.underflow": "sim.casting.underflow",
    "sim.fp16_sweep": "sim.casting.scales",
    "sim.layers": "sim.replay.layers",
    "sim.metrics": "sim.replay.metrics",
    "sim.plot_common": "sim.plots.common",
    "sim.plot_gradients": "sim.plots.gradients",
    "sim.plot_layers": "sim.plots.layers",
    "sim.plot_runs": "sim.plots.runs",
    "sim.predictions": "sim.replay.predictions",
    "sim.progress": "sim.cli.progress",
    "sim.provenance": "sim.report.provenance",
    "sim.real_runs": "sim.nnabla_studies.real_runs",
    "sim.real_traces": "sim.nnabla_studies.real_traces",
    "sim.report_figures": "sim.report.figures",
    "sim.report_text": "sim.report.text",
    "sim.run": "sim.replay.run",
    "sim.selection": "sim.replay.selection",
    "sim.sweep": "sim.replay.sweep",
    "sim.underflow": "sim.casting.underflow",
}
"""Module paths of earlier versions -> where the module is now (:mod:`updater.common.moved`);
``sim.tables`` is not among them: that path names another module now (:mod:`sim.tables`)."""
alias_moved(MOVED)
