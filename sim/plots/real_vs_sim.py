"""A real run's loss scale beside the simulator's prediction for it: the scale each step of an
updater used (``updater.history``, its :class:`StepRecord` objects, or the scales themselves,
e.g. read from a Monitor's ``loss_scale`` series) against the median and the 5-95% spread of a
:class:`sim.replay.result.RunResult` replayed over the run's recorded trace."""

from __future__ import annotations

from typing import Iterable, Union

import numpy as np
from matplotlib.ticker import MaxNLocator

from sim.plots.common import legend_right, literal, log2_ticks, new_axes
from sim.replay.result import RunResult


def real_scales(history: Iterable) -> np.ndarray:
    """The scales of a real run, float64: from :class:`StepRecord` objects (their ``scale``,
    the backward seed used) or from numbers.

    >>> real_scales([4.0, 8.0]).tolist()
    [4.0, 8.0]
    """
    values = [getattr(r, "scale", r) for r in history]
    scales = np.asarray(values, dtype=np.float64)
    if scales.ndim != 1 or not len(scales) or not (np.isfinite(scales) & (scales > 0)).all():
        empty = (
            "; an updater keeps its StepRecords in updater.history only when built with "
            "history=N (N at least the run's steps; the default history=0 keeps none)"
            if not values
            else ""
        )
        raise ValueError(
            "history must hold StepRecords or finite scales > 0, one per step, "
            f"got {values[:5]!r}{empty}"
        )
    return scales


def plot_real_vs_simulated(
    history: Union[Iterable, np.ndarray], result: RunResult, ax=None, label: str = "real run"
):
    """Draw the real run's scale per step (1 = first) and the simulated runs' median and 5-95%
    spread, as powers of two; return the axes.

    Args:
        history: ``updater.history`` (StepRecords; ``history=`` at least the run's length) or
            the scales, one per step.
        result (RunResult): :func:`sim.replay.run.simulate` over the run's recorded trace.
        ax (matplotlib axes, optional): where to draw; default a new figure.
        label (str, default "real run"): the real line's legend.
    """
    real = real_scales(history)
    _, ax = new_axes(ax, (8, 3.5))
    steps = np.arange(1, result.steps + 1)
    low, mid, high = np.percentile(np.log2(result.scale), [5, 50, 95], axis=1)
    ax.fill_between(steps, low, high, color="0.85", step="mid", label="simulated, 5-95%")
    ax.step(
        steps, mid, where="mid", color="0.35", label=f"simulated, median ({literal(result.label)})"
    )
    ax.step(np.arange(1, len(real) + 1), np.log2(real), where="mid", color="C3", label=label)
    ax.yaxis.set_major_formatter(log2_ticks())  # the lines are log2 of the scale
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(min(low.min(), np.log2(real).min()) - 1, max(high.max(), np.log2(real).max()) + 1)
    ax.set_xlim(1, max(result.steps, len(real)))
    ax.set_xlabel("training step (1 = first)")
    ax.set_ylabel("loss scale")
    title = f"loss scale: real run and simulation on {literal(result.trace_name)}"
    ax.set_title(title, fontsize="medium")
    legend_right(ax)
    return ax
