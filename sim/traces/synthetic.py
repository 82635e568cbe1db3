"""The trace kind whose histogram is the gradient values themselves (NumPy only)."""

from __future__ import annotations

from updater.trace import Trace


class SyntheticTrace(Trace):
    """A :class:`updater.trace.Trace` made by a synthetic family (:mod:`sim.traces.families`).

    Its histogram is the model's gradient values themselves, not what float16 kept of them at
    some scale, so the binade model of flushing (:func:`sim.casting.underflow.flushed_share`) is
    exact for it at every scale (:mod:`sim.replay.flush_basis`). Saved and loaded again it is a
    plain :class:`~updater.trace.Trace`: the file does not say where its histogram came from.
    """
