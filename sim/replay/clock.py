"""The training clock of a trace recorded every ``every`` steps.

``GradientRecorder(every=N)`` records the first of every ``N`` ``update()`` calls; a policy's
counters (growth intervals, hysteresis) count training steps, not recorded ones. The replay
runs each recorded step ``N`` times (:func:`training_clock`): the steps between two recordings
are taken to be like the one recorded before them, and every result (scale trajectories, the
plots' step axis, skipped steps, ``dls tune``'s choice) is on the training clock.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from updater.trace import Trace


def training_clock(trace: Trace) -> Trace:
    """``trace`` with each recorded step repeated ``trace.every`` times (``every`` 1 in the
    result; per-layer arrays dropped: the replay does not read them); ``trace`` itself when it
    was recorded every step.

    >>> from sim.traces.families import lognormal_trace
    >>> import dataclasses
    >>> t = dataclasses.replace(lognormal_trace(steps=5), every=10)
    >>> training_clock(t).steps, training_clock(t).every
    (50, 1)
    """
    if trace.every == 1:
        return trace
    steps = np.repeat(np.arange(trace.steps), trace.every)
    return dataclasses.replace(trace, layers=None, every=1).take(steps)
