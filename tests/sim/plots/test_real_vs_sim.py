"""A real run's scale beside the simulated one (issue 41): from ``updater.history`` of a real
cpu:half run recorded with a GradientRecorder, and the simulation over its trace."""

import numpy as np
import pytest

from sim.plots.common import save_figure
from sim.plots.real_vs_sim import plot_real_vs_simulated, real_scales
from sim.replay.run import simulate
from sim.traces.families import make_trace
from tests.nnabla_models import TinyClassifier
from updater import DynamicLossScalingUpdater, GradientRecorder, Trace


@pytest.mark.nnabla
def test_the_real_runs_scale_is_drawn_beside_the_simulated_spread(tmp_path):
    m = TinyClassifier("real_vs_sim")
    with GradientRecorder(tmp_path / "run.npz") as recorder:
        updater = DynamicLossScalingUpdater(
            m.solver, m.loss, m.feeder(), policy="dynamic", history=30, recorder=recorder
        )
        for _ in range(30):
            updater.update()
    result = simulate(updater.policy, Trace.load(tmp_path / "run.npz"), runs=8)
    ax = plot_real_vs_simulated(updater.history, result)
    lines = {line.get_label(): line for line in ax.get_lines()}
    real = lines["real run"].get_ydata()
    assert np.array_equal(real, np.log2([r.scale for r in updater.history])) and len(real) == 30
    assert np.array_equal(
        lines["simulated, median (dynamic)"].get_ydata(), np.median(np.log2(result.scale), 1)
    )
    assert ax.get_xlabel() == "training step (1 = first)" and ax.get_xlim()[0] == 1
    png = save_figure(ax.figure, tmp_path / "real_vs_sim.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_real_scales_take_numbers_and_refuse_what_is_no_scale():
    assert real_scales(np.array([2.0, 4.0])).tolist() == [2.0, 4.0]
    for bad in ([], [0.0], [float("nan")], [[1.0]]):
        with pytest.raises(ValueError, match="history must hold StepRecords or finite scales"):
            real_scales(bad)


@pytest.mark.nnabla
def test_an_updaters_history_left_at_its_default_says_to_pass_history():
    """Issue 52: the default ``history=0`` keeps no records; the error said only ``got []``."""
    m = TinyClassifier("real_vs_sim_default")
    updater = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    for _ in range(3):
        updater.update()
    result = simulate(updater.policy, make_trace("stationary", steps=3), runs=2)
    with pytest.raises(ValueError, match=r"got \[\]; .* built with history=N .* default history=0"):
        plot_real_vs_simulated(updater.history, result)
